"""The revert bundle, run for real under dash against a copy of the host's files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bundled import FIXTURES, copy_tree, example_plan
from pvegpu.rendering.artifact import HOST, REVERT_BUNDLE
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


def run_revert(tmp_path: Path, root: Path, out: Path, **env: str) -> tuple[int, list[str], str]:
    log = tmp_path / "log"
    log.touch()
    result = subprocess.run(
        [DASH or "sh", str(out / "revert" / "revert.sh")],
        env={
            "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
            "ROOT": str(root),
            "LOG": str(log),
            "SYSFS": str(root / "sys"),
            **env,
        },
        capture_output=True,
        text=True,
        check=False,
    )
    calls = [c for c in log.read_text().splitlines() if not c.startswith("hostname")]
    return result.returncode, calls, result.stderr


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
def test_revert_restores_files_and_runs_steps_in_order(
    tmp_path: Path, applied: tuple[Path, Path]
) -> None:
    """revert.sh puts back 129.conf and pci.cfg byte for byte and removes pvegpu's files."""
    root, out = applied
    code, calls, err = run_revert(tmp_path, root, out)
    assert (code, err) == (0, ""), calls
    for path in ("etc/pve/lxc/129.conf", "etc/pve/mapping/pci.cfg"):
        assert (root / path).read_bytes() == (KPRO6 / path).read_bytes(), path
    for path in (
        "usr/local/sbin/pvegpu-vfio-split",
        "etc/systemd/system/pvegpu-vfio-split.service",
        "etc/modprobe.d/pvegpu-vfio.conf",
    ):
        assert not (root / path).exists(), path
    assert calls == [
        "pct status 129",
        "pct exec 129 -- systemctl stop sglang-qwen.service",
        "pct status 129",
        "pct stop 129",
        "systemctl disable pvegpu-vfio-split.service",
        "systemctl daemon-reload",
        "update-initramfs -u -k all",
        "pct start 129",
        "pct push 129 "
        f"{out}/revert/ct/129/etc/systemd/system/sglang-qwen.service "
        "/etc/systemd/system/sglang-qwen.service",
        "pct exec 129 -- systemctl daemon-reload",
        "pct exec 129 -- systemctl restart sglang-qwen.service",
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
    code, calls, err = run_revert(tmp_path, root, out)
    assert code == 3
    assert f"{pci} changed since the change was applied" in err
    assert calls == []
    assert pci.read_bytes() == before


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
def test_revert_refuses_on_another_node(tmp_path: Path, applied: tuple[Path, Path]) -> None:
    """The bundle only runs on the node it was made for."""
    root, out = applied
    code, calls, err = run_revert(tmp_path, root, out, STUB_HOSTNAME="pve2")
    assert code == 2
    assert "this bundle is for node kpro6, not pve2" in err
    assert calls == []
