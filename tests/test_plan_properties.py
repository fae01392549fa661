"""Properties of plan() over generated hosts and specs (strategies_host.py).

A property of accepted plans proves little if plan() refuses most examples, so each test
counts the outcomes, reports them as hypothesis events (`--hypothesis-show-statistics`)
and asserts a floor on the accepted share. The specs are built from the generated host's
GPUs, and one in five is wild (blind selectors and consumers) to keep refusals covered:
about 80% of examples are accepted.
"""

from __future__ import annotations

from collections import Counter

import attrs
from hypothesis import event, given, settings
from hypothesis import strategies as st

from depth import examples
from pvegpu.errors import PlanError
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.plan import Plan, PoolKind
from pvegpu.model.schema import Spec
from pvegpu.pci import PciAddress
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from strategies_host import hosts, specs

MIN_ACCEPTED = 0.6
# The properties that assert a share of their outcomes draw a fixed sequence of examples
# (derandomize): a share of random draws falls under any honest floor now and then (one
# run in about 50 did), and a red run that the next run cannot repeat says nothing. The
# fixed sequence differs between the quick and the thorough run; both are checked in CI.
SHARE_SETTINGS = settings(derandomize=True, database=None)
"""The accepted share each property must reach (measured: about 0.8)."""


def with_containers(host: HostFacts, spec: Spec) -> HostFacts:
    """The host with a config file for each LXC pool's container, as Proxmox would have."""
    files = tuple(
        ConfigFile(f"etc/pve/lxc/{p.lxc.vmid}.conf", "arch: amd64\n")
        for p in spec.pools
        if p.lxc is not None
    )
    return attrs.evolve(host, files=files)


def outcome(facts: HostFacts, spec: Spec, outcomes: Counter[str]) -> Plan | None:
    """plan(), counted: the plan, or None for a refusal (which must say why)."""
    try:
        result = plan(facts, spec)
    except PlanError as err:
        assert err.problems  # refusals always say why
        codes = sorted({p.code for p in err.problems})
        event("refused: " + ", ".join(codes))
        outcomes["refused"] += 1
        outcomes.update(f"refused: {code}" for code in codes)
        return None
    event("accepted")
    outcomes["accepted"] += 1
    return result


def assert_mostly_accepted(outcomes: Counter[str], floor: float = MIN_ACCEPTED) -> None:
    total = outcomes["accepted"] + outcomes["refused"]
    share = outcomes["accepted"] / total
    print(f"plan() accepted {outcomes['accepted']} of {total} generated examples ({share:.0%})")
    assert share >= floor, f"only {share:.0%} of the examples reach a plan: {outcomes}"


def test_plans_are_disjoint_and_vfio_pools_take_whole_groups() -> None:
    """Any accepted plan: no GPU in two pools; a vfio pool holds every non-bridge group
    member; and it renders (renderers format decided values, they do not refuse)."""
    outcomes: Counter[str] = Counter()

    @settings(SHARE_SETTINGS, max_examples=examples(200, at_least=80))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        host = data.draw(hosts())
        spec = data.draw(specs(host))
        facts = with_containers(host, spec)
        result = outcome(facts, spec, outcomes)
        if result is None:
            return
        seen: set[PciAddress] = set()
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
                    functions = [facts.function(a) for a in group.members]
                    members = {f.address for f in functions if f is not None and not f.is_bridge}
                    assert members <= moved
        # The plan decided everything: rendering an accepted plan formats it, never refuses.
        render(result)

    check()
    assert_mostly_accepted(outcomes)


def test_foreign_group_members_always_refused() -> None:
    """A vfio pool over a group that also holds a non-GPU device is never accepted; vfio
    pools are drawn over such groups too (vfio_anywhere), and some must be refused so."""
    outcomes: Counter[str] = Counter()

    @settings(SHARE_SETTINGS, max_examples=examples(100, at_least=80))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        host = data.draw(hosts(iommu=True))
        spec = data.draw(specs(host, vfio_anywhere=True))
        result = outcome(with_containers(host, spec), spec, outcomes)
        if result is None:
            return
        for pool in result.vfio_pools:
            gpu_functions = {f.address for g in pool.gpus for f in g.functions}
            assert {f.address for f in pool.functions} == gpu_functions

    check()
    assert outcomes["refused: foreign-device-in-group"], f"none refused for it: {outcomes}"
    # Groups with foreign members are drawn on purpose here, so fewer plans go through:
    # 60% of this Hypothesis release's fixed sequence, 49% in a run on Debian 13's (80 examples:
    # one standard deviation is about 5.5 points). The floor sits three below.
    assert_mostly_accepted(outcomes, floor=0.4)
