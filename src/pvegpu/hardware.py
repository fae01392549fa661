"""What pvegpu knows about hardware and its drivers: one table per fact, one home for all.

Add a GPU model here (its memory), a GPU vendor's host driver, or a device-node major;
nothing else in the code names a PCI id, a driver or a major.
"""

from __future__ import annotations

from pvegpu.host.facts import PciFunction

MIB = 1024**2

GPU_MEMORY: dict[str, tuple[int, str]] = {
    # nvidia-smi's FB memory total for this card; pci.ids names 10de:2bb5. 96 GB of GDDR7
    # less what the driver reserves. Source and how to add a card: docs/serving.md.
    "10de:2bb5": (97887 * MIB, "RTX PRO 6000 Blackwell Server Edition"),
}
"""Per-GPU memory by PCI vendor:device, used when the spec gives no gpu_memory_bytes."""

VFIO_DRIVER = "vfio-pci"
"""The driver VM functions end on."""

HOST_GPU_DRIVERS = {0x10DE: "nvidia", 0x1002: "amdgpu", 0x8086: "i915"}
"""The driver a GPU returns to when it leaves vfio-pci, by PCI vendor: GPUs on vfio-pci
(or unbound) today show no host driver in sysfs."""

GPU_DRIVER_MODULES = {
    0x10DE: frozenset({"nvidia", "nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nouveau"}),
    0x1002: frozenset({"amdgpu", "radeon"}),
    0x8086: frozenset({"i915", "xe"}),
}
"""Modules (kmod names, `_` not `-`) whose loading binds a vendor's GPUs: its drivers,
and the modules that load the driver as a dependency (nvidia_drm needs nvidia)."""

HOST_AUDIO_DRIVER = "snd_hda_intel"
"""The host driver of a GPU's HDMI/DP audio function (class 0x0403)."""
CLASS_AUDIO = 0x0403

NVIDIA_MAJOR = 195
"""Char major of /dev/nvidiaN and /dev/nvidiactl (fixed by the driver). nvidia-uvm and
nvidia-caps get dynamic majors, read from /proc/devices."""
NVIDIACTL_MINOR = 255


def host_driver(function: PciFunction) -> str | None:
    """The host-side driver of a function: what it is on now unless that is vfio-pci."""
    if function.driver and function.driver != VFIO_DRIVER:
        return function.driver
    if function.pci_class >> 8 == CLASS_AUDIO:
        return HOST_AUDIO_DRIVER
    if function.is_display:
        return HOST_GPU_DRIVERS.get(function.vendor)
    return None


def binding_modules(function: PciFunction) -> frozenset[str]:
    """The modules that, once loaded, bind `function` unless its driver_override says otherwise."""
    found = set()
    if function.driver and function.driver != VFIO_DRIVER:
        found.add(function.driver.replace("-", "_"))
    if function.pci_class >> 8 == CLASS_AUDIO:
        found.add(HOST_AUDIO_DRIVER)
    if function.is_display:
        found |= GPU_DRIVER_MODULES.get(function.vendor, frozenset())
    return frozenset(found)
