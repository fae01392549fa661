"""IOMMU groups that lie (issue 19, item 6): `pcie_acs_override` and the ports' own ACS.

The host: a PLX PEX 8747 switch below an ACS root port, a GPU (and its audio) below one
downstream port, the boot NVMe (or a second GPU) below the other. With the override on,
every function has an IOMMU group of its own, which is what the override makes of a
switch without ACS. Discovery reads the bridges' ACS from their 4 KiB `config` only
while the override is on; the plan warns on every plan, refuses a split across a port
without ACS, and `pvegpu check` applies the same rule to the drivers of now.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from syrupy.assertion import SnapshotAssertion

from depth import examples
from fixture_hosts import GEN3_X16, PVE_BLACKLIST, STORAGE_LVM
from pvegpu.cli import main
from pvegpu.errors import DiscoveryError
from pvegpu.host.acs import port_acs, upstream_bridges
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import SCHEMA, converter, facts_from_json, facts_to_json
from pvegpu.host.reader import Trace
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.facts import HostFacts
from pvegpu.model.ports import AcsState, PortAcs, PortType
from pvegpu.pci import PciAddress
from pvegpu.pipeline import check_host
from pvegpu.planning.acs import multifunction_findings
from pvegpu.planning.planner import plan
from pvegpu.spec.load import parse_spec
from pvegpu.testing import (
    ConfigSpace,
    DeviceSpec,
    HostSpec,
    IommuUnit,
    NvidiaInfo,
    NvidiaModule,
    write_host,
)
from pvegpu.testing.config_space import config_header, root_config
from strategies_host import hosts, with_ports_and_driverctl
from test_whole_host_guests import of, refused, text

Golden = Callable[[str], SnapshotAssertion]

OVERRIDE = "pcie_acs_override=downstream,multifunction"
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet"
KERNELS_ACS = 0x1D
"""What the kernel turns on in a port with ACS: SV, RR, CR, UF."""
ROOT_PORT, UPSTREAM, DS_GPU, DS_OTHER = (
    "0000:00:01.1",
    "0000:01:00.0",
    "0000:02:08.0",
    "0000:02:10.0",
)
GPU, AUDIO, OTHER = "0000:03:00.0", "0000:03:00.1", "0000:04:00.0"

VM_SPEC = """\
node = "pve-lab"

[[pools]]
name = "vm"
gpus = ["03:00.0"]
mapping = { id = "a5000" }

[pools.vfio.vm]
vmid = 120
"""


def _port(address: str, parent: str | None, group: int, space: ConfigSpace | None) -> DeviceSpec:
    """A PLX PEX 8747 port (or the root port, with the same ids for brevity)."""
    return DeviceSpec(
        address=address, parent=parent, vendor=0x10B5, device=0x8747, subsystem_vendor=0x10B5,
        subsystem_device=0x8747, pci_class=0x060400, revision=0xCA, numa_node=0,
        driver="pcieport", iommu_group=group, link=GEN3_X16, config_space=space,
    )  # fmt: skip


def _gpu(address: str, parent: str, group: int, minor: int, driver: str) -> DeviceSpec:
    return DeviceSpec(
        address=address, parent=parent, vendor=0x10DE, device=0x2231, subsystem_vendor=0x10DE,
        subsystem_device=0x147E, pci_class=0x030000, revision=0xA1, numa_node=0,
        driver=driver, iommu_group=group, link=GEN3_X16,
        nvidia=NvidiaInfo(model="NVIDIA RTX A5000", minor=minor) if driver == "nvidia" else None,
    )  # fmt: skip


def switch_host(
    *,
    ds_acs: int | None = None,
    cmdline: str = f"{CMDLINE} {OVERRIDE}",
    second_gpu: bool = False,
    second_driver: str = "nvidia",
    gpu_driver: str = "nvidia",
    root_read: bool = True,
    files: dict[str, str] | None = None,
    numa: tuple[str, ...] = ("0-23",),
) -> HostSpec:
    """The switch host. `ds_acs`: the downstream ports' ACS control register (None: no
    ACS capability); `root_read`: the bridges' config as root reads it (else 64 bytes)."""

    def space(port_type: int, acs: int | None) -> ConfigSpace | None:
        return ConfigSpace(port_type=port_type, acs_control=acs) if root_read else None

    devices = [
        DeviceSpec(address="0000:00:00.2", vendor=0x1022, device=0x14D9, pci_class=0x080600,
                   numa_node=0),
        _port(ROOT_PORT, None, 2, space(0x4, KERNELS_ACS)),
        _port(UPSTREAM, ROOT_PORT, 3, space(0x5, None)),
        _port(DS_GPU, UPSTREAM, 4, space(0x6, ds_acs)),
        _port(DS_OTHER, UPSTREAM, 5, space(0x6, ds_acs)),
        _gpu(GPU, DS_GPU, 6, 0, gpu_driver),
        DeviceSpec(address=AUDIO, parent=DS_GPU, vendor=0x10DE, device=0x1AEF,
                   subsystem_vendor=0x10DE, subsystem_device=0x147E, pci_class=0x040300,
                   revision=0xA1, numa_node=0, driver="snd_hda_intel", iommu_group=7),
    ]  # fmt: skip
    if second_gpu:
        devices.append(_gpu(OTHER, DS_OTHER, 8, 1, second_driver))
    else:
        devices.append(
            DeviceSpec(
                address=OTHER, parent=DS_OTHER, vendor=0x144D, device=0xA80A,
                subsystem_vendor=0x144D, subsystem_device=0xA801, pci_class=0x010802,
                numa_node=0, driver="nvme", iommu_group=8, link=GEN3_X16,
            )
        )  # fmt: skip
    return HostSpec(
        hostname="pve-lab",
        cmdline=cmdline,
        numa=numa,
        iommu_units=(IommuUnit("ivhd0", "0000:00:00.2"),),
        group_type="DMA",
        sev_snp=False,
        nvidia=NvidiaModule(version="580.95.05", open=True, uvm_major=510, caps_major=511),
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_LVM,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            **(files or {}),
        },
    )


