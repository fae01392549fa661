"""`pvegpu plan` (what would change, as diffs) and `pvegpu render` (write it all to OUT)."""

from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path
from typing import Any

from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.planning.plan import Plan
from pvegpu.rendering.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.rendering.bundle import manifest_entry, write_bundle
from pvegpu.rendering.review.topology import topology_table
from pvegpu.spec.load import load_spec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root", type=Path, default=Path("/"), help="host root to read (default: /)"
    )
    common.add_argument("--spec", type=Path, required=True, help="split spec (TOML)")

    p = sub.add_parser(
        "plan",
        parents=[common],
        help="show what would change, as unified diffs, and the plan's findings",
        description="Plan the split and show every file it would change as a unified diff "
        "against what is under --root. Writes nothing. Exit 0 when the plan is valid.",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_plan)

    r = sub.add_parser(
        "render",
        parents=[common],
        help="write every artifact under OUT, with MANIFEST.json and a revert bundle",
        description="Render every artifact into OUT at its target path (OUT/etc/pve/lxc/"
        "129.conf; container files under OUT/ct/<vmid>/), the revert bundle under "
        "OUT/revert/, SUMMARY.md and topology.svg, and OUT/MANIFEST.json. Never touches "
        "the host; nothing is written when the plan is refused.",
    )
    r.add_argument("--out", type=Path, required=True, help="output directory")
    r.set_defaults(func=run_render)


def _load(args: argparse.Namespace) -> tuple[Plan, tuple[Artifact, ...]]:
    spec = load_spec(args.spec)
    return plan_and_render(discover_for(spec, args.root), spec)


def _current(root: Path, artifact: Artifact) -> str | None:
    """What the file is now: the host file under root, else the base the patch read."""
    if artifact.target == HOST:
        path = root / artifact.path
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return artifact.base.content if artifact.base else None


def _diff(root: Path, artifact: Artifact) -> str:
    before = _current(root, artifact)
    where = artifact.path if artifact.target == HOST else f"{artifact.target}/{artifact.path}"
    lines = difflib.unified_diff(
        (before or "").splitlines(keepends=True),
        artifact.content.splitlines(keepends=True),
        fromfile=f"a/{where}" if before is not None else "/dev/null",
        tofile=f"b/{where}",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def run_plan(args: argparse.Namespace) -> int:
    plan, artifacts = _load(args)
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
                }
                for p in plan.pools
            ],
            "findings": [
                {
                    "severity": str(f.severity),
                    "code": f.code,
                    "subject": f.subject,
                    "message": f.message,
                }
                for f in plan.findings
            ],
            "changes": [{**manifest_entry(a), "diff": _diff(args.root, a)} for a in installed],
        }
        print(json.dumps(doc, indent=2))
        return 0
    for artifact in installed:
        diff = _diff(args.root, artifact)
        print(diff if diff else f"# {artifact.target}:{artifact.path}: unchanged\n", end="")
    print()
    print(f"plan for node {plan.facts.node}: {len(installed)} file(s)")
    for pool in plan.pools:
        gpus = ", ".join(g.address.short for g in pool.gpus)
        print(f"  pool {pool.name}: {pool.kind} on {pool.driver}: {gpus}")
    for finding in plan.findings:
        print(f"  {finding.severity}: {finding.subject}: {finding.message} [{finding.code}]")
    return 0


def run_render(args: argparse.Namespace) -> int:
    plan, artifacts = _load(args)
    written = write_bundle(artifacts, args.out, node=plan.facts.node, spec=str(args.spec))
    print(f"rendered {len(written)} files for node {plan.facts.node} into {args.out}:")
    for path in written:
        print(f"  {path}")
    print()
    print(topology_table(plan), end="")
    print()
    print(f"review: {args.out / 'SUMMARY.md'} (layout, changed files, findings, runbook, revert)")
    return 0
