"""`pvegpu discover --svg`: the host as it is, drawn as the bundle's topology.svg is."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

from pvegpu.cli import main
from pvegpu.host.discover import discover
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.rendering.host_picture import host_picture
from pvegpu.rendering.host_svg import host_svg

REPO = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
FIXTURES = sorted(p.name for p in (REPO / "fixtures" / "sysfs").iterdir() if p.is_dir())


def _facts(name: str) -> HostFacts:
    return discover(REPO / "fixtures" / "sysfs" / name)


def _boxes(svg: str) -> dict[str, list[str]]:
    """The lines of text of each box, by its id; the document must parse."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return {
        g.attrib["id"]: [t.text or "" for t in g.iter(f"{SVG}text")] for g in root.iter(f"{SVG}g")
    }


@pytest.mark.parametrize("name", ["kpro6", "workstation", "pve-tb", "mixed", "intel-arc"])
def test_golden(name: str, golden: Callable[[str], SnapshotAssertion]) -> None:
    """kpro6 (eight GPUs, one container), workstation (a VM and a host file use a GPU),
    pve-tb (a GPU behind a PCIe switch, an iGPU, no NUMA node; Intel and NVIDIA), mixed
    (NVIDIA and AMD), intel-arc (a container reaching every DRM node, a BMC display)."""
    assert host_svg(_facts(name)) == golden("svg")


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_host_draws_well_formed_and_the_same_twice(name: str) -> None:
    facts = _facts(name)
    svg = host_svg(facts)
    assert svg == host_svg(_facts(name))
    boxes = _boxes(svg)
    gpus = [box for box in boxes if box.startswith("gpu")]
    assert len(gpus) == len(facts.gpus)
    for index, gpu in enumerate(sorted(facts.gpus, key=lambda g: g.address)):
        assert boxes[f"gpu{index}"][0] == f"GPU {index} · {gpu.address.short}"
        assert f"IOMMU group {gpu.iommu_group}" in boxes[f"gpu{index}"][2] or (
            gpu.iommu_group is None
        )
    root = ET.fromstring(svg)
    ids = [e.attrib["id"] for e in root.iter() if "id" in e.attrib]
    assert len(ids) == len(set(ids))


def test_who_uses_each_gpu_is_drawn_from_the_reference_inventory() -> None:
    """workstation: VM 110's hostpci0 and the host's modprobe.d line reach 39:00.0; the
    users are boxes with an edge from that GPU, in discover's USE line's order."""
    picture = host_picture(_facts("workstation"))
    users = {u.box.lines[0]: u for u in picture.users}
    assert list(users) == ["VM 110", "this host"]
    gpu = next(g for n in picture.numa for g in n.gpus if "39:00.0" in g.lines[0])
    assert users["VM 110"].edges == ((gpu.id, False),)
    assert users["this host"].edges == ((gpu.id, False),)
    assert "hostpci" in users["VM 110"].box.lines[-1]
    assert users["this host"].box.lines[-1] == "modprobe.d"


def test_a_gpu_behind_a_switch_hangs_off_the_switch() -> None:
    picture = host_picture(_facts("pve-tb"))
    attachments = [a for n in picture.numa for a in n.attachments]
    switched = [a for a in attachments if a.switch is not None]
    assert len(switched) == 1
    assert switched[0].switch is not None
    assert switched[0].switch.lines == ("PCIe switch", "upstream port 2c:00.0", "root port 00:07.0")
    assert [g.lines[0] for g in switched[0].gpus] == ["GPU 1 · 2e:00.0"]
    boxes = _boxes(host_svg(_facts("pve-tb")))
    assert "switch0" in boxes
    # A host without a switch has no switch column.
    assert "PCIe switch" not in host_svg(_facts("kpro6"))


def test_shared_group_names_the_other_device() -> None:
    """shared-group: the GPU's IOMMU group also holds the boot NVMe (its switch has no
    ACS): the box says so, the tooltip names it."""
    facts = _facts("shared-group")
    picture = host_picture(facts)
    (gpu,) = (g for n in picture.numa for g in n.gpus)
    assert gpu.lines[2].endswith("+ 1 other device")
    assert "IOMMU group also holds 0000:04:00.0" in gpu.tooltip