def written(tmp_path: Path, desc: HostSpec, name: str = "host") -> Path:
    root = tmp_path / name
    write_host(desc, root)
    return root


def facts_of(tmp_path: Path, desc: HostSpec) -> HostFacts:
    return discover(written(tmp_path, desc))


# --- the configuration space --------------------------------------------------------


def _config(space: ConfigSpace) -> bytes:
    port = _port(DS_GPU, UPSTREAM, 4, None)
    return root_config(config_header(port, irq=0, multifunction=False, buses=(2, 3, 3)), space)


ADDRESS = PciAddress.parse(DS_GPU)


@pytest.mark.parametrize(
    ("space", "state", "port_type"),
    [
        (ConfigSpace(acs_control=KERNELS_ACS), AcsState.ENABLED, PortType.DOWNSTREAM),
        # The capability without upstream forwarding on: peers below are not redirected.
        (ConfigSpace(acs_control=0x0D), AcsState.DISABLED, PortType.DOWNSTREAM),
        # A control the port lacks (no UF in its capability) is not asked of it.
        (ConfigSpace(acs_control=0x0D, acs_capability=0x0F), AcsState.ENABLED, PortType.DOWNSTREAM),
        (ConfigSpace(acs_control=None), AcsState.ABSENT, PortType.DOWNSTREAM),
        (ConfigSpace(acs_control=KERNELS_ACS, extended=()), AcsState.ENABLED, PortType.DOWNSTREAM),
        # ACS third in the list, after AER and another capability.
        (
            ConfigSpace(port_type=0x4, acs_control=KERNELS_ACS, extended=(0x0001, 0x000B)),
            AcsState.ENABLED,
            PortType.ROOT_PORT,
        ),
        (ConfigSpace(extended_space=False), AcsState.NO_EXTENDED_SPACE, PortType.DOWNSTREAM),
        (ConfigSpace(port_type=0x7, acs_control=None), AcsState.ABSENT, PortType.PCIE_TO_PCI),
        (ConfigSpace(port_type=0x5), AcsState.ABSENT, PortType.UPSTREAM),
    ],
)
def test_port_acs_reads_the_capability_lists(
    space: ConfigSpace, state: AcsState, port_type: PortType
) -> None:
    assert port_acs(ADDRESS, _config(space)) == PortAcs(ADDRESS, state, port_type)


def test_a_64_byte_read_says_so_without_guessing() -> None:
    header = config_header(_port(DS_GPU, UPSTREAM, 4, None), irq=0, multifunction=False)
    found = port_acs(ADDRESS, header)
    assert found == PortAcs(ADDRESS, AcsState.HEADER_ONLY, None)
    assert found.isolates is None
    assert "did not run as root" in found.describe


