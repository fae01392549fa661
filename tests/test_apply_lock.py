"""One apply or revert at a time on a node: a flock on var/lib/pvegpu/apply/lock, held by
another real process (or by the test through a second open file), refuses the second run
at once, naming the lock file and the holder's pid, before it checks or changes anything."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bundled import FIXTURES, REPO
from pvegpu.apply.run import apply_bundle
from pvegpu.apply.state import LOCK
from pvegpu.apply.undo import revert
from pvegpu.cli import apply as cli_apply
from pvegpu.cli import main
from pvegpu.errors import ApplyError
from test_apply import Setup, tree

HOLD = """
import sys
from pathlib import Path
from pvegpu.apply.host import LiveHost
from pvegpu.apply.state import LOCK
node = LiveHost(Path(sys.argv[1]))
node.live = True  # the test's tree stands for the node's /
with node.exclusive(LOCK):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""
"""A second process that takes the lock with pvegpu's own code and holds it."""


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.kernel.close()


@contextmanager
def held_by_another_process(root: Path) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == "held\n"
            yield child
        finally:
            if child.poll() is None:
                child.communicate("", timeout=30)  # closing its stdin lets it go


def _locked_out(setup: Setup, run: str) -> ApplyError:
    """`run` ("apply" or "revert") is refused while the lock is held: nothing changes."""
    host = setup.host()
    before, kernel = tree(setup.root), setup.kernel.state()
    with pytest.raises(ApplyError) as err:
        if run == "apply":
            setup.apply(host)
        else:
            revert(host, setup.lines.append)
    assert tree(setup.root) == before and setup.kernel.state() == kernel
    assert host.commands == [], "the locked-out run went on to run commands"
    return err.value


def test_apply_is_refused_while_another_process_holds_the_lock(setup: Setup) -> None:
    with held_by_another_process(setup.root) as child:
        [problem] = _locked_out(setup, "apply").problems
        assert (problem.code, problem.subject) == ("apply-locked", f"/{LOCK}")
        assert f"process {child.pid}" in problem.message
        assert f"ps -p {child.pid}" in problem.fix
    # The holder is gone: the lock went with it, and the apply runs to the end.
    setup.apply(setup.host())
    assert any(line.startswith("verified:") for line in setup.lines)
    assert (setup.root / LOCK).read_bytes() == b"", "a finished run left its pid behind"


def test_revert_is_refused_while_an_apply_runs(setup: Setup) -> None:
    original = tree(setup.root)
    setup.apply(setup.host())
    with held_by_another_process(setup.root) as child:
        [problem] = _locked_out(setup, "revert").problems
        assert problem.code == "apply-locked" and f"process {child.pid}" in problem.message
    revert(setup.host(), setup.lines.append)
    assert tree(setup.root) == original


def test_a_killed_holder_leaves_no_lock(setup: Setup) -> None:
    with held_by_another_process(setup.root) as child:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    setup.apply(setup.host())
    assert any(line.startswith("verified:") for line in setup.lines)


def test_the_lock_is_a_flock_that_any_holder_blocks(setup: Setup) -> None:
    """The same lock taken by the test itself, through its own open file description
    (flock locks belong to one): the pid in the file is what the refusal names."""
    lock = setup.root / LOCK
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"4242\n")
        [problem] = _locked_out(setup, "apply").problems
        assert "process 4242" in problem.message
    finally:
        os.close(fd)


def test_a_dry_run_takes_no_lock_and_writes_nothing(setup: Setup) -> None:
    """A dry run writes nothing, not even the lock, so it runs beside an apply."""
    with held_by_another_process(setup.root):
        host = setup.host()
        apply_bundle(host, setup.bundle, setup.lines.append, dry_run=True)
        assert host.effects == 0
    assert setup.lines[-1] == "dry run: nothing was changed"


def test_a_dry_run_on_a_fresh_node_makes_no_state_directory(setup: Setup) -> None:
    apply_bundle(setup.host(), setup.bundle, setup.lines.append, dry_run=True)
    assert not (setup.root / "var/lib/pvegpu").exists()


def test_the_cli_says_nothing_was_written_when_locked_out(
    setup: Setup,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`pvegpu apply` on the node (the fake one): a refusal before this run's first step
    says so, even where an earlier run left its journal."""
    monkeypatch.setattr(cli_apply, "LiveHost", lambda root: setup.host())
    out = tmp_path / "out"
    spec = REPO / "examples/kpro6.toml"
    assert (
        main(["render", "--root", str(FIXTURES / "kpro6"), "--spec", str(spec), "--out", str(out)])
        == 0
    )
    assert main(["apply", "--bundle", str(out), "--yes"]) == 0
    capsys.readouterr()
    with held_by_another_process(setup.root):
        assert main(["apply", "--bundle", str(out), "--yes"]) == ApplyError.exit_code
    err = capsys.readouterr().err
    assert "[apply-locked]" in err and "nothing was written." in err


def test_a_lock_path_that_is_a_link_is_refused_not_followed(setup: Setup) -> None:
    """The lock is opened with O_NOFOLLOW: a link planted there is refused, naming it."""
    lock = setup.root / LOCK
    lock.parent.mkdir(parents=True)
    lock.symlink_to(setup.root / "etc/hostname")
    [problem] = _locked_out(setup, "apply").problems
    assert (problem.code, problem.subject) == ("lock-unusable", f"/{LOCK}")
    assert (setup.root / "etc/hostname").read_text() == "kpro6\n"
