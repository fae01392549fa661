"""The ways docs/install.md gives to run pvegpu, each for real in a fresh environment.

- the built wheel installed into a fresh venv (pip, no index: the dependencies are the
  test environment's own, linked in);
- a checkout run as `PYTHONPATH=src python3 -m pvegpu`, nothing of pvegpu installed;
- the versions of attrs, cattrs and jinja2 that Debian 13 packages, installed from PyPI
  (needs the network: skipped without it, except under CI=true, where it fails).

Each one prints the version and renders the reference split of kpro6, which loads the
templates and the SGLang option tables that an install has to carry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import pvegpu
from bundled import FIXTURES, REPO, spec_path

# Building and installing takes tens of seconds: the thorough run (tests/depth.py).
pytestmark = pytest.mark.thorough

IN_CI = os.environ.get("CI", "").lower() == "true"
RUNTIME = ("attrs", "cattrs", "jinja2")
DEBIAN_13 = ("attrs==25.3.0", "cattrs==24.1.2", "jinja2==3.1.6", "markupsafe==2.1.5")
"""What Debian 13 (Proxmox VE 9) packages as python3-attr, -cattr, -jinja2, -markupsafe."""
# Only what a build needs: the checkout minus .venv, tests, caches, fixtures.
_SOURCES = ("pyproject.toml", "README.md", "src", "templates")


def _run(*argv: str | Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=False, env=env, cwd=REPO
    )
    assert result.returncode == 0, f"{argv}: {result.stdout}\n{result.stderr}"
    return result.stdout


def _requirements(name: str, seen: set[str]) -> set[str]:
    """`name` and everything it requires here, as installed distributions."""
    key = distribution(name).metadata["Name"].lower()
    if key not in seen:
        seen.add(key)
        for text in distribution(name).requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                _requirements(requirement.name, seen)
    return seen


def fresh_venv(where: Path, with_runtime: bool = True) -> Path:
    """A venv without pip or pvegpu; the runtime dependencies linked in from this one."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", where], check=True)
    python = where / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run(python, "-c", purelib).strip())
    if with_runtime:
        for name in sorted(set().union(*(_requirements(n, set()) for n in RUNTIME))):
            dist = distribution(name)
            tops = {Path(str(f)).parts[0] for f in dist.files or []}
            for top in tops:
                source = Path(str(dist.locate_file(top)))
                if source.exists() and not (site / top).exists() and top != "..":
                    (site / top).symlink_to(source)
    return python


def _renders(python: Path, out: Path, env: dict[str, str] | None = None) -> None:
    version = _run(python, "-m", "pvegpu", "--version", env=env)
    assert version == f"pvegpu {pvegpu.__version__}\n"
    _run(
        python, "-m", "pvegpu", "render", "--root", FIXTURES / "kpro6",
        "--spec", spec_path("kpro6"), "--out", out, env=env,
    )  # fmt: skip
    assert (out / "ct/129/etc/systemd/system/sglang-qwen.service").is_file()
    assert (out / "SUMMARY.md").is_file()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pvegpu's wheel, built offline from a copy of the sources (no build/ in the tree)."""
    work = tmp_path_factory.mktemp("wheel")
    for name in _SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(
                source, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
            )
        else:
            shutil.copy(source, work / name)
    _run(
        sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
        "--no-build-isolation", "--wheel-dir", work / "dist", work,
    )  # fmt: skip
    (built,) = (work / "dist").glob("pvegpu-*.whl")
    return built


def _install(python: Path, *requirements: str | Path, index: bool = False) -> None:
    flags = () if index else ("--no-index",)
    _run(
        sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
        "--disable-pip-version-check", *flags, *requirements,
    )  # fmt: skip


def test_the_wheel_installs_and_runs(wheel: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv")
    _install(python, "--no-deps", wheel)
    where = _run(python, "-c", "import pvegpu; print(pvegpu.__file__)")
    assert where.startswith(str(tmp_path / "venv"))  # the wheel's copy, not the checkout
    assert (tmp_path / "venv/bin/pvegpu").exists()
    _run(tmp_path / "venv/bin/pvegpu", "--version")
    _renders(python, tmp_path / "out")


def test_a_checkout_runs_with_pythonpath_src(tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO / "src")}
    where = _run(python, "-c", "import pvegpu; print(pvegpu.__file__)", env=env)
    assert where.startswith(str(REPO / "src"))
    _renders(python, tmp_path / "out", env=env)


def test_the_debian_13_versions_run_it(wheel: Path, tmp_path: Path) -> None:
    """Debian 12 here cannot install Debian 13's packages: the same versions from PyPI."""
    python = fresh_venv(tmp_path / "venv", with_runtime=False)
    try:
        _install(python, *DEBIAN_13, index=True)
    except AssertionError as failure:
        if IN_CI:
            raise
        pytest.skip(f"PyPI not reachable: {str(failure)[-200:]}")
    _install(python, "--no-deps", wheel)
    installed = _run(python, "-c", "import attrs, cattrs, jinja2; print(attrs.__version__)")
    assert installed.strip() == "25.3.0"
    _renders(python, tmp_path / "out")
