"""NVIDIA's NVLink fabric on HGX/DGX baseboards: the NVSwitches, the GPUs they connect,
and Fabric Manager, the host service that programs them.

Pure facts and parsers: which PCI functions are NVSwitches, which GPU models sit on an
NVSwitch baseboard, where Fabric Manager's unit and configuration are and how its mode is
written. `host/fabric.py` reads the files through its reader; `planning/fabric.py` decides
what a split of the board means. Only the standard library and attrs are imported here.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import attrs

from pvegpu.values import value_class

if TYPE_CHECKING:
    from pvegpu.pci import PciIds

PCI_VENDOR = 0x10DE

SWITCH_CLASS = 0x0680
"""Base class and subclass of an NVSwitch: 0x0680, "bridge, other". It is not a PCI-to-PCI
bridge (nothing sits behind it, vfio-pci takes it like any endpoint): the NVIDIA driver
binds it and Fabric Manager programs it through /dev/nvidia-nvswitchN."""

SXM_GPUS: dict[int, str] = {
    # NVIDIA device ids whose pci.ids name is an SXM module (or the HGX/DGX baseboard
    # part): the GPUs an NVSwitch baseboard carries. A PCIe card of the same chip has its
    # own id (A100 PCIe 20b1, H100 PCIe 2331, H200 NVL 233b) and is on no NVSwitch.
    0x1DB1: "Tesla V100 SXM2 16GB",
    0x1DB5: "Tesla V100 SXM2 32GB",
    0x1DB8: "Tesla V100 SXM3 32GB",
    0x1DF5: "Tesla V100 SXM2 16GB",
    0x20B0: "A100 SXM4 40GB",
    0x20B2: "A100 SXM4 80GB",
    0x20B3: "A100-SXM-64GB",
    0x20BD: "A800 SXM4 40GB",
    0x20F3: "A800-SXM4-80GB",
    0x2324: "H800",
    0x2329: "H20",
    0x232C: "H20 HBM3e",
    0x2330: "H100 SXM5 80GB",
    0x2335: "H200 SXM 141GB",
    0x2337: "H100 SXM5 64GB",
    0x2338: "H100 SXM5 96GB",
    0x2339: "H100 SXM5 94GB",
    0x2901: "B200",
}
"""SXM models by device id (names as pci.ids gives them)."""

MANAGER_UNIT = "nvidia-fabricmanager.service"
"""Fabric Manager's systemd unit, as NVIDIA's packages install it."""
MANAGER_UNIT_DIRS = ("etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
"""Where systemd finds an installed unit (relative to the root), in its order."""
MANAGER_CONFIG = "usr/share/nvidia/nvswitch/fabricmanager.cfg"
"""Its configuration file; `FABRIC_MODE=` says which virtualization mode it runs in."""
MANAGER_PACKAGE = "nvidia-fabricmanager"
"""The package (suffixed with the driver branch, `nvidia-fabricmanager-570`) to install in
a guest that gets the whole board."""

MODE_FULL = 0
"""`FABRIC_MODE=0`: bare metal or full passthrough (every GPU and NVSwitch in one OS)."""
MODE_SHARED = 1
"""`FABRIC_MODE=1`: shared NVSwitch multitenancy (the NVSwitches stay with Fabric Manager,
GPUs go to guests in the partitions it defines)."""
MODE_VGPU = 2
"""`FABRIC_MODE=2`: vGPU based multitenancy."""
MODE_NAMES = {
    MODE_FULL: "bare metal / full passthrough",
    MODE_SHARED: "shared NVSwitch multitenancy",
    MODE_VGPU: "vGPU multitenancy",
}

_MODE_LINE = re.compile(r"^[ \t]*FABRIC_MODE[ \t]*=(?P<value>[^\n#]*)", re.M)
_DIGITS = re.compile(r"[0-9]+")


def is_switch(function: PciIds) -> bool:
    """An NVIDIA function of class 0x0680: an NVSwitch of an HGX/DGX baseboard."""
    return function.vendor == PCI_VENDOR and function.pci_class >> 8 == SWITCH_CLASS


def is_sxm_gpu(function: PciIds) -> bool:
    """An NVIDIA GPU of a model that sits on an NVSwitch baseboard (`SXM_GPUS`)."""
    return function.vendor == PCI_VENDOR and function.device in SXM_GPUS


@value_class
@attrs.frozen(eq=False, repr=False)
class ManagerConfig:
    """What fabricmanager.cfg says that pvegpu uses."""

    mode: int | None
    """`FABRIC_MODE`'s value; None where the file does not set it (Fabric Manager's
    default is then 0, full passthrough)."""


def parse_config(text: str) -> ManagerConfig:
    """fabricmanager.cfg: `KEY=value` lines, `#` comments. A FABRIC_MODE given twice is
    taken from its last line; a value that is not 0, 1 or 2 is a ValueError."""
    mode = None
    for match in _MODE_LINE.finditer(text):
        value = match.group("value").strip()
        if not _DIGITS.fullmatch(value):
            raise ValueError(f"FABRIC_MODE={value!r}: expected a number (0, 1 or 2)")
        mode = int(value)
        if mode not in MODE_NAMES:
            raise ValueError(f"FABRIC_MODE={mode}: expected 0, 1 or 2")
    return ManagerConfig(mode)
