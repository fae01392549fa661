"""Devices that move between PCI mappings, and the VMs on mappings that shrink (issue 9,
item 2).

A device that goes into a pool's mapping leaves every other mapping on this node (the old
one loses its line in the rendered pci.cfg, and goes when none is left), so no device is
in two mappings; a `;` line that cannot be split is refused; VMs on a mapping that
shrinks or goes are listed; map lines of other nodes keep every byte.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from bundled import KPRO6_SPEC, host_facts
from pvegpu.model.artifact import REVERT_BUNDLE
from pvegpu.model.facts import HostFacts
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.hostpci import host_ids
from pvegpu.rendering.registry import render
from pvegpu.spec.load import parse_spec
from test_whole_host_guests import ISSUE, SPLIT, VM140, VM140_BASE, artifact, of, refused, variant
from test_whole_host_guests import text as findings_text

Golden = Callable[[str], SnapshotAssertion]

# VM 200 takes 81:00.0 and 91:00.0; no pool for the other six GPUs.
TWO_TO_VM = ISSUE.replace('"01:00.0", "11:00.0"', '"81:00.0", "91:00.0"')


def _kpro6_pci_cfg() -> str:
    existing = host_facts("kpro6").file(pcicfg.PATH)
    assert existing is not None
    return existing.content


KPRO6_PCI_CFG = _kpro6_pci_cfg()
MAP = (
    "\tmap id=10de:2bb5,iommugroup={group},node={node},path=0000:{bus}:00,subsystem-id=10de:204b\n"
)


def map_line(bus: str, group: int, node: str = "kpro6") -> str:
    return MAP.format(bus=bus, group=group, node=node)


def rendered_pci_cfg(facts: HostFacts, spec: str) -> str:
    return artifact(render(plan(facts, parse_spec(spec))), pcicfg.PATH).content


def paths_here(text: str, node: str = "kpro6") -> dict[str, list[str]]:
    """Each mapping's paths on `node`, as the rendered file says."""
    return {
        s.id: [m.get("path") or "" for m in s.maps if m.node == node] for s in pcicfg.parse(text)
    }


def test_moved_device_leaves_the_old_mapping(golden: Golden) -> None:
    """The issue's case: 01:00 and 11:00 go to pro6000-vm and leave pro6000, which keeps
    the other six; the revert restores the file as discovered."""
    result = plan(host_facts("kpro6"), parse_spec(ISSUE))
    artifacts = render(result)
    cfg = artifact(artifacts, pcicfg.PATH)
    paths = paths_here(cfg.content)
    assert paths["pro6000-vm"] == ["0000:01:00", "0000:11:00"]
    assert paths["pro6000"] == [f"0000:{b}:00" for b in ("61", "71", "81", "91", "e1", "f1")]
    assert paths["nic-cx6"] == ["0000:c1:00.0"]
    assert "; pro6000 loses 0000:01:00, 0000:11:00 (moved to pro6000-vm)" in cfg.reason
    assert artifact(artifacts, pcicfg.PATH, REVERT_BUNDLE).content == KPRO6_PCI_CFG
    moved = of(result.findings, "mapping-devices-moved")
    assert [f.subject for f in moved] == [f"{pcicfg.PATH} mapping 'pro6000'"]
    assert findings_text(moved) == golden("txt")


@pytest.mark.parametrize(
    "spec",
    [
        ISSUE,
        TWO_TO_VM,
        SPLIT,
        KPRO6_SPEC,
        # Container pool without mapping: its GPUs stay in pro6000, VM 200's leave it.
        KPRO6_SPEC.replace('mapping = { id = "pro6000" }\n', ""),
        # Both pools in new mappings: pro6000 loses everything and goes.
        KPRO6_SPEC.replace('id = "pro6000" }', 'id = "pro6000-ct" }'),
    ],
    ids=["issue", "two-to-vm", "split", "reference", "ct-without-mapping", "all-new"],
)
def test_no_device_ends_up_in_two_mappings(spec: str) -> None:
    """Whatever the pools, every device of this node is in one mapping of the new file."""
    text = rendered_pci_cfg(host_facts("kpro6"), spec)
    devices = [
        (mapping_id, host)
        for mapping_id, paths in paths_here(text).items()
        for host in host_ids(paths)
    ]
    for i, (first, a) in enumerate(devices):
        assert not [(second, b) for second, b in devices[i + 1 :] if a.overlaps(b)], first


