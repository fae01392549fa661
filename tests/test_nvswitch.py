"""An HGX H100 board: NVSwitches are part of the GPUs' fabric, and Fabric Manager runs
where they are.

Discovery reads the NVSwitches (NVIDIA, class 0x0680) as devices, not bridges, and the
host's Fabric Manager (installed, enabled, its mode). The whole board goes to one VM with
its NVSwitches (split, mapping, hostpci lines) and the plan says Fabric Manager moves into
the guest; half a board, or a board split between VMs or host and VM, is refused unless
Fabric Manager runs in shared NVSwitch mode. `pvegpu check` applies the same rule to the
drivers bound now.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

from hgx_host import (
    FM_CONFIG,
    GPUS,
    HALF_TO_VM,
    HOST_ONLY,
    NODE,
    SWITCHES,
    WHOLE_BOARD,
    hgx_host,
)
from pvegpu.apply.check import check
from pvegpu.cli.discover import format_table
from pvegpu.errors import DiscoveryError, PlanError
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json, facts_to_json
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.facts import FabricManager, HostFacts, PciFunction
from pvegpu.model.plan import Plan
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.rendering.review.apply_steps import runbook
from pvegpu.rendering.split import SCRIPT_PATH
from pvegpu.spec.load import parse_spec
from pvegpu.testing import DeviceSpec, HostSpec, write_host
from sysfs_sim import KernelSim, natural_drivers

Golden = Callable[[str], SnapshotAssertion]

VM_301_302 = f"""\
node = "{NODE}"

[[pools]]
name = "a"
gpus = ["18:00.0", "2a:00.0", "3a:00.0", "5d:00.0"]
mapping = {{ id = "hgx-a" }}

[pools.vfio.vm]
vmid = 300

[[pools]]
name = "b"
gpus = ["9a:00.0", "ab:00.0", "ba:00.0", "db:00.0"]
mapping = {{ id = "hgx-b" }}

[pools.vfio.vm]
vmid = 301
"""

HALF_AND_CT = HALF_TO_VM + '\n[[pools]]\nname = "ct"\nnuma_node = 1\n\n[pools.lxc]\nvmid = 129\n'


def facts_of(tmp_path: Path, spec: HostSpec | None = None, name: str = "root") -> HostFacts:
    root = tmp_path / name
    write_host(spec or hgx_host(), root)
    return discover(root)


def refused(facts: HostFacts, spec: str) -> list[str]:
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(spec))
    return [p.code for p in err.value.problems]


def addresses(functions: tuple[PciFunction, ...]) -> list[str]:
    return [str(f.address) for f in functions]


# ------------------------------------------------------------------------------ discovery


def test_nvswitches_are_devices_not_bridges_nor_gpus(tmp_path: Path) -> None:
    facts = facts_of(tmp_path)
    assert addresses(facts.nvswitches) == list(SWITCHES)
    assert [str(g.address) for g in facts.gpus] == list(GPUS)
    for switch in facts.nvswitches:
        assert not switch.is_bridge and not switch.is_gpu
        assert switch.driver == "nvidia" and switch.pci_class == 0x068000
    # The PCIe switch ports above them are bridges still.
    port = facts.function(facts.nvswitches[0].address.__class__.parse("0000:04:00.0"))
    assert port is not None and port.is_bridge


def test_fabric_manager_is_read(tmp_path: Path) -> None:
    facts = facts_of(tmp_path)
    assert facts.fabric_manager == FabricManager(installed=True, enabled=True, mode=0)
    off = facts_of(tmp_path, hgx_host(fm_enabled=False, fm_mode=1), "off")
    assert off.fabric_manager == FabricManager(installed=True, enabled=False, mode=1)
    absent = facts_of(tmp_path, hgx_host(fm_installed=False, fm_mode=None), "absent")
    assert absent.fabric_manager == FabricManager()


def test_a_masked_fabric_manager_is_neither_installed_nor_enabled(tmp_path: Path) -> None:
    spec = hgx_host()
    masked = attrs.evolve(
        spec,
        symlinks={
            **spec.symlinks,
            "etc/systemd/system/nvidia-fabricmanager.service": "/dev/null",
        },
    )
    facts = facts_of(tmp_path, masked)
    assert facts.fabric_manager == FabricManager(installed=False, enabled=False, mode=0)


def test_a_bad_fabric_mode_names_the_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_host(hgx_host(files={FM_CONFIG: "FABRIC_MODE=shared\n"}), root)
    with pytest.raises(DiscoveryError) as err:
        discover(root)
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("bad-value", FM_CONFIG)
    assert "FABRIC_MODE" in problem.message and problem.fix


def test_discover_shows_the_nvswitches_and_fabric_manager(tmp_path: Path) -> None:
    table = format_table(facts_of(tmp_path))
    assert "NVSwitch 05:00.0 06:00.0 07:00.0 08:00.0: Fabric Manager enabled, FABRIC_MODE=0\n" in (
        table
    )
    off = format_table(facts_of(tmp_path, hgx_host(fm_installed=False, fm_mode=None), "off"))
    assert "NVSwitch 05:00.0 06:00.0 07:00.0 08:00.0: Fabric Manager not installed\n" in off


def test_a_host_without_nvswitches_reads_no_fabric_manager(tmp_path: Path) -> None:
    """Only a host with NVSwitches reads the service: others' facts stay as they were."""
    spec = hgx_host()
    # Without the NVSwitches and the PCIe switch ports above them.
    kept = tuple(d for d in spec.devices if d.device != 0x22A3 and d.parent != "0000:03:00.0")
    plain = attrs.evolve(spec, devices=kept)
    facts = facts_of(tmp_path, plain)
    assert facts.fabric_manager == FabricManager()
    assert "fabric_manager" not in json.loads(facts_to_json(facts))


