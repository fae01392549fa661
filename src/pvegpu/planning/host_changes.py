"""host_changes(facts, pools): what the plan does to the host's drivers and services,
decided once and recorded on the Plan (`model/host_changes.py`).

The split's files, the runbook and the manual revert read these values. Each was worked
out by the renderer that needed it (the revert driver of a group member twice, in
planning and again in the split script); a renderer that decides can disagree with the
plan the reviewer approved, so none does.
"""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.hardware import host_driver
from pvegpu.model.facts import HostFacts, PciFunction
from pvegpu.model.host_changes import HostChanges, MovedFunction, UserspaceUpgrade, VfioGroup
from pvegpu.model.paths import SPLIT_UDEV_RULE
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.pci import PciAddress
from pvegpu.planning.next_boot import userspace_upgrades
from pvegpu.planning.split import revert_driver
from pvegpu.planning.sriov import late_vf_pfs


def host_changes(facts: HostFacts, pools: Sequence[Pool]) -> HostChanges:
    """The decisions of a plan whose pools are `pools` (module docstring)."""
    late = late_vf_pfs(facts, pools)
    vm_functions = {f.address for p in pools if p.kind is PoolKind.VFIO for f in p.functions}
    manager = facts.fabric_manager
    return HostChanges(
        vfio_groups=vfio_groups(facts, pools),
        late_vf_pfs=late,
        boot_overrides=tuple(
            sorted(
                (o for o in facts.driverctl if o.address in vm_functions),
                key=lambda o: o.address,
            )
        ),
        stops_fabric_manager=(
            any(p.nvswitches for p in pools if p.kind is PoolKind.VFIO)
            and (manager.installed or manager.enabled)
        ),
        udev_rules=(SPLIT_UDEV_RULE,) if late else (),
        userspace_upgrades=tuple(
            UserspaceUpgrade(vmid, command) for vmid, command in userspace_upgrades(facts, pools)
        ),
    )


def vfio_groups(facts: HostFacts, pools: Sequence[Pool]) -> tuple[VfioGroup, ...]:
    """The IOMMU groups of the pools the split moves to vfio-pci, by first member."""
    split_pools = [p for p in pools if p.moves_to_vfio]
    pool_of: dict[PciAddress, str] = {}
    by_group: dict[int, list[PciFunction]] = {}
    for pool in split_pools:
        for function in sorted(pool.functions, key=_address):
            pool_of.setdefault(function.address, pool.name)
            # Bridges stay on pcieport; they do not spoil a group's viability. Every other
            # function plan() moves is a member of a group (gpu-without-iommu-group).
            # SR-IOV VFs are the script's VFS data: they may not exist yet at boot.
            if function.is_bridge or function.iommu_group is None or function.physfn:
                continue
            by_group.setdefault(function.iommu_group, []).append(function)
    gpus = {gpu.address for pool in split_pools for gpu in pool.gpus}

    groups: list[VfioGroup] = []
    for group_id, functions in by_group.items():
        members = tuple(sorted({f.address: f for f in functions}.values(), key=_address))
        gpu = next((f.address for f in members if f.address in gpus), None)
        groups.append(
            VfioGroup(
                id=group_id,
                pool=pool_of[gpu or members[0].address],
                gpu=gpu,
                members=tuple(
                    MovedFunction(f, host_driver(f), revert_driver(facts, f)) for f in members
                ),
            )
        )
    return tuple(sorted(groups, key=lambda g: g.members[0].function.address))


def _address(function: PciFunction) -> PciAddress:
    return function.address
