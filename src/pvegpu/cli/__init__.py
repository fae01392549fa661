"""`pvegpu` command line: parse (cli/arguments.py), then import and run one subcommand.

The run functions live in cli/discover.py, cli/snapshot.py and cli/plan.py; only the
module of the command given is imported, so `pvegpu --help` and `pvegpu discover` start
without the planner, the renderers or jinja2.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pvegpu.cli.arguments import EPILOG, build_parser, command_of
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PvegpuError
from pvegpu.gcpause import command_paused, frozen_for_exit

if TYPE_CHECKING:
    import argparse

__all__ = ["EPILOG", "REFUSAL_SCHEMA", "build_parser", "located", "main", "refusal_document"]


def _run_function(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    module, _, name = args.run.partition(":")
    run: Callable[[argparse.Namespace], int] = getattr(import_module(module), name)
    return run


REFUSAL_SCHEMA = "pvegpu.refusal/1"

_WAITING_COMMANDS = frozenset({"apply", "revert"})
"""Commands that wait on the host (units, health checks) for minutes: they run with the
cyclic collector on. Every other command is one short pass, run with it paused."""
_RENDERING_COMMANDS = frozenset({"plan", "render", "apply", "check"})
"""Commands that may render templates (apply and check from a spec): they keep the
compiled templates in the per-user cache when they do."""


def refusal_document(
    command: str,
    err: PvegpuError,
    problems: Sequence[Diagnostic] | None = None,
    progress: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What `--json` prints on a refusal (docs/cli.md, "Refusals as JSON"); `problems`:
    the error's, with their spec lines (`located`), if not the error's own; `progress`:
    what the command did before it (apply's and revert's `actions` and `messages`)."""
    return {
        "schema": REFUSAL_SCHEMA,
        "command": command,
        "exit_code": err.exit_code,
        "problems": [
            {
                "code": p.code,
                "subject": p.subject,
                "message": p.message,
                "fix": p.fix,
                "line": p.line,
            }
            for p in (err.problems if problems is None else problems)
        ],
        "written": err.partial,
        **(progress or {}),
    }


def located(problems: Sequence[Diagnostic], spec: Path | None) -> tuple[Diagnostic, ...]:
    """`problems` with the line of `spec` that sets each spec-path subject (the planner's
    `pools[0].gpus[1]`; the loader placed its own already). The spec is read again only
    when a refusal names a spec path, and only as the loader reads it: a regular file,
    UTF-8, of a spec's size; otherwise the problems are kept as they are."""
    if spec is None or all(p.line is not None for p in problems):
        return tuple(problems)
    from pvegpu.spec.lines import locate  # only on a refusal that has a spec
    from pvegpu.spec.load import MAX_SPEC_BYTES

    try:
        if not stat.S_ISREG(spec.stat().st_mode) or spec.stat().st_size > MAX_SPEC_BYTES:
            return tuple(problems)
        text = spec.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return tuple(problems)
    return locate(problems, text)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code.

    `argv`: the arguments after the program name. None: this process's own (sys.argv),
    and main is then the program itself, so it leaves its objects frozen for the exit
    that follows (`gcpause.frozen_for_exit`); a caller that goes on passes its argv.
    """
    # Only the invoked subcommand's arguments are built (cli/arguments.py).
    parser = build_parser(command_of(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    # apply and check render only from a spec (a bundle is rendered already): without
    # one, jinja2 is not even imported.
    if args.command in _RENDERING_COMMANDS and (
        args.command in ("plan", "render") or getattr(args, "spec", None) is not None
    ):
        # The process keeps compiled templates, not render() (a pure stage writes nothing).
        from pvegpu.formats.templating import default_cache_dir, use_bytecode_cache

        use_bytecode_cache(default_cache_dir())
    paused = command_paused() if args.command not in _WAITING_COMMANDS else nullcontext()
    try:
        with paused:
            code: int = _run_function(args)(args)
    except PvegpuError as err:
        problems = located(err.problems, getattr(args, "spec", None))
        print(f"pvegpu {args.command}: refused", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        if not err.partial:
            print("nothing was written.", file=sys.stderr)
        if getattr(args, "json", False):
            # The same refusal for automation, on stdout where --json output always goes.
            progress = getattr(args, "progress", None)  # set by apply and revert
            doc = refusal_document(args.command, err, problems, progress)
            print(json.dumps(doc, indent=2))
        return err.exit_code
    except BrokenPipeError:
        # `pvegpu plan | head`: the reader left; say nothing more, like other tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        if argv is None:
            # Run as the program (the console script, `python -m pvegpu`): the process
            # exits with what main returns.
            frozen_for_exit()
    return code
