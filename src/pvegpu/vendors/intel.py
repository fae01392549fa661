"""Intel (integrated graphics, Arc, Data Center GPU): i915 or xe, and their DRM nodes."""

from __future__ import annotations

from pvegpu.vendors.drm import drm_nodes
from pvegpu.vendors.vendor import Vendor

PCI_VENDOR = 0x8086

INTEL = Vendor(
    name="Intel",
    pci_vendor=PCI_VENDOR,
    # i915 drives the integrated GPUs and Arc A-series; xe the newer ones (Arc B-series,
    # Lunar Lake and later), and either may be forced. A GPU on vfio-pci shows neither, so
    # it returns to i915, the one every Proxmox kernel binds Intel graphics with.
    host_driver="i915",
    driver_modules=frozenset({"i915", "xe"}),
    drivers=("i915", "xe"),
    # VA-API, QSV and Level Zero open only the render node.
    nodes=drm_nodes(),
)
