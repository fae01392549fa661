"""`count = N` takes one NUMA node's GPUs where one node has N free (planning/count_choice.py).

The examples are hosts whose PCI order interleaves the sockets (as many dual-socket boards
enumerate them), so "the first N in PCI order" would straddle both; the property draws
hosts and specs and checks the choice against what each pool could take.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from depth import examples
from field_hosts import RTX3090, _ct, _nvidia_desktop, _vm
from pvegpu.errors import PlanError
from pvegpu.host.discover import discover
from pvegpu.model.facts import (
    GPU,
    HostFacts,
    IommuGroup,
    IommuGroupType,
    IommuState,
    NumaNode,
    PciFunction,
)
from pvegpu.model.plan import Plan
from pvegpu.model.schema import LxcSpec, MappingSpec, PoolSpec, Spec, VfioSpec, VmSpec
from pvegpu.pci import CpuList, PciAddress
from pvegpu.planning.planner import plan
from pvegpu.testing import write_host
from strategies_host import hosts
from test_plan_properties import SHARE_SETTINGS, assert_mostly_accepted, with_containers


def _host(nodes: list[int | None]) -> HostFacts:
    """One GPU per bus 0x10, 0x20, ..., the i-th on NUMA node nodes[i], each in its group."""
    gpus = []
    for i, node in enumerate(nodes):
        address = PciAddress(0, 0x10 * (i + 1), 0, 0)
        function = PciFunction(
            address=address,
            vendor=0x10DE,
            device=0x2BB5,
            subsystem_vendor=0x10DE,
            subsystem_device=0x204B,
            pci_class=0x030200,
            sysfs_path=f"sys/devices/pci0000:00/{address}",
            numa_node=node,
            iommu_group=10 + i,
            driver="nvidia",
        )
        gpus.append(GPU(function, (), node_minor=i))
    return HostFacts(
        node="pve1",
        functions=tuple(g.function for g in gpus),
        gpus=tuple(gpus),
        numa_nodes=(NumaNode(0, CpuList.parse("0-7")), NumaNode(1, CpuList.parse("8-15"))),
        iommu_groups=tuple(
            IommuGroup(10 + i, (g.address,), IommuGroupType.DMA_FQ) for i, g in enumerate(gpus)
        ),
        iommu=IommuState(True, ("dmar0",)),
        sev_snp=False,
        gpu_drivers=(),
        char_majors=(),
        cmdline="",
        vfio_ids=(),
    )


def _plan(nodes: list[int | None], *pools: dict[str, object]) -> Plan:
    spec = Spec(
        node="pve1",
        pools=tuple(
            PoolSpec(name=f"p{i}", lxc=LxcSpec(vmid=100 + i), **select)  # type: ignore[arg-type]
            for i, select in enumerate(pools)
        ),
    )
    return plan(with_containers(_host(nodes), spec), spec)


def _buses(result: Plan, name: str) -> list[int]:
    pool = next(p for p in result.pools if p.name == name)
    return [g.address.bus for g in pool.gpus]


# Sockets interleaved in PCI order: 0x10 node 0, 0x20 node 1, 0x30 node 0, ...
INTERLEAVED: list[int | None] = [0, 1, 0, 1, 0, 1, 0, 1]


def test_count_takes_one_nodes_gpus_not_the_first_in_pci_order() -> None:
    result = _plan(INTERLEAVED, {"count": 4})
    assert _buses(result, "p0") == [0x10, 0x30, 0x50, 0x70]
    assert result.pools[0].numa_nodes == (0,)
    codes = {f.code for f in result.findings}
    assert "count-spans-numa-nodes" not in codes and "pool-spans-numa-nodes" not in codes


def test_count_takes_the_lowest_node_with_enough_left() -> None:
    # The explicit pool takes two of node 0 first, so node 0 has 2 left and node 1 has 4:
    # count = 3 goes to node 1, and the next count = 2 to node 0's two.
    result = _plan(INTERLEAVED, {"count": 3}, {"gpus": ("10:00.0", "30:00.0")}, {"count": 2})
    assert _buses(result, "p0") == [0x20, 0x40, 0x60]
    assert _buses(result, "p1") == [0x10, 0x30]
    assert _buses(result, "p2") == [0x50, 0x70]


def test_gpus_without_a_node_count_as_one_after_the_numbered_ones() -> None:
    result = _plan([None, 0, None, 1, None], {"count": 2})
    assert _buses(result, "p0") == [0x10, 0x30]
    assert result.pools[0].numa_nodes == (None,)
    assert "count-spans-numa-nodes" not in {f.code for f in result.findings}


def test_count_that_no_node_holds_spans_nodes_and_says_why() -> None:
    result = _plan(INTERLEAVED, {"gpus": ("10:00.0",)}, {"count": 5})
    # No node has 5 free (node 0: 3, node 1: 4): the first 5 free in PCI order, as before.
    assert _buses(result, "p1") == [0x20, 0x30, 0x40, 0x50, 0x60]
    (finding,) = [f for f in result.findings if f.code == "count-spans-numa-nodes"]
    assert finding.subject == "p1"
    assert finding.message == (
        "pools[1].count = 5 takes GPUs on node 0, node 1: no NUMA node has 5 GPUs that no "
        "other pool takes (free per node: node 0: 3 (30:00.0, 50:00.0, 70:00.0), node 1: 4 "
        "(20:00.0, 40:00.0, 60:00.0, 80:00.0)), so transfers between the pool's GPUs cross "
        "sockets. To keep it on one node: count = 4, or free GPUs of one node from the other "
        "pools, or name them with gpus = [...]"
    )
    assert "pool-spans-numa-nodes" in {f.code for f in result.findings}


def test_count_beyond_the_free_gpus_is_still_refused() -> None:
    with pytest.raises(PlanError) as err:
        _plan(INTERLEAVED, {"numa_node": 0}, {"count": 5})
    (problem,) = [p for p in err.value.problems if p.code == "not-enough-gpus"]
    assert problem.subject == "pools[1].count"
    assert "only 4 are not in another pool" in problem.message


def _eligible(facts: HostFacts, spec: Spec, result: Plan, index: int) -> list[GPU]:
    """What pool `index` (a count pool) could take: the GPUs no explicit pool and no
    earlier count pool has, the BMC's display never."""
    taken: set[PciAddress] = set()
    for i, pool in enumerate(spec.pools):
        if pool.count is None or i < index:
            mine = next((p for p in result.pools if p.name == pool.name), None)
            taken |= {g.address for g in mine.gpus} if mine is not None else set()
    return [g for g in facts.gpus if not g.bmc_display and g.address not in taken]


