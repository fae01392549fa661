"""`pvegpu apply` where it cannot act: a machine without Proxmox's commands (refused up
front, naming the command, never a traceback), and a tree that is not the running machine
(`--root SNAPSHOT --dry-run`: every step and base file, no command, nothing written)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from apply_fake import FakeHost
from bundled import FIXTURES, REPO, copy_tree
from pvegpu.apply.commands import commands_needed
from pvegpu.apply.host import LiveHost
from pvegpu.apply.run import apply_bundle
from pvegpu.apply.undo import revert
from pvegpu.cli import main
from pvegpu.engines import installed_files
from pvegpu.errors import ApplyError
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.rendering.review.commands import SPLIT_SCRIPT
from pvegpu.spec.load import load_spec
from test_apply import CT, ROOTFS, UNIT, Setup, rendered, tree

UNIT_FILE = f"{ROOTFS}/etc/systemd/system/{UNIT}.service"


def everything(root: Path) -> dict[str, bytes]:
    """Every directory, file and link under root (apply's state and locks included;
    the simulated kernel's sysfs files are FIFOs, listed but not opened)."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in [*dirnames, *filenames]:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = b"-> " + os.fsencode(path.readlink())
            elif path.is_dir():
                found[rel] = b"<dir>"
            elif path.is_file():
                found[rel] = path.read_bytes()
            else:
                found[rel] = b"<special>"  # the simulated kernel's FIFOs: never opened
    return found


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.kernel.close()


# --- a machine that is not a Proxmox VE node ----------------------------------------


def _refused_before_anything(setup: Setup, host: FakeHost) -> ApplyError:
    before, kernel = everything(setup.root), setup.kernel.state()
    with pytest.raises(ApplyError) as err:
        setup.apply(host)
    assert everything(setup.root) == before and setup.kernel.state() == kernel
    assert host.commands == [], "a command ran on a machine that lacks the runbook's"
    return err.value


@pytest.mark.parametrize(
    ("missing", "package", "needed_by"),
    [
        ("pct", "pve-container", "preflight"),
        ("update-initramfs", "initramfs-tools", "step 7 (Install the host files)"),
        ("systemctl", "systemd", "step 8 (Move the VM GPUs to vfio-pci"),
    ],
)
def test_a_missing_command_is_refused_before_any_change(
    setup: Setup, missing: str, package: str, needed_by: str
) -> None:
    problems = _refused_before_anything(setup, setup.host(missing=frozenset({missing}))).problems
    [problem] = [p for p in problems if p.code == "command-missing"]
    assert problem.subject == missing
    assert "not a Proxmox VE node" in problem.message and package in problem.message
    assert needed_by in problem.message
    assert "--dry-run" in problem.fix
    assert not (setup.root / "var/lib/pvegpu").exists()


def test_revert_without_a_command_is_refused_before_undoing_anything(setup: Setup) -> None:
    setup.apply(setup.host())
    applied, kernel = tree(setup.root), setup.kernel.state()
    host = setup.host(missing=frozenset({"pct"}))
    with pytest.raises(ApplyError) as err:
        revert(host, setup.lines.append)
    assert [(p.code, p.subject) for p in err.value.problems] == [("command-missing", "pct")]
    assert err.value.problems[0].fix.startswith("run pvegpu revert on the node")
    assert tree(setup.root) == applied and setup.kernel.state() == kernel
    assert host.commands == []


def test_the_up_front_list_holds_every_command_apply_and_revert_run(setup: Setup) -> None:
    """commands_needed is a second list beside the actions: a command the steps, the
    verification or revert run that it lacks would again fail half way."""
    host = setup.host()
    setup.apply(host)
    revert(host, setup.lines.append)
    needed = commands_needed(setup.bundle)
    ran = {argv[0] for argv in host.commands}
    installs = {"/" + e.path for e in setup.bundle.entries if e.path.startswith("usr/local/sbin/")}
    assert installs == {SPLIT_SCRIPT, "/usr/local/sbin/pvegpu-device-nodes"}
    assert ran - installs <= set(needed), ran - set(needed)
    assert {"pct", "systemctl", "update-initramfs"} <= set(needed)
    assert not installs & set(needed)  # the bundle installs them before they run


def test_a_command_that_is_not_installed_is_a_problem_not_a_traceback() -> None:
    """The real host: an exec that fails (no such program) becomes `command-missing`."""
    with pytest.raises(ApplyError) as err:
        LiveHost().run(["pvegpu-test-no-such-command", "status"])
    [problem] = err.value.problems
    assert (problem.code, problem.subject) == ("command-missing", "pvegpu-test-no-such-command")


def _render(out: Path) -> Path:
    spec = REPO / "examples/kpro6.toml"
    assert (
        main(["render", "--root", str(FIXTURES / "kpro6"), "--spec", str(spec), "--out", str(out)])
        == 0
    )
    return out


def test_dry_run_on_a_machine_without_pct_says_so(tmp_path: Path) -> None:
    """The issue's report: `apply --bundle B --dry-run` where there is no pct. PATH is
    emptied, so this holds on any machine, a Proxmox VE node included."""
    bundle = _render(tmp_path / "out")
    empty = tmp_path / "bin"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pvegpu", "apply", "--bundle", str(bundle), "--dry-run"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(empty)},
        check=False,
    )
    assert "Traceback" not in done.stderr
    assert done.returncode == ApplyError.exit_code, done.stderr
    assert "pct: is not installed" in done.stderr and "[command-missing]" in done.stderr
    assert "this is not a Proxmox VE node" in done.stderr
    assert "step 1/" not in done.stdout  # refused before the steps


