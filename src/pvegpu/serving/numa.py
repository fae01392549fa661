"""The NUMA node systemd pins the service to: the one node all the pool's GPUs are on."""

from __future__ import annotations

from pvegpu.diagnostic import Severity
from pvegpu.model.decision import NumaPinning
from pvegpu.serving.checks import Checks


def numa_pinning(checks: Checks) -> NumaPinning | None:
    """The node to pin to; None, with a finding or a problem, when there is no single one."""
    nodes = {g.numa_node for g in checks.pool.gpus}
    known = sorted(n for n in nodes if n is not None)
    if len(known) > 1:
        if not checks.spec.allow_multi_numa:
            checks.problem(
                "serving-pool-spans-numa-nodes",
                f"the pool's GPUs are on NUMA nodes {', '.join(map(str, known))}: every "
                "all-reduce crosses the socket link and the service cannot be pinned",
                "select the pool by numa_node, or set allow_multi_numa = true to serve unpinned",
            )
        else:
            checks.finding(
                Severity.WARNING,
                "serving-unpinned",
                f"GPUs on NUMA nodes {', '.join(map(str, known))} (allow_multi_numa): "
                "the service is not pinned to a node",
            )
        return None
    if None in nodes or not known:
        checks.finding(
            Severity.WARNING,
            "serving-unpinned",
            "firmware gives no NUMA node for some of the pool's GPUs; the service is not pinned",
        )
        return None
    node = next((n for n in checks.facts.numa_nodes if n.id == known[0]), None)
    if node is None or not node.cpus:
        checks.finding(
            Severity.WARNING,
            "serving-unpinned",
            f"NUMA node {known[0]} has no CPUs in the facts; the service is not pinned",
        )
        return None
    return NumaPinning(node.id, node.cpus)
