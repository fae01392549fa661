"""What pvegpu knows about hardware and its drivers: one table per fact, one home for all.

Add a GPU model here (its memory). A GPU vendor's driver, modules and device nodes are
its module in `vendors/`; the tables here take them from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pvegpu.vendors import VENDORS
from pvegpu.vendors.nvswitch import is_switch

if TYPE_CHECKING:
    # Only a type: the tables sit with the vendors, below the facts that name them.
    from pvegpu.model.facts import PciFunction

MIB = 1024**2

GPU_MEMORY: dict[str, tuple[int, str]] = {
    # nvidia-smi's FB memory total for this card; pci.ids names 10de:2bb5. 96 GB of GDDR7
    # less what the driver reserves. Source and how to add a card: docs/serving.md.
    "10de:2bb5": (97887 * MIB, "RTX PRO 6000 Blackwell Server Edition"),
    # rocm-smi's "VRAM Total Memory (B)" (amdgpu's mem_info_vram_total) for the whole GPU
    # in SPX/NPS1 mode: 206141652992 B, 192 GB of HBM3; pci.ids names 1002:74a1. A
    # partitioned one (CPX, NPS4) shows each partition a share of it.
    "1002:74a1": (196592 * MIB, "Instinct MI300X"),
    # rocm-smi's VRAM Total Memory (B) on an MI250X node, 68702699520 B, for each of its
    # two dies (GCDs): each is a PCI function and a GPU of its own with 64 GB of HBM2e;
    # pci.ids names 1002:740c Instinct MI250X/MI250.
    "1002:740c": (65520 * MIB, "Instinct MI250X/MI250 (one GCD)"),
    # rocm-smi's VRAM Total Memory (B) of a Radeon Pro W7900, 51522830336 B of its 48 GB
    # GDDR6; pci.ids names 1002:7448. Not 1002:744c: that id is the RX 7900 XT (20 GB),
    # XTX (24 GB) and GRE (16 GB) alike, so its memory is the spec's gpu_memory_bytes.
    "1002:7448": (49136 * MIB, "Radeon Pro W7900"),
    # nvidia-smi's FB memory total of the workstation cards a serving pool may mix (pci.ids
    # names the ids): 48 GB of GDDR6 (ECC off), and 24 GB of GDDR6X on the two GeForce
    # cards, of which the 4090's driver reserves 12 MiB more than the 3090's.
    "10de:26b1": (49140 * MIB, "RTX 6000 Ada Generation"),
    "10de:2684": (24564 * MIB, "GeForce RTX 4090"),
    "10de:2204": (24576 * MIB, "GeForce RTX 3090"),
}
"""Per-GPU memory by PCI vendor:device, used when the spec gives no gpu_memory_bytes."""

VFIO_DRIVER = "vfio-pci"
"""The driver VM functions end on."""

# From each vendor module: a new vendor adds its row by being listed in VENDORS.
HOST_GPU_DRIVERS = {v.pci_vendor: v.host_driver for v in VENDORS}
"""The driver a GPU returns to when it leaves vfio-pci, by PCI vendor: GPUs on vfio-pci
(or unbound) today show no host driver in sysfs."""

GPU_DRIVER_MODULES = {v.pci_vendor: v.driver_modules for v in VENDORS}
"""Modules (kmod names, `_` not `-`) whose loading binds a vendor's GPUs: its drivers,
and the modules that load the driver as a dependency (nvidia_drm needs nvidia)."""

HOST_AUDIO_DRIVER = "snd_hda_intel"
"""The host driver of a GPU's HDMI/DP audio function (class 0x0403)."""
CLASS_AUDIO = 0x0403


def host_driver(function: PciFunction) -> str | None:
    """The host-side driver of a function: what it is on now unless that is vfio-pci."""
    if function.driver and function.driver != VFIO_DRIVER:
        return function.driver
    if function.pci_class >> 8 == CLASS_AUDIO:
        return HOST_AUDIO_DRIVER
    # An NVSwitch is bound by its vendor's GPU driver like the GPUs it connects.
    if function.is_gpu or is_switch(function):
        return HOST_GPU_DRIVERS.get(function.vendor)
    return None


def binding_modules(function: PciFunction) -> frozenset[str]:
    """The modules that, once loaded, bind `function` unless its driver_override says otherwise."""
    found = set()
    if function.driver and function.driver != VFIO_DRIVER:
        found.add(function.driver.replace("-", "_"))
    if function.pci_class >> 8 == CLASS_AUDIO:
        found.add(HOST_AUDIO_DRIVER)
    if function.is_gpu or is_switch(function):
        found |= GPU_DRIVER_MODULES.get(function.vendor, frozenset())
    return frozenset(found)
