"""What each subcommand accepts: the argparse tree, built from argparse and pathlib only.

Parsing `pvegpu --help` or `pvegpu discover` must not load the planner, the renderers
or jinja2, so each subcommand names its run function as "module:function" and `main`
imports that module only once the command line is parsed.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

EPILOG = """\
exit codes:
  0  success
  1  unexpected internal error (a bug: please report it with `pvegpu snapshot`)
  2  usage error (bad command line)
  3  the sysfs/procfs tree under --root is broken (discovery error)
  4  the spec, or the bundle given with --bundle, is malformed
  5  the plan is refused on this host (every problem is listed)
  6  an artifact cannot be rendered
  7  applying to the host failed (see the rollback notes printed)
  8  pvegpu check: warnings, no errors
  9  pvegpu check: at least one error
"""


class _Version(argparse.Action):
    """`--version`: `pvegpu.__version__`, so that it also works from a checkout, where there
    is no installed metadata (and importlib.metadata would be slow anyway)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from pvegpu import __version__

        print(f"pvegpu {__version__}")
        parser.exit(0)


def _columns() -> int:
    """The terminal's width as `shutil.get_terminal_size()` says it: $COLUMNS, else the
    width of the terminal stdout is, else 80. argparse's formatter asks shutil, and so
    imports it (with bz2 and lzma behind it: about 2 ms of every command, help or not,
    as each `add_argument` makes a formatter) for this one number."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter (the subcommands'), given the width as argparse takes it."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = _columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


class _RawDescriptionFormatter(_Formatter, argparse.RawDescriptionHelpFormatter):
    """The top level's: its description and epilog (the exit codes) as written."""


_NODE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?")