def test_a_snapshot_carries_the_fabric_manager(tmp_path: Path) -> None:
    """Read through the reader: an unpacked snapshot has the unit, its link and config."""
    facts = facts_of(tmp_path)
    snapshot(tmp_path / "root", tmp_path / "s.tar.gz")
    unpacked = discover(unpack(tmp_path / "s.tar.gz", tmp_path / "unpacked"))
    assert unpacked.fabric_manager == facts.fabric_manager == FabricManager(True, True, 0)
    assert addresses(unpacked.nvswitches) == list(SWITCHES)


def test_the_facts_document_round_trips_the_fabric_manager(tmp_path: Path) -> None:
    facts = facts_of(tmp_path)
    document = facts_to_json(facts)
    assert json.loads(document)["fabric_manager"] == {
        "installed": True,
        "enabled": True,
        "mode": 0,
    }
    assert facts_from_json(document) == facts


# ---------------------------------------------------------------------------- whole board


@pytest.fixture
def whole(tmp_path: Path) -> Plan:
    return plan(facts_of(tmp_path), parse_spec(WHOLE_BOARD))


def test_the_whole_board_takes_its_nvswitches_along(whole: Plan) -> None:
    (pool,) = whole.pools
    assert addresses(pool.nvswitches) == list(SWITCHES)
    assert addresses(pool.functions) == sorted((*GPUS, *SWITCHES))
    assert pool.mapping is not None
    assert [m.path for m in pool.mapping.maps] == [g[:-2] for g in GPUS] + list(SWITCHES)
    assert {m.id for m in pool.mapping.maps[8:]} == {"10de:22a3"}
    assert pool.vm is not None and pool.vm.count == 12


def test_the_whole_board_says_fabric_manager_moves_to_the_guest(whole: Plan) -> None:
    codes = [f.code for f in whole.findings]
    assert "fabric-manager-in-guest" in codes
    # The NVSwitches are not "group members" that happen to move: they are the fabric.
    assert "group-members-move" not in codes
    finding = next(f for f in whole.findings if f.code == "fabric-manager-in-guest")
    assert "VM 300" in finding.message and "disable" in finding.message


def test_the_runbook_stops_fabric_manager_before_the_split(whole: Plan) -> None:
    steps = runbook(whole, render(whole))
    titles = [s.title for s in steps]
    stop = titles.index("Stop Fabric Manager on the host: the NVSwitches go to the VM")
    assert stop < titles.index("Move the VM GPUs to vfio-pci, now and at every boot")
    assert steps[stop].commands == ("systemctl disable --now nvidia-fabricmanager.service",)
    move = steps[titles.index("Move the VM GPUs to vfio-pci, now and at every boot")]
    assert {f"{s} vfio-pci" for s in SWITCHES} <= set(move.output)


def test_no_stop_step_where_the_host_has_no_fabric_manager(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, hgx_host(fm_installed=False, fm_mode=None))
    planned = plan(facts, parse_spec(WHOLE_BOARD))
    titles = [s.title for s in runbook(planned, render(planned))]
    assert not any("Fabric Manager" in t for t in titles)
    finding = next(f for f in planned.findings if f.code == "fabric-manager-in-guest")
    assert "disable" not in finding.message


