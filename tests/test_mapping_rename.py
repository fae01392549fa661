"""A mapping renamed in the spec (issue 17, item 6): the pool's own VM follows its GPUs.

The pool's GPUs leave their old mapping for the spec's new id, and the bundle removes the
old mapping when nothing is left in it. The VM's line on the old id is converted in
place (same index, every option kept), never left on the deleted id next to a second
line; a line on an old mapping that still hands over other devices is refused, as is a
pending change on one that is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

import fixture_hosts
from bundled import FIXTURES, copy_tree, spec_path
from pvegpu.cli import main
from pvegpu.model.artifact import REVERT_BUNDLE
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.plan import Plan
from pvegpu.pci import CpuList
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import pcicfg, qemuconf
from pvegpu.pvefiles.guestconf import split_sections
from pvegpu.rendering.registry import render
from pvegpu.spec.load import parse_spec
from strategies import MAPPED_PATHS, MAPPING, GuestConf, vm_configs
from test_whole_host_guests import artifact, of, refused, text, variant

Golden = Callable[[str], SnapshotAssertion]

VM110 = "etc/pve/qemu-server/110.conf"
VM140 = "etc/pve/qemu-server/140.conf"
A4000_MAP = "\tmap id=10de:24b0,iommugroup=6,node=pve-ws,path=0000:39:00,subsystem-id=10de:14ad\n"
RTX3090_MAP = "\tmap id=10de:2204,iommugroup=4,node=pve-ws,path=0000:17:00,subsystem-id=1458:403b\n"
# What the workstation looks like after its example was applied: mapping a4000, and
# VM 110 on it with the options its raw line had.
APPLIED_PCI_CFG = f"a4000\n{A4000_MAP}\tdescription RTX A4000 for the Windows CAD VM\n\n"
SNAPSHOT = "\n[before-rename]\nhostpci0: mapping=a4000,pcie=1,x-vga=1\nsnaptime: 1700000000\n"
WORKSTATION_SPEC = spec_path("workstation").read_text()
RENAMED = WORKSTATION_SPEC.replace('id = "a4000"', 'id = "cad-gpu"')
assert RENAMED != WORKSTATION_SPEC


def _vm110(hostpci: str = "hostpci0: mapping=a4000,pcie=1,x-vga=1", rest: str = "") -> str:
    """VM 110 of the workstation fixture with `hostpci` instead of its raw line."""
    vm = fixture_hosts.workstation().files[VM110]
    old = "hostpci0: 0000:39:00,pcie=1,x-vga=1\n"
    assert old in vm
    return vm.replace(old, f"{hostpci}\n") + rest


def workstation(where: Path, pci_cfg: str = APPLIED_PCI_CFG, vm: str | None = None) -> HostFacts:
    files = {pcicfg.PATH: pci_cfg, VM110: _vm110() if vm is None else vm}
    return variant(where, files, fixture_hosts.workstation)


def hostpci(config: str) -> list[str]:
    """The main section's hostpci lines."""
    main_text = split_sections(config)[0].text
    return [line for line in main_text.splitlines() if line.startswith("hostpci")]


def rendered(result: Plan, path: str) -> str:
    return artifact(render(result), path).content


def test_renamed_mapping_converts_the_vm_line_in_place(tmp_path: Path, golden: Golden) -> None:
    """The issue's case: hostpci0 moves from a4000 to cad-gpu with pcie and x-vga, no
    second line, nothing left on a4000 (which the bundle removes); the snapshot is
    history and keeps its line; the revert brings the config back as it was."""
    facts = workstation(tmp_path, vm=_vm110(rest=SNAPSHOT))
    result = plan(facts, parse_spec(RENAMED))
    artifacts = render(result)
    vm = artifact(artifacts, VM110)
    assert hostpci(vm.content) == ["hostpci0: mapping=cad-gpu,pcie=1,x-vga=1"]
    assert vm.content.endswith(SNAPSHOT)
    assert [s.id for s in pcicfg.parse(artifact(artifacts, pcicfg.PATH).content)] == ["cad-gpu"]
    assert artifact(artifacts, VM110, REVERT_BUNDLE).content == _vm110(rest=SNAPSHOT)
    assert vm.reason.endswith(
        "; `hostpci0: mapping=a4000,pcie=1,x-vga=1` converted to "
        "`hostpci0: mapping=cad-gpu,pcie=1,x-vga=1` (mapping a4000, which the GPUs leave), "
        "options kept"
    )
    # The VM is the pool's: told what happens to its line, not that it no longer starts.
    assert not of(result.findings, "vm-mapping-shrinks")
    listed = of(result.findings, "vm-hostpci-converted", "mapping-devices-moved")
    assert [(f.code, f.subject) for f in listed] == [
        ("vm-hostpci-converted", VM110),
        ("mapping-devices-moved", f"{pcicfg.PATH} mapping 'a4000'"),
    ]
    assert text(listed) == golden("txt")


