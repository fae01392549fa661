"""`pvegpu` command line. Each subcommand lives in its own module with `register()`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pvegpu.errors import PvegpuError

EPILOG = """\
exit codes:
  0  success
  1  unexpected internal error (a bug: please report it with `pvegpu snapshot`)
  2  usage error (bad command line)
  3  the sysfs/procfs tree under --root is broken (discovery error)
  4  the spec is malformed
  5  the plan is refused on this host (every problem is listed)
  6  an artifact cannot be rendered
  7  applying to the host failed (see the rollback notes printed)
"""


def build_parser() -> argparse.ArgumentParser:
    from pvegpu.cli import discover as discover_cmd
    from pvegpu.cli import plan as plan_cmd

    parser = argparse.ArgumentParser(
        prog="pvegpu",
        description="Plan, render and apply GPU splits on a Proxmox VE host.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (discover_cmd, plan_cmd):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except PvegpuError as err:
        print(f"pvegpu {args.command}: refused", file=sys.stderr)
        for problem in err.problems:
            print(f"  {problem}", file=sys.stderr)
        if not err.partial:
            print("nothing was written.", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:
        # `pvegpu plan | head`: the reader left; say nothing more, like other tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code
