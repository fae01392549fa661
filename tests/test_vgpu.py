"""NVIDIA vGPU on SR-IOV virtual functions (issue 29, item 4), as Proxmox hands them over.

The host is fixtures' vgpu-l40s (tests/fixture_hosts.py: `vgpu_l40s`), changed per test
and written to tmp_path: an L40S 4b:00.0 on NVIDIA's vGPU manager with 32 VFs on nvidia,
each offering the vGPU types of `L40S_VGPU_TYPES`, and a second L40S 5b:00.0 without
VFs. A vfio pool that names such a VF moves nothing: the VF stays on nvidia, its mapping
says `mdev 1`, its VM's hostpci line `mdev=nvidia-<id>`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from fixture_hosts import vgpu_l40s
from pvegpu.cli import main
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError, SpecError
from pvegpu.host.discover import discover
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.pipeline import check_host
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.rendering.review import qm_set_command, revert_steps, runbook
from pvegpu.rendering.review.apply_doc import apply_contract
from pvegpu.rendering.review.render import summary_markdown
from pvegpu.rendering.split import SCRIPT_PATH, render_split
from pvegpu.spec.load import parse_spec
from pvegpu.testing import HostSpec, VgpuSpec, write_host
from script_data import script_parts
from sriov_host import write_igpu_host

PF = "0000:4b:00.0"
VF = "0000:4b:00.4"
VF2 = "0000:4b:00.5"
OTHER = "0000:5b:00.0"
TYPE = "nvidia-1157"
VM_LINE = f"hostpci0: mapping=l40s-cad,pcie=1,mdev={TYPE}"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "vgpu-l40s.toml"


def host(
    devices: Mapping[str, dict[str, Any]] | None = None,
    *,
    drop: frozenset[str] = frozenset(),
    files: Mapping[str, str] | None = None,
) -> HostSpec:
    """vgpu-l40s with some devices changed (by address: DeviceSpec fields), some left out."""
    spec = vgpu_l40s()
    changed = tuple(
        attrs.evolve(d, **(devices or {}).get(d.address, {}))
        for d in spec.devices
        if d.address not in drop
    )
    return attrs.evolve(spec, devices=changed, files={**spec.files, **(files or {})})


def facts_of(tmp_path: Path, spec: HostSpec | None = None) -> HostFacts:
    root = tmp_path / "host"
    write_host(spec or host(), root)
    return discover(root)


def pool(
    gpus: str = '"4b:00.4"',
    *,
    vgpu_type: str | None = TYPE,
    vm: int | None = 301,
    name: str = "cad",
) -> str:
    """One vfio pool: its `gpus`, its type, its VM (None: mapping only)."""
    text = f'\n[[pools]]\nname = "{name}"\ngpus = [{gpus}]\nmapping = {{ id = "l40s-{name}" }}\n'
    if vgpu_type is not None:
        text += f'\n[pools.vfio]\nvgpu_type = "{vgpu_type}"\n'
    if vm is not None:
        text += f"\n[pools.vfio.vm]\nvmid = {vm}\n"
    elif vgpu_type is None:
        text += "\n[pools.vfio]\n"
    return text


def spec(*pools: str) -> str:
    return 'node = "pve-vdi"\n' + "".join(pools or (pool(),))


def problems_of(facts: HostFacts, text: str) -> list[Diagnostic]:
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(text, "spec.toml"))
    return list(err.value.problems)


def one(problems: list[Diagnostic], code: str) -> Diagnostic:
    hits = [p for p in problems if p.code == code]
    assert len(hits) == 1, [(p.code, p.subject) for p in problems]
    return hits[0]


@pytest.fixture(scope="module")
def example() -> Plan:
    root = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs" / "vgpu-l40s"
    return plan(discover(root), parse_spec(EXAMPLE.read_text(), str(EXAMPLE)))


# ------------------------------------------------------------------ the accepted plan


def test_vgpu_pools_move_nothing(example: Plan) -> None:
    cad, vdi, render_pool = example.pools
    for vgpu in (cad, vdi):
        assert vgpu.vgpu_type == TYPE and not vgpu.moves_to_vfio
        assert vgpu.functions == (), "a vGPU VF stays on nvidia: nothing of it moves"
        assert vgpu.driver == "nvidia"
    assert [str(g.address) for g in vdi.gpus] == [
        "0000:4b:00.5", "0000:4b:00.6", "0000:4b:00.7", "0000:4b:01.0",
    ]  # fmt: skip
    assert [str(f.address) for f in render_pool.functions] == [OTHER]
    assert example.split_pools == (render_pool,)
    # The VFs share the moved GPU's id, but nothing binds them: no "bound by address" note.
    assert "identical-device-ids" not in {f.code for f in example.findings}


def test_split_script_moves_the_whole_gpu_only(example: Plan) -> None:
    script = next(a for a in render_split(example) if a.path == SCRIPT_PATH)
    _, data = script_parts(script.content)
    assert f"\n{OTHER} 10de:26b9 0 4 nvidia\n" in data
    assert "4b:" not in data, "neither the vGPU GPU nor any of its VFs is in the script"
    assert "moves 1 GPU of render" in script.reason


def test_mapping_says_mdev_and_names_each_vf(example: Plan) -> None:
    cad, vdi, render_pool = (p.mapping for p in example.pools)
    assert cad is not None and vdi is not None and render_pool is not None
    assert (cad.mdev, vdi.mdev, render_pool.mdev) == (True, True, None)
    assert [m.path for m in cad.maps] == [VF]
    assert [m.iommugroup for m in vdi.maps] == [6, 7, 8, 9]


def test_vm_line_carries_the_type(example: Plan) -> None:
    vm = next(a for a in render(example) if a.path == "etc/pve/qemu-server/301.conf")
    assert f"\n{VM_LINE}\n" in vm.content
    assert "mdev=nvidia-1157 (Proxmox sets it on a free VF at start)" in vm.reason
    render_vm = next(a for a in render(example) if a.path == "etc/pve/qemu-server/320.conf")
    assert "\nhostpci0: mapping=l40s-render,pcie=1\n" in render_vm.content


def test_runbook_checks_the_vfs_and_binds_only_the_gpu(example: Plan) -> None:
    artifacts = render(example)
    steps = {s.title: s for s in runbook(example, artifacts)}
    check = steps["Check that the vGPU virtual functions are on nvidia"]
    assert check.output == (
        f"{VF} nvidia", f"{VF2} nvidia", "0000:4b:00.6 nvidia", "0000:4b:00.7 nvidia",
        "0000:4b:01.0 nvidia",
    )  # fmt: skip
    move = steps["Move the VM GPUs to vfio-pci, now and at every boot"]
    assert move.output == (f"{OTHER} vfio-pci",)
    assert "nvidia/current_vgpu_type" in steps["Start VM 301 when you are ready"].expect
    contract = apply_contract(example, artifacts)
    assert [f["address"] for f in contract.functions] == [OTHER]


def test_summary_says_what_happens_at_vm_start(example: Plan) -> None:
    text = summary_markdown(example, render(example))
    assert "stays on nvidia as a vGPU of type `nvidia-1157`" in text
    assert "qm set <vmid> --hostpci0 mapping=l40s-vdi,pcie=1,mdev=nvidia-1157\n" in text
    assert "`pve-nvidia-sriov@ALL.service`" in text
    # The mapping without a VM: one vGPU per VM, whatever the pool's size.
    assert qm_set_command(example.pools[1]) == (
        "qm set <vmid> --hostpci0 mapping=l40s-vdi,pcie=1,mdev=nvidia-1157"
    )


def test_only_vgpu_pools_render_no_split(tmp_path: Path) -> None:
    result = plan(facts_of(tmp_path), parse_spec(spec()))
    assert render_split(result) == ()
    artifacts = render(result)
    assert not any(a.path == SCRIPT_PATH for a in artifacts)
    titles = [s.title for s in runbook(result, artifacts)]
    assert "Move the VM GPUs to vfio-pci, now and at every boot" not in titles
    assert not any("reboot" in t for t in titles)
    assert apply_contract(result, artifacts).split_unit is None
    assert not any("host drivers" in s.title for s in revert_steps(result, artifacts))


def test_vm_to_be_created_gets_the_type_in_its_snippet(tmp_path: Path) -> None:
    result = plan(facts_of(tmp_path), parse_spec(spec(pool(vm=399))))
    snippet = next(a for a in render(result) if a.path == "snippets/qemu-server/399.conf")
    assert f"\nhostpci0: mapping=l40s-cad,pcie=1,mdev={TYPE}\n" in snippet.content


def test_raw_line_on_the_vf_becomes_the_pool_line_with_its_type(tmp_path: Path) -> None:
    """The VM's own raw line on the VF, with an older type: the mapping's line replaces it
    in place, with the pool's type; other options stay. A vGPU on a VF that stays is no
    `gpu-has-mdev-guests`: that refusal is for GPUs going to vfio-pci."""
    vm = vgpu_l40s().files["etc/pve/qemu-server/301.conf"]
    vm = vm.replace("efidisk0", f"hostpci0: {VF},mdev=nvidia-1151,rombar=0\nefidisk0")
    facts = facts_of(tmp_path, host(files={"etc/pve/qemu-server/301.conf": vm}))
    result = plan(facts, parse_spec(spec()))
    patched = next(a for a in render(result) if a.path == "etc/pve/qemu-server/301.conf")
    assert f"\nhostpci0: mapping=l40s-cad,pcie=1,mdev={TYPE},rombar=0\n" in patched.content
    assert "nvidia-1151" not in patched.content


def test_another_vm_on_the_vf_is_refused(tmp_path: Path) -> None:
    other = f"cores: 4\nhostpci0: {VF},mdev={TYPE},pcie=1\nmachine: q35\nmemory: 8192\n"
    facts = facts_of(tmp_path, host(files={"etc/pve/qemu-server/302.conf": other}))
    problem = one(problems_of(facts, spec()), "vm-takes-pool-gpu")
    assert problem.subject == "etc/pve/qemu-server/302.conf line 2"
    assert "VM 301" in problem.message


def test_a_vf_alone_in_its_slot_is_mapped_by_its_function(tmp_path: Path) -> None:
    """Five VFs: 4b:01.0 is the only function of slot 4b:01. A function-less path would
    be a multifunction device to Proxmox, which takes no vGPU on one."""
    gone = frozenset(f"0000:4b:{(4 + n) // 8:02x}.{(4 + n) % 8}" for n in range(5, 32))
    facts = facts_of(tmp_path, host(drop=gone))
    result = plan(facts, parse_spec(spec(pool('"4b:01.0"'))))
    mapping = result.pools[0].mapping
    assert mapping is not None and [m.path for m in mapping.maps] == ["0000:4b:01.0"]


def test_plan_json_names_the_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "host"
    write_host(host(), root)
    path = tmp_path / "spec.toml"
    path.write_text(spec(pool(), pool('"5b:00.0"', vgpu_type=None, vm=320, name="render")))
    assert main(["plan", "--json", "--root", str(root), "--spec", str(path)]) == 0
    cad, render_pool = json.loads(capsys.readouterr().out)["pools"]
    assert (cad["vgpu_type"], cad["driver"], cad["functions"]) == (TYPE, "nvidia", [])
    assert "vgpu_type" not in render_pool


# ------------------------------------------------------------------------ refusals


def test_a_vf_without_a_type_is_refused_with_the_types_it_offers(tmp_path: Path) -> None:
    problems = problems_of(facts_of(tmp_path), spec(pool('"4b:00.4", "4b:00.5"', vgpu_type=None)))
    problem = one(problems, "vgpu-type-missing")
    assert problem.subject == "pools[0].vfio.vgpu_type"
    assert f"virtual functions {VF}, {VF2}" in problem.message
    assert '"nvidia-1157" (NVIDIA L40S-8Q)' in problem.fix
    assert f"{VF}, {VF2} offer now" in problem.fix
    assert "vgpu-vf" not in {p.code for p in problems}


def test_a_type_the_vf_does_not_offer_is_refused(tmp_path: Path) -> None:
    problem = one(problems_of(facts_of(tmp_path), spec(pool(vgpu_type="nvidia-9999"))),
                  "vgpu-type-not-offered")  # fmt: skip
    assert problem.subject == VF
    assert "'nvidia-9999' is not a vGPU type" in problem.message
    assert "nvidia/creatable_vgpu_types" in problem.message
    assert '"nvidia-1150" (NVIDIA L40S-1B)' in problem.fix


def test_a_vf_offering_nothing_says_why(tmp_path: Path) -> None:
    """Homogeneous mode: the other VFs hold a type of another size, so this offers none."""
    facts = facts_of(tmp_path, host({VF: {"vgpu": VgpuSpec()}}))
    problem = one(problems_of(facts, spec()), "vgpu-type-not-offered")
    assert "it offers no type now" in problem.fix and "homogeneous" in problem.fix


def test_the_type_the_vf_has_now_is_taken(tmp_path: Path) -> None:
    """A VF with the type set (its VM running) lists no creatable types; Proxmox keeps the
    type it has. Its live vGPU does not refuse the pool: the VF stays where it is."""
    facts = facts_of(tmp_path, host({VF: {"vgpu": VgpuSpec(current=1157)}}))
    result = plan(facts, parse_spec(spec()))
    assert result.pools[0].vgpu_type == TYPE


def test_a_type_on_a_whole_gpu_is_refused(tmp_path: Path) -> None:
    problems = problems_of(facts_of(tmp_path), spec(pool('"5b:00.0"', vm=320)))
    problem = one(problems, "vgpu-type-not-vgpu")
    assert problem.subject == OTHER
    assert "is a whole GPU" in problem.message
    assert "remove vgpu_type" in problem.fix


def test_a_type_on_an_intel_vf_is_refused(tmp_path: Path) -> None:
    """An i915 VF has no vendor vGPU types: it goes to vfio-pci alone, without a type."""
    facts = discover(write_igpu_host(tmp_path / "igpu"))
    text = 'node = "pve-nuc"\n' + pool('"00:02.1"', vm=200, name="desktop")
    problem = one(problems_of(facts, text), "vgpu-type-not-vgpu")
    assert problem.subject == "0000:00:02.1"
    assert "a virtual function without vendor vGPU types" in problem.message


def test_a_vf_on_vfio_pci_is_refused(tmp_path: Path) -> None:
    """Moved by an older split that followed the old rule: no nvidia/ directory there."""
    vf = {"driver": "vfio-pci", "driver_override": "vfio-pci", "vgpu": None}
    problems = problems_of(facts_of(tmp_path, host({VF: vf})), spec())
    problem = one(problems, "vgpu-vf-not-on-host-driver")
    assert problem.subject == VF
    assert "on vfio-pci, not nvidia" in problem.message
    assert f"echo > /sys/bus/pci/devices/{VF}/driver_override" in problem.fix
    assert f"echo {VF} > /sys/bus/pci/devices/{VF}/driver/unbind" in problem.fix
    assert "vgpu-type-not-offered" not in {p.code for p in problems}


def test_a_vf_whose_gpu_is_off_nvidia_is_refused(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, host({PF: {"driver": None}}))
    problem = one(problems_of(facts, spec(pool('"4b:00.4", "4b:00.5"'))),
                  "vgpu-pf-not-on-host-driver")  # fmt: skip
    assert problem.subject == PF
    assert "is on no driver, not nvidia" in problem.message
    assert f"systemctl enable --now pve-nvidia-sriov@{PF}.service" in problem.fix


def test_a_pool_moving_the_gpu_of_a_vgpu_pool_is_refused(tmp_path: Path) -> None:
    text = spec(pool(), pool('"4b:00.0"', vgpu_type=None, vm=320, name="whole"))
    problem = one(problems_of(facts_of(tmp_path), text), "sriov-pf-vfs-in-use")
    assert problem.subject == PF
    assert f"{VF} is bound to nvidia and in pool 'cad'" in problem.message


def test_the_spec_takes_a_type_only_as_mdev_names_it() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(spec(pool(vgpu_type="1157")), "spec.toml")
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("spec-invalid-value", "pools[0].vfio.vgpu_type")
    assert "`nvidia-<id>`" in problem.fix


# --------------------------------------------------------------------- pvegpu check


@pytest.mark.parametrize("bound", [True, False])
def test_check_reports_a_vgpu_vf_held_by_vfio_pci(tmp_path: Path, bound: bool) -> None:
    """Bound to vfio-pci, or pinned there for the next probe: either way no vGPU type. It
    is not `sriov-autoprobe-on` (that advice is for a VF that belongs on vfio-pci)."""
    vf: dict[str, Any] = {"driver_override": "vfio-pci"}
    if bound:
        vf |= {"driver": "vfio-pci", "vgpu": None}
    root = tmp_path / "host"
    write_host(host({VF: vf}), root)
    checks = check_host(root)[2]
    found = [f for f in checks if f.code.startswith(("sriov-", "vgpu-"))]
    (finding,) = found
    assert (finding.code, finding.subject) == ("vgpu-vf-on-vfio", VF)
    assert finding.message.startswith("is on vfio-pci" if bound else "is pinned to vfio-pci")
    assert f"echo {VF} > /sys/bus/pci/drivers_probe" in finding.message
    assert (f"echo {VF} > /sys/bus/pci/drivers/vfio-pci/unbind" in finding.message) is bound


def test_a_mapping_shared_by_nodes_has_one_vgpu_type() -> None:
    """Two nodes' pools on one mapping id: one vGPU type, or none, for all its devices."""
    text = 'nodes = ["pve-vdi", "pve-vdi2"]\n'
    text += pool(name="a").replace('name = "a"', 'name = "a"\nnode = "pve-vdi"')
    text += (
        pool(vgpu_type="nvidia-1160", name="b")
        .replace('name = "b"', 'name = "b"\nnode = "pve-vdi2"')
        .replace("l40s-b", "l40s-a")
        .replace("vmid = 301", "vmid = 302")
    )
    with pytest.raises(SpecError) as err:
        parse_spec(text, "cluster.toml")
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("spec-mapping-vgpu-mixed", "pools[1].mapping.id")
    assert "of vGPU type 'nvidia-1157' in pools[0] and of 'nvidia-1160' here" in problem.message
    same = text.replace("nvidia-1160", TYPE)
    assert len(parse_spec(same, "cluster.toml").pools) == 2


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("mapping=l40s-vdi,pcie=1", "without mdev=: at its start Proxmox would bind the VF"),
        ("mapping=l40s-vdi,pcie=1,mdev=nvidia-1150", "with mdev=nvidia-1150, not the pool's"),
        (f"{VF2},mdev=nvidia-1150", "with mdev=nvidia-1150, not the pool's"),
        (f"mapping=l40s-vdi,pcie=1,mdev={TYPE}", None),
    ],
)
def test_a_vm_on_a_vgpu_mapping_needs_the_pool_type(
    tmp_path: Path, value: str, says: str | None
) -> None:
    """A pool without a VM of its own lends its VFs to any VM, with its type only."""
    vm = f"cores: 4\nhostpci0: {value}\nmachine: q35\nmemory: 8192\n"
    facts = facts_of(tmp_path, host(files={"etc/pve/qemu-server/305.conf": vm}))
    text = spec(pool('"4b:00.5", "4b:00.6"', vm=None, name="vdi"))
    if says is None:
        assert plan(facts, parse_spec(text)).pools[0].vgpu_type == TYPE
        return
    problem = one(problems_of(facts, text), "vgpu-vm-line-type")
    assert problem.subject == "etc/pve/qemu-server/305.conf line 2"
    assert says in problem.message and "pool 'vdi'" in problem.message
    kept = value.rsplit(",mdev=", 1)[0]
    assert problem.fix.startswith(f"qm set 305 --hostpci0 {kept},mdev={TYPE}")