def _node(gpu: GPU) -> int:
    return -1 if gpu.numa_node is None else gpu.numa_node


def test_count_keeps_to_one_node_whenever_one_has_enough() -> None:
    """Any accepted plan: each count pool has exactly N GPUs it could take (none of an
    explicit pool's, none of an earlier count pool's); where some node had N of those, all
    N are of one node, the lowest such (GPUs without a node last), the first N of it in
    PCI order; where none had, it says why (count-spans-numa-nodes). GPUs on vfio-pci
    count only when the others are too few, and passing them over is said."""
    outcomes: Counter[str] = Counter()

    @settings(SHARE_SETTINGS, max_examples=examples(200, at_least=80))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        host = data.draw(hosts())
        # Some GPUs without a node (firmware that gives none), to cover those too.
        if data.draw(st.booleans()):
            host = attrs.evolve(
                host,
                gpus=tuple(
                    attrs.evolve(g, function=attrs.evolve(g.function, numa_node=None))
                    if data.draw(st.integers(0, 3)) == 0
                    else g
                    for g in host.gpus
                ),
            )
        # Some GPUs on vfio-pci (a VM's, or left there): container pools pass them over.
        if data.draw(st.booleans()):
            host = attrs.evolve(
                host,
                gpus=tuple(
                    attrs.evolve(g, function=attrs.evolve(g.function, driver="vfio-pci"))
                    if data.draw(st.integers(0, 4)) == 0
                    else g
                    for g in host.gpus
                ),
            )
        addresses = [str(g.address) for g in host.gpus]
        pools = []
        for i in range(data.draw(st.integers(1, 3))):
            select: dict[str, object]
            if data.draw(st.booleans()):
                select = {"count": data.draw(st.integers(1, 4))}
            else:
                picked = data.draw(st.lists(st.sampled_from(addresses), min_size=1, max_size=2))
                select = {"gpus": tuple(dict.fromkeys(picked))}
            pools.append(PoolSpec(name=f"p{i}", lxc=LxcSpec(vmid=100 + i), **select))  # type: ignore[arg-type]
        spec = Spec(node="pve1", pools=tuple(pools))
        facts = with_containers(host, spec)
        try:
            result = plan(facts, spec)
        except PlanError as err:
            outcomes["refused"] += 1
            event("refused: " + ", ".join(sorted({p.code for p in err.problems})))
            return
        outcomes["accepted"] += 1
        spans = {f.subject for f in result.findings if f.code == "count-spans-numa-nodes"}
        skips = {f.subject for f in result.findings if f.code == "count-skips-gpus-in-use"}
        seen: set[PciAddress] = set()
        for pool in result.pools:
            assert not {g.address for g in pool.gpus} & seen, "a GPU in two pools"
            seen |= {g.address for g in pool.gpus}
        for index, pool_spec in enumerate(spec.pools):
            if pool_spec.count is None:
                continue
            chosen = next(p for p in result.pools if p.name == pool_spec.name).gpus
            eligible = _eligible(facts, spec, result, index)
            assert len(chosen) == pool_spec.count
            assert {g.address for g in chosen} <= {g.address for g in eligible}
            # A container pool takes GPUs on vfio-pci only when the others are too few.
            idle = [g for g in eligible if g.driver != "vfio-pci"]
            skipped = pool_spec.name in skips
            if len(idle) >= pool_spec.count:
                assert skipped == (len(idle) < len(eligible))
                if skipped:
                    event("count pool passes over GPUs on vfio-pci")
                eligible = idle
            else:
                assert not skipped
            by_node: dict[int, list[GPU]] = {}
            for gpu in eligible:
                by_node.setdefault(_node(gpu), []).append(gpu)
            fitting = sorted(
                (n for n, gpus in by_node.items() if len(gpus) >= pool_spec.count),
                key=lambda n: (n == -1, n),
            )
            if fitting:
                event("count pool on one node")
                assert {_node(g) for g in chosen} == {fitting[0]}
                assert list(chosen) == by_node[fitting[0]][: pool_spec.count]
                assert pool_spec.name not in spans
            else:
                event("count pool spans nodes")
                # Said, unless it took every GPU left (nothing to choose).
                assert (pool_spec.name in spans) == (len(eligible) > pool_spec.count)
                assert list(chosen) == eligible[: pool_spec.count]

    check()
    assert_mostly_accepted(outcomes, 0.5)


