"""Start-up: each command imports what it needs and nothing more.

Checked in a fresh interpreter per command (`-X importtime` lists every module imported),
because within the test session everything is imported already.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from pvegpu.cli.arguments import COMMANDS, build_parser, command_of

REPO = Path(__file__).resolve().parent.parent
KPRO6 = str(REPO / "fixtures" / "sysfs" / "kpro6")

HEAVY = ("jinja2", "pvegpu.planning", "pvegpu.rendering", "pvegpu.serving", "pvegpu.engines")
"""Modules (and their submodules) that reading a host never needs."""
NEVER = ("xml.sax", "urllib.request", "http.client")
"""Pulled in by xml.sax.saxutils for two escapes; no command needs them."""


def _imported(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, check=False
    )
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done, modules


def _loaded(modules: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in roots))


@pytest.mark.parametrize(
    "argv",
    [
        ("-m", "pvegpu", "--help"),
        ("-m", "pvegpu", "discover", "--root", KPRO6),
        ("-m", "pvegpu", "discover", "--root", KPRO6, "--json"),
        ("-c", "import pvegpu; pvegpu.discover"),
    ],
    ids=["help", "discover", "discover-json", "import-pvegpu"],
)
def test_reading_a_host_imports_no_planner_renderer_or_jinja2(argv: tuple[str, ...]) -> None:
    done, modules = _imported(*argv)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pvegpu" in modules, "importtime output not understood"
    assert _loaded(modules, HEAVY + NEVER) == []


def test_check_without_a_spec_imports_no_jinja2() -> None:
    """`check --root` compares the host with itself: no template is rendered, so the
    template cache (and jinja2 with it) is not set up; with --spec it is."""
    done, modules = _imported("-m", "pvegpu", "check", "--root", KPRO6)
    assert done.returncode in (0, 8, 9), done.stderr[-2000:]
    assert "pvegpu.apply.check" in modules
    assert _loaded(modules, ("jinja2", "pvegpu.rendering", "pvegpu.formats.templating")) == []
    spec = str(REPO / "examples" / "kpro6.toml")
    done, modules = _imported("-m", "pvegpu", "check", "--root", KPRO6, "--spec", spec)
    assert done.returncode in (0, 8, 9), done.stderr[-2000:]
    assert "pvegpu.formats.templating" in modules


def test_render_does_not_import_saxutils(tmp_path: Path) -> None:
    spec = str(REPO / "examples" / "kpro6.toml")
    argv = ("-m", "pvegpu", "render", "--root", KPRO6, "--spec", spec, "--out", str(tmp_path))
    done, modules = _imported(*argv)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "jinja2" in modules
    assert _loaded(modules, NEVER) == []


def test_version_is_the_installed_one_without_reading_metadata() -> None:
    # pyproject.toml takes the version from pvegpu.__version__, so a checkout without
    # metadata prints the same; tests/test_install.py runs it from a checkout.
    done, modules = _imported("-m", "pvegpu", "--version")
    assert (done.returncode, done.stdout) == (0, f"pvegpu {version('pvegpu')}\n")
    assert "importlib.metadata" not in modules


def test_help_does_not_read_metadata() -> None:
    done, modules = _imported("-m", "pvegpu", "--help")
    assert done.returncode == 0
    assert "--version" in done.stdout
    assert _loaded(modules, ("importlib.metadata", "pvegpu.host")) == []


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_only_the_invoked_subcommand_is_built(command: str) -> None:
    """`main` builds the arguments of the command given only: that subcommand reads the
    command line exactly as the whole parser's does, the others are names and help."""
    full = _subparsers(build_parser())
    lazy_parser = build_parser(command_of([command, "--root", "/"]))
    lazy = _subparsers(lazy_parser)
    assert list(lazy) == list(full)
    assert lazy[command].format_help() == full[command].format_help()
    assert lazy_parser.format_help() == build_parser().format_help()
    for name, parser in lazy.items():
        if name != command:
            assert parser._actions == [], name


def test_without_a_command_everything_is_built() -> None:
    for argv in ([], ["--help"], ["--version"], ["bogus"], ["-x", "discover"]):
        assert command_of(argv) is None
        built = _subparsers(build_parser(command_of(argv)))
        assert all(parser._actions for parser in built.values()), argv
