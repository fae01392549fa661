"""`pvegpu check`: the host against the plan; exit 0 clean, 8 warnings, 9 errors."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pvegpu.apply.check import CheckReport, check
from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.errors import PlanError, SpecError

if TYPE_CHECKING:
    from pvegpu.apply.bundle import Bundle

CHECK_SCHEMA = "pvegpu.check/1"


def _spec_bundle(args: argparse.Namespace) -> tuple[Bundle | None, tuple[Diagnostic, ...]]:
    from pvegpu.apply.bundle import bundle_from_files
    from pvegpu.pipeline import discover_for, load_spec, plan_and_render
    from pvegpu.rendering.bundle_layout import bundle_files
    from pvegpu.rendering.review.apply_doc import manifest_header

    spec = load_spec(args.spec)
    try:
        plan, artifacts = plan_and_render(discover_for(spec, args.root), spec)
    except (PlanError, SpecError) as err:
        # A host that no longer fits its plan is what check is for: report, do not stop.
        # SpecError here is the server's options against the release installed now (an
        # upgrade in the container); a spec that does not load was refused above.
        return None, tuple(
            Diagnostic(Severity.ERROR, p.code, p.subject, p.message) for p in err.problems
        )
    header = manifest_header(plan, artifacts, str(args.spec))
    return bundle_from_files(bundle_files(artifacts, **header)), ()


def drift(args: argparse.Namespace, bundle: Bundle) -> tuple[Diagnostic, ...]:
    """What an upgrade changed: the applied spec (`--spec`, or the one MANIFEST.json
    names) planned on the host as it is now, against the host's files, each with the
    command that reconciles it (`pvegpu apply --reconcile`) or the render to review."""
    from pvegpu.pipeline import load_spec, reconcile_host

    source = str(args.spec) if args.spec is not None else bundle.spec
    if source is None or not Path(source).is_file():
        return (
            Diagnostic(
                Severity.INFO,
                "drift-unchecked",
                f"{args.bundle}/MANIFEST.json",
                f"the applied spec ({source or 'none named'}) is not readable here, so what an "
                "upgrade changed in the plan was not looked for: pass it with --spec",
            ),
        )
    try:
        planned, _, found = reconcile_host(load_spec(Path(source)), args.root, bundle.functions)
    except (PlanError, SpecError) as err:
        return tuple(
            Diagnostic(Severity.ERROR, p.code, p.subject, f"the applied spec {source}: {p.message}")
            for p in err.problems
        )
    reconcile = f"pvegpu apply --reconcile --bundle {args.bundle}" + (
        f" --spec {args.spec}" if args.spec is not None else ""
    )
    findings = [
        Diagnostic(
            Severity.WARNING,
            "drift-reconcilable",
            f"/{a.path}",
            f"the applied spec, planned on {planned.facts.node} as it is now, writes it "
            f"otherwise ({a.reason}); it moves no GPU and changes no guest's GPUs: `{reconcile}`",
        )
        for a in found.writes
    ]
    findings += [
        Diagnostic(
            Severity.WARNING,
            "drift-needs-render",
            f"/{left.artifact.path}",
            f"the applied spec, planned on {planned.facts.node} as it is now, writes it "
            f"otherwise, and {left.why}: render and review it (`pvegpu render --spec {source} "
            "--out <new dir>`, then `pvegpu apply --bundle <new dir>`)",
        )
        for left in found.left
    ]
    return tuple(findings)


def prometheus_text(report: CheckReport) -> str:
    lines = [
        "# HELP pvegpu_check_findings Findings of the last pvegpu check, by severity.",
        "# TYPE pvegpu_check_findings gauge",
    ]
    for severity in (Severity.ERROR, Severity.WARNING):
        count = sum(1 for f in report.findings if f.severity == severity)
        lines.append(f'pvegpu_check_findings{{node="{report.node}",severity="{severity}"}} {count}')
    lines += [
        "# HELP pvegpu_check_finding One line per finding (value 1), by stable code.",
        "# TYPE pvegpu_check_finding gauge",
    ]
    for f in report.findings:
        subject = f.subject.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
        lines.append(
            f'pvegpu_check_finding{{node="{report.node}",severity="{f.severity}",'
            f'code="{f.code}",subject="{subject}"}} 1'
        )
    lines += [
        "# HELP pvegpu_check_last_run_timestamp_seconds When pvegpu check last ran.",
        "# TYPE pvegpu_check_last_run_timestamp_seconds gauge",
        f"pvegpu_check_last_run_timestamp_seconds {int(time.time())}",
    ]
    return "\n".join(lines) + "\n"


def _write_atomically(path: Path, text: str) -> None:
    # node_exporter may read the file at any moment: never let it see half of one.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def run_check(args: argparse.Namespace) -> int:
    bundle: Bundle | None = None
    refused: tuple[Diagnostic, ...] = ()
    if args.bundle:
        # The bundle reader (and the review code it checks against) only with --bundle.
        from pvegpu.apply.bundle import read_bundle_dir

        bundle = read_bundle_dir(args.bundle)
        refused = drift(args, bundle)
    elif args.spec:
        bundle, refused = _spec_bundle(args)
    report = check(args.root, bundle, refused)
    if args.prometheus:
        _write_atomically(args.prometheus, prometheus_text(report))
    if args.json:
        doc = {
            "schema": CHECK_SCHEMA,
            "node": report.node,
            "exit_code": report.exit_code,
            "findings": [f.document() for f in report.findings],
        }
        print(json.dumps(doc, indent=2))
    else:
        for f in report.findings:
            print(f"{f.severity}: {f.subject}: {f.message} [{f.code}]")
            if f.fix:
                print(f"  fix: {f.fix}")
        print(
            f"check of {report.node}: "
            + (f"{len(report.findings)} finding(s)" if report.findings else "clean")
        )
    return report.exit_code
