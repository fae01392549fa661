"""The revert bundle, run for real under dash against a copy of the host's files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bundled import FIXTURES, copy_tree, example_plan
from pvegpu.model.artifact import HOST, REVERT_BUNDLE
from pvegpu.model.plan import Plan
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.registry import render
from sysfs_sim import copy_host

KPRO6 = FIXTURES / "kpro6"
DASH = shutil.which("dash")

# Stand-ins for the Proxmox and systemd commands: each logs its arguments.
STUB = """#!/bin/sh
echo "{name} $*" >>"$LOG"
{body}
"""
STUBS = {
    "pct": 'case "$1" in status) echo "status: running";; esac',
    "qm": 'case "$1" in status) echo "status: running";; esac',
    "systemctl": "",
    "update-initramfs": "",
    "hostname": 'echo "${STUB_HOSTNAME:-kpro6}"',
}


@pytest.fixture
def applied(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of kpro6 with the change applied, and the rendered bundle beside it."""
    artifacts = render(example_plan("kpro6"))
    out = tmp_path / "out"
    write_bundle(artifacts, out, node="kpro6")
    root = tmp_path / "root"
    copy_tree(KPRO6 / "etc", root / "etc")
    for artifact in artifacts:
        if artifact.target == HOST and artifact.bundle != REVERT_BUNDLE:
            path = root / artifact.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(artifact.content)
    (root / "usr/local/sbin/pvegpu-vfio-split").chmod(0o755)
    # The real split script runs its revert against the fixture's sysfs, where every GPU
    # is already on its host driver: a no-op (its moves are tested in test_split_script).
    copy_host("kpro6", root)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text(STUB.format(name=name, body=body))
        (bin_dir / name).chmod(0o755)
    return root, out


def run_revert(
    tmp_path: Path, root: Path | None, out: Path, **env: str
) -> tuple[int, list[str], str, str]:
    """revert.sh under dash with logging stand-ins first on PATH: (exit, calls, out, err).

    With `root`, the dry run on that copy (ROOT set). Without, the live mode, whose PATH
    holds only the stand-ins (cp, rm and sha256sum too), so that nothing on this machine
    can change even when the script goes wrong."""
    log = tmp_path / "log"
    log.write_text("")
    bin_dir = tmp_path / "bin"
    path = f"{bin_dir}:/usr/bin:/bin"
    if root is None:
        for name in ("cp", "rm", "mv", "sha256sum", "cat"):
            (bin_dir / name).write_text(STUB.format(name=name, body=""))
            (bin_dir / name).chmod(0o755)
        for name in ("dirname", "cut", "grep"):
            real = shutil.which(name)
            assert real is not None, name
            (bin_dir / name).unlink(missing_ok=True)
            (bin_dir / name).symlink_to(real)
        path = str(bin_dir)
    result = subprocess.run(
        [DASH or "sh", str(out / "revert" / "revert.sh")],
        env={
            "PATH": path,
            "LOG": str(log),
            **({} if root is None else {"ROOT": str(root)}),
            **env,
        },
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode, log.read_text().splitlines(), result.stdout, result.stderr


def would_run(stdout: str) -> list[str]:
    return [
        line.removeprefix("would run: ")
        for line in stdout.splitlines()
        if line.startswith("would run:")
    ]


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
def test_dry_run_under_root_restores_files_and_runs_no_command(
    tmp_path: Path, applied: tuple[Path, Path]
) -> None:
    """ROOT set: 129.conf and pci.cfg come back byte for byte and pvegpu's files go, under
    ROOT only; not one command runs (the stand-ins log nothing), each is printed."""
    root, out = applied
    code, calls, stdout, err = run_revert(tmp_path, root, out)
    assert (code, err) == (0, ""), stdout
    assert calls == []
    for path in ("etc/pve/lxc/129.conf", "etc/pve/mapping/pci.cfg"):
        assert (root / path).read_bytes() == (KPRO6 / path).read_bytes(), path
    for path in (
        "usr/local/sbin/pvegpu-vfio-split",
        "etc/systemd/system/pvegpu-vfio-split.service",
        "etc/modprobe.d/pvegpu-vfio.conf",
        "usr/local/sbin/pvegpu-device-nodes",
        "etc/systemd/system/pvegpu-device-nodes.service",
    ):
        assert not (root / path).exists(), path
    assert would_run(stdout) == [
        "pct exec 129 -- systemctl stop sglang-qwen.service",
        "pct push 129 "
        f"{out}/revert/ct/129/etc/systemd/system/sglang-qwen.service "
        "/etc/systemd/system/sglang-qwen.service",
        "pct exec 129 -- systemctl daemon-reload",
        "pct stop 129",
        "systemctl disable pvegpu-vfio-split.service",
        f"{root}/usr/local/sbin/pvegpu-vfio-split revert",
        "systemctl disable pvegpu-device-nodes.service",
        "systemctl daemon-reload",
        "update-initramfs -u -k all",
        "pct start 129",
        "pct exec 129 -- systemctl start sglang-qwen.service",
    ]


def test_previous_unit_is_back_before_the_container_starts(kpro6: Plan) -> None:
    """The container's previous unit is pushed while it still runs and before it is
    stopped: starting it again must never start the new unit (an enabled unit starts
    with its container)."""
    script = next(a.content for a in render(kpro6) if a.path == "revert.sh")
    lines = [line.strip() for line in script.splitlines()]
    push = next(i for i, line in enumerate(lines) if line.startswith("run pct push 129"))
    assert push < lines.index("run pct stop 129") < lines.index("run pct start 129")


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
def test_live_revert_refuses_a_stopped_container_before_any_change(
    tmp_path: Path, applied: tuple[Path, Path]
) -> None:
    """Live (no ROOT): a stopped container cannot take its files back (pct push needs it
    running), so the revert stops before its first change and says how to go on."""
    _, out = applied
    (tmp_path / "bin" / "pct").write_text(STUB.format(name="pct", body='echo "status: stopped"'))
    code, calls, _, err = run_revert(tmp_path, None, out)
    assert code == 4, err
    assert "CT 129 is not running" in err and "pct start 129, then run revert.sh again" in err
    assert [c for c in calls if not c.startswith(("hostname", "sha256sum", "cat"))] == [
        "pct status 129"
    ]


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
def test_revert_refuses_when_a_file_changed_since(
    tmp_path: Path, applied: tuple[Path, Path]
) -> None:
    """A pci.cfg edited after the change (another node's mapping) stops the revert untouched."""
    root, out = applied
    pci = root / "etc/pve/mapping/pci.cfg"
    pci.write_text(pci.read_text() + "other\n\tmap id=1234:5678,node=pve2,path=0000:02:00\n\n")
    before = pci.read_bytes()
    code, calls, stdout, err = run_revert(tmp_path, root, out)
    assert code == 3
    assert f"{pci} changed since the change was applied" in err
    assert calls == [] and would_run(stdout) == []
    assert pci.read_bytes() == before


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
def test_revert_refuses_on_another_node(tmp_path: Path, applied: tuple[Path, Path]) -> None:
    """The bundle only runs on the node it was made for: the live host's name, or under
    ROOT the copy's etc/hostname."""
    root, out = applied
    (root / "etc/hostname").write_text("pve2\n")
    code, calls, stdout, err = run_revert(tmp_path, root, out)
    assert code == 2
    assert "this bundle is for node kpro6, not pve2" in err
    assert calls == [] and would_run(stdout) == []
    code, calls, _, err = run_revert(tmp_path, None, out, STUB_HOSTNAME="pve2")
    assert code == 2
    assert "this bundle is for node kpro6, not pve2" in err
