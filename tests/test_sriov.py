"""SR-IOV (issue 19, item 1): discovery of PFs and VFs, `discover`, and the plan's rules.

The host is an Intel iGPU box built into tmp_path (tests/sriov_host.py): PF 0000:00:02.0
on i915 with up to 7 VFs. A VF is not a GPU: `count` never takes one, a pool may name one
by address, and a PF does not go to vfio-pci while its VFs are in use.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from pvegpu.cli import main
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import DiscoveryError, PlanError
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json, facts_to_json
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.pci import PciAddress
from pvegpu.pipeline import check_host
from pvegpu.planning.planner import plan
from pvegpu.planning.sriov import check_findings
from pvegpu.rendering.split import render_split
from pvegpu.spec.load import parse_spec
from sriov_host import NODE, PF, SPEC, TOTAL_VFS, VM_200, vf_address, write_igpu_host

PF_ADDRESS = PciAddress.parse(PF)


def facts_of(tmp_path: Path, vfs: int = TOTAL_VFS, **options: object) -> HostFacts:
    return discover(write_igpu_host(tmp_path / "host", vfs, **options))


def pool_spec(selector: str, *, vfio: bool = True, vmid: int = 200) -> str:
    """One pool selecting by `selector` (a TOML line), for a VM (with mapping) or the host."""
    head = f'node = "{NODE}"\n\n[[pools]]\nname = "main"\n{selector}\n'
    if vfio:
        return head + f'mapping = {{ id = "main-gpu" }}\n\n[pools.vfio.vm]\nvmid = {vmid}\n'
    return head + "\n[pools.lxc]\nvmid = 300\n"


def problems_of(facts: HostFacts, spec: str) -> list[Diagnostic]:
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(spec, "spec.toml"))
    return list(err.value.problems)


# ------------------------------------------------------------------------ discovery


def test_vfs_are_functions_of_their_pf_not_gpus(tmp_path: Path) -> None:
    facts = facts_of(tmp_path)
    assert [str(g.address) for g in facts.gpus] == [PF], "a VF is not a GPU"
    pf = facts.function(PF_ADDRESS)
    assert pf is not None and pf.sriov is not None
    assert (pf.sriov.total_vfs, pf.sriov.num_vfs, pf.sriov.drivers_autoprobe) == (7, 7, True)
    assert [str(a) for a in pf.sriov.vfs] == [vf_address(i) for i in range(7)]
    vfs = facts.virtual_functions(PF_ADDRESS)
    assert [f.physfn for f in vfs] == [PF_ADDRESS] * 7
    assert all(f.sriov is None for f in vfs)
    # Same slot, other groups: never the PF's companions.
    assert facts.gpus[0].companions == ()


def test_pf_before_its_vfs_exist(tmp_path: Path) -> None:
    """At boot (or with sriov_numvfs 0) the PF has the capability and no VFs."""
    facts = facts_of(tmp_path, 0, autoprobe=False)
    pf = facts.function(PF_ADDRESS)
    assert pf is not None and pf.sriov is not None
    assert (pf.sriov.total_vfs, pf.sriov.num_vfs, pf.sriov.drivers_autoprobe) == (7, 0, False)
    assert pf.sriov.vfs == () and facts.virtual_functions(PF_ADDRESS) == ()


def test_facts_json_keys_only_with_sriov(tmp_path: Path) -> None:
    """physfn / sriov appear on SR-IOV functions only, and the document reads back."""
    facts = facts_of(tmp_path, 2)
    text = facts_to_json(facts)
    doc = json.loads(text)
    by_address = {f["address"]: f for f in doc["functions"]}
    assert by_address[PF]["sriov"] == {
        "total_vfs": 7,
        "num_vfs": 2,
        "drivers_autoprobe": True,
        "vfs": [vf_address(0), vf_address(1)],
    }
    assert by_address[vf_address(1)]["physfn"] == PF
    assert "physfn" not in by_address[PF] and "sriov" not in by_address[vf_address(0)]
    assert "sriov" not in by_address["0000:00:14.0"]
    assert facts_from_json(text) == facts


@pytest.mark.parametrize(
    ("file", "text", "code", "says"),
    [
        ("sriov_numvfs", "8\n", "bad-value", "more than sriov_totalvfs (7)"),
        ("sriov_totalvfs", "seven\n", "bad-value", "expected a number"),
        ("sriov_drivers_autoprobe", "2\n", "bad-value", "expected 0 or 1"),
    ],
)
def test_malformed_sriov_attribute(
    tmp_path: Path, file: str, text: str, code: str, says: str
) -> None:
    root = write_igpu_host(tmp_path / "host", 3)
    (root / "sys/bus/pci/devices" / PF / file).write_text(text)
    with pytest.raises(DiscoveryError) as err:
        discover(root)
    (problem,) = err.value.problems
    assert problem.code == code
    assert problem.subject == f"sys/bus/pci/devices/{PF}/{file}"
    assert says in problem.message


def test_missing_virtfn_link(tmp_path: Path) -> None:
    root = write_igpu_host(tmp_path / "host", 3)
    (root / "sys/bus/pci/devices" / PF / "virtfn2").unlink()
    with pytest.raises(DiscoveryError) as err:
        discover(root)
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == (
        "missing-file",
        f"sys/bus/pci/devices/{PF}/virtfn2",
    )
    assert "sriov_numvfs says 3" in problem.message


def test_dangling_physfn_link(tmp_path: Path) -> None:
    root = write_igpu_host(tmp_path / "host", 1)
    link = root / "sys/bus/pci/devices" / vf_address(0) / "physfn"
    link.unlink()
    link.symlink_to("../0000:00:09.0")
    with pytest.raises(DiscoveryError) as err:
        discover(root)
    (problem,) = err.value.problems
    assert problem.code == "dangling-link"
    assert problem.subject == f"sys/bus/pci/devices/{vf_address(0)}/physfn"


def test_discover_table_shows_vfs_under_their_pf(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    golden: Callable[[str], SnapshotAssertion],
) -> None:
    root = write_igpu_host(tmp_path / "host", 3, vf_driver={0: "vfio-pci", 1: "i915"})
    assert main(["discover", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert [r[:2] for r in rows] == [
        ["0", PF],
        ["0.vf0", vf_address(0)],
        ["0.vf1", vf_address(1)],
        ["0.vf2", vf_address(2)],
    ]
    assert "SR-IOV 00:02.0: 3 of 7 VFs, sriov_drivers_autoprobe 1" in out
    assert out == golden("txt")


def test_discover_json_lists_vfs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_igpu_host(tmp_path / "host", 2)
    assert main(["discover", "--json", "--root", str(root)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [g["address"] for g in doc["gpus"]] == [PF]
    pf = next(f for f in doc["functions"] if f["address"] == PF)
    assert pf["sriov"]["vfs"] == [vf_address(0), vf_address(1)]


# ------------------------------------------------------------------------- planning


def test_count_counts_gpus_never_vfs(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, vf_driver=None)
    (problem,) = [
        p for p in problems_of(facts, pool_spec("count = 2")) if p.code != "sriov-pf-vfs-in-use"
    ]
    assert (problem.code, problem.subject) == ("not-enough-gpus", "pools[0].count")
    assert "only 1 are not in another pool" in problem.message
    one = plan(facts, parse_spec(pool_spec("count = 1")))
    assert [str(g.address) for g in one.pools[0].gpus] == [PF]
    assert [str(f.address) for f in one.pools[0].functions] == [PF], "its VFs do not go along"


def _vf_plan(tmp_path: Path) -> Plan:
    return plan(facts_of(tmp_path), parse_spec(SPEC, "desktop.toml"))


def test_a_pool_names_a_vf_and_takes_only_its_group(tmp_path: Path) -> None:
    """The VF goes to vfio-pci alone: the PF and its six siblings stay where they are."""
    result = _vf_plan(tmp_path)
    (pool,) = result.pools
    assert [str(g.address) for g in pool.gpus] == [vf_address(0)]
    assert [str(f.address) for f in pool.functions] == [vf_address(0)]
    assert pool.mapping is not None
    (line,) = pool.mapping.maps
    assert (line.path, line.iommugroup, line.id) == (vf_address(0), 20, "8086:a7a0")
    script = next(a for a in render_split(result) if a.path.endswith("pvegpu-vfio-split"))
    data = script.content.split("\nplanned_vf()")[0]
    assert f"\n{vf_address(0)} 8086:a7a0 -1 {PF} i915\n" in data
    assert f"\n{PF} 8086:a7a0 -1 1 i915\n" in data
    for sibling in range(1, TOTAL_VFS):
        assert vf_address(sibling) not in data


def test_vfio_pool_names_a_vf_before_it_exists_is_refused(tmp_path: Path) -> None:
    """Planned where the VF is not created: discovery cannot check it, so it is refused."""
    (problem,) = problems_of(facts_of(tmp_path, 0), SPEC)
    assert (problem.code, problem.subject) == ("address-not-on-host", "pools[0].gpus[0]")


def test_vf_in_a_container_pool_is_refused(tmp_path: Path) -> None:
    facts = facts_of(tmp_path)
    problems = problems_of(facts, pool_spec('gpus = ["00:02.3"]', vfio=False))
    (problem,) = [p for p in problems if p.code == "sriov-vf-in-container"]
    assert problem.subject == vf_address(2)
    assert "give the container the PF (00:02.0)" in problem.fix


def test_pf_to_vfio_while_its_vfs_are_bound_is_refused(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, 3, vf_driver={0: None, 1: "i915", 2: "vfio-pci"})
    (problem,) = problems_of(facts, pool_spec('gpus = ["00:02.0"]'))
    assert (problem.code, problem.subject) == ("sriov-pf-vfs-in-use", PF)
    assert f"{vf_address(1)} is bound to i915" in problem.message
    assert f"{vf_address(2)} is bound to vfio-pci" in problem.message
    assert vf_address(0) not in problem.message, "an unused VF is not in use"
    assert f"/sys/bus/pci/devices/{PF}/sriov_numvfs" in problem.fix


def test_pf_to_vfio_while_a_vm_names_its_vf_is_refused(tmp_path: Path) -> None:
    vm = VM_200 + f"hostpci0: {vf_address(1)},pcie=1\n"
    facts = facts_of(tmp_path, 2, vf_driver=None, files={"etc/pve/qemu-server/201.conf": vm})
    (problem,) = problems_of(facts, pool_spec('gpus = ["00:02.0"]'))
    assert problem.code == "sriov-pf-vfs-in-use"
    assert f"{vf_address(1)} is named by a VM's hostpci line" in problem.message
    assert vf_address(0) not in problem.message


def test_pf_to_vfio_while_a_mapping_names_its_vf_is_refused(tmp_path: Path) -> None:
    cfg = f"vf\n\tmap id=8086:a7a0,iommugroup=21,node={NODE},path={vf_address(1)}\n"
    facts = facts_of(tmp_path, 2, vf_driver=None, files={"etc/pve/mapping/pci.cfg": cfg})
    problems = problems_of(facts, pool_spec('gpus = ["00:02.0"]'))
    hit = [p for p in problems if p.code == "sriov-pf-vfs-in-use"]
    assert len(hit) == 1 and f"{vf_address(1)} is named by" in hit[0].message


def test_pf_and_its_vf_in_two_pools_is_refused(tmp_path: Path) -> None:
    spec = pool_spec('gpus = ["00:02.0"]') + (
        '\n[[pools]]\nname = "q"\ngpus = ["00:02.2"]\nmapping = { id = "second-gpu" }\n\n'
        "[pools.vfio.vm]\nvmid = 201\n"
    )
    facts = facts_of(tmp_path, 2, vf_driver=None)
    problems = problems_of(facts, spec)
    hit = [p for p in problems if p.code == "sriov-pf-vfs-in-use"]
    assert len(hit) == 1 and f"{vf_address(1)} is in pool 'q'" in hit[0].message


def test_pf_to_vfio_with_unused_vfs_warns_they_go_away(tmp_path: Path) -> None:
    result = plan(
        facts_of(tmp_path, 2, vf_driver=None), parse_spec(pool_spec('gpus = ["00:02.0"]'))
    )
    (finding,) = [f for f in result.findings if f.code == "sriov-vfs-removed"]
    assert finding.subject == PF
    assert f"({vf_address(0)}, {vf_address(1)}) go away" in finding.message


def test_vf_sharing_its_pf_group_is_refused_not_a_companion(tmp_path: Path) -> None:
    """Without ACS a VF can land in its PF's group: it is no companion, so the PF's pool
    refuses the group (moving it would take the VF), and the VF's pool the PF."""
    root = write_igpu_host(tmp_path / "host", 1, vf_driver=None)
    vf = root / "sys/bus/pci/devices" / vf_address(0)
    group = root / "sys/kernel/iommu_groups"
    (group / "20/devices" / vf_address(0)).unlink()
    (vf / "iommu_group").unlink()
    (vf / "iommu_group").symlink_to("../../../kernel/iommu_groups/1")
    (group / "1/devices" / vf_address(0)).symlink_to(
        f"../../../../devices/pci0000:00/{vf_address(0)}"
    )
    facts = discover(root)
    assert facts.gpus[0].companions == ()
    codes = {p.code for p in problems_of(facts, pool_spec('gpus = ["00:02.0"]'))}
    assert "foreign-device-in-group" in codes
    codes = {p.code for p in problems_of(facts, SPEC)}
    assert "foreign-device-in-group" in codes


