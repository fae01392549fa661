"""What plan() decides of the host's drivers and services, once, for every reader.

`Plan.host_changes` carries it (`planning/host_changes.py` decides it): each IOMMU group
the split moves to vfio-pci with its members' drivers now, after and at revert; the
SR-IOV physical functions whose VFs are pinned when they appear; the driverctl overrides
that bind a reverted function again at boot; what the runbook must stop and reload; the
containers whose userspace the next boot's driver needs. The split's files, the runbook
and the manual revert read these values: they format them and decide nothing again.
"""

from __future__ import annotations

import attrs

from pvegpu.hardware import VFIO_DRIVER
from pvegpu.model.facts import DriverctlOverride, PciFunction
from pvegpu.pci import PciAddress
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class MovedFunction:
    """A function the split moves to vfio-pci, with the drivers it has on the way."""

    function: PciFunction
    host_driver: str | None
    """The driver that claims it when nothing overrides it (`hardware.host_driver`): the
    split's softdeps and unit ordering name it. None: not known."""
    revert_driver: str | None
    """The driver `revert` returns it to (`planning.split.revert_driver`). None: not known
    (revert leaves it unbound)."""

    @property
    def now(self) -> str | None:
        """The driver discovery saw it on (None: unbound)."""
        return self.function.driver

    @property
    def after(self) -> str:
        """The driver the split leaves it on."""
        return VFIO_DRIVER


@value_class
@attrs.frozen(eq=False, repr=False)
class VfioGroup:
    """One IOMMU group the split moves to vfio-pci, whole."""

    id: int
    pool: str
    """The pool of its GPU (of its first member where it holds none: an NVSwitch's)."""
    gpu: PciAddress | None
    """The pool's GPU in it; None for a group of a whole board's NVSwitch."""
    members: tuple[MovedFunction, ...]
    """Every non-bridge function of it the plan moves, in address order (not its SR-IOV
    VFs: those are `LateVfPf.vfs`, they may not exist yet at boot)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class LateVfPf:
    """A PF whose VFs the split pins when they are created (`planning.sriov.late_vf_pfs`)."""

    function: PciFunction
    vfs: tuple[MovedFunction, ...]
    """Its VFs that go to vfio-pci, in address order."""
    sibling_driver: str | None
    """The driver its other VFs are pinned to when they appear (autoprobe is off, so
    without a pin no driver would take them): the one a discovered sibling VF is on,
    else the PF's own host driver. None: not known (they are left unbound)."""
    autoprobe: bool
    """`sriov_drivers_autoprobe` as discovered: what `revert` writes back."""


@value_class
@attrs.frozen(eq=False, repr=False)
class UserspaceUpgrade:
    """A container whose CUDA the next boot's driver breaks, and the command that puts
    that driver's userspace into it (`container-driver-next-boot`)."""

    vmid: int
    command: str


@value_class
@attrs.frozen(eq=False, repr=False)
class HostChanges:
    """The plan's decisions on the host's drivers and services (module docstring)."""

    vfio_groups: tuple[VfioGroup, ...] = ()
    """The groups the split moves, by their first member's address."""
    late_vf_pfs: tuple[LateVfPf, ...] = ()
    """The PFs of the VFs a vfio pool moves, in address order."""
    boot_overrides: tuple[DriverctlOverride, ...] = ()
    """The driverctl overrides of the VM pools' functions, in address order: driverctl
    binds each again at every boot, a revert included."""
    stops_fabric_manager: bool = False
    """The runbook stops and disables Fabric Manager on the host: a VM takes a whole
    NVSwitch board, and the service (installed or enabled) holds the switches open."""
    udev_rules: tuple[str, ...] = ()
    """The udev rule files the plan writes (the split's rule for late VFs): udevd is told
    to reload when one is installed or put back."""
    userspace_upgrades: tuple[UserspaceUpgrade, ...] = ()
    """The containers whose userspace the next boot's driver needs, by vmid."""
