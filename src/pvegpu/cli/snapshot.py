"""`pvegpu snapshot`: capture what discovery (and a spec's servers) read, for later.

Its arguments are in cli/arguments.py. Kept apart from `discover` because capturing a
spec's server inputs loads the serving decisions, which `discover` never needs.
"""

from __future__ import annotations

import argparse
import json
import sys

from pvegpu.cli import refusal_document
from pvegpu.engines import installed_files, spec_engines
from pvegpu.host.snapshot import snapshot
from pvegpu.spec.load import load_spec

SNAPSHOT_SCHEMA = "pvegpu.snapshot/1"


def run_snapshot(args: argparse.Namespace) -> int:
    # The registry's engines judge the spec (pvegpu.pipeline's loader, without loading
    # the planner the snapshot does not need).
    spec = load_spec(args.spec, engines=spec_engines()) if args.spec is not None else None
    result = snapshot(args.root, args.out, spec, installed_files)
    fields = {
        "archive": str(result.path),
        "entries": result.entries,
        "redacted": list(result.redacted),
    }
    if args.json:
        if result.error is None:
            print(json.dumps({"schema": SNAPSHOT_SCHEMA, **fields}, indent=2))
        else:
            # Discovery failed, the archive is written: the refusal, with what was archived.
            doc = refusal_document("snapshot", result.error, progress=fields)
            print(json.dumps({**doc, "written": True}, indent=2))
    else:
        print(f"wrote {result.path} ({result.entries} entries)")
        if result.redacted:
            print(f"secret values replaced by REDACTED in: {', '.join(result.redacted)}")
    if result.error is None:
        return 0
    print("pvegpu snapshot: discovery failed; the archive holds what was read", file=sys.stderr)
    for problem in result.error.problems:
        print(f"  {problem}", file=sys.stderr)
    return result.error.exit_code