def test_isolation_follows_the_kernels_rules() -> None:
    def isolates(state: AcsState, kind: PortType | None) -> bool | None:
        return PortAcs(ADDRESS, state, kind).isolates

    assert isolates(AcsState.ENABLED, PortType.DOWNSTREAM) is True
    assert isolates(AcsState.ABSENT, PortType.DOWNSTREAM) is False
    assert isolates(AcsState.DISABLED, PortType.ROOT_PORT) is False
    # An upstream port forwards to its own downstream ports: not asked for ACS.
    assert isolates(AcsState.ABSENT, PortType.UPSTREAM) is True
    # Conventional PCI behind a bridge is a shared bus, ACS or not.
    assert isolates(AcsState.ENABLED, PortType.PCIE_TO_PCI) is False
    assert isolates(AcsState.NO_EXTENDED_SPACE, PortType.DOWNSTREAM) is None


def test_a_looping_extended_list_ends() -> None:
    """A next pointer back to 0x100 ends the walk (bounded, as the kernel's): no ACS."""
    config = bytearray(_config(ConfigSpace(acs_control=None)))
    struct.pack_into("<I", config, 0x100, 0x0001 | 1 << 16 | 0x100 << 20)
    assert port_acs(ADDRESS, bytes(config)).acs is AcsState.ABSENT
    # A pointer into the standard space ends it too, whatever the bytes there look like.
    struct.pack_into("<I", config, 0x100, 0x0001 | 1 << 16 | 0x080 << 20)
    struct.pack_into("<IHH", config, 0x080, 0x000D | 1 << 16, 0x5F, KERNELS_ACS)
    assert port_acs(ADDRESS, bytes(config)).acs is AcsState.ABSENT


def test_a_looping_standard_list_ends() -> None:
    config = bytearray(_config(ConfigSpace(acs_control=KERNELS_ACS)))
    config[0x40:0x42] = bytes([0x01, 0x40])  # a power management capability naming itself
    assert port_acs(ADDRESS, bytes(config)) == PortAcs(ADDRESS, AcsState.ENABLED, None)


@pytest.mark.parametrize("size", [0, 63, 100, 255, 4095, 4097])
def test_a_config_of_no_kernel_size_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match="bytes"):
        port_acs(ADDRESS, bytes(size))


def test_upstream_bridges_come_from_the_real_path(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, switch_host())
    gpu = facts.function(PciAddress.parse(GPU))
    assert gpu is not None
    assert [str(a) for a in upstream_bridges(gpu)] == [ROOT_PORT, UPSTREAM, DS_GPU]


# --- discovery ----------------------------------------------------------------------


def test_discovery_reads_the_ports_above_the_gpus(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, switch_host())
    assert [(str(p.address), p.acs, p.port_type) for p in facts.acs_ports] == [
        (ROOT_PORT, AcsState.ENABLED, PortType.ROOT_PORT),
        (UPSTREAM, AcsState.ABSENT, PortType.UPSTREAM),
        (DS_GPU, AcsState.ABSENT, PortType.DOWNSTREAM),
    ]
    # The NVMe's port is above no GPU: not read.
    assert PciAddress.parse(DS_OTHER) not in {p.address for p in facts.acs_ports}


def test_without_the_override_no_config_is_read(tmp_path: Path) -> None:
    root = written(tmp_path, switch_host(cmdline=CMDLINE))
    trace = Trace()
    facts = discover(root, trace=trace)
    assert facts.acs_ports == ()
    assert not [path for path in trace.files if path.endswith("/config")]
    assert '"acs_ports"' not in facts_to_json(facts)


def test_the_next_boots_override_counts(tmp_path: Path) -> None:
    """Off now, on after the reboot (systemd-boot's /etc/kernel/cmdline): the groups the
    plan is for are the next boot's."""
    desc = switch_host(
        cmdline=CMDLINE, files={"etc/kernel/cmdline": f"root=ZFS=rpool/ROOT/pve-1 {OVERRIDE}\n"}
    )
    facts = facts_of(tmp_path, desc)
    assert len(facts.acs_ports) == 3
    problems = refused(facts, VM_SPEC)
    assert [p.code for p in problems] == ["acs-override-split"]
    assert "the next boot's /etc/kernel/cmdline" in problems[0].message


def test_the_facts_document_round_trips_the_ports(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, switch_host())
    document = facts_to_json(facts)
    assert '"acs": "absent"' in document
    assert '"port_type": "downstream-port"' in document
    assert facts_from_json(document) == facts