def test_converted_config_plans_clean_again(tmp_path: Path) -> None:
    """Once applied, the next plan leaves the VM config as it is and converts nothing."""
    first = plan(workstation(tmp_path), parse_spec(RENAMED))
    cfg, vm = rendered(first, pcicfg.PATH), rendered(first, VM110)
    again = plan(workstation(tmp_path, cfg, vm), parse_spec(RENAMED))
    assert rendered(again, VM110) == vm
    assert again.pools[0].vm is not None and again.pools[0].vm.old_mappings == ()
    assert not of(again.findings, "vm-hostpci-converted")


def test_unrenamed_mapping_converts_nothing(tmp_path: Path) -> None:
    """The same host planned with the id it already has: no old mapping, no finding."""
    result = plan(workstation(tmp_path), parse_spec(WORKSTATION_SPEC))
    assert result.pools[0].vm is not None and result.pools[0].vm.old_mappings == ()
    assert rendered(result, VM110) == _vm110()
    assert not of(result.findings, "vm-hostpci-converted")


KPRO6_SPLIT_SPEC = """\
node = "kpro6"
[[pools]]
name = "vm"
numa_node = 1
mapping = { id = "snp-gpus" }
vfio = { vm = { vmid = 140, numa = false } }
"""
# kpro6-split's VM GPUs are mapping pro6000-vm (81, 91, e1, f1); the spec renames it.
VM140_LINES = (
    "hostpci0: mapping=pro6000-vm,pcie=1,device-id=0x2bb5\n"
    "hostpci1: 0000:91:00,pcie=1,rombar=0,romfile=pro6000.rom\n"
    "hostpci10: mapping=pro6000-vm,x-vga=1,driver=vfio\n"
    "hostpci5: mapping=nic-cx6,pcie=1\n"
)


def test_old_mapping_and_raw_lines_keep_their_indices_and_options(tmp_path: Path) -> None:
    """Lines on the old id and by raw address alike become the new mapping's lines on
    their own indices, device-id/rombar/romfile/x-vga/driver kept; another mapping
    stays. (An `mdev=` line is refused instead: test_mdev_mig.py.)"""
    # cpu: host: four 128 GiB BARs need more than the default type's 40 address bits.
    base = "#SNP VM\ncores: 8\ncpu: host\nmachine: q35\nmemory: 65536\nname: snp\nostype: l26\n"
    config = base.replace("machine: q35\n", VM140_LINES + "machine: q35\n")
    facts = variant(tmp_path, {VM140: config}, fixture_hosts.kpro6_split)
    result = plan(facts, parse_spec(KPRO6_SPLIT_SPEC))
    patched = artifact(render(result), VM140)
    assert hostpci(patched.content) == [
        "hostpci0: mapping=snp-gpus,pcie=1,device-id=0x2bb5",
        "hostpci1: mapping=snp-gpus,pcie=1,rombar=0,romfile=pro6000.rom",
        "hostpci10: mapping=snp-gpus,pcie=1,x-vga=1,driver=vfio",
        "hostpci2: mapping=snp-gpus,pcie=1",
        "hostpci5: mapping=nic-cx6,pcie=1",
    ]
    converted = of(result.findings, "vm-hostpci-converted")
    assert [f.message.split("`")[1] for f in converted] == [
        "hostpci0: mapping=pro6000-vm,pcie=1,device-id=0x2bb5",
        "hostpci10: mapping=pro6000-vm,x-vga=1,driver=vfio",
    ]
    assert "raw host address of the pool's GPU on hostpci1 replaced" in patched.reason


