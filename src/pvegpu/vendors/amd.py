"""AMD (Radeon, Radeon Pro, Instinct): amdgpu, its DRM nodes and ROCm's /dev/kfd."""

from __future__ import annotations

import re

from pvegpu.vendors.drm import drm_nodes
from pvegpu.vendors.vendor import ComputeRuntime, DynamicNode, NodeMaker, Vendor

PCI_VENDOR = 0x1002

# ROCm opens /dev/kfd (one node for every GPU; its major is dynamic, `kfd` in
# /proc/devices) and the render node of each GPU it may use: it sees exactly those.
KFD = DynamicNode("kfd", "/dev/kfd", (0,), "modprobe amdgpu", "ROCm", module_name="amdgpu")

# HIP numbers the GPUs it can open in KFD's topology order, which amdgpu fills as it probes
# them: PCI bus order, with no variable to change it (CUDA_DEVICE_ORDER has no HIP twin).
# RCCL is NCCL's port and reads NCCL_P2P_DISABLE as NCCL does.
# HIP also honours CUDA_VISIBLE_DEVICES, and the ROCr runtime below it ROCR_VISIBLE_DEVICES
# and GPU_DEVICE_ORDINAL, each narrowing the set HIP_VISIBLE_DEVICES then indexes.
ROCM = ComputeRuntime(
    "ROCm",
    "HIP_VISIBLE_DEVICES",
    (),
    "RCCL",
    "rocm-smi --showmeminfo vram: its VRAM Total Memory (B)",
    other_selectors=("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"),
    # `6.4.1-120`: the release and its build, written by the rocm-core package.
    release_file="opt/rocm/.info/version",
)

AMD = Vendor(
    name="AMD",
    pci_vendor=PCI_VENDOR,
    host_driver="amdgpu",
    driver_modules=frozenset({"amdgpu", "radeon"}),
    # radeon binds the GCN 1/2 cards amdgpu leaves to it by default.
    drivers=("amdgpu", "radeon"),
    # amdgpu makes its render nodes as it binds each GPU, and /dev/kfd as it loads: loading
    # it (if udev has not yet) is all a container's nodes need before guests start.
    nodes=drm_nodes(
        shared=(KFD.node,),
        dynamic=KFD,
        makers=(NodeMaker(re.compile(re.escape(KFD.node)), ("modprobe", KFD.loaded_by)),),
    ),
    compute=ROCM,
    # Instinct MI300 split into DPX..CPX partitions: partition 0 keeps the PCI device's
    # render node, the others get render nodes of `amdgpu_xcp.N` platform devices, which
    # sysfs does not tie to the PCI device they are slices of.
    compute_partition="current_compute_partition",
    whole_partition="SPX",
)