def test_a_snapshot_carries_the_ports_config(tmp_path: Path) -> None:
    """The config files are read through the reader, so a snapshot plans like the host
    (the bytes archived as read, the driverctl files with them)."""
    desc = switch_host(files={"etc/driverctl.d/pci-0000:04:00.0": "nvme\n"})
    facts = discover(written(tmp_path, desc))
    snapshot(tmp_path / "host", tmp_path / "s.tar.gz")
    unpacked = discover(unpack(tmp_path / "s.tar.gz", tmp_path / "unpacked"))
    assert unpacked.acs_ports == facts.acs_ports and len(facts.acs_ports) == 3
    assert unpacked.driverctl == facts.driverctl and facts.driverctl


@pytest.mark.parametrize("size", [100, 300])
def test_a_broken_config_is_a_discovery_error(tmp_path: Path, size: int) -> None:
    root = written(tmp_path, switch_host())
    config = root / f"sys/devices/pci0000:00/{ROOT_PORT}/{UPSTREAM}/{DS_GPU}/config"
    config.write_bytes(bytes(size))
    with pytest.raises(DiscoveryError) as error:
        discover(root)
    (problem,) = error.value.problems
    assert (problem.code, problem.subject) == ("bad-value", f"sys/bus/pci/devices/{DS_GPU}/config")
    assert f"is {size} bytes" in problem.message


def test_a_config_larger_than_the_kernels_is_refused_unread(tmp_path: Path) -> None:
    root = written(tmp_path, switch_host())
    config = root / f"sys/devices/pci0000:00/{ROOT_PORT}/config"
    config.write_bytes(bytes(1 << 20))
    with pytest.raises(DiscoveryError) as error:
        discover(root)
    assert [(p.code, p.subject) for p in error.value.problems] == [
        ("file-too-large", f"sys/bus/pci/devices/{ROOT_PORT}/config")
    ]


def test_a_missing_config_names_the_fix(tmp_path: Path) -> None:
    root = written(tmp_path, switch_host())
    (root / f"sys/devices/pci0000:00/{ROOT_PORT}/config").unlink()
    with pytest.raises(DiscoveryError) as error:
        discover(root)
    (problem,) = error.value.problems
    assert problem.code == "missing-file"
    assert "as root" in problem.fix


# --- the plan -----------------------------------------------------------------------


def test_split_across_a_port_without_acs_is_refused(tmp_path: Path, golden: Golden) -> None:
    """The GPU to VM 120, its audio and the NVMe below the same switch to the host."""
    problems = refused(facts_of(tmp_path, switch_host()), VM_SPEC)
    assert [(p.code, p.subject) for p in problems] == [("acs-override-split", UPSTREAM)]
    message = problems[0].message
    assert f"{GPU} (10de:2231) -> VM 120 (pool 'vm')" in message
    assert f"{OTHER} (144d:a80a) -> the host" in message
    assert text(problems) == golden("txt")


def test_two_vms_below_one_switch_without_acs_are_refused(tmp_path: Path) -> None:
    spec = VM_SPEC + (
        '\n[[pools]]\nname = "vm2"\ngpus = ["04:00.0"]\nmapping = { id = "second" }\n'
        "\n[pools.vfio.vm]\nvmid = 121\n"
    )
    problems = refused(facts_of(tmp_path, switch_host(second_gpu=True)), spec)
    (problem,) = [p for p in problems if p.code == "acs-override-split"]
    assert "-> VM 120 (pool 'vm')" in problem.message
    assert f"{OTHER} (10de:2231) -> VM 121 (pool 'vm2')" in problem.message


def test_a_device_another_guest_has_now_is_a_place_of_its_own(tmp_path: Path) -> None:
    """A second GPU on vfio-pci that no pool names: some other VM has it."""
    facts = facts_of(tmp_path, switch_host(second_gpu=True, second_driver="vfio-pci"))
    (problem,) = refused(facts, VM_SPEC)
    assert f"{OTHER} (10de:2231) -> a guest it is passed to now (vfio-pci)" in problem.message


def test_ports_with_acs_let_the_split_through_with_the_warning(
    tmp_path: Path, golden: Golden
) -> None:
    facts = facts_of(tmp_path, switch_host(ds_acs=KERNELS_ACS))
    result = plan(facts, parse_spec(VM_SPEC))
    found = of(result.findings, "acs-override", "acs-unknown", "acs-override-multifunction")
    # The audio function, in a group of its own under the override, stays on the host.
    assert [(f.code, f.subject) for f in found] == [
        ("acs-override-multifunction", "0000:03:00"),
        ("acs-override", "proc/cmdline"),
    ]
    assert text(found) == golden("txt")


