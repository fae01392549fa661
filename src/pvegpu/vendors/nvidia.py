"""NVIDIA: its PCI id, drivers, device nodes and the tools that show its GPUs."""

from __future__ import annotations

import re

from pvegpu.pci import PciAddress
from pvegpu.vendors.vendor import DeviceNodes, GpuTool, Userspace, Vendor

PCI_VENDOR = 0x10DE

NODES = DeviceNodes(
    gpu_path="/dev/nvidia{minor}",
    gpu_node=re.compile(r"^/dev/nvidia(\d+)$"),
    # GPUs, control, UVM, modeset, MIG caps.
    any_node=re.compile(r"^/dev/nvidia(?:\d+|ctl|-uvm|-uvm-tools|-modeset|-caps(?:/.*)?)$"),
    # What CUDA opens besides /dev/nvidiaN: control node and unified memory (+ its tools node).
    shared=("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"),
    # Fixed by the driver for /dev/nvidiaN and /dev/nvidiactl.
    major=195,
    # 195:254 is /dev/nvidia-modeset and 195:255 /dev/nvidiactl.
    shared_minors=(254, 255),
    control_minor=255,
    # nvidia-uvm and nvidia-caps get dynamic majors, read from /proc/devices.
    dynamic_major_prefix="nvidia",
    dynamic_module="nvidia-uvm",
    dynamic_node="/dev/nvidia-uvm",
    # Minor 0 is uvm, 1 uvm-tools.
    dynamic_minors=(0, 1),
)


def smi_bus_id(address: PciAddress) -> str:
    """The form `nvidia-smi --query-gpu=pci.bus_id` prints: 8-digit domain, uppercase hex."""
    return f"{address.domain:08X}:{address.bus:02X}:{address.device:02X}.{address.function:X}"


USERSPACE = Userspace(
    # libcuda.so.<driver version> / libnvidia-ml.so.<driver version>. ASCII digits only (a
    # Unicode digit is not a version), anchored at the very end (`$` would also take a
    # name ending in a newline), so even `.match` takes only the whole name.
    library=re.compile(
        r"(?P<lib>libcuda|libnvidia-ml)\.so\.(?P<version>[0-9]+\.[0-9]+(?:\.[0-9]+)?)\Z"
    ),
    # Only the driver's own packages carry a driver version (cuda-toolkit is 12.x,
    # nvidia-container-toolkit 1.x, and the caller checks the version's shape).
    driver_package=lambda name: "nvidia" in name or name.startswith("libcuda"),
)

SMI = GpuTool(
    list_gpus=("nvidia-smi", "-L"),
    listed_prefix="GPU ",
    query_bus_ids=("nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"),
    bus_id=smi_bus_id,
)

NVIDIA = Vendor(
    name="NVIDIA",
    pci_vendor=PCI_VENDOR,
    host_driver="nvidia",
    # nouveau binds them too; nvidia_drm and the others load nvidia as a dependency.
    driver_modules=frozenset({"nvidia", "nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nouveau"}),
    drivers=("nvidia", "nouveau"),
    # It loads nvidia, which binds every NVIDIA GPU it finds free.
    driver_loaders=("nvidia-persistenced",),
    nodes=NODES,
    userspace=USERSPACE,
    tool=SMI,
)
