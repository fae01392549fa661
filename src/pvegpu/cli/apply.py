"""`pvegpu apply` (a bundle, or a spec rendered in memory) and `pvegpu revert`."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from pvegpu.apply.bundle import Bundle, bundle_from_files, read_bundle_dir
from pvegpu.apply.commands import refuse_off_node
from pvegpu.apply.host import LiveHost
from pvegpu.apply.run import apply_bundle
from pvegpu.apply.state import STATE_DIR
from pvegpu.apply.undo import revert
from pvegpu.errors import ApplyError
from pvegpu.redact import redact_text


def _say(line: str) -> None:
    print(line, flush=True)


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise ApplyError.one(
            "confirmation-needed", "stdin", "is not a terminal, so apply cannot ask",
            "review first (pvegpu apply --dry-run), then pass --yes",
        )  # fmt: skip
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise ApplyError.one(
            "not-confirmed",
            "stdin",
            "answered no; nothing was changed",
            "review the steps above, then run it again and answer y (or pass --yes)",
        )


def _from_spec(args: argparse.Namespace, host: LiveHost) -> Bundle:
    from pvegpu.pipeline import discover_for, plan_and_render
    from pvegpu.rendering.bundle import bundle_files
    from pvegpu.rendering.review.apply_doc import manifest_header
    from pvegpu.spec.load import load_spec

    spec = load_spec(args.spec)
    plan, artifacts = plan_and_render(discover_for(spec, args.root), spec)
    bundle = bundle_from_files(
        bundle_files(artifacts, **manifest_header(plan, artifacts, str(args.spec)))
    )
    for entry in bundle.entries:
        if entry.target != "host":
            continue  # container files: shown by `pvegpu plan`
        before = (host.read(entry.path) or b"").decode(errors="replace")
        print(_diff(before, entry.content.decode(), entry.path), end="")
    return bundle


def _usage(message: str) -> int:
    print(f"pvegpu apply: {message}", file=sys.stderr)
    return 2


def _diff(before: str, after: str, path: str) -> str:
    return "".join(
        difflib.unified_diff(
            redact_text(before).splitlines(keepends=True),
            redact_text(after).splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
        )
    )


def _reconcile(args: argparse.Namespace, host: LiveHost) -> int:
    """`apply --reconcile`: the applied spec planned on the host now; the files that move
    no GPU and change no guest's GPUs written (a bundle of their own, journaled and
    reverted like any apply), the rest shown and left to a reviewed render."""
    from pvegpu.pipeline import reconcile_bundle, reconcile_host
    from pvegpu.spec.load import load_spec

    applied = read_bundle_dir(args.bundle)
    source = str(args.spec) if args.spec is not None else applied.spec
    if source is None:
        raise ApplyError.one(
            "reconcile-spec-unknown", f"{args.bundle}/MANIFEST.json",
            "names no spec to plan again",
            "pass the applied spec: pvegpu apply --reconcile --bundle DIR --spec FILE",
        )  # fmt: skip
    spec = load_spec(Path(source))
    planned, artifacts, found = reconcile_host(spec, args.root, applied.functions)
    for artifact in found.writes:
        base = artifact.base.content if artifact.base is not None else ""
        print(_diff(base, artifact.content, artifact.path), end="")
    for left in found.left:
        base = left.artifact.base.content if left.artifact.base is not None else ""
        print(f"# left to a reviewed render: /{left.artifact.path}: {left.why}")
        print(_diff(base, left.artifact.content, left.artifact.path), end="")
    if found.left:
        print(
            f"# {len(found.left)} file(s) left: pvegpu render --spec {source} --out <new dir>, "
            "review its SUMMARY.md, then pvegpu apply --bundle <new dir>"
        )
    if not found.writes:
        print(f"nothing to reconcile on {planned.facts.node}")
        return 0
    bundle = bundle_from_files(reconcile_bundle(planned, artifacts, found, source))
    if not args.dry_run:
        _confirm(f"reconcile {len(found.writes)} file(s) on {bundle.node}?", args.yes)
    apply_bundle(host, bundle, _say, dry_run=args.dry_run)
    return 0


def run_apply(args: argparse.Namespace) -> int:
    if args.reconcile and args.bundle is None:
        return _usage("--reconcile needs --bundle, the bundle applied to this host")
    if not args.reconcile and (args.bundle is None) == (args.spec is None):
        return _usage("give one of --bundle and --spec (or --reconcile with --bundle)")
    host = LiveHost(args.root)
    if not args.dry_run:
        refuse_off_node(host)  # before the diffs and the question, not after
    if args.reconcile:
        return _reconcile(args, host)
    bundle = _from_spec(args, host) if args.spec else read_bundle_dir(args.bundle)
    if not args.dry_run:
        _confirm(f"apply bundle {bundle.id} to {bundle.node}?", args.yes)
    journal = f"{STATE_DIR}/{bundle.id}/journal.json"
    before = None if args.dry_run else host.read(journal)
    try:
        apply_bundle(host, bundle, _say, dry_run=args.dry_run)
    except ApplyError as err:
        # Written: this run journaled a step (a refusal before the first one leaves the
        # journal of an earlier run as it was).
        err.partial = not args.dry_run and host.read(journal) != before
        raise
    return 0


def run_revert(args: argparse.Namespace) -> int:
    host = LiveHost(args.root)
    refuse_off_node(host)
    _confirm("undo the last pvegpu apply on this host?", args.yes)
    revert(host, _say)
    return 0
