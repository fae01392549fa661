"""`pvegpu snapshot`: capture what discovery (and a spec's servers) read, for later.

Its arguments are in cli/arguments.py. Kept apart from `discover` because capturing a
spec's server inputs loads the serving decisions, which `discover` never needs.
"""

from __future__ import annotations

import argparse
import sys

from pvegpu.engines import installed_files
from pvegpu.host.snapshot import snapshot
from pvegpu.spec.load import load_spec


def run_snapshot(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec) if args.spec is not None else None
    result = snapshot(args.root, args.out, spec, installed_files)
    print(f"wrote {result.path} ({result.entries} entries)")
    if result.redacted:
        print(f"secret values replaced by REDACTED in: {', '.join(result.redacted)}")
    if result.error is None:
        return 0
    print("pvegpu snapshot: discovery failed; the archive holds what was read", file=sys.stderr)
    for problem in result.error.problems:
        print(f"  {problem}", file=sys.stderr)
    return result.error.exit_code