def test_emptied_mapping_goes_and_vms_on_shrinking_mappings_are_listed(
    tmp_path: Path, golden: Golden
) -> None:
    """old-vm hands over only 81:00 and 91:00: both move to pro6000-vm, so it goes, and
    VM 140 on it is told it no longer starts; VM 141 on pro6000 (8 -> 6) gets fewer."""
    cfg = KPRO6_PCI_CFG + "old-vm\n" + map_line("81", 40) + map_line("91", 41) + "\n"
    vm140 = VM140_BASE.replace("machine", "hostpci0: mapping=old-vm,pcie=1\nmachine")
    vm141 = VM140_BASE.replace(
        "machine", "hostpci0: mapping=pro6000\nhostpci1: mapping=pro6000\nmachine"
    )
    files = {pcicfg.PATH: cfg, VM140: vm140, "etc/pve/qemu-server/141.conf": vm141}
    result = plan(variant(tmp_path, files), parse_spec(TWO_TO_VM))
    text = artifact(render(result), pcicfg.PATH).content
    assert [s.id for s in pcicfg.parse(text)] == ["nic-cx6", "pro6000", "pro6000-vm"]
    listed = of(result.findings, "mapping-devices-moved", "vm-mapping-shrinks")
    assert [(f.code, f.subject) for f in listed] == [
        ("mapping-devices-moved", f"{pcicfg.PATH} mapping 'pro6000'"),
        ("mapping-devices-moved", f"{pcicfg.PATH} mapping 'old-vm'"),
        ("vm-mapping-shrinks", VM140),
        ("vm-mapping-shrinks", "etc/pve/qemu-server/141.conf"),
    ]
    assert "qm set 140 --delete hostpci0" in listed[2].message
    assert "goes from 8 devices to 6 on kpro6" in listed[3].message
    assert findings_text(listed) == golden("txt")


def test_pool_vm_on_its_own_shrinking_mapping_is_not_listed(tmp_path: Path) -> None:
    """The pool's VM gets one hostpci line per GPU of the pool: nothing to tell it."""
    vm = VM140_BASE.replace("machine", "hostpci0: mapping=pro6000-vm,pcie=1\nmachine")
    cfg = KPRO6_PCI_CFG + "pro6000-vm\n" + map_line("81", 40) + map_line("91", 41)
    spec = ISSUE.replace('"01:00.0", "11:00.0"', '"81:00.0"').replace("200", "140")
    result = plan(variant(tmp_path, {pcicfg.PATH: cfg + "\n", VM140: vm}), parse_spec(spec))
    assert not of(result.findings, "vm-mapping-shrinks")


OTHER_NODE = (
    "pro6000\n"
    + map_line("01", 112, "kpro7")
    + map_line("01", 12)
    + map_line("81", 140, "kpro7")
    + map_line("11", 13)
    + map_line("81", 40)
    + map_line("91", 141, "kpro7")
    + "\tdescription across the cluster\n\n"
    + "kpro7-only\n"
    + map_line("81", 40, "kpro7")
    + "\n"
)


