"""`pvegpu discover` and `pvegpu snapshot` on the command line."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from pvegpu.cli import main
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json


def test_table_kpro6(
    fixture_root: Callable[[str], Path],
    capsys: pytest.CaptureFixture[str],
    golden: Callable[[str], SnapshotAssertion],
) -> None:
    """The table lists the 8 GPUs and the NUMA split 01,11,61,71 | 81,91,e1,f1."""
    assert main(["discover", "--root", str(fixture_root("kpro6"))]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line[:1].isdigit()]
    assert len(rows) == 8
    assert "NUMA 0 (cpus 0-31,64-95): 01:00.0 11:00.0 61:00.0 71:00.0" in out
    assert "NUMA 1 (cpus 32-63,96-127): 81:00.0 91:00.0 e1:00.0 f1:00.0" in out
    assert out.startswith("node kpro6: IOMMU translated (amd, 9 units), SEV-SNP on")
    assert out == golden("txt")


def test_table_without_numa_or_iommu(
    fixture_root: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """GPUs with numa_node -1 and no IOMMU group show `-`, listed apart from the nodes."""
    assert main(["discover", "--root", str(fixture_root("no-iommu"))]) == 0
    out = capsys.readouterr().out
    assert "IOMMU off" in out
    assert "no NUMA node (numa_node -1): 01:00.0" in out
    row = next(line for line in out.splitlines() if line.startswith("0 "))
    assert row.split()[3:5] == ["-", "-"]


def test_json(fixture_root: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints the facts document, which parses back to the same facts."""
    root = fixture_root("kpro6-split")
    assert main(["discover", "--root", str(root), "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["schema"] == "pvegpu.facts/1"
    assert facts_from_json(out) == discover(root)


def test_broken_root_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A broken tree exits 3 and names the path and code on stderr."""
    assert main(["discover", "--root", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "etc/hostname" in err and "[missing-file]" in err


def test_snapshot_command(
    fixture_root: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pvegpu snapshot --out` writes an archive that discovers like the root."""
    out = tmp_path / "kpro6.tar.gz"
    assert main(["snapshot", "--root", str(fixture_root("kpro6")), "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    shutil.unpack_archive(out, tmp_path / "u", filter="data")
    assert discover(tmp_path / "u") == discover(fixture_root("kpro6"))


def test_snapshot_of_broken_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A snapshot of a broken root is still written, and the exit code says discovery failed."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/hostname").write_text("h\n")
    out = tmp_path / "s.tar.gz"
    assert main(["snapshot", "--root", str(tmp_path), "--out", str(out)]) == 3
    captured = capsys.readouterr()
    assert out.is_file() and "[missing-dir]" in captured.err
