"""The shape of a vendor's GPU partitions: MIG capability nodes and vGPU types on SR-IOV
virtual functions. The values are in the vendor's module (`vendors/nvidia.py`).

A partition is not a PCI function: the driver lists it in procfs or in a directory of
its own under the function's sysfs directory, and a container reaches a MIG instance
through a capability node of its own besides the GPU's node.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class MigSource:
    """Where the host driver lists the capability nodes of MIG instances, and the nodes.

    Layout below `capabilities` (relative to the root discovery reads): `mig/config` and
    `mig/monitor` (the host-wide capabilities), `gpu<minor>/mig/gi<N>/access` per GPU
    instance and `gpu<minor>/mig/gi<N>/ci<M>/access` per compute instance, `<minor>`
    being the GPU's node minor. Each file says the minor of the instance's node.
    """

    capabilities: str
    parse_access: Callable[[str], int]
    """An access file -> the minor of its capability node (pure; ValueError if malformed)."""
    node_path: str
    """`str.format` pattern of a capability node by its minor (`{minor}`)."""
    node: re.Pattern[str]
    """A path that is one capability node; group 1 is its minor."""
    directory: str
    """The directory of the capability nodes (a bind of it hands over all of them)."""
    major_name: str
    """The `/proc/devices` name of the capability nodes' dynamic major."""

    def path(self, minor: int) -> str:
        return self.node_path.format(minor=minor)


@value_class
@attrs.frozen(eq=False, repr=False)
class VgpuSource:
    """Where a virtual function shows the vendor's vGPU types (outside the kernel's
    `mdev_supported_types`), and how a VM config names one of them (`mdev=`)."""

    directory: str
    """The directory in the function's sysfs directory."""
    creatable: str
    """Its file listing the types the function can take now."""
    current: str
    """Its file holding the type the function has (0: none)."""
    parse_creatable: Callable[[str], tuple[tuple[int, str], ...]]
    """The creatable file -> (type id, type name) pairs (pure; ValueError if malformed)."""
    parse_current: Callable[[str], int]
    type_name: str
    """`str.format` pattern of a type id as `mdev=` names it (`{id}`)."""
    vf_unit: str
    """`str.format` pattern of the Proxmox unit that creates a GPU's VFs at boot
    (`{address}`: the GPU's, or `ALL`)."""

    def mdev_type(self, type_id: int) -> str:
        return self.type_name.format(id=type_id)

    @property
    def type_pattern(self) -> re.Pattern[str]:
        """A type as `mdev=` names it, for fullmatch: the pattern with a number for `{id}`."""
        prefix, _, suffix = self.type_name.partition("{id}")
        return re.compile(re.escape(prefix) + "[0-9]+" + re.escape(suffix))

    def file(self, name: str) -> str:
        """One of its files as a path below the function's sysfs directory."""
        return f"{self.directory}/{name}"

    def unit(self, address: str = "ALL") -> str:
        return self.vf_unit.format(address=address)
