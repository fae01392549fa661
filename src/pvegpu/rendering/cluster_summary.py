"""OUT/SUMMARY.md of a cluster: what each node gets, the one pci.cfg, the order to apply.

Each node's own SUMMARY.md (layout, files, findings, runbook, revert) stays in its
bundle; this page is the cluster's table of contents: a row per node, every mapping's
devices by node with the sysfs values written, the findings that concern several nodes,
and one topology picture per node (the node's own topology.svg).
"""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.diagnostic import Diagnostic
from pvegpu.model.artifact import APPLY_BUNDLE, REVIEW, Artifact
from pvegpu.model.plan import ClusterPlan, Plan
from pvegpu.pvefiles import pcicfg
from pvegpu.rendering.review.render import SEVERITY_HEADINGS, cell
from pvegpu.wording import plural


def _pools(plan: Plan) -> str:
    parts = []
    for pool in plan.pools:
        guest = (
            f"LXC {pool.lxc.vmid}"
            if pool.lxc is not None
            else f"VM {pool.vm.vmid}"
            if pool.vm is not None
            else "no VM yet"
        )
        kind = "vfio-pci" if pool.moves_to_vfio else pool.driver
        what = plural(pool.size, "GPU")
        if pool.vgpu_type is not None:
            what = f"{plural(pool.size, 'vGPU VF')} ({pool.vgpu_type})"
        parts.append(f"{pool.name}: {what} on {kind} for {guest}")
    return "; ".join(parts) or "none"


def _node_rows(
    cluster: ClusterPlan, rendered: Sequence[tuple[str, Sequence[Artifact]]]
) -> list[str]:
    rows = [
        "| node | GPUs | pools | mappings | files | findings | bundle |",
        "|---|---:|---|---|---:|---:|---|",
    ]
    for node, artifacts in rendered:
        plan = cluster.plan_of(node)
        installed = [a for a in artifacts if a.bundle == APPLY_BUNDLE and a.target != REVIEW]
        mappings = ", ".join(f"`{p.mapping.id}`" for p in plan.pools if p.mapping) or "-"
        rows.append(
            f"| {node} | {len(plan.facts.gpus)} | {cell(_pools(plan))} | {mappings} | "
            f"{len(installed)} | {len(plan.findings)} | [{node}/]({node}/SUMMARY.md) |"
        )
    return rows


def _mapping_rows(cluster: ClusterPlan) -> list[str]:
    shared = cluster.shared
    if shared is None:
        return ["No pool has a PCI mapping: pci.cfg is not written."]
    lines = [
        f"`/{pcicfg.PATH}` is one file for the whole cluster (pmxcfs): it is written once, "
        f"by **{shared.writer}**'s bundle (`{shared.writer}/{pcicfg.PATH}`), with the map "
        "lines of every node below, each from that node's own sysfs. Lines of nodes not "
        "planned here are kept as they are.",
        "",
        "| mapping | node | path | id | iommugroup | subsystem-id |",
        "|---|---|---|---|---:|---|",
    ]
    for mapping in shared.mappings:
        for entry in mapping.maps:
            lines.append(
                f"| `{mapping.id}` | {entry.node} | `{entry.path}` | `{entry.id}` | "
                f"{'-' if entry.iommugroup is None else entry.iommugroup} | "
                f"`{entry.subsystem_id or '-'}` |"
            )
    if shared.drop:
        moved = ", ".join(f"`{i}` ({plural(len(v), 'line')})" for i, v in shared.drop)
        lines += [
            "",
            f"Map lines leaving other mappings (their devices move into a pool's): {moved}.",
        ]
    return lines


def _findings(findings: Sequence[Diagnostic]) -> list[str]:
    if not findings:
        return ["None across nodes; each node's SUMMARY.md lists its own."]
    lines: list[str] = []
    for severity, heading in SEVERITY_HEADINGS.items():
        chosen = [f for f in findings if f.severity is severity]
        if chosen:
            lines += [f"### {heading}", ""]
            lines += [f"- `{f.subject}`: {f.message} [{f.code}]{_fix(f)}" for f in chosen]
            lines.append("")
    return lines[:-1]


def _fix(finding: Diagnostic) -> str:
    return f" Fix: {finding.fix}" if finding.fix else ""


def _apply_order(cluster: ClusterPlan) -> list[str]:
    nodes = list(cluster.nodes)
    shared = cluster.shared
    if shared is not None:
        # The writer first: the other nodes' VMs name mappings whose lines it installs.
        nodes.remove(shared.writer)
        nodes.insert(0, shared.writer)
    lines = ["Apply each bundle on its own node, in this order:", "", "```sh"]
    lines += [f"pvegpu apply --bundle {node}/    # on {node}" for node in nodes]
    lines.append("```")
    if shared is not None and len(nodes) > 1:
        lines += [
            "",
            f"{shared.writer} goes first: its bundle writes pci.cfg for the cluster, which "
            "the other nodes' VMs need before they start with their mapping.",
        ]
    return lines


def cluster_summary(
    cluster: ClusterPlan, rendered: Sequence[tuple[str, Sequence[Artifact]]]
) -> str:
    lines = [
        f"# GPU split of the cluster: {', '.join(cluster.nodes)}",
        "",
        "## Nodes",
        "",
        *_node_rows(cluster, rendered),
        "",
        "## PCI mappings",
        "",
        *_mapping_rows(cluster),
        "",
        "## Findings across nodes",
        "",
        *_findings(cluster.findings),
        "",
        "## Apply",
        "",
        *_apply_order(cluster),
        "",
        "## Topology",
    ]
    for node in cluster.nodes:
        lines += [
            "",
            f"### {node}",
            "",
            f"![{node}: NUMA nodes, GPUs, pools and consumers]({node}/topology.svg)",
        ]
    return "\n".join(lines) + "\n"
