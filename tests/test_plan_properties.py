from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from pvegpu.errors import PlanError
from pvegpu.host.facts import ConfigFile
from pvegpu.planning.plan import PoolKind
from pvegpu.planning.planner import plan
from strategies_host import hosts, specs


def with_containers(host, spec):  # type: ignore[no-untyped-def]
    files = tuple(
        ConfigFile(f"etc/pve/lxc/{p.lxc.vmid}.conf", "arch: amd64\n")
        for p in spec.pools
        if p.lxc is not None
    )
    return attrs.evolve(host, files=files)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_plans_are_disjoint_and_vfio_pools_take_whole_groups(data: st.DataObject) -> None:
    """Any accepted plan: no GPU in two pools; a vfio pool holds every non-bridge group member."""
    host = data.draw(hosts())
    spec = data.draw(specs(host))
    facts = with_containers(host, spec)
    try:
        result = plan(facts, spec)
    except PlanError as err:
        assert err.problems  # refusals always say why
        return
    seen: set[object] = set()
    for pool in result.pools:
        addresses = {g.address for g in pool.gpus}
        assert not addresses & seen
        seen |= addresses
        assert pool.gpus, "no empty pool is ever accepted"
        if pool.kind is PoolKind.VFIO:
            moved = {f.address for f in pool.functions}
            for gpu in pool.gpus:
                group = facts.group(gpu.iommu_group) if gpu.iommu_group is not None else None
                assert group is not None
                members = {a for a in group.members if not facts.function(a).is_bridge}  # type: ignore[union-attr]
                assert members <= moved


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_foreign_group_members_always_refused(data: st.DataObject) -> None:
    """A vfio pool over a group that also holds a non-GPU device is never accepted."""
    host = data.draw(hosts(iommu=True))
    spec = data.draw(specs(host))
    facts = with_containers(host, spec)
    try:
        result = plan(facts, spec)
    except PlanError:
        return
    for pool in result.vfio_pools:
        gpu_functions = {f.address for g in pool.gpus for f in g.functions}
        assert {f.address for f in pool.functions} == gpu_functions
