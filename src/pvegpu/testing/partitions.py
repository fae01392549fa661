"""GPU partitions of a fake host: virtual GPU types and mediated devices in sysfs, the
vGPU manager's files on SR-IOV virtual functions, and MIG capabilities in procfs.

Every field defaults to "absent", so a host that describes none writes the same bytes
as before these existed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from pvegpu.values import value_class

if TYPE_CHECKING:
    from pvegpu.testing.tree_files import TreeFiles

MIG_GPU_INSTANCES = 15
"""GPU instance ids the driver numbers capability minors for, per GPU (gi0..gi14)."""
MIG_COMPUTE_INSTANCES = 8
"""Compute instance ids per GPU instance (ci0..ci7)."""
_CAPS = "proc/driver/nvidia/capabilities"


@value_class
@attrs.frozen(eq=False, repr=False)
class MdevTypeSpec:
    """One directory of a parent's `mdev_supported_types/`."""

    type_id: str
    """The directory's name, as `mdev=` names it: `nvidia-558`, `i915-GVTg_V5_4`."""
    name: str
    available_instances: int = 1
    device_api: str = "vfio-pci"


@value_class
@attrs.frozen(eq=False, repr=False)
class MdevSpec:
    """A mediated device that exists: `/sys/bus/mdev/devices/<uuid>`."""

    uuid: str
    parent: str
    """The parent function's address; it must offer `type_id` (`DeviceSpec.mdev_types`)."""
    type_id: str


@value_class
@attrs.frozen(eq=False, repr=False)
class VgpuSpec:
    """The vGPU manager's `nvidia/` directory on an SR-IOV virtual function."""

    creatable: tuple[tuple[int, str], ...] = ()
    """`creatable_vgpu_types`: (type id, name) lines."""
    current: int = 0
    """`current_vgpu_type`: the type the VF has, 0 for none."""


@value_class
@attrs.frozen(eq=False, repr=False)
class MigInstance:
    """A MIG GPU instance and its compute instances."""

    gpu_instance: int
    compute_instances: tuple[int, ...] = (0,)


def caps_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The capability node minor the driver gives a GPU or compute instance (its
    `mig-minors` table): after `config` (1) and `monitor` (2), each GPU has 15 GPU
    instances of 1 + 8 compute instance minors each."""
    base = 3 + gpu_minor * MIG_GPU_INSTANCES * (1 + MIG_COMPUTE_INSTANCES)
    base += gi * (1 + MIG_COMPUTE_INSTANCES)
    return base if ci is None else base + 1 + ci


CONFIG_MINOR = 1
MONITOR_MINOR = 2


def _access(minor: int, mode: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def write_device_partitions(
    writer: TreeFiles, path: str, mdev_types: Sequence[MdevTypeSpec], vgpu: VgpuSpec | None
) -> None:
    """A function's (its sysfs directory `path`) `mdev_supported_types/` and vGPU manager
    directory."""
    for kind in mdev_types:
        at = f"{path}/mdev_supported_types/{kind.type_id}"
        writer.file(f"{at}/name", kind.name + "\n")
        writer.file(f"{at}/available_instances", f"{kind.available_instances}\n")
        writer.file(f"{at}/device_api", kind.device_api + "\n")
        writer.file(f"{at}/create", "")
        writer.dir(f"{at}/devices")
    if vgpu is not None:
        lines = "".join(f"{i:<5} : {name}\n" for i, name in vgpu.creatable)
        writer.file(f"{path}/nvidia/creatable_vgpu_types", "ID    : vGPU Name\n" + lines)
        writer.file(f"{path}/nvidia/current_vgpu_type", f"{vgpu.current}\n")


def write_host_partitions(
    writer: TreeFiles,
    mdevs: Sequence[tuple[MdevSpec, str]],
    mig: Sequence[tuple[int, Sequence[MigInstance]]],
) -> None:
    """The mediated devices (each with its parent's sysfs directory) and the MIG
    capabilities (each NVIDIA GPU's minor and instances) of the whole host."""
    for mdev, parent in mdevs:
        home = f"{parent}/{mdev.uuid}"
        writer.file(f"{home}/remove", "")
        writer.rel_link(f"{home}/mdev_type", f"{parent}/mdev_supported_types/{mdev.type_id}")
        writer.rel_link(f"{parent}/mdev_supported_types/{mdev.type_id}/devices/{mdev.uuid}", home)
        writer.rel_link(f"sys/bus/mdev/devices/{mdev.uuid}", home)
    if not mig:
        return
    # Mode 0400 for config (root only), 0444 for monitor and the instances.
    writer.file(f"{_CAPS}/mig/config", _access(CONFIG_MINOR, 256))
    writer.file(f"{_CAPS}/mig/monitor", _access(MONITOR_MINOR, 292))
    for minor, instances in mig:
        for instance in instances:
            gi = instance.gpu_instance
            at = f"{_CAPS}/gpu{minor}/mig/gi{gi}"
            writer.file(f"{at}/access", _access(caps_minor(minor, gi), 292))
            for ci in instance.compute_instances:
                writer.file(f"{at}/ci{ci}/access", _access(caps_minor(minor, gi, ci), 292))