# --- a tree that is not the running machine -------------------------------------------


@pytest.fixture
def snap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of kpro6 standing for a snapshot; any process started once it is made
    fails the test."""
    root = copy_tree(FIXTURES / "kpro6", tmp_path / "snap")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a command was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    return root


def _dry_run(root: Path, lines: list[str]) -> None:
    apply_bundle(LiveHost(root), rendered()[0], lines.append, dry_run=True)


def test_dry_run_under_a_tree_shows_every_step_and_base_file(
    snap: Path,
) -> None:
    before = everything(snap)
    lines: list[str] = []
    _dry_run(snap, lines)
    assert everything(snap) == before, "the dry run wrote into the tree"
    bundle = rendered()[0]
    for path in (
        "/etc/pve/lxc/129.conf",
        "/etc/pve/mapping/pci.cfg",
        f"CT {CT}:/etc/systemd/system/{UNIT}.service",
    ):
        assert any(line.startswith(f"  base file {path}: as rendered") for line in lines), path
    total = len(bundle.steps)
    for i, step in enumerate(bundle.steps):
        assert f"step {i + 1}/{total}: {step.title}" in lines
        for action in step.actions:
            for line in action.lines():
                assert f"  $ {line}" in lines
    results = {line.strip() for line in lines if line.strip().startswith("->")}
    assert results == {"-> would run", "-> left to you: apply does not run this"}
    assert lines[-1] == "dry run: nothing was changed"


@pytest.mark.parametrize(
    ("path", "subject"),
    [
        ("etc/pve/nodes/kpro6/lxc/129.conf", "/etc/pve/lxc/129.conf"),
        (UNIT_FILE, f"CT {CT}:/etc/systemd/system/{UNIT}.service"),
    ],
)
def test_dry_run_under_a_tree_refuses_a_changed_base_file(
    snap: Path, path: str, subject: str
) -> None:
    """A stopped or running container alike: the tree has its files either way."""
    changed = snap / path
    changed.write_text(changed.read_text() + "# edited after render\n")
    before = everything(snap)
    with pytest.raises(ApplyError) as err:
        _dry_run(snap, [])
    assert [(p.code, p.subject) for p in err.value.problems] == [("file-changed", subject)]
    assert everything(snap) == before


def test_a_tree_without_the_container_files_says_what_to_capture(
    snap: Path,
) -> None:
    shutil.rmtree(snap / ROOTFS)  # a snapshot taken without --spec
    with pytest.raises(ApplyError) as err:
        _dry_run(snap, [])
    [problem] = err.value.problems
    assert problem.code == "not-in-tree" and "snapshot --spec" in problem.fix


def test_only_a_dry_run_is_allowed_under_a_tree(snap: Path) -> None:
    """Refused first, before preflight looks at the tree (here it would find a change)."""
    conf = snap / "etc/pve/nodes/kpro6/lxc/129.conf"
    conf.write_text(conf.read_text() + "onboot: 1\n")
    before = everything(snap)
    host = LiveHost(snap)
    with pytest.raises(ApplyError) as err:
        apply_bundle(host, rendered()[0], print)
    assert [p.code for p in err.value.problems] == ["apply-not-live"]
    with pytest.raises(ApplyError) as err:
        revert(host, print)
    assert [p.code for p in err.value.problems] == ["apply-not-live"]
    assert everything(snap) == before


def test_dry_run_after_a_revert_shows_the_steps_to_run_again(setup: Setup) -> None:
    """A reverted journal's `done` events count for nothing: a new apply starts over."""
    host = setup.host()
    setup.apply(host)
    revert(host, setup.lines.append)
    lines: list[str] = []
    apply_bundle(host, setup.bundle, lines.append, dry_run=True)
    assert not any("already done (journal" in line for line in lines)
    assert "    -> would run" in lines


