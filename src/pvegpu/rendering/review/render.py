"""The reviewer's files: SUMMARY.md (what, why, how, how back) and topology.svg.

Both are `Artifact`s with target `review`: written into the output directory next to
the rendered files, installed nowhere. The content comes from pvegpu.rendering.review (data) and
pvegpu.rendering.review.topology (drawings); this module only formats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pvegpu.diagnostic import Severity
from pvegpu.engines import engine_label
from pvegpu.formats.templating import render_template
from pvegpu.model.artifact import REVIEW, Artifact
from pvegpu.model.plan import Plan, Pool, PoolKind
from pvegpu.model.schema import DeviceStyle
from pvegpu.pvefiles.lxcconf import DRIVER_MOUNT_POINT
from pvegpu.rendering.review import (
    SEVERITY_ORDER,
    ChangeKind,
    LayoutRow,
    changed_files,
    host_facts_line,
    hostpci_lines,
    in_bundle,
    layout,
    moving_functions,
    qm_set_command,
    revert_script,
    revert_steps,
    review_only,
    runbook,
)
from pvegpu.rendering.review.gpu_layout import moving_nvswitches
from pvegpu.rendering.review.topology import topology_mermaid, topology_svg
from pvegpu.wording import plural

SUMMARY = "SUMMARY.md"
TOPOLOGY = "topology.svg"

"""How the projects spell their own names, for prose."""

SEVERITY_HEADINGS = {Severity.WARNING: "Warnings", Severity.INFO: "For information"}

CHANGE_NOTES = {
    ChangeKind.NEW: "new",
    ChangeKind.PATCHED: "patched",
    ChangeKind.REPLACED: "**replaced whole**",
    ChangeKind.UNREAD: "**not read: pulled into revert/ first**",
    ChangeKind.UNCHANGED: "unchanged",
}


def cell(text: object) -> str:
    """Text safe inside a markdown table cell: a `|` would end the cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _driver(row: LayoutRow) -> str:
    if row.driver_changes:
        return f"{row.driver_before} → **{row.driver_after}**"
    return row.driver_after


def _pool_line(pool: Pool) -> str:
    """One sentence per pool: where its GPUs go and what runs on them."""
    gpus = ", ".join(g.address.short for g in pool.gpus)
    known = [str(n) for n in pool.numa_nodes if n is not None]
    nodes = f"on NUMA {', '.join(known)}" if known else "with no NUMA node"
    where = f"{plural(pool.size, 'GPU')} {nodes} ({gpus})"
    # The verb agrees with the count: "1 GPU ... moves", "4 GPUs ... move".
    ending = "s" if pool.size == 1 else ""
    if pool.kind is PoolKind.VFIO:
        if pool.vgpu_type is not None:
            vfs = plural(pool.size, "vGPU virtual function")
            line = (
                f"**{pool.name}**: {vfs} {nodes} ({gpus}) stay{ending} on {pool.driver} as "
                f"{'a vGPU' if pool.size == 1 else 'vGPUs'} of type `{pool.vgpu_type}`, which "
                "Proxmox sets at the VM's start (nothing moves to vfio-pci)"
            )
        else:
            line = f"**{pool.name}**: {where} move{ending} to vfio-pci"
        if pool.mapping is not None:
            line += f", PCI mapping `{pool.mapping.id}`"
        if pool.vm is not None:
            line += f", for VM {pool.vm.vmid}"
            if pool.vm.config is None:
                line += " (not created yet)"
        else:
            line += ", no VM attached yet"
        return line + "."
    line = f"**{pool.name}**: {where} stay{ending} on {pool.driver}"
    if pool.lxc is not None:
        style = "devN entries" if pool.lxc.devices is DeviceStyle.DEV else "raw lxc.* lines"
        line += f" for LXC {pool.lxc.vmid} (device nodes as {style})"
    if pool.mapping is not None:
        line += f", PCI mapping `{pool.mapping.id}`"
    line += "."
    serving = pool.serving
    if serving is not None:
        name = f" as `{serving.served_model_name}`" if serving.served_model_name else ""
        engine = engine_label(serving.engine)
        line += (
            f" {engine} {serving.version} serves `{serving.model_path}`{name} with "
            f"TP={pool.size} on port {serving.port} (unit `{serving.unit}.service`)."
        )
    if pool.lxc is not None and pool.lxc.cpuset is not None:
        numa = pool.lxc.cpuset
        line += (
            f" The container's CPU set is pinned to NUMA node {numa.id} (CPUs {numa.cpus}), "
            'where its server runs (`lxc.cpuset = "numa"`, the default; `"keep"` leaves it alone).'
        )
    if pool.lxc is not None and pool.lxc.host_userspace:
        line += (
            " Its GPU programs run the host's own driver userspace of the loaded module "
            '(`userspace = "host"`), staged at every boot and bind-mounted read-only at '
            f"/{DRIVER_MOUNT_POINT}: a driver upgrade on the host needs nothing in the container."
        )
    return line