@pytest.mark.parametrize("autoprobe", [True, False])
def test_check_warns_of_a_pinned_vf_whose_pf_autoprobes(tmp_path: Path, autoprobe: bool) -> None:
    """`pvegpu check` after a split: VF 0 on vfio-pci by override. With autoprobe back on
    (the boot unit did not run), re-created VFs go to i915 first: a warning."""
    root = write_igpu_host(
        tmp_path / "host",
        2,
        vf_driver={0: "vfio-pci", 1: "i915"},
        vf_override={0: "vfio-pci"},
        autoprobe=autoprobe,
    )
    found = [f for f in check_host(root)[2] if f.code.startswith("sriov-")]
    if autoprobe:
        (finding,) = found
        assert (finding.code, finding.subject) == ("sriov-autoprobe-on", PF)
        assert "pvegpu-vfio-split bind" in finding.message
    else:
        assert found == []


def test_check_refuses_a_pf_on_vfio_with_vfs_in_use(tmp_path: Path) -> None:
    root = write_igpu_host(tmp_path / "host", 1, pf_driver="vfio-pci", vf_driver="i915")
    facts = discover(root)
    (finding,) = [f for f in check_findings(facts) if f.code == "sriov-pf-vfs-in-use"]
    assert finding.subject == PF
    assert f"{vf_address(0)} is bound to i915" in finding.message


def test_snapshot_keeps_the_sriov_facts(tmp_path: Path) -> None:
    """`pvegpu snapshot` archives the sriov_* files and physfn/virtfnN links it read:
    the unpacked archive discovers to the same facts."""
    root = write_igpu_host(tmp_path / "host", 3, vf_driver={0: None, 1: "i915", 2: "i915"})
    result = snapshot(root, tmp_path / "s.tar.gz")
    assert result.error is None
    unpacked = unpack(result.path, tmp_path / "unpacked")
    assert discover(unpacked) == discover(root) == result.facts
    pf = discover(unpacked).function(PF_ADDRESS)
    assert pf is not None and pf.sriov is not None and len(pf.sriov.vfs) == 3