def test_old_mapping_split_between_two_vm_pools(tmp_path: Path) -> None:
    """pro6000-vm's four GPUs go to two pools of their own: it goes, and each VM's line
    on it follows that VM's GPUs."""
    spec = (
        'node = "kpro6"\n'
        '[[pools]]\nname = "a"\ngpus = ["81:00.0", "91:00.0"]\nmapping = { id = "vm-a" }\n'
        "vfio = { vm = { vmid = 140 } }\n"
        '[[pools]]\nname = "b"\ngpus = ["e1:00.0", "f1:00.0"]\nmapping = { id = "vm-b" }\n'
        "vfio = { vm = { vmid = 141 } }\n"
    )
    vm = "cores: 4\nhostpci0: mapping=pro6000-vm,x-vga=1\nmachine: q35\nmemory: 4096\n"
    files = {VM140: vm, "etc/pve/qemu-server/141.conf": vm}
    result = plan(variant(tmp_path, files, fixture_hosts.kpro6_split), parse_spec(spec))
    assert hostpci(rendered(result, VM140)) == [
        "hostpci0: mapping=vm-a,pcie=1,x-vga=1",
        "hostpci1: mapping=vm-a,pcie=1",
    ]
    assert hostpci(rendered(result, "etc/pve/qemu-server/141.conf"))[0] == (
        "hostpci0: mapping=vm-b,pcie=1,x-vga=1"
    )
    ids = [s.id for s in pcicfg.parse(rendered(result, pcicfg.PATH))]
    assert "pro6000-vm" not in ids


def test_old_mapping_that_keeps_other_devices_is_refused(tmp_path: Path, golden: Golden) -> None:
    """a4000 also hands over the 3090, which no pool takes: converting the line would take
    it from the VM, keeping it would pass it next to the A4000; the admin decides."""
    cfg = f"a4000\n{A4000_MAP}{RTX3090_MAP}\tdescription both\n\n"
    problems = refused(workstation(tmp_path, cfg), RENAMED)
    assert [(p.code, p.subject) for p in problems] == [("vm-old-mapping-shared", f"{VM110} line 7")]
    assert "qm set 110 --delete hostpci0" in problems[0].fix
    assert text(problems) == golden("txt")


def test_pending_change_on_a_removed_old_mapping_is_refused(tmp_path: Path) -> None:
    """At the next start the pending line would name a mapping the bundle removes."""
    vm = _vm110(rest="\n[PENDING]\nhostpci3: mapping=a4000\n")
    problems = refused(workstation(tmp_path, vm=vm), RENAMED)
    assert [(p.code, p.subject, p.fix) for p in problems] == [
        (
            "vm-pending-old-mapping",
            f"{VM110} line 19",
            "revert it (qm set 110 --revert hostpci3), then run pvegpu again",
        )
    ]


@pytest.mark.parametrize("command", ["plan", "render"])
def test_refusal_exits_5_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """On the command line: exit 5, the line and its fix printed, no --out directory."""
    root = copy_tree(FIXTURES / "workstation", tmp_path / "root")
    (root / pcicfg.PATH).parent.mkdir(parents=True, exist_ok=True)
    (root / pcicfg.PATH).write_text(f"a4000\n{A4000_MAP}{RTX3090_MAP}\n")
    (root / VM110).write_text(_vm110())
    spec = tmp_path / "renamed.toml"
    spec.write_text(RENAMED)
    out = tmp_path / "out"
    extra = ["--out", str(out)] if command == "render" else []
    code = main([command, "--root", str(root), "--spec", str(spec), *extra])
    err = capsys.readouterr().err
    assert code == 5
    assert f"  {VM110} line 7: `hostpci0: mapping=a4000,pcie=1,x-vga=1` names" in err
    assert "[vm-old-mapping-shared]" in err
    assert err.endswith("nothing was written.\n")
    assert not out.exists()


