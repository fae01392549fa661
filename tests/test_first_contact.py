"""What a new user runs first: the README's two commands, on a tree as a fresh clone has it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    """The commands of the README's first code block, comments stripped."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block is not None, "README.md starts without a sh code block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_gives_exactly_two_commands() -> None:
    assert readme_commands() == ["make demo", "make test"]


def test_ci_runs_the_readme_commands_as_written() -> None:
    """.ci/run runs each README command verbatim, in the README's order, so a fresh clone
    that cannot run one of them fails CI."""
    lines = [line.strip() for line in (REPO / ".ci/run").read_text().splitlines()]
    positions = [lines.index(command) for command in readme_commands()]
    assert positions == sorted(positions)


def _fresh_clone(dest: Path) -> Path:
    """The tracked files only: no out/, no caches, no build output."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = REPO / name.decode()
        target = dest / name.decode()
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(source.readlink())
        elif source.is_file():
            shutil.copy2(source, target)
    return dest


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_on_a_fresh_tree(tmp_path: Path) -> None:
    """`make demo` where out/ does not exist yet (it is gitignored, so a clone has none).

    The tree's venv is this test's own (already installed): `-o` tells make not to rebuild
    its stamp, so only the demo recipe itself runs."""
    tree = _fresh_clone(tmp_path / "clone")
    assert not (tree / "out").exists()
    venv = Path(sys.executable).parent.parent
    stamp = venv / ".pvegpu-installed"
    result = subprocess.run(
        ["make", "-o", str(stamp), f"VENV={venv}", f"STAMP={stamp}", "demo"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tree / "out/kpro6/MANIFEST.json").is_file()
    assert (tree / "out/kpro6/SUMMARY.md").is_file()