def _renamed(facts: HostFacts, path: str, key: str, value: str) -> HostFacts:
    files = []
    for file in facts.files:
        if file.path == path:
            lines = [
                f"{key}: {value}" if line.startswith(f"{key}:") else line
                for line in file.content.split("\n")
            ]
            file = ConfigFile(path, "\n".join(lines))
        files.append(file)
    return attrs.evolve(facts, files=tuple(files))


def test_names_from_the_host_are_escaped() -> None:
    """A container hostname with XML's special characters stays text: the document
    parses and shows the name as written."""
    evil = "a<b>&c\"d'e]]>"
    facts = _renamed(_facts("kpro6"), "etc/pve/lxc/129.conf", "hostname", evil)
    svg = host_svg(facts)
    boxes = _boxes(svg)
    (user,) = (lines for box, lines in boxes.items() if box.startswith("user"))
    assert user[:2] == ["CT 129", evil]
    assert "sglang-qwen" in host_svg(_facts("kpro6"))
    # The same for a VM's name, in the tooltip (an attribute-free <title>) too.
    vm = _renamed(_facts("workstation"), "etc/pve/qemu-server/110.conf", "name", evil)
    root = ET.fromstring(host_svg(vm))
    assert evil in [t.text for t in root.iter(f"{SVG}text")]


def test_a_host_without_gpus_says_so() -> None:
    facts = attrs.evolve(_facts("kpro6"), gpus=(), references=())
    svg = host_svg(facts)
    assert "no GPUs: no PCI function of class 0x03 or 0x12" in svg
    assert _boxes(svg) == {}


# ---------------------------------------------------------------------------- the CLI


def test_svg_with_the_table(
    fixture_root: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fixture_root("kpro6")
    out = tmp_path / "kpro6.svg"
    assert main(["discover", "--root", str(root), "--svg", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("node kpro6: ")
    assert out.read_text(encoding="utf-8") == host_svg(discover(root))
    assert str(out) in captured.err
    assert [p.name for p in tmp_path.iterdir()] == ["kpro6.svg"]  # no temporary left


def test_svg_with_json_keeps_stdout_json(
    fixture_root: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fixture_root("workstation")
    out = tmp_path / "ws.svg"
    out.write_text("an older drawing")
    assert main(["discover", "--root", str(root), "--json", "--svg", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "pvegpu.facts/1"
    assert out.read_text(encoding="utf-8") == host_svg(discover(root))


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_svg_into_a_missing_directory_is_refused(
    fixture_root: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    json_flag: list[str],
) -> None:
    """Exit 6 (an artifact cannot be written), the path and a fix; nothing is printed on
    stdout but the refusal document, and no directory is created."""
    out = tmp_path / "missing" / "host.svg"
    argv = ["discover", "--root", str(fixture_root("kpro6")), "--svg", str(out), *json_flag]
    assert main(argv) == 6
    captured = capsys.readouterr()
    assert f"{out}: cannot write: the directory" in captured.err
    assert "does not exist" in captured.err and "mkdir -p" in captured.err
    assert "[output-unwritable]" in captured.err
    if json_flag:
        assert json.loads(captured.out)["problems"][0]["code"] == "output-unwritable"
    else:
        assert captured.out == ""
    assert not (tmp_path / "missing").exists()


def test_svg_onto_a_directory_is_refused(
    fixture_root: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["discover", "--root", str(fixture_root("kpro6")), "--svg", str(tmp_path)]) == 6
    assert "cannot write: it is a directory" in capsys.readouterr().err


def test_svg_imports_neither_jinja2_nor_the_planner(tmp_path: Path) -> None:
    """--svg loads the drawing (rendering/host_svg.py) and nothing heavier: no jinja2, no
    planning, no review package, no xml.sax (see test_cli_lazy.py for plain discover)."""
    out = tmp_path / "kpro6.svg"
    root = str(REPO / "fixtures" / "sysfs" / "kpro6")
    argv = ["discover", "--root", root, "--svg", str(out)]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pvegpu", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "pvegpu.rendering.host_svg" in modules
    heavy = ("jinja2", "pvegpu.planning", "pvegpu.rendering.review", "pvegpu.serving", "xml.sax")
    assert sorted(m for m in modules if m.startswith(heavy)) == []
