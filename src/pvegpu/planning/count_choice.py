"""Which GPUs a `count = N` pool takes: N of those no other pool takes, on one NUMA node
when one node has them.

A pool's GPUs talk to each other and to the server's CPU threads for every transfer; a
pool split over two sockets pays the inter-socket link for all of it (and its server is
pinned to one node's CPUs, `serving/numa.py`). An admin who writes `count = 4` on a host
with four free GPUs per socket means four GPUs of one socket, not the first four in PCI
order that happen to straddle the two.

**Decision: greedy, in spec order, lowest node first.** Each `count` pool, in the order
the spec lists them, takes the first N free GPUs (PCI order) of the lowest-numbered NUMA
node that has N free; GPUs whose firmware gives no node count as one node after the
numbered ones. Only when no node has N free does it take the first N free in PCI order
across nodes (as before), and says why (`count-spans-numa-nodes`, naming each node's
free GPUs), unless it takes every GPU left: then there was nothing to choose. The GPUs
the explicit selectors (`gpus`, `numa_node`) name are taken before any `count` pool, so
the choice never takes one of them. Deterministic: the same host and spec always give
the same GPUs. Not an optimal packing: an earlier pool may take the node a later, larger
one needed; the finding then says which node had how many, and `gpus =` (or another
pool order) says exactly which.

**GPUs in use elsewhere come last.** A GPU a guest outside the pool holds today (its
config or hookscript reaches it: the host's reference inventory), or, for a container
pool, one bound to vfio-pci (the container needs the vendor's driver), is taken only when
the pool cannot have its count without it: taking it would refuse the plan
(`vm-takes-pool-gpu`, `gpu-minor-unknown`) although free GPUs were there. The choice
above runs over the GPUs in use nowhere first; the plan says which it passed over and
why (`count-skips-gpus-in-use`). Where even all of them are too few, the choice runs over
every free GPU as before, and the checks after it say what stands in the way.

What the choice does not decide is checked afterwards as for every pool (IOMMU groups,
a GPU in two pools, the BMC's display never taken).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import VFIO_DRIVER
from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.references import Holder
from pvegpu.model.schema import PoolSpec
from pvegpu.pci import PciAddress
from pvegpu.wording import plural

_NO_NODE = 1 << 30
"""Sort key of the GPUs whose firmware gives no NUMA node: after every numbered node."""


def _node_key(gpu: GPU) -> int:
    return _NO_NODE if gpu.numa_node is None else gpu.numa_node


def _node_name(key: int) -> str:
    return "no node" if key == _NO_NODE else f"node {key}"


def choose_counts(
    pools: Sequence[PoolSpec],
    free: Sequence[GPU],
    in_use: Callable[[PoolSpec, GPU], str | None],
    selections: list[tuple[GPU, ...]],
    problems: list[Diagnostic],
    findings: list[Diagnostic],
) -> None:
    """Fill `selections[i]` for each `count` pool from `free` (the GPUs no explicit
    selector took, in PCI order); `in_use(pool, gpu)` says why a GPU is in use elsewhere
    for that pool (None: it is not). Refusals go to `problems`, the reasons a pool spans
    NUMA nodes or passes GPUs over to `findings`."""
    taken: set[PciAddress] = set()
    for i, pool in enumerate(pools):
        if pool.count is None:
            continue
        left = [g for g in free if g.address not in taken]
        busy = {g.address: why for g in left if (why := in_use(pool, g)) is not None}
        idle = [g for g in left if g.address not in busy]
        if len(idle) >= pool.count:
            chosen = _choose(pool, i, idle, findings)
            if busy:
                findings.append(_skips(pool, i, busy))
        else:
            if len(left) < pool.count:
                problems.append(
                    Diagnostic.error(
                        "not-enough-gpus",
                        f"pools[{i}].count",
                        f"asks for {pool.count} GPUs but only {len(left)} are not in another pool",
                        f"lower count to {len(left)} or free GPUs from another pool",
                    )
                )
            chosen = _choose(pool, i, left, findings)
        taken.update(g.address for g in chosen)
        selections[i] = tuple(chosen)


def _choose(
    pool: PoolSpec, index: int, candidates: Sequence[GPU], findings: list[Diagnostic]
) -> list[GPU]:
    """`pool.count` of `candidates` (PCI order): the first of the lowest node that has
    that many, else the first in PCI order (and why, unless that is every candidate)."""
    count = pool.count or 0
    nodes: dict[int, list[GPU]] = {}
    for gpu in sorted(candidates, key=_node_key):  # stable: PCI order within a node
        nodes.setdefault(_node_key(gpu), []).append(gpu)
    node = next((k for k, gpus in nodes.items() if len(gpus) >= count), None)
    if node is not None:
        return nodes[node][:count]
    chosen = sorted(candidates, key=lambda g: g.address)[:count]
    # Taking every GPU left is no choice (a whole HGX board for one VM): the
    # pool-spans-numa-nodes warning says it all.
    if len(candidates) > count:
        findings.append(_spans(pool, index, nodes, chosen))
    return chosen


def _skips(pool: PoolSpec, index: int, busy: dict[PciAddress, str]) -> Diagnostic:
    # Information: the choice is not PCI order here, and the reviewer sees why.
    passed = "; ".join(f"{address.short}: {why}" for address, why in sorted(busy.items()))
    return Diagnostic(
        Severity.INFO,
        "count-skips-gpus-in-use",
        pool.name,
        f"pools[{index}].count = {pool.count} passes over {plural(len(busy), 'GPU')} in use "
        f"elsewhere ({passed}) and takes free ones instead. To give the pool one of them, "
        "name it with gpus = [...] and free it from the other guest first",
    )


def _spans(
    pool: PoolSpec, index: int, nodes: dict[int, list[GPU]], chosen: Sequence[GPU]
) -> Diagnostic:
    spanned = sorted({_node_key(g) for g in chosen})
    listed = ", ".join(
        f"{_node_name(k)}: {len(gpus)} ({', '.join(g.address.short for g in gpus)})"
        for k, gpus in nodes.items()
    )
    largest = max(len(gpus) for gpus in nodes.values())
    # Information: `pool-spans-numa-nodes` already warns that the pool spans nodes; this
    # says why the choice could not keep it on one and what would.
    return Diagnostic(
        Severity.INFO,
        "count-spans-numa-nodes",
        pool.name,
        f"pools[{index}].count = {pool.count} takes GPUs on "
        f"{', '.join(_node_name(k) for k in spanned)}: no NUMA node has "
        f"{plural(pool.count or 0, 'GPU')} that no other pool takes (free per node: "
        f"{listed}), so transfers between the pool's GPUs cross sockets. To keep it on one "
        f"node: count = {largest}, or free GPUs of one node from the other pools, or name "
        "them with gpus = [...]",
    )


def gpus_in_use(facts: HostFacts) -> Callable[[PoolSpec, GPU], str | None]:
    """Why a GPU is in use elsewhere for a pool, from the host's reference inventory: a
    guest other than the pool's own reaches it in its config's main or pending section
    (a snapshot's lines are not the guest's now), or a container pool would have to take
    it from vfio-pci."""
    holders: dict[PciAddress, dict[tuple[Holder, int], str]] = {}
    for ref in facts.references:
        if ref.vmid is None or ref.inert is not None or not (ref.main_section or ref.pending):
            continue
        for address in ref.gpus:
            holders.setdefault(address, {}).setdefault((ref.holder, ref.vmid), ref.where)

    def in_use(pool: PoolSpec, gpu: GPU) -> str | None:
        own = _own_guest(pool)
        others = [
            f"{'CT' if holder is Holder.CONTAINER else 'VM'} {vmid} ({where})"
            for (holder, vmid), where in holders.get(gpu.address, {}).items()
            if (holder, vmid) != own
        ]
        if others:
            return "held by " + ", ".join(others)
        if pool.lxc is not None and gpu.driver == VFIO_DRIVER:
            return "on vfio-pci, and the container needs the host driver"
        return None

    return in_use


def _own_guest(pool: PoolSpec) -> tuple[Holder, int] | None:
    if pool.lxc is not None:
        return (Holder.CONTAINER, pool.lxc.vmid)
    if pool.vfio is not None and pool.vfio.vm is not None:
        return (Holder.VM, pool.vfio.vm.vmid)
    return None
