"""The ACS of the bridges above the GPUs, read from their configuration space.

Only while `pcie_acs_override` is on (this boot's /proc/cmdline or a command line of the
next boot, `HostFacts.acs_overrides`): without it the kernel's IOMMU groups already are what
the ports isolate, and reading every bridge's `config` would be work (and snapshot
bytes) for nothing.

A port's `config` file is 4 KiB for root on a PCIe function (the standard 256 bytes
and the extended space behind them), 256 bytes for a function without extended space,
and 64 bytes (the header) for anyone else. The PCI Express capability in the standard
list says what kind of port it is; the extended capability list beyond 0x100 says
whether it has ACS (id 0x000d) and its control register which controls are on. Both
lists are walked as the kernel walks them: a pointer below the list's start ends it,
and a bounded number of steps (so a loop ends too).
"""

from __future__ import annotations

import struct

from pvegpu.host.reader import RootReader, fail
from pvegpu.model.facts import PciFunction
from pvegpu.model.ports import ACS_CAPABILITY, PORT_TYPES, AcsState, PortAcs, PortType
from pvegpu.model.ports import OverrideSetting as OverrideSetting
from pvegpu.model.ports import override_settings as override_settings
from pvegpu.model.ports import upstream_bridges as upstream_bridges
from pvegpu.pci import PciAddress

HEADER_BYTES = 64
STANDARD_BYTES = 256
EXTENDED_BYTES = 4096

_STATUS = 0x06
_STATUS_CAP_LIST = 0x10
_CAPABILITY_POINTER = 0x34
_PCIE_CAPABILITY = 0x10
_STANDARD_TTL = 48
"""The kernel's PCI_FIND_CAP_TTL: at most this many standard capabilities are looked at."""
_EXTENDED_TTL = (EXTENDED_BYTES - STANDARD_BYTES) // 8
"""The kernel's bound on the extended list: a capability takes at least 8 bytes."""

_ACS_SV = 0x01
_ACS_RR = 0x04
_ACS_CR = 0x08
_ACS_UF = 0x10
REQUIRED_CONTROLS = _ACS_SV | _ACS_RR | _ACS_CR | _ACS_UF
"""The controls the kernel asks of a port for the groups below it to be apart
(REQ_ACS_FLAGS): source validation, P2P request and completion redirect, upstream
forwarding. One the port lacks (its capability register) is not asked."""


def port_acs(address: PciAddress, config: bytes) -> PortAcs:
    """A bridge's ACS from the bytes of its `config` file; ValueError: no config file."""
    if len(config) not in (HEADER_BYTES, STANDARD_BYTES, EXTENDED_BYTES):
        raise ValueError(
            f"is {len(config)} bytes; the kernel's is {HEADER_BYTES} (read without root), "
            f"{STANDARD_BYTES} (no extended space) or {EXTENDED_BYTES}"
        )
    if len(config) == HEADER_BYTES:
        return PortAcs(address, AcsState.HEADER_ONLY)
    port_type = _port_type(config)
    if len(config) == STANDARD_BYTES:
        return PortAcs(address, AcsState.NO_EXTENDED_SPACE, port_type)
    return PortAcs(address, _acs_state(config), port_type)


def _port_type(config: bytes) -> PortType | None:
    """From the PCI Express capability of the standard list; None: not a PCIe function."""
    if not config[_STATUS] & _STATUS_CAP_LIST:
        return None
    position = config[_CAPABILITY_POINTER]
    for _ in range(_STANDARD_TTL):
        position &= ~3
        if position < HEADER_BYTES:
            return None
        cap_id, following = config[position], config[position + 1]
        if cap_id == 0xFF:
            return None
        if cap_id == _PCIE_CAPABILITY:
            (flags,) = struct.unpack_from("<H", config, position + 2)
            return PORT_TYPES.get((flags >> 4) & 0xF, PortType.OTHER)
        position = following
    return None


def _acs_state(config: bytes) -> AcsState:
    position = STANDARD_BYTES
    for _ in range(_EXTENDED_TTL):
        (header,) = struct.unpack_from("<I", config, position)
        if header in (0, 0xFFFFFFFF):
            return AcsState.ABSENT
        if header & 0xFFFF == ACS_CAPABILITY:
            capability, control = struct.unpack_from("<HH", config, position + 4)
            wanted = REQUIRED_CONTROLS & capability
            return AcsState.ENABLED if control & wanted == wanted else AcsState.DISABLED
        position = (header >> 20) & 0xFFC
        if position < STANDARD_BYTES:
            return AcsState.ABSENT
    return AcsState.ABSENT


def read_acs_ports(
    reader: RootReader, functions: tuple[PciFunction, ...], gpus: tuple[PciFunction, ...]
) -> tuple[PortAcs, ...]:
    """The ACS of every bridge above a GPU, in address order."""
    by_address = {f.address: f for f in functions}
    ports: dict[PciAddress, PortAcs] = {}
    for gpu in gpus:
        for address in upstream_bridges(gpu):
            bridge = by_address.get(address)
            if address in ports or bridge is None or not bridge.is_bridge:
                continue
            path = f"{bridge.sysfs_path}/config"
            subject = f"sys/bus/pci/devices/{address}/config"
            data = reader.read_bytes(path, subject=subject, limit=EXTENDED_BYTES)
            if data is None:
                fail(
                    "missing-file",
                    subject,
                    "does not exist; pcie_acs_override is on, so the bridge's ACS must be "
                    "read from its configuration space",
                    "capture the host again as root: `pvegpu snapshot --root / --out "
                    "host.tar.gz` (a snapshot made before this check lacks it)",
                )
            try:
                ports[address] = port_acs(address, data)
            except ValueError as err:
                fail("bad-value", subject, str(err))
    return tuple(sorted(ports.values()))
