"""The topology drawings: topology.svg, the Mermaid block of SUMMARY.md, the terminal table."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from bundled import spec_plan
from pvegpu.model.artifact import REVIEW
from pvegpu.model.plan import Plan
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.rendering.review.render import render_topology_svg
from pvegpu.rendering.review.topology import topology_mermaid, topology_svg, topology_table
from pvegpu.spec.load import load_spec

REPO = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
MERMAID_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

# Four pools of uneven size on kpro6, so boxes compete for the same vertical space.
FOUR_POOLS = """
node = "kpro6"
[[pools]]
name = "big"
gpus = ["01:00.0", "11:00.0", "61:00.0"]
[pools.lxc]
vmid = 129
[[pools]]
name = "one"
gpus = ["71:00.0"]
mapping = { id = "one-vm" }
[pools.vfio]
vm = { vmid = 201 }
[[pools]]
name = "two"
gpus = ["81:00.0", "91:00.0"]
mapping = { id = "two-vm" }
[pools.vfio]
vm = { vmid = 202 }
[[pools]]
name = "rest"
gpus = ["e1:00.0"]
mapping = { id = "rest-vm" }
[pools.vfio]
"""


def _rects(root: ET.Element) -> dict[str, tuple[int, int, int, int]]:
    """x, y, width, height of each box, by the id of its group."""
    boxes = {}
    for group in root.iter(f"{SVG}g"):
        rect = group.find(f"{SVG}rect")
        assert rect is not None
        x, y, w, h = (int(rect.attrib[k]) for k in ("x", "y", "width", "height"))
        boxes[group.attrib["id"]] = (x, y, w, h)
    return boxes


def _mermaid_structure(text: str) -> tuple[set[str], list[tuple[str, str]], dict[str, str]]:
    """Declared node ids, edges and class assignments of a flowchart; asserts the syntax."""
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    nodes: set[str] = set()
    edges: list[tuple[str, str]] = []
    classes: dict[str, str] = {}
    depth = 0
    for line in lines[1:]:
        stripped = line.strip()
        if match := re.fullmatch(r'subgraph (\w+)\["[^"]*"\]', stripped):
            depth += 1
            nodes.add(match[1])
        elif stripped == "end":
            depth -= 1
            assert depth >= 0
        elif stripped == "direction TB":
            assert depth == 1
        elif match := re.fullmatch(r'(\w+)\["[^"]*"\]', stripped):
            nodes.add(match[1])
        elif match := re.fullmatch(r"(\w+) --> (\w+)", stripped):
            edges.append((match[1], match[2]))
        elif match := re.fullmatch(r"classDef (\w+) (\S.*)", stripped):
            assert "fill:" in match[2] and "stroke:" in match[2]
        elif match := re.fullmatch(r"class ([\w,]+) (\w+)", stripped):
            for node in match[1].split(","):
                classes[node] = match[2]
        else:
            pytest.fail(f"not a flowchart statement: {line!r}")
    assert depth == 0
    return nodes, edges, classes


# ---------------------------------------------------------------------------- SVG


def test_svg_kpro6_is_review_only(kpro6: Plan) -> None:
    """topology.svg is installed nowhere (golden: test_end_to_end/*kpro6-topology*)."""
    artifact = render_topology_svg(kpro6)
    assert (artifact.path, artifact.target) == ("topology.svg", REVIEW)


def test_svg_is_well_formed_and_names_every_gpu(kpro6: Plan) -> None:
    """The SVG parses as XML and has one box per GPU carrying its full and short address."""
    root = ET.fromstring(topology_svg(kpro6))
    assert root.tag == f"{SVG}svg"
    boxes = {g.attrib["id"]: g for g in root.iter(f"{SVG}g")}
    for index, gpu in enumerate(sorted(kpro6.facts.gpus, key=lambda g: g.address)):
        box = boxes[f"gpu{index}"]
        assert str(gpu.address) in "".join(box.itertext())
        assert gpu.address.short in "".join(box.itertext())
    assert len([i for i in boxes if i.startswith("gpu")]) == len(kpro6.facts.gpus)


def test_svg_marks_drivers_and_moves(kpro6: Plan) -> None:
    """GPUs are coloured by the driver they end on, dashed when it changes; the legend says so."""
    root = ET.fromstring(topology_svg(kpro6))
    boxes = {g.attrib["id"]: g.find(f"{SVG}rect") for g in root.iter(f"{SVG}g")}
    stay, move = boxes["gpu0"], boxes["gpu4"]
    assert stay is not None and move is not None
    assert stay.attrib["stroke"] != move.attrib["stroke"]
    assert "stroke-dasharray" not in stay.attrib and "stroke-dasharray" in move.attrib
    text = " ".join(root.itertext())
    assert "ends on nvidia" in text and "ends on vfio-pci" in text
    assert "dashed: driver changes with this plan" in text


def test_svg_no_move_no_dashed_legend(workstation: Plan) -> None:
    """Where no GPU changes driver, the legend does not explain dashed boxes."""
    assert "dashed" not in topology_svg(workstation)


def test_svg_escapes_text(kpro6: Plan) -> None:
    """Names with XML metacharacters are escaped, so the file still parses."""
    odd = attrs.evolve(kpro6, facts=attrs.evolve(kpro6.facts, node='lab&<"1">'))
    root = ET.fromstring(topology_svg(odd))
    assert 'GPU split on lab&<"1">' in "".join(root.itertext())


def test_svg_boxes_never_overlap() -> None:
    """With uneven pools and stacked consumers, no two boxes overlap and edges go rightwards."""
    planned = spec_plan("kpro6", FOUR_POOLS)
    root = ET.fromstring(topology_svg(planned))
    boxes = list(_rects(root).items())
    for i, (a, (ax, ay, aw, ah)) in enumerate(boxes):
        for b, (bx, by, bw, bh) in boxes[i + 1 :]:
            apart = ax + aw <= bx or bx + bw <= ax or ay + ah <= by or by + bh <= ay
            assert apart, f"{a} overlaps {b}"
    for path in root.iter(f"{SVG}path"):
        match = re.fullmatch(r"M(\d+),\d+ C.* (\d+),\d+", path.attrib["d"])
        if match:
            assert int(match[1]) < int(match[2])


def test_svg_unpooled_gpu_and_missing_numa(workstation: Plan) -> None:
    """A GPU in no pool is drawn, marked unchanged, with no edge; no-NUMA GPUs get a box."""
    svg = topology_svg(workstation)
    root = ET.fromstring(svg)
    text = " ".join(root.itertext())
    assert "nvidia · unchanged" in text
    assert "no NUMA node" in text
    assert "VM 110" in text and "mapping ws-gpu" in text


def test_svg_is_deterministic(kpro6: Plan, fixture_root: Callable[[str], Path]) -> None:
    """Two discoveries of the same host give byte-identical drawings."""
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    again = plan(discover_for(spec, fixture_root("kpro6")), spec)
    assert topology_svg(kpro6) == topology_svg(again)


# ---------------------------------------------------------------------------- Mermaid


def test_mermaid_kpro6_structure(kpro6: Plan) -> None:
    """A flowchart with a subgraph per NUMA node; every edge joins declared nodes."""
    text = topology_mermaid(kpro6)
    nodes, edges, classes = _mermaid_structure(text)
    assert all(MERMAID_ID.match(n) for n in nodes)
    assert {"numa0", "numa1"} <= nodes
    assert all(a in nodes and b in nodes for a, b in edges)
    assert set(classes) <= nodes
    assert [b for a, b in edges if a.startswith("gpu")] == ["pool0"] * 4 + ["pool1"] * 4
    assert ("pool0", "ct129") in edges and ("pool1", "map1") in edges
    assert classes["gpu4"] == "vfio_pci_moved" and classes["gpu0"] == "nvidia"
    for gpu in kpro6.facts.gpus:
        assert gpu.address.short in text


def test_mermaid_nesting(kpro6: Plan) -> None:
    """GPUs are declared inside their NUMA node's subgraph, pools and consumers outside."""
    lines = topology_mermaid(kpro6).splitlines()
    numa1 = lines.index('  subgraph numa1["NUMA 1<br/>CPUs 32-63,96-127"]')
    end = lines.index("  end", numa1)
    inside = " ".join(lines[numa1:end])
    assert all(f"gpu{i}[" in inside for i in range(4, 8))
    assert "pool" not in inside


def test_mermaid_chains_mapping_to_vm(workstation: Plan) -> None:
    """A VM that uses its pool's mapping hangs off the mapping, not the pool."""
    nodes, edges, _ = _mermaid_structure(topology_mermaid(workstation))
    assert ("pool0", "map0") in edges and ("map0", "vm110") in edges
    assert ("pool0", "vm110") not in edges
    assert not [e for e in edges if e[0] == "gpu0"]
    assert "numa_none" in nodes


def test_mermaid_escapes_quotes(kpro6: Plan) -> None:
    """A `"` in a label becomes Mermaid's #quot;, so the label is not cut short."""
    pool = kpro6.pools[0]
    assert pool.serving is not None
    odd = attrs.evolve(pool, serving=attrs.evolve(pool.serving, unit='a"b<c>'))
    text = topology_mermaid(attrs.evolve(kpro6, pools=(odd, *kpro6.pools[1:])))
    assert "a#quot;b#lt;c#gt;.service" in text
    _mermaid_structure(text)


def test_mermaid_counts_agree_with_their_nouns(kpro6: Plan) -> None:
    """A one-GPU container without device minors is `1 GPU`; the VM pool counts functions."""
    pool = kpro6.pools[0]
    one = attrs.evolve(pool, gpus=(attrs.evolve(pool.gpus[0], node_minor=None),))
    text = topology_mermaid(attrs.evolve(kpro6, pools=(one, *kpro6.pools[1:])))
    assert "<br/>1 GPU" in text and "1 GPUs" not in text
    assert "vfio-pci · 4 GPUs, 8 functions" in text


# ---------------------------------------------------------------------------- text


def test_table_kpro6(kpro6: Plan) -> None:
    """The terminal table: a facts line, a header and one aligned row per GPU."""
    lines = topology_table(kpro6).splitlines()
    assert lines[0].startswith("kpro6: IOMMU: translated")
    assert lines[1].split() == ["GPU", "PCI", "NUMA", "driver", "pool", "purpose"]
    assert len(lines) == 2 + 8
    assert lines[2].split()[:5] == ["0", "01:00.0", "0", "nvidia", "sglang"]
    assert lines[6].split()[:7] == ["4", "81:00.0", "1", "nvidia", "->", "vfio-pci", "vm"]
    assert {line.find(" sglang ") for line in lines[2:6]} == {lines[1].index("pool") - 1}


def test_table_is_ascii(workstation: Plan) -> None:
    """The terminal table is plain ASCII, for any terminal and log."""
    assert topology_table(workstation).isascii()
