"""The two binary-ish files lspci's sysfs backend needs besides the attribute files.

`lspci -A linux-sysfs` opens each function's `resource` (a fatal error when missing) and
reads the standard header from `config`; a function whose header cannot be read is left
out. An unprivileged read of a real `config` gives exactly these 64 bytes, so a tree
with them lists like the host it describes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from pvegpu.testing.hostspec import ConfigSpace, DeviceSpec
from pvegpu.testing.resources import resource_text

CONFIG_HEADER_SIZE = 64

_COMMAND_MEMORY = 0x0002
_COMMAND_BUS_MASTER = 0x0004
_HEADER_TYPE_BRIDGE = 0x01
_HEADER_MULTIFUNCTION = 0x80
_INTERRUPT_PIN_INTA = 1
_NO_ID = 0xFFFF
"""What a virtual function's vendor and device registers read (the ids are the PF's)."""


def config_header(
    dev: DeviceSpec,
    *,
    irq: int,
    multifunction: bool,
    buses: tuple[int, int, int] | None = None,
) -> bytes:
    """The 64-byte type 0 (or, given `buses`, type 1 bridge) configuration header.

    `buses` is (primary, secondary, subordinate). No capability list is claimed: there
    is nothing behind the first 64 bytes to point at.
    """
    header = bytearray(CONFIG_HEADER_SIZE)
    virtual = dev.physfn is not None
    command = _COMMAND_MEMORY | _COMMAND_BUS_MASTER if dev.driver else 0
    vendor, device = (_NO_ID, _NO_ID) if virtual else (dev.vendor, dev.device)
    struct.pack_into("<HHHH", header, 0x00, vendor, device, command, 0)
    header[0x08] = dev.revision
    header[0x09:0x0C] = (dev.pci_class & 0xFFFFFF).to_bytes(3, "little")
    kind = _HEADER_TYPE_BRIDGE if buses is not None else 0
    header[0x0E] = kind | (_HEADER_MULTIFUNCTION if multifunction else 0)
    if buses is not None:
        header[0x18:0x1B] = bytes(buses)
    else:
        struct.pack_into("<HH", header, 0x2C, dev.subsystem_vendor, dev.subsystem_device)
    if irq and not virtual:  # virtual functions have no INTx, only MSI-X
        header[0x3C] = irq & 0xFF
        header[0x3D] = _INTERRUPT_PIN_INTA
    return bytes(header)


def resource_table(dev: DeviceSpec, starts: Mapping[int, int] | None = None) -> str:
    """`resource`: one "start end flags" line per resource; `dev.bars` at `starts` (the
    address of each by index, `BarPlacer`), every other line unused (zero)."""
    return resource_text(dev.bars, starts or {}, dev.is_bridge)


STANDARD_SIZE = 256
EXTENDED_SIZE = 4096
_STATUS_CAP_LIST = 0x10
_PCIE_CAP_AT = 0x40
_PCIE_CAP_ID = 0x10
_PCIE_CAP_VERSION = 2
_EXTENDED_START = 0x100
_EXTENDED_STRIDE = 0x40
_ACS_ID = 0x000D


def root_config(header: bytes, space: ConfigSpace) -> bytes:
    """`header` grown to what root reads: 256 bytes with the PCI Express capability as
    the only standard one, then (with extended space) 4 KiB whose extended list holds
    `space.extended` and, given its control register, ACS, linked from 0x100 on."""
    config = bytearray(EXTENDED_SIZE if space.extended_space else STANDARD_SIZE)
    config[: len(header)] = header
    struct.pack_into("<H", config, 0x06, _STATUS_CAP_LIST)
    config[0x34] = _PCIE_CAP_AT
    flags = _PCIE_CAP_VERSION | (space.port_type & 0xF) << 4
    struct.pack_into("<BBH", config, _PCIE_CAP_AT, _PCIE_CAP_ID, 0, flags)
    if not space.extended_space:
        return bytes(config)
    ids = [*space.extended, *([_ACS_ID] if space.acs_control is not None else [])]
    for index, cap_id in enumerate(ids):
        at = _EXTENDED_START + index * _EXTENDED_STRIDE
        following = at + _EXTENDED_STRIDE if index + 1 < len(ids) else 0
        # Header dword: id (16 bits) | version (4) | next offset (12).
        struct.pack_into("<I", config, at, cap_id | 1 << 16 | following << 20)
        if cap_id == _ACS_ID and space.acs_control is not None:
            struct.pack_into("<HH", config, at + 4, space.acs_capability, space.acs_control)
    return bytes(config)
