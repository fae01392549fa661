"""How a GPU is shared out below a whole device, as discovery finds it: the virtual GPU
types its functions offer and the virtual GPUs that exist now (mediated devices, a
vendor's vGPUs on SR-IOV virtual functions), and the MIG instances' capability nodes."""

from __future__ import annotations

import attrs

from pvegpu.pci import PciAddress
from pvegpu.values import value_repr


@value_repr
@attrs.frozen(order=True, repr=False)
class MdevType:
    """A virtual GPU type a PCI function offers: a directory of the kernel's
    `mdev_supported_types` (`nvidia-558`, `i915-GVTg_V5_4`) or one line of a vendor's
    vGPU types on an SR-IOV virtual function (`Vendor.vgpu`), named as `mdev=` names it."""

    parent: PciAddress
    type_id: str
    name: str | None = None
    available_instances: int | None = None
    """How many more the parent can create now; None where the vendor does not say."""


@value_repr
@attrs.frozen(order=True, repr=False)
class MdevInstance:
    """A virtual GPU that exists now on a parent function: a mediated device
    (`/sys/bus/mdev/devices/<uuid>`) or a vendor vGPU type set on a virtual function."""

    parent: PciAddress
    type_id: str | None
    uuid: str | None = None
    """None for a vendor vGPU on a virtual function (no mediated device of its own)."""


@value_repr
@attrs.frozen(order=True, repr=False)
class MigCap:
    """A MIG capability node the GPU driver lists (`Vendor.mig`): `nvidia-cap<minor>`."""

    minor: int
    """Of its node under the capability directory (`/dev/nvidia-caps/nvidia-cap12`)."""
    gpu_minor: int | None = None
    """The node minor of its GPU (`GPU.node_minor`); None for the host-wide ones."""
    gpu_instance: int | None = None
    compute_instance: int | None = None
    """None for a GPU instance's own node (and the host-wide ones)."""
    name: str = ""
    """What it is, as the driver's procfs names it: `mig/config`, `gpu0/mig/gi1/ci0`."""
