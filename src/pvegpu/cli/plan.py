"""`pvegpu plan` (what would change, as diffs) and `pvegpu render` (write it all to OUT).

Their arguments are in cli/arguments.py; this module, and with it the planner and the
renderers, is imported only when one of the two runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pvegpu.cli.brief import Painter, colour_wanted, finding_counts, plan_brief
from pvegpu.cli.diffs import diff
from pvegpu.model.artifact import REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.model.plan import Plan
from pvegpu.model.schema import Spec
from pvegpu.pipeline import discover_for, load_spec, plan_and_render
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.bundle_layout import manifest_entry

if TYPE_CHECKING:
    from pvegpu.cli.cluster import Roots


def single_root(spec: Spec, roots: Roots) -> Path | None:
    """The root of a single-node run, or None when the run is a cluster's."""
    given = list(roots or [(None, Path("/"))])
    if spec.is_cluster or len(given) != 1:
        return None
    name, root = given[0]
    return root if name in (None, spec.node) else None


def _load(args: argparse.Namespace) -> tuple[Path, Plan, tuple[Artifact, ...]] | None:
    """The root, plan and artifacts of a single-node run; None for a cluster's (the spec
    has `nodes` or a root is given as NODE=DIR): cli/cluster.py runs those."""
    spec = load_spec(args.spec)
    root = single_root(spec, args.root)
    if root is None:
        return None
    return root, *plan_and_render(discover_for(spec, root), spec)


def run_plan(args: argparse.Namespace) -> int:
    loaded = _load(args)
    if loaded is None:
        # Imported here, as its planner and renderers: only a cluster's run needs them.
        from pvegpu.cli.cluster import run_cluster_plan

        return run_cluster_plan(args)
    root, plan, artifacts = loaded
    installed = [a for a in artifacts if a.target != REVIEW and a.bundle != REVERT_BUNDLE]
    if args.json:
        doc: dict[str, Any] = {
            "schema": "pvegpu.plan/1",
            "node": plan.facts.node,
            "pools": [
                {
                    "name": p.name,
                    "kind": str(p.kind),
                    "driver": p.driver,
                    "gpus": [str(g.address) for g in p.gpus],
                    "functions": [str(f.address) for f in p.functions],
                    "numa_nodes": list(p.numa_nodes),
                    # Only on a vGPU pool, whose VFs stay on `driver` (not moved).
                    **({"vgpu_type": p.vgpu_type} if p.vgpu_type is not None else {}),
                }
                for p in plan.pools
            ],
            "findings": [f.document() for f in plan.findings],
            "changes": [{**manifest_entry(a), "diff": diff(root, a)} for a in installed],
        }
        print(json.dumps(doc, indent=2))
        return 0
    paint = Painter(colour_wanted(args.color, sys.stdout))
    pointer = "their text: pvegpu plan --json, or SUMMARY.md of a render"
    for line in plan_brief(plan, artifacts, paint, pointer=pointer):
        print(line)
    print()
    for artifact in installed:
        text = diff(root, artifact)
        print(
            paint.diff(text) if text else f"# {artifact.target}:{artifact.path}: unchanged\n",
            end="",
        )
    print()
    # The summary is above the diffs: say so where a long plan ends.
    counts = finding_counts(plan.findings)
    print(f"plan for node {plan.facts.node}: {counts} (summary above the diffs)")
    return 0


def run_render(args: argparse.Namespace) -> int:
    loaded = _load(args)
    if loaded is None:
        from pvegpu.cli.cluster import run_cluster_render  # as in run_plan

        return run_cluster_render(args)
    _, plan, artifacts = loaded
    # With the plan, MANIFEST.json carries the runbook as actions: `pvegpu apply --bundle`
    # runs those. The library's documented call (docs/api.md), so the two cannot differ.
    written = write_bundle(artifacts, args.out, plan=plan, spec=str(args.spec))
    if args.json:
        doc = {
            "schema": "pvegpu.render/1",
            "node": plan.facts.node,
            "out": str(args.out),
            # Relative to out, as in MANIFEST.json.
            "written": [os.path.relpath(path, args.out) for path in written],
            "summary": str(args.out / "SUMMARY.md"),
            "findings": [f.document() for f in plan.findings],
        }
        print(json.dumps(doc, indent=2))
        return 0
    paint = Painter(colour_wanted(args.color, sys.stdout))
    summary = args.out / "SUMMARY.md"
    for line in plan_brief(plan, artifacts, paint, pointer=f"their text: {summary}"):
        print(line)
    print()
    print(f"rendered {len(written)} files into {args.out}:")
    for path in written:
        print(f"  {path}")
    print()
    print(f"review: {summary} (layout, changed files, findings, runbook, revert)")
    return 0
