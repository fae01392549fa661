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

What the choice does not decide is checked afterwards as for every pool (IOMMU groups,
a GPU in two pools, the BMC's display never taken).
"""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.errors import Problem
from pvegpu.model.facts import GPU
from pvegpu.model.plan import Finding, Severity
from pvegpu.model.schema import PoolSpec
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
    selections: list[tuple[GPU, ...]],
    problems: list[Problem],
    findings: list[Finding],
) -> None:
    """Fill `selections[i]` for each `count` pool from `free` (the GPUs no explicit
    selector took, in PCI order); refusals go to `problems`, the reasons a pool spans
    NUMA nodes to `findings`."""
    # Each node's free GPUs in PCI order, nodes ascending. Every choice takes a prefix of
    # each node's list (the first N of one node, or the first N in PCI order overall), so
    # a cursor per node is all the state: no scan of the host per pool.
    nodes: dict[int, list[GPU]] = {}
    for gpu in sorted(free, key=_node_key):  # stable: PCI order within a node
        nodes.setdefault(_node_key(gpu), []).append(gpu)
    taken = dict.fromkeys(nodes, 0)
    left = len(free)
    for i, pool in enumerate(pools):
        if pool.count is None:
            continue
        counts = {k: len(gpus) - taken[k] for k, gpus in nodes.items()}
        node = next((k for k, n in counts.items() if n >= pool.count), None)
        if node is not None:
            chosen = nodes[node][taken[node] : taken[node] + pool.count]
        else:
            if left < pool.count:
                problems.append(
                    Problem(
                        "not-enough-gpus",
                        f"pools[{i}].count",
                        f"asks for {pool.count} GPUs but only {left} are not in another pool",
                        f"lower count to {left} or free GPUs from another pool",
                    )
                )
            remaining = [g for k, gpus in nodes.items() for g in gpus[taken[k] :]]
            chosen = sorted(remaining, key=lambda g: g.address)[: pool.count]
            # Taking every GPU left is no choice (a whole HGX board for one VM): the
            # pool-spans-numa-nodes warning says it all.
            if left > pool.count:
                findings.append(_spans(pool, i, nodes, taken, chosen))
        for gpu in chosen:
            taken[_node_key(gpu)] += 1
        left -= len(chosen)
        selections[i] = tuple(chosen)


def _spans(
    pool: PoolSpec,
    index: int,
    nodes: dict[int, list[GPU]],
    taken: dict[int, int],
    chosen: Sequence[GPU],
) -> Finding:
    free = {k: gpus[taken[k] :] for k, gpus in nodes.items() if len(gpus) > taken[k]}
    spanned = sorted({_node_key(g) for g in chosen})
    listed = ", ".join(
        f"{_node_name(k)}: {len(gpus)} ({', '.join(g.address.short for g in gpus)})"
        for k, gpus in free.items()
    )
    largest = max(len(gpus) for gpus in free.values())
    # Information: `pool-spans-numa-nodes` already warns that the pool spans nodes; this
    # says why the choice could not keep it on one and what would.
    return Finding(
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
