"""Start-up: each command imports what it needs and nothing more.

Checked in a fresh interpreter per command (`-X importtime` lists every module imported),
because within the test session everything is imported already.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

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
