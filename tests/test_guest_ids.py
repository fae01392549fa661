"""A spec's VM id that is a container's, or container id that is a VM's, is refused
(planning/guest_ids.py), on this node or on another node of the cluster."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError
from pvegpu.host.discover import discover
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.facts import FileStat
from pvegpu.planning.planner import plan
from pvegpu.spec.lines import locate
from pvegpu.spec.load import parse_spec

REPO = Path(__file__).resolve().parent.parent

SPEC = """\
node = "kpro6"

[[pools]]
name = "ct"
numa_node = 0

[pools.lxc]
vmid = {ct}

[[pools]]
name = "vm"
numa_node = 1
mapping = {{ id = "pro6000-vm" }}

[pools.vfio]
vm = {{ vmid = {vm} }}
"""

VM_CONF = "boot: order=scsi0\nmachine: q35\nmemory: 4096\nname: other\n"
CT_CONF = "arch: amd64\nhostname: other\nostype: debian\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """kpro6 (CT 129, CT 131, VM 200 here) and a second node, kpro7, with CT 300 and VM 310."""
    root = tmp_path / "kpro6"
    shutil.copytree(REPO / "fixtures" / "sysfs" / "kpro6", root, symlinks=True)
    other = root / "etc/pve/nodes/kpro7"
    (other / "lxc").mkdir(parents=True)
    (other / "qemu-server").mkdir()
    (other / "lxc/300.conf").write_text(CT_CONF)
    (other / "qemu-server/310.conf").write_text(VM_CONF)
    # etc/pve/qemu-server leads into this node's directory, as pmxcfs has it.
    here = root / "etc/pve/nodes/kpro6/qemu-server"
    here.mkdir(exist_ok=True)
    (here / "200.conf").write_text(VM_CONF)
    (root / "etc/pve/nodes/kpro6/lxc/131.conf").write_text(CT_CONF)
    return root


def _refusals(root: Path, ct: int, vm: int) -> list[Diagnostic]:
    text = SPEC.format(ct=ct, vm=vm)
    with pytest.raises(PlanError) as err:
        plan(discover(root), parse_spec(text))
    return [p for p in locate(err.value.problems, text) if p.code.startswith("vmid-is-a-")]


def test_discovery_lists_the_other_nodes_guests_by_name(root: Path, tmp_path: Path) -> None:
    facts = discover(root)
    assert [s for s in facts.stats if s.path.startswith("etc/pve/nodes/")] == [
        FileStat("etc/pve/nodes/kpro7/lxc/300.conf", 0),
        FileStat("etc/pve/nodes/kpro7/qemu-server/310.conf", 0),
    ]
    # A snapshot keeps their names, and the unpacked one gives the same facts.
    taken = snapshot(root, tmp_path / "snap.tar.gz")
    assert discover(unpack(taken.path, tmp_path / "unpacked")) == facts


def test_vm_id_of_a_container_on_this_node(root: Path) -> None:
    (problem,) = _refusals(root, 129, 131)
    assert problem.code == "vmid-is-a-container"
    assert problem.subject == "pools[1].vfio.vm.vmid"
    assert problem.line == 16
    assert "etc/pve/lxc/131.conf exists" in problem.message
    assert "pvesh get /cluster/nextid" in problem.fix


def test_container_id_of_a_vm_on_this_node(root: Path) -> None:
    problems = _refusals(root, 200, 201)
    assert [(p.code, p.subject, p.line) for p in problems] == [
        ("vmid-is-a-vm", "pools[0].lxc.vmid", 8)
    ]
    assert "etc/pve/qemu-server/200.conf exists" in problems[0].message


def test_ids_of_guests_on_another_node(root: Path) -> None:
    problems = _refusals(root, 310, 300)
    assert [(p.code, p.subject) for p in problems] == [
        ("vmid-is-a-vm", "pools[0].lxc.vmid"),
        ("vmid-is-a-container", "pools[1].vfio.vm.vmid"),
    ]
    assert "etc/pve/nodes/kpro7/qemu-server/310.conf exists" in problems[0].message
    assert "etc/pve/nodes/kpro7/lxc/300.conf exists" in problems[1].message


def test_ids_of_the_same_kind_are_not_refused_here(root: Path) -> None:
    # CT 129 is a container and VM 200 a VM: no clash (the plan may refuse for others).
    text = SPEC.format(ct=129, vm=200)
    try:
        plan(discover(root), parse_spec(text))
    except PlanError as err:
        assert not [p for p in err.problems if p.code.startswith("vmid-is-a-")]
