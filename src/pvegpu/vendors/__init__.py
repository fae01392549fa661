"""GPU vendors: everything pvegpu knows about one vendor's GPUs lives in its module here.

A `Vendor` is a value, not a class hierarchy: what a GPU of it is (its PCI vendor id),
its host driver and the kernel modules that bind its GPUs, the services that load that
driver at boot, the device nodes a container needs and how a node maps to a GPU, and the
command that shows the host sees its GPUs. The rest of pvegpu asks `vendor_of(...)` and
never names a vendor; a vendor without a field (None, `()`) is one pvegpu cannot yet do
that thing for (a container pool needs `nodes`).

Only attrs, the standard library and `pci` are imported here, so `host/` may ask a vendor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pvegpu.vendors.amd import AMD
from pvegpu.vendors.intel import INTEL
from pvegpu.vendors.nvidia import CUDA as NVIDIA_CUDA
from pvegpu.vendors.nvidia import NODES as NVIDIA_NODES
from pvegpu.vendors.nvidia import NVIDIA
from pvegpu.vendors.nvidia import SMI as NVIDIA_SMI
from pvegpu.vendors.nvidia import USERSPACE as NVIDIA_USERSPACE
from pvegpu.vendors.vendor import (
    ComputeRuntime,
    DeviceNodes,
    DriverVersionSource,
    DynamicNode,
    GpuInformation,
    GpuNodeSource,
    GpuTool,
    HostUserspace,
    ModuleFiles,
    NodeMaker,
    Userspace,
    Vendor,
)

if TYPE_CHECKING:
    from pvegpu.pci import PciIds

__all__ = [
    "CONTAINER_NODES",
    "CONTAINER_RUNTIME",
    "CONTAINER_TOOL",
    "CONTAINER_USERSPACE",
    "CONTAINER_VENDOR",
    "DRIVER_VERSION_VENDORS",
    "LOCKED_MODULE_VENDORS",
    "RUNTIME_MODULE_FILES",
    "RUNTIME_RELEASE_FILES",
    "VENDORS",
    "ComputeRuntime",
    "DeviceNodes",
    "DriverVersionSource",
    "DynamicNode",
    "GpuInformation",
    "GpuNodeSource",
    "GpuTool",
    "HostUserspace",
    "ModuleFiles",
    "NodeMaker",
    "Userspace",
    "Vendor",
    "module_version_file",
    "vendor_by_driver",
    "vendor_of",
]

VENDORS: tuple[Vendor, ...] = (NVIDIA, AMD, INTEL)
"""Every vendor with a module here; a new vendor is one module and one entry."""
_BY_ID = {v.pci_vendor: v for v in VENDORS}

CONTAINER_NODES: DeviceNodes = NVIDIA_NODES
"""The device nodes container configs are read and written with: those of the one vendor
whose GPUs pvegpu hands to containers so far. A config line names a node, not a vendor;
once a second vendor has `nodes`, the readers of other guests' configs ask each one."""
CONTAINER_TOOL: GpuTool = NVIDIA_SMI
"""The tool that lists a container's GPUs, that same vendor's: the runbook's `check-gpus`
action (MANIFEST.json names no vendor) and apply's server check run it."""
CONTAINER_USERSPACE: Userspace = NVIDIA_USERSPACE
"""The userspace a GPU container's files are read and checked for, that same vendor's."""
CONTAINER_VENDOR: Vendor = NVIDIA
"""That vendor: whose loaded host driver a container's userspace is compared with."""
CONTAINER_RUNTIME: ComputeRuntime = NVIDIA_CUDA
"""Its compute runtime: whose visible-devices variable a server in a container of GPUs of
no known runtime is read by."""
RUNTIME_RELEASE_FILES: tuple[str, ...] = tuple(
    v.compute.release_file for v in VENDORS if v.compute is not None and v.compute.release_file
)
"""Where a server's container may name its compute runtime's release: discovery reads each."""


def module_version_file(vendor: Vendor) -> str:
    """Where the host driver's module shows its version when it has one: an out-of-tree
    build's (amdgpu-dkms); the kernel's own modules show none."""
    return f"sys/module/{vendor.host_driver}/version"


RUNTIME_MODULE_FILES: tuple[str, ...] = tuple(
    module_version_file(v) for v in VENDORS if v.compute is not None and v.compute.release_file
)
"""The module version files of the vendors whose runtime release discovery reads."""
DRIVER_VERSION_VENDORS: tuple[Vendor, ...] = tuple(v for v in VENDORS if v.driver_version)
"""The vendors whose loaded driver's version discovery reads (`HostFacts.gpu_drivers`):
the facts JSON has a key for each, named by its host driver (`"nvidia"`)."""


LOCKED_MODULE_VENDORS: tuple[Vendor, ...] = tuple(v for v in VENDORS if v.module_files)
"""The vendors whose userspace is locked to their driver module's version: discovery reads
the module the next boot's kernel loads for each (`HostFacts.boot.kernels.modules`)."""


def vendor_of(function: PciIds) -> Vendor | None:
    """The vendor of a GPU's function, when pvegpu knows it."""
    return _BY_ID.get(function.vendor)


def vendor_by_driver(driver: str | None) -> Vendor | None:
    """The vendor whose host driver this is."""
    return next((v for v in VENDORS if v.host_driver == driver), None)