def _attach(plan: Plan, artifacts: Sequence[Artifact]) -> list[dict[str, Any]]:
    """How each VM pool's GPUs reach a VM: done by this plan, or the lines to add."""
    # The VM config snippets by the name after `qemu-server/` ("129.conf"), the CPU lists by
    # node: one lookup per pool instead of a scan.
    snippets: dict[str, Artifact] = {}
    for a in review_only(artifacts):
        _, sep, name = a.path.rpartition("qemu-server/")
        if sep:
            snippets.setdefault(name, a)
    cpus_of = {n.id: n.cpus for n in plan.facts.numa_nodes}
    out = []
    for pool in plan.vfio_pools:
        cpus = None
        if len(pool.numa_nodes) == 1:
            node_cpus = cpus_of.get(pool.numa_nodes[0]) if pool.numa_nodes[0] is not None else None
            cpus = str(node_cpus) if node_cpus else None
        vm = pool.vm
        snippet = None
        if vm is not None and (entry := snippets.get(f"{vm.vmid}.conf")) is not None:
            snippet = in_bundle(entry)
        out.append(
            {
                "pool": pool,
                "vm": vm,
                "lines": hostpci_lines(pool),
                "qm_set": qm_set_command(pool),
                "vgpu": pool.vgpu_source,
                "cpus": cpus,
                "snippet": snippet,
            }
        )
    return out


def summary_markdown(plan: Plan, artifacts: Sequence[Artifact]) -> str:
    findings = [
        (severity, [f for f in plan.findings if f.severity is severity])
        for severity in SEVERITY_ORDER
    ]
    return render_template(
        "summary.md.j2",
        cell=cell,
        plural=plural,
        node=plan.facts.node,
        facts_line=host_facts_line(plan.facts),
        pools=[_pool_line(p) for p in plan.pools],
        rows=[
            {
                "index": r.index,
                "address": r.address.short,
                "numa": r.numa,
                "driver": _driver(r),
                "pool": r.pool.name if r.pool else "-",
                "purpose": r.purpose,
            }
            for r in layout(plan)
        ],
        moving=moving_functions(plan),
        switches=moving_nvswitches(plan),
        files=[(f, CHANGE_NOTES[f.kind]) for f in changed_files(plan, artifacts)],
        replaced=any(f.kind is ChangeKind.REPLACED for f in changed_files(plan, artifacts)),
        review_files=[(in_bundle(a), a) for a in review_only(artifacts)],
        findings=[(SEVERITY_HEADINGS[s], items) for s, items in findings if items],
        steps=runbook(plan, artifacts),
        attach=_attach(plan, artifacts),
        revert_script=(lambda a: in_bundle(a) if a else None)(revert_script(artifacts)),
        revert=revert_steps(plan, artifacts),
        mermaid=topology_mermaid(plan),
        topology=TOPOLOGY,
    )


def render_summary(plan: Plan, artifacts: Sequence[Artifact]) -> Artifact:
    """SUMMARY.md: layout, changed files, findings, runbook, revert, topology."""
    return Artifact(
        path=SUMMARY,
        content=summary_markdown(plan, artifacts),
        reason="what this plan changes and how to apply and revert it, for the reviewer",
        target=REVIEW,
    )


def render_topology_svg(plan: Plan) -> Artifact:
    """topology.svg: NUMA nodes -> GPUs -> pools -> consumers, drivers in colour."""
    return Artifact(
        path=TOPOLOGY,
        content=topology_svg(plan),
        reason="the split drawn: NUMA nodes, GPUs, pools and their consumers",
        target=REVIEW,
    )


def render_review(plan: Plan, artifacts: Sequence[Artifact]) -> tuple[Artifact, ...]:
    """Both review files, from the plan and every other artifact (revert bundle included)."""
    return (render_summary(plan, artifacts), render_topology_svg(plan))