def test_count_passes_over_a_gpu_a_vm_outside_the_spec_holds(tmp_path: Path) -> None:
    """VM 200 holds 01:00.0; 02:00.0 and 03:00.0 are free. `count = 2` takes the two free
    ones (PCI order would take 01:00.0 and refuse the plan: VM 200 would take it back),
    and says which it passed over. The VM's GPU is taken only by its own pool."""
    facts = _vm_holds_the_first(tmp_path)
    spec = Spec(node="pve-rt", pools=(PoolSpec(name="a", count=2, lxc=LxcSpec(vmid=101)),))
    result = plan(facts, spec)
    assert [str(g.address) for g in result.pools[0].gpus] == ["0000:02:00.0", "0000:03:00.0"]
    (finding,) = [f for f in result.findings if f.code == "count-skips-gpus-in-use"]
    assert finding.message == (
        "pools[0].count = 2 passes over 1 GPU in use elsewhere (01:00.0: held by VM 200 "
        "(etc/pve/qemu-server/200.conf line 9)) and takes free ones instead. To give the "
        "pool one of them, name it with gpus = [...] and free it from the other guest first"
    )
    # The VM's own pool takes its GPU with the rest, and passes nothing over.
    own = Spec(
        node="pve-rt",
        pools=(
            PoolSpec(
                name="w", count=3, vfio=VfioSpec(vm=VmSpec(vmid=200)), mapping=MappingSpec("wgpu")
            ),
        ),
    )
    mine = plan(facts, own)
    assert len(mine.pools[0].gpus) == 3
    assert "count-skips-gpus-in-use" not in {f.code for f in mine.findings}


def test_count_takes_a_gpu_in_use_only_when_the_free_ones_are_too_few(tmp_path: Path) -> None:
    """The same host, `count = 3` for the container: only two are free, so the choice
    takes all three as before and the checks after it refuse the plan, naming VM 200's
    line (the choice itself does not hide why)."""
    spec = Spec(node="pve-rt", pools=(PoolSpec(name="a", count=3, lxc=LxcSpec(vmid=101)),))
    with pytest.raises(PlanError) as err:
        plan(_vm_holds_the_first(tmp_path), spec)
    (taken,) = [p for p in err.value.problems if p.code == "vm-takes-pool-gpu"]
    assert taken.subject == "etc/pve/qemu-server/200.conf line 9"


def _vm_holds_the_first(tmp_path: Path) -> HostFacts:
    """Three RTX 3090s, no NUMA node: 01:00.0 on vfio-pci, VM 200's (`hostpci0`);
    02:00.0 and 03:00.0 on nvidia, no guest's; CT 101 without GPUs."""
    cards = [(f"0000:0{i}:00.0", RTX3090, "NVIDIA GeForce RTX 3090") for i in (1, 2, 3)]
    vm = _vm("w", 200, "hostpci0: 0000:01:00,pcie=1\n")
    host = _nvidia_desktop(
        "pve-rt",
        cards,
        drivers=["vfio-pci", "nvidia", "nvidia"],
        files={"etc/pve/lxc/101.conf": _ct("a", 101, ""), "etc/pve/qemu-server/200.conf": vm},
    )
    root = tmp_path / "root"
    write_host(host, root)
    return discover(root)
