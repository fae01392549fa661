"""AMD (Radeon, Radeon Pro, Instinct): amdgpu, its DRM nodes and ROCm's /dev/kfd."""

from __future__ import annotations

from pvegpu.vendors.drm import drm_nodes
from pvegpu.vendors.vendor import DynamicNode, Vendor

PCI_VENDOR = 0x1002

# ROCm opens /dev/kfd (one node for every GPU; its major is dynamic, `kfd` in
# /proc/devices) and the render node of each GPU it may use: it sees exactly those.
KFD = DynamicNode("kfd", "/dev/kfd", (0,), "modprobe amdgpu", "ROCm", module_name="amdgpu")

AMD = Vendor(
    name="AMD",
    pci_vendor=PCI_VENDOR,
    host_driver="amdgpu",
    driver_modules=frozenset({"amdgpu", "radeon"}),
    # radeon binds the GCN 1/2 cards amdgpu leaves to it by default.
    drivers=("amdgpu", "radeon"),
    nodes=drm_nodes(shared=(KFD.node,), dynamic=KFD),
)