# --- qemuconf.patch_hostpci's `old`, on text -------------------------------------------

TEXT = (
    "cores: 4\n"
    "hostpci0: x-vga=1,mapping=old,rombar=0\n"
    "hostpci1: mapping=other,pcie=1\n"
    "hostpci2: mapping=old,pcie=1,mdev=nvidia-63\n"
    "machine: q35\n"
    "memory: 4096\n"
)


def test_patch_converts_lines_of_the_old_mapping() -> None:
    """Each line on `old` becomes a line of the mapping on its index, options kept, and
    is listed with what it was; another mapping's line stays."""
    patched = qemuconf.patch_hostpci(TEXT, "new", 2, old=("old",))
    assert hostpci(patched.text) == [
        "hostpci0: mapping=new,pcie=1,x-vga=1,rombar=0",
        "hostpci1: mapping=other,pcie=1",
        "hostpci2: mapping=new,pcie=1,mdev=nvidia-63",
    ]
    assert [(c.before, c.after, c.old_mapping) for c in patched.conversions] == [
        (
            "hostpci0: x-vga=1,mapping=old,rombar=0",
            "hostpci0: mapping=new,pcie=1,x-vga=1,rombar=0",
            "old",
        ),
        (
            "hostpci2: mapping=old,pcie=1,mdev=nvidia-63",
            "hostpci2: mapping=new,pcie=1,mdev=nvidia-63",
            "old",
        ),
    ]
    assert patched.converted == ()  # no raw-address line among them
    again = qemuconf.patch_hostpci(patched.text, "new", 2, old=("old",))
    assert (again.text, again.conversions) == (patched.text, ())


def test_patch_without_old_leaves_the_old_mapping_alone() -> None:
    """Without `old` a line on another mapping id is not the pool's (the pre-fix output:
    a second line next to the old one)."""
    patched = qemuconf.patch_hostpci(TEXT, "new", 1)
    assert "hostpci0: x-vga=1,mapping=old,rombar=0" in hostpci(patched.text)
    assert patched.conversions == ()


def test_old_mapping_line_on_a_pending_index_moves_with_its_options() -> None:
    """A pending change on the old line's index wins at the next start: the converted
    line takes a free index, and the conversion says so."""
    text_ = "hostpci1: mapping=old,x-vga=1\n\n[PENDING]\nhostpci1: mapping=other\n"
    patched = qemuconf.patch_hostpci(text_, "new", 1, old=["old"])
    assert hostpci(patched.text) == ["hostpci0: mapping=new,x-vga=1"]
    (conversion,) = patched.conversions
    assert (conversion.before, conversion.after) == (
        "hostpci1: mapping=old,x-vga=1",
        "hostpci0: mapping=new,x-vga=1",
    )


def test_hostpci_problems_count_old_lines_as_the_mappings() -> None:
    """Fifteen other lines and one on `old`: with `old` the old line's index is reused,
    without it the sixteenth index is missing (vm-hostpci-full)."""
    others = "".join(f"hostpci{i}: mapping=other{i}\n" for i in range(1, 16))
    text_ = "hostpci0: mapping=old\n" + others
    assert (
        GuestConfig(ConfigFile("etc/pve/qemu-server/100.conf", text_)).hostpci_problems(
            "new", 1, old=("old",)
        )
        == ()
    )
    (problem,) = GuestConfig(ConfigFile("etc/pve/qemu-server/100.conf", text_)).hostpci_problems(
        "new", 1
    )
    assert problem.code == "vm-hostpci-full"


