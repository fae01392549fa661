"""`pvegpu plan|render` of a cluster spec: one root per node (`--root NODE=DIR`).

A spec with `nodes` is planned from one root per node, named on the command line; a
single-node spec keeps taking a plain `--root DIR` (or `--root NODE=DIR` naming its
node). A node without a root, a root for no node of the spec, the same node twice, or a
root whose host name is not its node are refused (exit 5) before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pvegpu.cli.brief import Painter, colour_wanted, file_counts, finding_counts, finding_lines
from pvegpu.cli.diffs import diff
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError
from pvegpu.model.artifact import REVERT_BUNDLE, REVIEW
from pvegpu.model.plan import ClusterPlan
from pvegpu.model.schema import Spec
from pvegpu.pipeline import discover_cluster, load_spec, plan_and_render_cluster
from pvegpu.planning.cluster import root_problems
from pvegpu.rendering.bundle_layout import manifest_entry
from pvegpu.rendering.cluster import NodeArtifacts, write_cluster

Roots = Sequence[tuple[str | None, Path]] | None
"""`--root` as argparse gathered it: (node or None, directory) per flag; None: none given.
Whether a run is a cluster's at all is `cli.plan.single_root`'s to say."""


def _given_problems(given: Sequence[tuple[str | None, Path]]) -> Iterator[Diagnostic]:
    seen: set[str] = set()
    for name, root in given:
        if name is None:
            yield Diagnostic.error(
                "root-needs-node",
                str(root),
                "a spec with several nodes (or several roots) needs the node of each root",
                f"write --root NODE={root}",
            )
        elif name in seen:
            yield Diagnostic.error(
                "root-given-twice", name, "two roots are given for this node", "keep one"
            )
        seen.add(name or "")


def cluster_roots(spec: Spec, roots: Roots) -> dict[str, Path]:
    """Each node's root, or PlanError naming every missing, unknown or doubled one."""
    given = list(roots or [(None, Path("/"))])
    named = {name: root for name, root in given if name is not None}
    problems = [*_given_problems(given), *root_problems(spec, named.keys())]
    if problems:
        raise PlanError(problems)
    return named


def _load(args: argparse.Namespace) -> tuple[dict[str, Path], ClusterPlan, NodeArtifacts]:
    spec = load_spec(args.spec)
    roots = cluster_roots(spec, args.root)
    cluster, rendered = plan_and_render_cluster(discover_cluster(spec, roots), spec)
    return roots, cluster, rendered


def _brief(cluster: ClusterPlan, rendered: NodeArtifacts, paint: Painter, pointer: str) -> None:
    """The cluster's summary, before the diffs or the files: per node its files, pools
    and findings (warnings in full, infos counted), then the cluster's own findings."""
    shared = cluster.shared
    writer = f"; pci.cfg written by {shared.writer}" if shared is not None else ""
    print(paint("heading", f"plan for the cluster {', '.join(cluster.nodes)}{writer}"))
    for node, artifacts in rendered:
        plan = cluster.plan_of(node)
        counts = f"{file_counts(plan, artifacts)}, {finding_counts(plan.findings)}"
        print(f"  node {node}: {counts}")
        for pool in plan.pools:
            gpus = ", ".join(str(g.address) for g in pool.gpus)
            print(f"    pool {pool.name}: {pool.kind}: {gpus}")
        for line in finding_lines(plan.findings, paint, pointer=pointer, indent="    "):
            print(line)
    if cluster.findings:
        print(f"  the cluster: {finding_counts(cluster.findings)}")
        for line in finding_lines(cluster.findings, paint, pointer=pointer, indent="    "):
            print(line)
    print()


def run_cluster_plan(args: argparse.Namespace) -> int:
    roots, cluster, rendered = _load(args)
    shared = cluster.shared
    nodes: list[dict[str, Any]] = []
    for node, artifacts in rendered:
        plan = cluster.plan_of(node)
        installed = [a for a in artifacts if a.target != REVIEW and a.bundle != REVERT_BUNDLE]
        diffs = [(a, diff(roots[node], a)) for a in installed]
        nodes.append(
            {
                "node": node,
                "pools": [
                    {"name": p.name, "kind": str(p.kind), "gpus": [str(g.address) for g in p.gpus]}
                    for p in plan.pools
                ],
                "findings": [f.document() for f in plan.findings],
                "changes": [{**manifest_entry(a), "diff": text} for a, text in diffs],
            }
        )
    if args.json:
        doc = {
            "schema": "pvegpu.cluster-plan/1",
            "nodes": nodes,
            "pci_cfg_node": None if shared is None else shared.writer,
            "findings": [f.document() for f in cluster.findings],
        }
        print(json.dumps(doc, indent=2))
        return 0
    paint = Painter(colour_wanted(args.color, sys.stdout))
    _brief(cluster, rendered, paint, "their text: pvegpu plan --json, or SUMMARY.md of a render")
    for entry in nodes:
        print(paint("heading", f"## node {entry['node']}"))
        for change in entry["changes"]:
            text = change["diff"]
            where = f"{change['target']}:{change['path']}"
            print(paint.diff(text) if text else f"# {where}: unchanged\n", end="")
        print()
    return 0


def run_cluster_render(args: argparse.Namespace) -> int:
    _, cluster, rendered = _load(args)
    written = write_cluster(cluster, rendered, args.out, str(args.spec))
    relative = [os.path.relpath(path, args.out) for path in written]
    if args.json:
        doc = {
            "schema": "pvegpu.cluster-render/1",
            "nodes": list(cluster.nodes),
            "pci_cfg_node": None if cluster.shared is None else cluster.shared.writer,
            "out": str(args.out),
            "written": relative,
            "summary": str(args.out / "SUMMARY.md"),
            "findings": {
                node: [f.document() for f in cluster.plan_of(node).findings]
                for node in cluster.nodes
            },
            "cluster_findings": [f.document() for f in cluster.findings],
        }
        print(json.dumps(doc, indent=2))
        return 0
    _brief(
        cluster,
        rendered,
        Painter(colour_wanted(args.color, sys.stdout)),
        f"their text: {args.out / 'SUMMARY.md'}",
    )
    print(
        f"rendered {len(written)} files for the cluster {', '.join(cluster.nodes)} into {args.out}:"
    )
    for node in cluster.nodes:
        mine = [r for r in relative if r.startswith(f"{node}/")]
        print(f"  {args.out / node}/: {len(mine)} files")
    if cluster.shared is not None:
        print(
            f"  pci.cfg for the cluster: {args.out / cluster.shared.writer}/etc/pve/mapping/pci.cfg"
        )
    print()
    print(f"review: {args.out / 'SUMMARY.md'} (nodes, mappings, apply order, topology)")
    return 0
