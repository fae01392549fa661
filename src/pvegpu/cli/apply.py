"""`pvegpu apply` (a bundle, or a spec rendered in memory) and `pvegpu revert`.

With `--json` the lines each prints go into one document instead (`pvegpu.apply/1`,
`pvegpu.revert/1`, docs/cli.md), with every action's outcome; a refusal or a failed step
prints the refusal document with the outcomes so far. A JSON stream cannot hold a
question, so `--json` needs `--yes` or `--dry-run`.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any

from pvegpu.apply.bundle import Bundle, bundle_from_files, read_bundle_dir
from pvegpu.apply.commands import refuse_off_node
from pvegpu.apply.execute import Outcome
from pvegpu.apply.host import LiveHost
from pvegpu.apply.run import apply_bundle
from pvegpu.apply.state import STATE_DIR, last_apply
from pvegpu.apply.undo import revert
from pvegpu.errors import ApplyError
from pvegpu.redact import redact_text

APPLY_SCHEMA = "pvegpu.apply/1"
REVERT_SCHEMA = "pvegpu.revert/1"


class _Output:
    """Where apply's and revert's lines go: the terminal as they come, or with `--json`
    the document, whose `actions` and `messages` also go into a refusal (`progress`)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.json: bool = args.json
        self.progress: dict[str, list[Any]] = {"actions": [], "messages": []}
        self.diffs: list[dict[str, str]] = []
        if self.json:
            args.progress = self.progress  # cli.main adds it to a refusal's document

    def say(self, line: str) -> None:
        if self.json:
            self.progress["messages"].append(line)
        else:
            print(line, flush=True)

    def told(self, outcome: Outcome) -> None:
        self.progress["actions"].append(outcome.document())

    def diff(self, path: str, text: str) -> None:
        if self.json:
            self.diffs.append({"path": path, "diff": text})
        else:
            print(text, end="")

    def document(self, schema: str, **fields: Any) -> int:
        """Print the `--json` document (nothing without --json); exit 0."""
        if self.json:
            doc = {"schema": schema, **fields, **self.progress}
            if schema == APPLY_SCHEMA:
                doc["diffs"] = self.diffs
            print(json.dumps(doc, indent=2))
        return 0


def _confirm(question: str, yes: bool, command: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise ApplyError.one(
            "confirmation-needed", "stdin", f"is not a terminal, so {command} cannot ask",
            f"review first (pvegpu {command} --dry-run), then pass --yes",
        )  # fmt: skip
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        seen = "the steps above" if command == "apply" else f"pvegpu {command} --dry-run"
        raise ApplyError.one(
            "not-confirmed",
            "stdin",
            "answered no; nothing was changed",
            f"review {seen}, then run it again and answer y (or pass --yes)",
        )


def _from_spec(args: argparse.Namespace, host: LiveHost, out: _Output) -> Bundle:
    from pvegpu.pipeline import discover_for, load_spec, plan_and_render
    from pvegpu.rendering.bundle_layout import bundle_files
    from pvegpu.rendering.review.apply_doc import manifest_header

    spec = load_spec(args.spec)
    plan, artifacts = plan_and_render(discover_for(spec, args.root), spec)
    bundle = bundle_from_files(
        bundle_files(artifacts, **manifest_header(plan, artifacts, str(args.spec)))
    )
    for entry in bundle.entries:
        if entry.target != "host":
            continue  # container files: shown by `pvegpu plan`
        before = (host.read(entry.path) or b"").decode(errors="replace")
        out.diff(entry.path, _diff(before, entry.content.decode(), entry.path))
    return bundle


def _usage(message: str, command: str = "apply") -> int:
    print(f"pvegpu {command}: {message}", file=sys.stderr)
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


def _reconcile(args: argparse.Namespace, host: LiveHost, out: _Output) -> int:
    """`apply --reconcile`: the applied spec planned on the host now; the files that move
    no GPU and change no guest's GPUs written (a bundle of their own, journaled and
    reverted like any apply), the rest shown and left to a reviewed render."""
    from pvegpu.pipeline import load_spec, reconcile_bundle, reconcile_host

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
        out.diff(artifact.path, _diff(base, artifact.content, artifact.path))
    for left in found.left:
        base = left.artifact.base.content if left.artifact.base is not None else ""
        out.say(f"# left to a reviewed render: /{left.artifact.path}: {left.why}")
        out.diff(left.artifact.path, _diff(base, left.artifact.content, left.artifact.path))
    if found.left:
        out.say(
            f"# {len(found.left)} file(s) left: pvegpu render --spec {source} --out <new dir>, "
            "review its SUMMARY.md, then pvegpu apply --bundle <new dir>"
        )
    fields: dict[str, Any] = {"node": planned.facts.node, "dry_run": args.dry_run}
    if not found.writes:
        out.say(f"nothing to reconcile on {planned.facts.node}")
        return out.document(APPLY_SCHEMA, bundle=None, result="nothing-to-reconcile", **fields)
    bundle = bundle_from_files(reconcile_bundle(planned, artifacts, found, source))
    if not args.dry_run:
        _confirm(f"reconcile {len(found.writes)} file(s) on {bundle.node}?", args.yes, "apply")
    apply_bundle(host, bundle, out.say, dry_run=args.dry_run, told=out.told)
    result = "dry-run" if args.dry_run else "reconciled"
    return out.document(APPLY_SCHEMA, bundle=bundle.id, result=result, **fields)


def run_apply(args: argparse.Namespace) -> int:
    if args.reconcile and args.bundle is None:
        return _usage("--reconcile needs --bundle, the bundle applied to this host")
    if not args.reconcile and (args.bundle is None) == (args.spec is None):
        return _usage("give one of --bundle and --spec (or --reconcile with --bundle)")
    if args.json and not (args.yes or args.dry_run):
        return _usage("--json needs --yes or --dry-run: a JSON stream cannot hold a question")
    out = _Output(args)
    host = LiveHost(args.root)
    if not args.dry_run:
        refuse_off_node(host)  # before the diffs and the question, not after
    if args.reconcile:
        return _reconcile(args, host, out)
    bundle = _from_spec(args, host, out) if args.spec else read_bundle_dir(args.bundle)
    if not args.dry_run:
        _confirm(f"apply bundle {bundle.id} to {bundle.node}?", args.yes, "apply")
    journal = f"{STATE_DIR}/{bundle.id}/journal.json"
    before = None if args.dry_run else host.read(journal)
    try:
        apply_bundle(host, bundle, out.say, dry_run=args.dry_run, told=out.told)
    except ApplyError as err:
        # Written: this run journaled a step (a refusal before the first one leaves the
        # journal of an earlier run as it was).
        err.partial = not args.dry_run and host.read(journal) != before
        raise
    result = "dry-run" if args.dry_run else "applied"
    return out.document(
        APPLY_SCHEMA, bundle=bundle.id, node=bundle.node, dry_run=args.dry_run, result=result
    )


def run_revert(args: argparse.Namespace) -> int:
    if args.json and not (args.yes or args.dry_run):
        return _usage(
            "--json needs --yes or --dry-run: a JSON stream cannot hold a question", "revert"
        )
    out = _Output(args)
    host = LiveHost(args.root)
    if not args.dry_run:
        refuse_off_node(host, "revert")
        _confirm("revert the last pvegpu apply on this host?", args.yes, "revert")
    bundle = last_apply(host)  # what revert undoes (it refuses when there is none)
    result = revert(host, out.say, dry_run=args.dry_run, told=out.told)
    return out.document(REVERT_SCHEMA, bundle=bundle, dry_run=args.dry_run, result=result)