@given(vm_configs(), st.integers(1, 6), st.booleans())
def test_old_mapping_lines_are_patched_like_the_mappings_own(
    conf: GuestConf, count: int, numa: bool
) -> None:
    """Generated configs whose lines of the mapping name it by an old id instead: patched
    with that id in `old`, the result is the one the config on the mapping itself gets,
    no main-section line is left on the old id, and each conversion says where it came from."""
    own = f"mapping={MAPPING}"
    renamed = attrs.evolve(
        conf, main=tuple((line.replace(own, "mapping=was"), t) for line, t in conf.main)
    )
    pin = qemuconf.NumaPin(1, CpuList.parse("32-63")) if numa else None
    want = qemuconf.patch_hostpci(conf.text, MAPPING, count, numa=pin, mapped=MAPPED_PATHS)
    got = qemuconf.patch_hostpci(
        renamed.text, MAPPING, count, numa=pin, mapped=MAPPED_PATHS, old=("was",)
    )
    assert (got.text, got.indices, got.converted) == (want.text, want.indices, want.converted)
    assert "mapping=was" not in split_sections(got.text)[0].text
    renamed_lines = [line for line, _ in renamed.main]
    for c in got.conversions:
        assert c.before in renamed_lines and c.after.startswith("hostpci")
        assert (c.old_mapping == "was") == ("mapping=was" in c.before)


# --- a second VM on the mapping the bundle removes (issue 29, item 7) ------------------

VM111 = "etc/pve/qemu-server/111.conf"
SECOND_VM = "cores: 4\nhostpci0: mapping=a4000,pcie=1\nhostpci2: mapping=a4000\nmachine: q35\n"


def _second_vm(tmp_path: Path, config: str) -> Plan:
    files = {pcicfg.PATH: APPLIED_PCI_CFG, VM110: _vm110(), VM111: config}
    return plan(variant(tmp_path, files, fixture_hosts.workstation), parse_spec(RENAMED))


def test_second_vm_on_the_removed_mapping_is_told_it_does_not_start(
    tmp_path: Path, golden: Golden
) -> None:
    """VM 110 follows its GPU to cad-gpu; VM 111's lines still name a4000, which the
    bundle removes: a warning on VM 111 with one command that removes both lines."""
    result = _second_vm(tmp_path, SECOND_VM)
    (finding,) = of(result.findings, "vm-mapping-shrinks")
    assert finding.subject == VM111
    assert "VM 111 does not start while a hostpci line names a missing mapping" in finding.message
    assert "(qm set 111 --delete hostpci0,hostpci2)" in finding.message
    assert VM111 not in {a.path for a in render(result)}  # pvegpu does not edit VM 111
    assert text([finding]) == golden("txt")


def test_second_vm_pending_line_on_the_removed_mapping_is_named(tmp_path: Path) -> None:
    """A pending change of VM 111 that adds a line on a4000 names the missing mapping at
    its next start: listed with the revert (it was passed over); a snapshot is history."""
    config = "cores: 4\nmachine: q35\n\n[PENDING]\nhostpci1: mapping=a4000\n"
    config += "\n[before]\nhostpci0: mapping=a4000\nsnaptime: 1700000000\n"
    (finding,) = of(_second_vm(tmp_path, config).findings, "vm-mapping-shrinks")
    assert finding.subject == VM111
    assert finding.message.startswith("the pending hostpci1 uses mapping a4000, which the plan")
    assert "(qm set 111 --revert hostpci1)" in finding.message


def test_mapping_left_without_a_device_on_this_node_is_not_fewer_gpus(tmp_path: Path) -> None:
    """a4000 keeps a line of another node: not removed, but without a device here, so
    VM 111 does not start here at all (not "gets fewer GPUs")."""
    other = "\tmap id=10de:24b0,iommugroup=9,node=pve-ws2,path=0000:39:00,subsystem-id=10de:14ad\n"
    cfg = APPLIED_PCI_CFG.replace(A4000_MAP, A4000_MAP + other)
    files = {pcicfg.PATH: cfg, VM110: _vm110(), VM111: SECOND_VM}
    result = plan(variant(tmp_path, files, fixture_hosts.workstation), parse_spec(RENAMED))
    (finding,) = of(result.findings, "vm-mapping-shrinks")
    assert "keeps no device on pve-ws after the plan" in finding.message
    assert "VM 111 does not start on pve-ws" in finding.message
    assert "gets fewer GPUs" not in finding.message
