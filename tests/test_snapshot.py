"""Snapshots hold exactly what discovery reads and give back the same facts when unpacked."""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

import pytest

from fixture_hosts import HOSTS
from pvegpu.engines import installed_files
from pvegpu.engines.sglang.engine import SglangEngine
from pvegpu.host.discover import discover
from pvegpu.host.reader import RootReader
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.facts import ConfigFile
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.spec.load import load_spec
from strategies_serving import ROOTFS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"


def _link(path: Path) -> str:
    return str(path.readlink())


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_round_trip(name: str, tmp_path: Path) -> None:
    """discover(unpack(snapshot(root))) == discover(root) for every fixture host."""
    result = snapshot(FIXTURES / name, tmp_path / f"{name}.tar.gz")
    assert result.error is None
    root = unpack(result.path, tmp_path / "unpacked")
    assert discover(root) == discover(FIXTURES / name) == result.facts


def test_symlinks_stay_symlinks(tmp_path: Path) -> None:
    """Links are archived as links with the kernel's relative text, not as copies."""
    result = snapshot(FIXTURES / "kpro6", tmp_path / "s.tar.gz")
    root = unpack(result.path, tmp_path / "u")
    for rel in (
        "sys/bus/pci/devices/0000:81:00.0",
        "sys/devices/pci0000:80/0000:80:01.1/0000:81:00.0/driver",
        "sys/devices/pci0000:80/0000:80:01.1/0000:81:00.0/iommu_group",
        "sys/kernel/iommu_groups/40/devices/0000:81:00.1",
        "sys/class/iommu/ivhd0",
        "etc/pve/lxc",
    ):
        assert (root / rel).is_symlink(), rel
        assert _link(root / rel) == _link(FIXTURES / "kpro6" / rel)
    assert (root / "sys/bus/pci/drivers/nvidia").is_dir()


def test_holds_only_what_discovery_reads(tmp_path: Path) -> None:
    """Container files, model files and attributes discovery ignores are not archived."""
    result = snapshot(FIXTURES / "kpro6", tmp_path / "s.tar.gz")
    with tarfile.open(result.path) as tar:
        names = set(tar.getnames())
    assert "etc/pve/nodes/kpro6/lxc/129.conf" in names
    assert "proc/driver/nvidia/gpus/0000:f1:00.0/information" in names
    assert not any(n.startswith(("rpool", "shared")) for n in names)
    assert not any(n.endswith(("/irq", "/revision", "/enable")) for n in names)


def test_deterministic(tmp_path: Path) -> None:
    """The same tree gives the same archive bytes (mtime 0, sorted, no owner names)."""
    one = snapshot(FIXTURES / "workstation", tmp_path / "1.tar.gz")
    two = snapshot(FIXTURES / "workstation", tmp_path / "2.tar.gz")
    assert one.path.read_bytes() == two.path.read_bytes()


def test_sizes_come_from_bytes_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Archived sizes are the bytes read, not stat's (sysfs says 4096, procfs says 0)."""
    real_lstat = Path.lstat
    real_os_lstat = os.lstat

    def lie(st: os.stat_result) -> os.stat_result:
        fields = list(st)
        fields[6] = 4096
        return os.stat_result(fields)

    def lying_lstat(self: Path) -> os.stat_result:
        return lie(real_lstat(self))

    def lying_os_lstat(path: str) -> os.stat_result:
        return lie(real_os_lstat(path))

    monkeypatch.setattr(Path, "lstat", lying_lstat)
    monkeypatch.setattr(os, "lstat", lying_os_lstat)
    result = snapshot(FIXTURES / "mixed", tmp_path / "s.tar.gz")
    monkeypatch.undo()
    with tarfile.open(result.path) as tar:
        member = tar.getmember("etc/hostname")
        extracted = tar.extractfile(member)
        assert extracted is not None
        assert (member.size, extracted.read()) == (10, b"pve-mixed\n")


def test_broken_tree_is_archived_up_to_the_problem(tmp_path: Path) -> None:
    """A failing discovery still writes what it read, and reports the problem."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "no-iommu", root, symlinks=True)
    (root / "proc/devices").unlink()
    result = snapshot(root, tmp_path / "s.tar.gz")
    assert result.facts is None and result.error is not None
    assert result.error.problems[0].subject == "proc/devices"
    with tarfile.open(result.path) as tar:
        assert "etc/hostname" in tar.getnames()


def test_snapshot_with_spec_plans_elsewhere(tmp_path: Path) -> None:
    """With --spec, the unpacked archive plans and renders exactly like the host."""
    spec = load_spec(FIXTURES.parent.parent / "examples" / "kpro6.toml")
    result = snapshot(FIXTURES / "kpro6", tmp_path / "s.tar.gz", spec, installed_files)
    assert result.error is None
    unpacked = unpack(result.path, tmp_path / "host")
    here = plan_and_render(discover_for(spec, FIXTURES / "kpro6"), spec)[1]
    there = plan_and_render(discover_for(spec, unpacked), spec)[1]
    assert [(a.path, a.content) for a in there] == [(a.path, a.content) for a in here]
    assert result.facts == discover_for(spec, unpacked)


def test_discovery_and_snapshot_ask_the_engine_for_its_installed_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """host/ names no engine: the engine of each server, found through the registry, is
    asked which files of the container its release is read from, once per rootfs."""
    asked: list[tuple[str, str]] = []
    reads = SglangEngine.installed_files

    def recording(
        self: SglangEngine, reader: RootReader, rootfs: str, python: str
    ) -> tuple[ConfigFile, ...]:
        asked.append((rootfs, python))
        return reads(self, reader, rootfs, python)

    monkeypatch.setattr(SglangEngine, "installed_files", recording)
    root = tmp_path / "kpro6"
    shutil.copytree(FIXTURES / "kpro6", root, symlinks=True)
    metadata = f"{ROOTFS}/root/ml-env/lib/python3.12/site-packages/sglang-0.5.12.dist-info/METADATA"
    (root / metadata).parent.mkdir(parents=True)
    (root / metadata).write_text("Metadata-Version: 2.4\nName: sglang\nVersion: 0.5.12\n")
    spec = load_spec(FIXTURES.parent.parent / "examples" / "kpro6.toml")
    facts = discover_for(spec, root)
    (serving,) = [p.lxc.serving for p in spec.pools if p.lxc and p.lxc.serving]
    assert (ROOTFS, serving.python) in asked
    once = list(asked)
    result = snapshot(root, tmp_path / "s.tar.gz", spec, installed_files)
    assert asked == once * 2
    assert result.facts == facts
    # What the engine named is in the facts and the archive: both plan the same release.
    assert metadata in {f.path for f in facts.files}
    with tarfile.open(result.path) as tar:
        assert metadata in tar.getnames()


def test_a_snapshot_for_a_spec_needs_the_engines_files(tmp_path: Path) -> None:
    """Left out, the archive would lack the release its plan decides from: refused."""
    spec = load_spec(FIXTURES.parent.parent / "examples" / "kpro6.toml")
    with pytest.raises(ValueError, match="installed files"):
        snapshot(FIXTURES / "kpro6", tmp_path / "s.tar.gz", spec)
