"""Which driver a PCI function belongs to on the host side (when it is not on vfio-pci)."""

from __future__ import annotations

from pvegpu.host.facts import PciFunction
from pvegpu.planning.plan import VFIO_DRIVER

# The driver a function returns to when it leaves vfio-pci, by PCI vendor, for GPUs
# that are on vfio-pci (or unbound) today and so show no host driver in sysfs.
HOST_GPU_DRIVERS = {0x10DE: "nvidia", 0x1002: "amdgpu", 0x8086: "i915"}
HOST_AUDIO_DRIVER = "snd_hda_intel"
CLASS_AUDIO = 0x0403


def host_driver(function: PciFunction) -> str | None:
    """The host-side driver of a function: what it is on now unless that is vfio-pci."""
    if function.driver and function.driver != VFIO_DRIVER:
        return function.driver
    if function.pci_class >> 8 == CLASS_AUDIO:
        return HOST_AUDIO_DRIVER
    if function.is_display:
        return HOST_GPU_DRIVERS.get(function.vendor)
    return None