def test_no_warning_and_no_refusal_without_the_override(tmp_path: Path) -> None:
    """The same tree read without the override: the groups are the hardware's."""
    result = plan(facts_of(tmp_path, switch_host(cmdline=CMDLINE)), parse_spec(VM_SPEC))
    assert not of(result.findings, "acs-override", "acs-unknown", "acs-override-multifunction")


def test_unreadable_ports_are_said_not_guessed(tmp_path: Path) -> None:
    """Read without root (64-byte config): every port unknown, each said, no refusal."""
    result = plan(facts_of(tmp_path, switch_host(root_read=False)), parse_spec(VM_SPEC))
    unknown = of(result.findings, "acs-unknown")
    assert [f.subject for f in unknown] == [ROOT_PORT, UPSTREAM, DS_GPU]
    assert "as root" in unknown[0].message


def test_cli_plan_refuses_with_the_code_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = written(tmp_path, switch_host())
    spec = tmp_path / "spec.toml"
    spec.write_text(VM_SPEC)
    out = tmp_path / "out"
    code = main(["render", "--root", str(root), "--spec", str(spec), "--out", str(out)])
    assert code != 0
    err = capsys.readouterr().err
    assert "acs-override-split" in err
    assert "Traceback" not in err
    assert not out.exists()


# --- check --------------------------------------------------------------------------


def test_check_reports_a_split_that_is_there_now(tmp_path: Path) -> None:
    """The GPU on vfio-pci (a VM has it), the NVMe on nvme, one switch without ACS."""
    root = written(tmp_path, switch_host(gpu_driver="vfio-pci"))
    found = [f for f in check_host(root)[2] if f.code.startswith("acs-")]
    assert [(f.severity.value, f.code, f.subject) for f in found] == [
        ("warning", "acs-override", "proc/cmdline"),
        ("error", "acs-override-split", UPSTREAM),
    ]
    assert f"{GPU} (10de:2231) -> a VM (vfio-pci)" in found[1].message


def test_check_is_quiet_where_the_ports_isolate(tmp_path: Path) -> None:
    root = written(tmp_path, switch_host(gpu_driver="vfio-pci", ds_acs=KERNELS_ACS))
    found = [f for f in check_host(root)[2] if f.code.startswith("acs-")]
    assert [f.code for f in found] == ["acs-override"]


def test_port_descriptions_are_stable() -> None:
    port = PortAcs(ADDRESS, AcsState.ABSENT, PortType.DOWNSTREAM)
    assert port.describe == f"switch downstream port {DS_GPU} (no ACS capability)"
    assert attrs.evolve(port, port_type=None).name == f"bridge {DS_GPU}"


# --- the facts document ---------------------------------------------------------------


@settings(max_examples=examples(40), deadline=None)
@given(facts=hosts().flatmap(with_ports_and_driverctl))
def test_ports_and_overrides_round_trip(facts: HostFacts) -> None:
    """Both writers write the same document for any ports and driverctl overrides, and it
    reads back; empty, the keys are left out (every document before them reads alike)."""
    document = facts_to_json(facts)
    by_converter = {"schema": SCHEMA} | converter.unstructure(facts)
    assert json.loads(document) | {"gpus": None} == by_converter | {"gpus": None}
    assert facts_from_json(document) == facts
    assert ('"acs_ports"' in document) == bool(facts.acs_ports)
    assert ('"driverctl"' in document) == bool(facts.driverctl)


@pytest.mark.parametrize(
    "change", [{"physfn": PciAddress.parse(GPU)}, {"pci_class": 0x060400}], ids=["vf", "bridge"]
)
def test_virtual_functions_and_bridges_of_the_slot_are_not_counted(
    tmp_path: Path, change: dict[str, object]
) -> None:
    """The audio function made an SR-IOV VF of the GPU (isolated by design) or a bridge
    (never moved): the slot is no longer split."""
    facts = facts_of(tmp_path, switch_host(ds_acs=KERNELS_ACS))
    result = plan(facts, parse_spec(VM_SPEC))
    assert [f.subject for f in multifunction_findings(facts, result.pools)] == ["0000:03:00"]
    functions = tuple(
        attrs.evolve(f, **change) if str(f.address) == AUDIO else f  # type: ignore[arg-type]
        for f in facts.functions
    )
    assert (
        list(multifunction_findings(attrs.evolve(facts, functions=functions), result.pools)) == []
    )