@pytest.mark.parametrize("spec", [ISSUE, KPRO6_SPEC], ids=["other-mapping", "pool-mapping"])
def test_map_lines_of_other_nodes_keep_every_byte(tmp_path: Path, spec: str) -> None:
    """pci.cfg is cluster-wide: kpro7's lines (the same addresses, other GPUs) stay, in
    order and byte for byte, whether pro6000 loses lines (ISSUE) or is rewritten as a
    pool's mapping (the reference split)."""
    text = rendered_pci_cfg(variant(tmp_path, {pcicfg.PATH: OTHER_NODE}), spec)
    kept = [line for line in text.splitlines(keepends=True) if "node=kpro7" in line]
    assert kept == [line for line in OTHER_NODE.splitlines(keepends=True) if "node=kpro7" in line]
    sections = pcicfg.parse(text)
    assert [s.id for s in sections][:2] == ["pro6000", "kpro7-only"]
    assert [m.node for m in sections[1].maps] == ["kpro7"]


def test_other_nodes_lines_keep_a_mapping_whose_node_lines_all_move(tmp_path: Path) -> None:
    """A mapping that loses every line of this node stays while another node has one."""
    cfg = "old-vm\n" + map_line("81", 40) + map_line("81", 140, "kpro7") + "\n"
    text = rendered_pci_cfg(variant(tmp_path, {pcicfg.PATH: cfg}), TWO_TO_VM)
    assert text.startswith("old-vm\n" + map_line("81", 140, "kpro7") + "\n")


def test_line_with_a_moving_and_a_staying_device_is_refused(tmp_path: Path, golden: Golden) -> None:
    """81:00 moves to pro6000-vm, 71:00 is in no pool: one `;` line cannot be split."""
    cfg = "pair\n\tmap id=10de:2bb5,node=kpro6,path=0000:81:00;0000:71:00\n\n"
    problems = refused(variant(tmp_path, {pcicfg.PATH: cfg}), SPLIT)
    assert [(p.code, p.subject) for p in problems] == [
        ("mapping-line-mixed", f"{pcicfg.PATH} line 2")
    ]
    assert findings_text(problems) == golden("txt")


def test_unreadable_pci_cfg_is_refused_when_a_vm_uses_a_mapping(tmp_path: Path) -> None:
    """Without a pool mapping pci.cfg is not written, but a VM by mapping cannot be judged
    without reading it."""
    broken = KPRO6_PCI_CFG.replace("\n\npro6000\n", "\npro6000\n")
    lxc_only = KPRO6_SPEC.split('\n[[pools]]\nname = "pro6000-vm"')[0]
    lxc_only = lxc_only.replace('mapping = { id = "pro6000" }\n', "")
    assert plan(variant(tmp_path, {pcicfg.PATH: broken}), parse_spec(lxc_only))
    vm = VM140_BASE.replace("machine", "hostpci0: mapping=pro6000\nmachine")
    facts = variant(tmp_path, {pcicfg.PATH: broken, VM140: vm})
    assert [p.code for p in refused(facts, lxc_only)] == ["pcicfg-syntax"]


# --- pcicfg.patch's `drop`, on text ----------------------------------------------------

TEXT = (
    "keep\n"
    + map_line("01", 12)
    + "\tdescription stays\n\n"
    + "empty\n\tdescription no map line at all\n\n"
    + "shrink\n"
    + map_line("81", 40)
    + map_line("81", 140, "kpro7")
    + map_line("91", 41)
    + "\n"
    + "gone\n"
    + map_line("e1", 42)
    + "\n"
)


def test_patch_drops_the_named_lines_and_empty_sections() -> None:
    """Only the named map strings go; a section left without map lines goes; one that
    never had any stays; patching again changes nothing."""
    drop = {"shrink": (map_line("91", 41)[5:-1],), "gone": (map_line("e1", 42)[5:-1],)}
    patched = pcicfg.patch(TEXT, [], drop=drop)
    assert patched == TEXT.split("gone\n")[0].replace(map_line("91", 41), "")
    assert pcicfg.patch(patched, [], drop=drop) == patched
    assert pcicfg.patch(TEXT, []) == TEXT