def test_the_split_script_and_vm_carry_the_nvswitches(whole: Plan) -> None:
    files: dict[str, str] = {}
    for artifact in render(whole):  # the bundle's files come before revert's
        files.setdefault(artifact.path, artifact.content)
    script = files["usr/local/sbin/pvegpu-vfio-split"]
    for switch in SWITCHES:
        assert f"{switch} 10de:22a3" in script
    vm = files["etc/pve/qemu-server/300.conf"]
    assert vm.count("mapping=hgx-board") == 12
    pci_cfg = files["etc/pve/mapping/pci.cfg"]
    for switch in SWITCHES:
        assert "id=10de:22a3,iommugroup=" in pci_cfg and f"path={switch}" in pci_cfg
    assert script.count("GPU none (an NVSwitch of the board)") == 4
    # SUMMARY.md says why they go: the fabric, not a shared IOMMU group.
    summary = files["SUMMARY.md"]
    board, _, rest = summary.partition("The board's NVSwitches connect all of its GPUs")
    assert rest and "share an IOMMU group" not in board
    for switch in SWITCHES:
        assert f"`{switch[5:]}` (10de:22a3): nvidia → vfio-pci, pool train" in rest


def test_the_script_moves_the_board_on_the_kernel_simulator(whole: Plan, tmp_path: Path) -> None:
    """Run for real against the simulated kernel: bind moves every GPU and NVSwitch of
    the board to vfio-pci; revert gives each back to nvidia."""
    root = tmp_path / "sim"
    write_host(hgx_host(), root)
    script = tmp_path / "pvegpu-vfio-split"
    script.write_text(next(a.content for a in render(whole) if a.path == SCRIPT_PATH))
    with KernelSim(root, natural_drivers(whole)) as kernel:
        result = kernel.run(script, "bind")
        assert result.rc == 0, result.stderr
        state = kernel.state()
        assert {a: state[a][0] for a in (*GPUS, *SWITCHES)} == dict.fromkeys(
            (*GPUS, *SWITCHES), "vfio-pci"
        )
        result = kernel.run(script, "revert")
        assert result.rc == 0, result.stderr
        state = kernel.state()
        assert {state[a][0] for a in (*GPUS, *SWITCHES)} == {"nvidia"}


# ------------------------------------------------------------------------------- refusals


def test_an_nvswitch_named_as_a_gpu_says_how_it_moves(tmp_path: Path) -> None:
    text = WHOLE_BOARD.replace("count = 8", 'gpus = ["05:00.0"]')
    with pytest.raises(PlanError) as err:
        plan(facts_of(tmp_path), parse_spec(text))
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("address-not-a-gpu", "pools[0].gpus[0]")
    assert "it goes to the VM that gets every GPU of its board" in problem.message


def test_an_nvswitch_group_with_a_host_device_is_refused(tmp_path: Path) -> None:
    """vfio-pci takes the NVSwitch's IOMMU group whole: a host device in it would go too."""
    spec = hgx_host()
    nvme = DeviceSpec(
        address="0000:05:00.1", parent="0000:04:00.0", vendor=0x144D, device=0xA80A,
        pci_class=0x010802, numa_node=0, driver="nvme", iommu_group=7,
    )  # fmt: skip
    facts = facts_of(tmp_path, attrs.evolve(spec, devices=(*spec.devices, nvme)))
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(WHOLE_BOARD))
    found = [(p.code, p.subject) for p in err.value.problems]
    assert ("foreign-device-in-group", SWITCHES[0]) in found
    problem = next(p for p in err.value.problems if p.subject == SWITCHES[0])
    assert "0000:05:00.1" in problem.message


@pytest.mark.parametrize(
    "spec", [HALF_TO_VM, VM_301_302, HALF_AND_CT], ids=["half-to-vm", "two-vms", "vm-and-ct"]
)
def test_a_split_board_is_refused(tmp_path: Path, spec: str) -> None:
    assert "nvswitch-board-split" in refused(facts_of(tmp_path), spec)