AUDIT = """
import json, os, sys
seen = []
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        seen.append(("open", os.path.abspath(os.fsdecode(args[0]))))
    elif event in ("os.listdir", "os.scandir") and args[0] is not None:
        seen.append(("list", os.path.abspath(os.fsdecode(args[0]))))
    elif event.startswith(("subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.system")):
        seen.append(("run", repr(args)))
sys.addaudithook(hook)
from pvegpu.cli import main
code = main(sys.argv[2:])
found = list(seen)
with open(sys.argv[1], "w") as out:
    json.dump(found, out)
sys.exit(code)
"""
"""Runs pvegpu with every file opened, directory listed and process started recorded."""


def _audited(args: list[str], record: Path) -> tuple[int, list[tuple[str, str]]]:
    done = subprocess.run([sys.executable, "-c", AUDIT, str(record), *args], check=False)
    return done.returncode, [(kind, what) for kind, what in json.loads(record.read_text())]


def test_dry_run_against_a_snapshot_reads_nothing_else_and_runs_nothing(tmp_path: Path) -> None:
    """`pvegpu apply --root SNAPSHOT --bundle B --dry-run` as a reviewer runs it, off the
    node: every path it opens or lists is in the snapshot, the bundle, or Python's own
    files; no process is started; the snapshot is left as it was; exit 0."""
    spec = load_spec(REPO / "examples/kpro6.toml")
    taken = snapshot(FIXTURES / "kpro6", tmp_path / "kpro6.tar.gz", spec, installed_files)
    assert taken.error is None
    root = unpack(taken.path, tmp_path / "snapshot")
    # An absolute link means the snapshot's own file, as on the node, never the live one.
    (root / "etc/pve/lxc").unlink()
    (root / "etc/pve/lxc").symlink_to("/etc/pve/nodes/kpro6/lxc")
    bundle = _render(tmp_path / "out")
    before = everything(root)
    args = ["apply", "--root", str(root), "--bundle", str(bundle), "--dry-run"]
    code, seen = _audited(args, tmp_path / "audit.json")
    assert code == 0
    assert everything(root) == before
    assert [what for kind, what in seen if kind == "run"] == []
    allowed = {
        os.path.realpath(p)
        for p in (root, bundle, sys.prefix, sys.base_prefix, sys.exec_prefix, REPO / "src")
    }
    outside = sorted(
        {what for kind, what in seen if kind != "run"}
        - {
            w
            for _, w in seen
            if any(
                os.path.realpath(w).startswith(a + "/") or os.path.realpath(w) == a for a in allowed
            )
        }
    )
    assert outside == [], "the dry run read the live machine"
    assert any(what.startswith(str(root) + "/etc/pve") for kind, what in seen)

    # The same review with a base file changed in the snapshot: refused, exit 7.
    conf = root / "etc/pve/nodes/kpro6/lxc/129.conf"
    conf.write_text(conf.read_text() + "onboot: 1\n")
    code, _ = _audited(args, tmp_path / "audit2.json")
    assert code == ApplyError.exit_code
