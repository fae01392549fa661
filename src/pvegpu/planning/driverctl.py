"""driverctl's persisted overrides judged against a plan: a second binder at every boot.

driverctl writes each saved override into the device's `driver_override` again at every
boot (its udev rule and `driverctl@.service`), whatever pvegpu's split unit did before.
So a device the plan moves to vfio-pci that driverctl binds elsewhere, or a host-side
GPU the plan keeps on its host driver that driverctl sends to vfio-pci, would end up
wherever the last of the two binders put it: refused, with `driverctl unset-override`
as the fix. An override that agrees with the plan still outlives `revert` (the device
goes back to driverctl's driver at the next boot), and one on a device the plan leaves
alone still moves that device at every boot: both are said.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import VFIO_DRIVER, host_driver
from pvegpu.model.facts import DriverctlOverride, HostFacts, PciFunction
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.pci import PciAddress


def unset_command(override: DriverctlOverride) -> str:
    return f"driverctl unset-override {override.address}"


def _places(pools: Sequence[Pool]) -> dict[PciAddress, tuple[Pool, PciFunction]]:
    return {f.address: (p, f) for p in pools for f in p.functions}


def _guest(pool: Pool) -> str:
    if pool.kind is PoolKind.VFIO:
        return f"VM {pool.vm.vmid}" if pool.vm is not None else f"pool {pool.name!r}'s VM"
    return f"CT {pool.lxc.vmid}" if pool.lxc is not None else f"pool {pool.name!r}"


def planned_driver(pool: Pool, function: PciFunction) -> str | None:
    """The driver the plan gives `function` of `pool`: vfio-pci, or its host driver."""
    return VFIO_DRIVER if pool.kind is PoolKind.VFIO else host_driver(function)


def driverctl_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """A saved override that binds a device of the plan to another driver than the plan's."""
    places = _places(pools)
    for override in facts.driverctl:
        found = places.get(override.address)
        if found is None:
            continue
        pool, function = found
        wanted = planned_driver(pool, function)
        if wanted is None or override.driver == wanted:
            continue
        yield Diagnostic.error(
            "driverctl-override-conflict",
            override.path,
            f"driverctl binds {override.address} to {override.driver} at every boot, and the "
            f"plan gives it to {_guest(pool)} on {wanted}: the two binders race at each boot "
            "and the last one wins",
            f"run `{unset_command(override)}`, then plan again",
        )


def driverctl_findings(facts: HostFacts, pools: Sequence[Pool] = ()) -> Iterator[Diagnostic]:
    """What the saved overrides the plan accepts will do at boot (`pvegpu check`: every
    override, with no plan)."""
    places = _places(pools)
    for override in facts.driverctl:
        found = places.get(override.address)
        if found is not None:
            pool, function = found
            if planned_driver(pool, function) != override.driver:
                continue  # refused by driverctl_problems
            yield Diagnostic(
                Severity.WARNING,
                "driverctl-also-binds",
                override.path,
                f"driverctl binds {override.address} to {override.driver} at every boot, as "
                "the plan does: after a revert it takes the device again at the next boot; "
                f"run `{unset_command(override)}` so the split is the one binder",
            )
            continue
        device = facts.function(override.address)
        now = (
            "no such device on the host now"
            if device is None
            else f"{device.vendor_device}, on {device.driver or 'no driver'} now"
        )
        yield Diagnostic(
            Severity.INFO,
            "driverctl-override",
            override.path,
            f"driverctl binds {override.address} ({now}) to {override.driver} at every boot; "
            "the plan leaves it alone"
            if pools
            else f"driverctl binds {override.address} ({now}) to {override.driver} at every "
            "boot, next to any split unit",
        )