def _node_root(text: str) -> tuple[str | None, Path]:
    """`NODE=DIR` (a node's root) or `DIR`. A directory whose name holds `=` after a
    node-like word is written with a path in front: `./a=b`."""
    name, sep, rest = text.partition("=")
    if sep and _NODE_NAME.fullmatch(name) and len(name) <= 63:
        if not rest:
            raise argparse.ArgumentTypeError(f"{text!r}: no directory after {name}=")
        return name, Path(rest)
    return None, Path(text)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `command` (the subcommand about to run), only that
    subcommand's arguments: the others are listed by name and help line (for `--help`
    and the "invalid choice" message) but not built, a few milliseconds of every run."""
    parser = argparse.ArgumentParser(
        prog="pvegpu",
        description="Plan, render and apply GPU splits on a Proxmox VE host.",
        epilog=EPILOG,
        formatter_class=_RawDescriptionFormatter,
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    build_all = command not in COMMANDS
    for name, (help_line, build) in COMMANDS.items():
        if build_all or name == command:
            build(sub.add_parser(name, help=help_line, formatter_class=_Formatter))
        else:
            sub.add_parser(name, help=help_line, add_help=False, formatter_class=_Formatter)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names: its first word, when no option comes before it (the
    top level has only --help and --version); None otherwise (build everything)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def _discover(d: argparse.ArgumentParser) -> None:
    d.description = (
        "Read sysfs, procfs and /etc under --root and print the GPU topology: "
        "one line per GPU in PCI order, the host line (node, IOMMU mode, SEV-SNP, "
        "nvidia module) and the GPUs of each NUMA node. Reads only; writes nothing."
    )
    d.add_argument("--root", type=Path, default=Path("/"), help="host root (default: /)")
    d.add_argument("--json", action="store_true", help="the facts document (docs/facts-schema.md)")
    d.add_argument(
        "--svg",
        type=Path,
        metavar="FILE",
        help="also draw the topology into FILE (NUMA nodes, PCIe switches, GPUs, who uses "
        "each), as the bundle's topology.svg looks; the table or --json still goes to stdout",
    )
    d.set_defaults(run="pvegpu.cli.discover:run_discover")


def _snapshot(s: argparse.ArgumentParser) -> None:
    s.description = (
        "Capture every file and symlink discover reads under --root into "
        "a .tar.gz that `pvegpu discover --root <unpacked>` reads back to the same "
        "facts: sysfs and procfs attributes, the kernel command line, the guest configs, "
        "PCI mappings and storage.cfg under /etc/pve, modprobe.d and the host's systemd "
        "units; with --spec also the container's unit and drop-ins, dpkg status, NVIDIA "
        "library names (empty) and the model's config.json. Values that look like secrets "
        "(tokens, API keys, passwords in units and environment lines) are replaced by "
        "REDACTED, and the command lists the files where it did so; the rest of those "
        "files, guest names and descriptions included, is archived as read."
    )
    s.add_argument("--root", type=Path, default=Path("/"), help="host root (default: /)")
    s.add_argument("--out", type=Path, required=True, help="archive to write (.tar.gz)")
    s.add_argument(
        "--spec",
        type=Path,
        help="also capture what planning this spec's servers reads (model config, "
        "container files), so `pvegpu plan` works on the unpacked archive",
    )
    s.add_argument(
        "--json", action="store_true", help="the archive written, as JSON (pvegpu.snapshot/1)"
    )
    s.set_defaults(run="pvegpu.cli.snapshot:run_snapshot")


def _init(i: argparse.ArgumentParser) -> None:
    i.description = (
        "Write a split spec of the host as it is now: every GPU a container or VM holds "
        "in a way a pool expresses, as pools, commented with what discovery found (models, "
        "NUMA nodes, IOMMU groups, free GPUs) and with what it cannot express (also said on "
        "stderr). Planning it unchanged changes no GPU's driver and no guest's GPUs. Reads "
        "only --root; never overwrites --out."
    )
    i.add_argument("--root", type=Path, default=Path("/"), help="host root (default: /)")
    i.add_argument("--out", type=Path, help="write the spec here (refused if it exists)")
    i.add_argument("--json", action="store_true", help="the spec, its pools and notes, as JSON")
    i.set_defaults(run="pvegpu.cli.init:run_init")


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    """What plan and render share: the roots and the spec."""
    p.add_argument(
        "--root",
        type=_node_root,
        action="append",
        metavar="[NODE=]DIR",
        help="host root to read (default: /); for a spec with `nodes`, NODE=DIR once per "
        "node (/ on the node itself, an unpacked `pvegpu snapshot` for the others)",
    )
    p.add_argument("--spec", type=Path, required=True, help="split spec (TOML)")
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the summary and diffs: auto (a terminal, unless NO_COLOR is set or "
        "TERM=dumb), always, never (default: auto)",
    )


def _plan(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Plan the split and show every file it would change as a unified diff "
        "against what is under --root. Writes nothing. Exit 0 when the plan is valid."
    )
    _plan_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run="pvegpu.cli.plan:run_plan")


def _render(r: argparse.ArgumentParser) -> None:
    r.description = (
        "Render every artifact into OUT at its target path (OUT/etc/pve/lxc/"
        "129.conf; container files under OUT/ct/<vmid>/), the revert bundle under "
        "OUT/revert/, SUMMARY.md and topology.svg, and OUT/MANIFEST.json. Never touches "
        "the host; nothing is written when the plan is refused."
    )
    _plan_arguments(r)
    r.add_argument("--out", type=Path, required=True, help="output directory")
    r.add_argument("--json", action="store_true", help="the files written, as JSON")
    r.set_defaults(run="pvegpu.cli.plan:run_render")


def _apply(a: argparse.ArgumentParser) -> None:
    a.description = (
        "Run the runbook of a bundle on the host (docs/apply.md): refuse before "
        "any change when the host moved on since rendering, then each step once, journaled "
        "under /var/lib/pvegpu/apply so that a rerun resumes and `pvegpu revert` undoes it; "
        "verify the split, the container, its GPUs and the server's health at the end."
    )
    a.add_argument("--bundle", type=Path, help="directory written by pvegpu render --out")
    a.add_argument("--spec", type=Path, help="render this spec in memory, show the diffs")
    a.add_argument(
        "--reconcile",
        action="store_true",
        help="after an upgrade: plan the applied spec (--bundle's, or --spec) on the host as "
        "it is now and write only what moves no GPU and changes no guest's GPUs",
    )
    a.add_argument("--root", type=Path, default=Path("/"), help="host root (default: /)")
    a.add_argument("--dry-run", action="store_true", help="print every step; change nothing")
    a.add_argument("--yes", action="store_true", help="do not ask before changing the host")
    a.add_argument(
        "--json",
        action="store_true",
        help="every step's outcome as one JSON document (needs --yes or --dry-run)",
    )
    a.set_defaults(run="pvegpu.cli.apply:run_apply")


def _revert(r: argparse.ArgumentParser) -> None:
    r.description = (
        "Undo the last `pvegpu apply` from its state directory, newest step first; "
        "with --dry-run, show each step it would undo and change nothing."
    )
    r.add_argument("--root", type=Path, default=Path("/"), help="host root (default: /)")
    r.add_argument(
        "--dry-run", action="store_true", help="print every step it would undo; change nothing"
    )
    r.add_argument("--yes", action="store_true", help="do not ask before changing the host")
    r.add_argument(
        "--json",
        action="store_true",
        help="every step's outcome as one JSON document (needs --yes or --dry-run)",
    )
    r.set_defaults(run="pvegpu.cli.apply:run_revert")


def _check(c: argparse.ArgumentParser) -> None:
    c.description = (
        "Check the host as it is (container NVIDIA userspace against the host "
        "module, P2P under IOMMU translation, stale mappings, vfio-pci.ids) and, with "
        "--bundle or --spec, against the plan: drivers, the split unit, installed files, the "
        "server's TP, GPUs and P2P, the plan's findings. Reads only."
    )
    c.add_argument("--root", type=Path, default=Path("/"), help="host root (default: /)")
    c.add_argument("--bundle", type=Path, help="directory written by pvegpu render --out")
    c.add_argument(
        "--spec",
        type=Path,
        help="split spec (TOML), planned in memory; with --bundle: the applied spec, planned "
        "again to find what an upgrade changed (default: the one MANIFEST.json names)",
    )
    c.add_argument("--json", action="store_true", help="findings as JSON (stable codes)")
    c.add_argument("--prometheus", type=Path, help="write node_exporter textfile metrics here")
    c.set_defaults(run="pvegpu.cli.check:run_check")


SHELLS = ("bash", "zsh", "fish")
"""The shells `pvegpu completion` writes a script for (cli/completion.py)."""


def _completion(c: argparse.ArgumentParser) -> None:
    c.description = (
        "Print the shell completion script for SHELL, generated from these argument "
        "definitions: the Debian package installs all three; after a pip install, save "
        "it where the shell looks (docs/install.md), e.g. `pvegpu completion bash > "
        "~/.local/share/bash-completion/completions/pvegpu`."
    )
    c.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    c.set_defaults(run="pvegpu.cli.completion:run_completion")


def _man(m: argparse.ArgumentParser) -> None:
    m.description = (
        "Print the manual page (roff), generated from these argument definitions: "
        "`pvegpu man | man -l -` reads it; the Debian package installs it as pvegpu(1)."
    )
    m.set_defaults(run="pvegpu.cli.docs:run_man")


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "discover": ("show the host's GPUs, NUMA nodes, IOMMU groups and drivers", _discover),
    "snapshot": ("archive exactly what discover reads into a .tar.gz", _snapshot),
    "init": ("write a split spec of the host as it is now, to edit", _init),
    "plan": ("show what would change, as unified diffs, and the plan's findings", _plan),
    "render": (
        "write every artifact under OUT, with MANIFEST.json and a revert bundle",
        _render,
    ),
    "apply": ("apply a rendered bundle (or a spec) to this host, step by step", _apply),
    "revert": ("undo the last apply on this host", _revert),
    "check": (
        "compare the host with the plan (exit 0 clean, 8 warnings, 9 errors; 4: the "
        "--bundle or --spec cannot be used)",
        _check,
    ),
    "completion": ("print the shell completion script (bash, zsh, fish)", _completion),
    "man": ("print the manual page (roff): pvegpu man | man -l -", _man),
}
"""Each subcommand: its help line in `pvegpu --help`, and what builds its arguments."""