def test_the_refusal_names_the_gpus_and_the_nvswitches(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as err:
        plan(facts_of(tmp_path), parse_spec(HALF_TO_VM))
    problem = next(p for p in err.value.problems if p.code == "nvswitch-board-split")
    assert problem.subject == "pool 'half' (VM 301)"
    for address in (*GPUS, *SWITCHES):
        assert address in problem.message
    assert "FABRIC_MODE=1" in problem.fix


def test_shared_nvswitch_mode_lets_the_board_be_split(tmp_path: Path) -> None:
    """In shared mode the NVSwitches stay with the host's Fabric Manager: nothing of
    the board but the pool's GPUs moves, and the plan says which partition to use."""
    facts = facts_of(tmp_path, hgx_host(fm_mode=1))
    planned = plan(facts, parse_spec(VM_301_302))
    for pool in planned.pools:
        assert pool.nvswitches == ()
        assert not set(addresses(pool.functions)) & set(SWITCHES)
    codes = [f.code for f in planned.findings]
    assert codes.count("fabric-shared-partition") == 2
    whole = plan(facts, parse_spec(WHOLE_BOARD))
    assert whole.pools[0].nvswitches == ()


def test_the_host_keeping_the_board_needs_fabric_manager_there(tmp_path: Path) -> None:
    enabled = plan(facts_of(tmp_path), parse_spec(HOST_ONLY))
    assert not [f for f in enabled.findings if f.code.startswith("fabric")]
    facts = facts_of(tmp_path, hgx_host(fm_enabled=False), "off")
    off = plan(facts, parse_spec(HOST_ONLY))
    assert [f.subject for f in off.findings if f.code == "fabric-manager-not-enabled"] == ["serve"]


def test_a_gpu_model_not_known_on_a_board_is_named(tmp_path: Path) -> None:
    """An NVIDIA GPU that is no SXM model pvegpu knows is taken as off the board; the
    reviewer is told, since only the admin knows."""
    spec = hgx_host()
    devices = tuple(
        attrs.evolve(d, device=0x2331) if d.address == GPUS[7] else d for d in spec.devices
    )
    facts = facts_of(tmp_path, attrs.evolve(spec, devices=devices))
    single = f'node = "{NODE}"\n\n[[pools]]\nname = "x"\ngpus = ["db:00.0"]\n'
    single += 'mapping = { id = "single" }\n\n[pools.vfio.vm]\nvmid = 301\n'
    planned = plan(facts, parse_spec(single))
    assert [f.subject for f in planned.findings if f.code == "nvswitch-unknown-gpu-model"] == [
        GPUS[7]
    ]
    assert planned.pools[0].nvswitches == ()


# --------------------------------------------------------------------------------- check


def test_check_finds_a_board_split_now(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_host(hgx_host(gpu_driver={0: "vfio-pci", 1: "vfio-pci"}), root)
    found = {f.code: f for f in check(root, None).findings}
    assert "nvswitch-board-split" in found
    assert GPUS[0] in found["nvswitch-board-split"].message


def test_check_finds_fabric_manager_left_on_without_the_nvswitches(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_host(hgx_host(gpu_driver="vfio-pci", switch_driver="vfio-pci"), root)
    codes = {f.code for f in check(root, None).findings}
    assert "fabric-manager-without-nvswitches" in codes
    assert "nvswitch-board-split" not in codes
    clean = tmp_path / "clean"
    write_host(hgx_host(), clean)
    assert not {f.code for f in check(clean, None).findings} & {
        "fabric-manager-without-nvswitches",
        "nvswitch-board-split",
    }


# --------------------------------------------------------------------------- golden text


def test_fabric_text(tmp_path: Path, golden: Golden) -> None:
    """Every new refusal and finding, as the admin reads them."""
    cases = {
        "whole board": (hgx_host(), WHOLE_BOARD),
        "half to a VM": (hgx_host(), HALF_TO_VM),
        "two VMs": (hgx_host(), VM_301_302),
        "two VMs, shared mode": (hgx_host(fm_mode=1, fm_enabled=False), VM_301_302),
        "host, fabric manager off": (hgx_host(fm_enabled=False), HOST_ONLY),
    }
    out: list[str] = []
    for index, (name, (host, spec)) in enumerate(cases.items()):
        out.append(f"## {name}")
        try:
            found = plan(facts_of(tmp_path, host, str(index)), parse_spec(spec)).findings
            out += [f"{f.severity}: {f.subject}: {f.message} [{f.code}]" for f in found]
        except PlanError as err:
            out += [f"refused: {p}" for p in err.problems]
    assert "\n".join(out) + "\n" == golden("txt")


def test_the_board_is_asked_per_host_not_remembered_across_hosts(tmp_path: Path) -> None:
    """planning.fabric.board keeps the last host's answer (asked once per pool): another
    host, even one equal but for its Fabric Manager mode, gets its own."""
    from pvegpu.planning.fabric import board
    from pvegpu.vendors import nvswitch

    facts = facts_of(tmp_path)
    found = board(facts)
    assert found is not None and not found.shared and len(found.switches) == 4
    assert board(facts) is found
    shared = attrs.evolve(
        facts, fabric_manager=attrs.evolve(facts.fabric_manager, mode=nvswitch.MODE_SHARED)
    )
    shared_board = board(shared)
    assert shared_board is not None and shared_board.shared
    no_switches = attrs.evolve(
        facts, functions=tuple(f for f in facts.functions if not nvswitch.is_switch(f))
    )
    assert board(no_switches) is None
    assert board(facts) == found
