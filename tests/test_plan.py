from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from pvegpu.errors import PlanError
from pvegpu.host.discover import discover
from pvegpu.model.facts import ConfigFile, HostFacts, VfioIdsSetting
from pvegpu.model.plan import PoolKind
from pvegpu.model.schema import (
    DeviceStyle,
    LxcSpec,
    MappingSpec,
    PoolSpec,
    Spec,
    VfioSpec,
    VmSpec,
)
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.spec.load import load_spec, parse_spec
from strategies import KPRO6_LXC_129, KPRO6_PCI_CFG, KPRO6_VM_140
from strategies import kpro6 as kpro6_facts

REPO = Path(__file__).resolve().parent.parent
Root = Callable[[str], Path]


@pytest.fixture(scope="module")
def kpro6() -> HostFacts:
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    return discover_for(spec, REPO / "fixtures" / "sysfs" / "kpro6")


def spec_text(*pools: str, node: str = "kpro6") -> str:
    return f'node = "{node}"\n' + "\n".join(pools)


LXC = '[[pools]]\nname = "ct"\n{select}\n[pools.lxc]\nvmid = 129\n'
VFIO = '[[pools]]\nname = "vm"\n{select}\nmapping = {{ id = "pro6000-vm" }}\n[pools.vfio]\n'


def codes(err: PlanError) -> list[tuple[str, str]]:
    return sorted((p.code, p.subject) for p in err.problems)


def test_reference_split(kpro6: HostFacts) -> None:
    """examples/kpro6.toml: NUMA 0 GPUs to LXC 129 on nvidia, NUMA 1 + audio to vfio-pci."""
    result = plan(kpro6, load_spec(REPO / "examples" / "kpro6.toml"))
    ct, vm = result.pools
    assert [g.address.short for g in ct.gpus] == ["01:00.0", "11:00.0", "61:00.0", "71:00.0"]
    assert (ct.kind, ct.driver, ct.lxc and ct.lxc.vmid) == (PoolKind.LXC, "nvidia", 129)
    assert [g.address.short for g in vm.gpus] == ["81:00.0", "91:00.0", "e1:00.0", "f1:00.0"]
    assert (vm.kind, vm.driver) == (PoolKind.VFIO, "vfio-pci")
    assert [f.address.short for f in vm.functions] == [
        f"{bus}:00.{fn}" for bus in ("81", "91", "e1", "f1") for fn in (0, 1)
    ]
    assert vm.mapping is not None
    assert [(m.path, m.iommugroup, m.id, m.subsystem_id) for m in vm.mapping.maps] == [
        (f"0000:{bus}:00", group, "10de:2bb5", "10de:204b")
        for bus, group in (("81", 40), ("91", 41), ("e1", 42), ("f1", 43))
    ]
    assert "identical-device-ids" in {f.code for f in result.findings}


def test_gpu_in_two_pools(kpro6: HostFacts) -> None:
    """A GPU selected by two pools is refused, naming the GPU and both pools."""
    text = spec_text(LXC.format(select="numa_node = 1"), VFIO.format(select='gpus = ["91:00.0"]'))
    with pytest.raises(PlanError) as err:
        plan(kpro6, parse_spec(text))
    assert codes(err.value) == [("gpu-in-two-pools", "0000:91:00.0")]
    assert "'ct', 'vm'" in str(err.value)


def test_every_problem_reported_at_once(kpro6: HostFacts) -> None:
    """Several problems come back together, not just the first one."""
    text = spec_text(
        LXC.format(select='gpus = ["0000:d7:00.0", "01:00.0"]'),
        VFIO.format(select="numa_node = 7"),
        node="pve2",
    )
    with pytest.raises(PlanError) as err:
        plan(kpro6, parse_spec(text))
    assert codes(err.value) == [
        ("address-not-on-host", "pools[0].gpus[0]"),
        ("node-mismatch", "node"),
        ("pool-empty", "pools[1].numa_node"),
    ]
    assert err.value.exit_code == 5


def test_address_of_non_gpu(kpro6: HostFacts) -> None:
    """An address that exists but is not a display controller is named as such."""
    nvme = next(f for f in kpro6.functions if f.pci_class >> 8 == 0x0108)
    text = spec_text(LXC.format(select=f'gpus = ["{nvme.address}"]'))
    with pytest.raises(PlanError) as err:
        plan(kpro6, parse_spec(text))
    assert codes(err.value) == [("address-not-a-gpu", "pools[0].gpus[0]")]


def test_count_takes_what_others_leave(kpro6: HostFacts) -> None:
    """`count` pools take unclaimed GPUs in PCI order; too many is refused."""
    text = spec_text(LXC.format(select="count = 2"), VFIO.format(select="numa_node = 0"))
    result = plan(kpro6, parse_spec(text))
    assert [g.address.short for g in result.pools[0].gpus] == ["81:00.0", "91:00.0"]
    with pytest.raises(PlanError) as err:
        plan(kpro6, parse_spec(text.replace("count = 2", "count = 5")))
    assert codes(err.value) == [("not-enough-gpus", "pools[0].count")]


def test_vfio_refused_without_iommu(fixture_root: Root) -> None:
    """A vfio pool on a host whose IOMMU is off is refused with the fix."""
    facts = discover(fixture_root("no-iommu"))
    text = spec_text(VFIO.format(select="count = 1"), node=facts.node)
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(text))
    assert [p.code for p in err.value.problems] == ["no-iommu"]
    assert "intel_iommu=on" in err.value.problems[0].fix


def test_foreign_device_in_group(fixture_root: Root) -> None:
    """A GPU whose IOMMU group also holds an NVMe is never passed through."""
    facts = discover(fixture_root("shared-group"))
    shared = next(
        g
        for g in facts.gpus
        if any(
            not (f := facts.function(a)) or f.pci_class >> 8 == 0x0108
            for a in facts.group(g.iommu_group).members  # type: ignore[arg-type, union-attr]
        )
    )
    text = spec_text(VFIO.format(select=f'gpus = ["{shared.address}"]'), node=facts.node)
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(text))
    problem = err.value.problems[0]
    assert problem.code == "foreign-device-in-group"
    assert problem.subject == str(shared.address)
    assert "take that device away from the host" in problem.message


def test_missing_container_config(kpro6: HostFacts) -> None:
    """A container that does not exist is refused: Proxmox creates containers."""
    text = spec_text(LXC.format(select="numa_node = 0").replace("129", "4242"))
    with pytest.raises(PlanError) as err:
        plan(kpro6, parse_spec(text))
    assert codes(err.value) == [("lxc-config-missing", "etc/pve/lxc/4242.conf")]


def test_minor_unknown_on_vfio_gpu(fixture_root: Root) -> None:
    """After a split, giving a vfio-bound GPU to a container asks for a revert first."""
    facts = discover(fixture_root("kpro6-split"))
    text = spec_text(LXC.format(select="numa_node = 1"))
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(text))
    assert {p.code for p in err.value.problems} == {"gpu-minor-unknown"}
    assert len(err.value.problems) == 4


def test_vfio_ids_that_grab_host_gpus(kpro6: HostFacts) -> None:
    """An existing `vfio-pci ids=10de:2bb5` would take the container's GPUs: refused."""
    facts = attrs.evolve(
        kpro6, vfio_ids=(VfioIdsSetting("etc/modprobe.d/vfio.conf", ("10de:2bb5",)),)
    )
    with pytest.raises(PlanError) as err:
        plan(facts, load_spec(REPO / "examples" / "kpro6.toml"))
    assert codes(err.value) == [("vfio-ids-grab-host-gpu", "etc/modprobe.d/vfio.conf")]


def test_plan_is_pure(kpro6: HostFacts) -> None:
    """The same facts and spec give equal plans."""
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    assert plan(kpro6, spec) == plan(kpro6, spec)


def test_hand_made_binder_unit_is_flagged(kpro6: HostFacts) -> None:
    """A leftover hand-made vfio unit (the seed's gpu-vfio-split.service) is warned about."""
    legacy = ConfigFile(
        "etc/systemd/system/gpu-vfio-split.service",
        "[Service]\nType=oneshot\nExecStart=/usr/local/bin/gpu-vfio-split.sh\n"
        "# echo vfio-pci > /sys/bus/pci/devices/$d/driver_override\n",
    )
    unrelated = ConfigFile("etc/systemd/system/backup.service", "[Service]\nExecStart=/bin/true\n")
    facts = attrs.evolve(kpro6, files=(*kpro6.files, legacy, unrelated))
    findings = plan(facts, load_spec(REPO / "examples" / "kpro6.toml")).findings
    flagged = [f for f in findings if f.code == "other-gpu-binder"]
    assert [f.subject for f in flagged] == ["etc/systemd/system/gpu-vfio-split.service"]
    assert "systemctl disable --now gpu-vfio-split.service" in flagged[0].message


def test_earlier_softdep_for_a_vm_driver_is_flagged(kpro6: HostFacts) -> None:
    """An earlier modprobe.d softdep for nvidia (kmod keeps only the first) is warned about."""
    shadow = ConfigFile("etc/modprobe.d/nvidia.conf", "softdep nvidia post: nvidia-uvm\n")
    harmless = ConfigFile("etc/modprobe.d/a-vfio.conf", "softdep nvidia pre: vfio-pci\n")
    later = ConfigFile("etc/modprobe.d/zz.conf", "softdep nvidia post: nvidia-drm\n")
    facts = attrs.evolve(kpro6, files=(*kpro6.files, shadow, harmless, later))
    findings = plan(facts, load_spec(REPO / "examples" / "kpro6.toml")).findings
    flagged = [f.subject for f in findings if f.code == "softdep-shadowed"]
    assert flagged == ["etc/modprobe.d/nvidia.conf"]


def test_minors_that_change_at_reboot_are_flagged(kpro6: HostFacts) -> None:
    """Container on NUMA 1 (minors 4..7), NUMA 0 to vfio: after reboot they are 0..3."""
    text = spec_text(LXC.format(select="numa_node = 1"), VFIO.format(select="numa_node = 0"))
    findings = plan(kpro6, parse_spec(text)).findings
    flagged = [f for f in findings if f.code == "minors-change-at-reboot"]
    assert [f.subject for f in flagged] == ["ct"]
    assert (
        "81:00.0: 4 -> 0, 91:00.0: 5 -> 1, e1:00.0: 6 -> 2, f1:00.0: 7 -> 3" in flagged[0].message
    )
    reference = plan(kpro6, load_spec(REPO / "examples" / "kpro6.toml")).findings
    assert "minors-change-at-reboot" not in {f.code for f in reference}


# --- refusals that need the existing files: plan(), never a renderer -------------------

LXC_PATH = "etc/pve/lxc/129.conf"
VM_PATH = "etc/pve/qemu-server/140.conf"


def built_spec(
    *,
    vm_gpus: tuple[str, ...] | None = None,
    vm_mapping: str | None = "pro6000-vm",
    lxc_mapping: str | None = None,
    style: DeviceStyle = DeviceStyle.DEV,
) -> Spec:
    """The kpro6 split as a program builds it (the spec loader's own checks not run)."""
    return Spec(
        "kpro6",
        (
            PoolSpec(
                "ct",
                numa_node=0,
                lxc=LxcSpec(129, style),
                mapping=MappingSpec(lxc_mapping) if lxc_mapping else None,
            ),
            PoolSpec(
                "vm",
                numa_node=None if vm_gpus else 1,
                gpus=vm_gpus,
                vfio=VfioSpec(VmSpec(140, numa=True)),
                mapping=MappingSpec(vm_mapping) if vm_mapping else None,
            ),
        ),
    )


def host(**files: str) -> HostFacts:
    return kpro6_facts({LXC_PATH: KPRO6_LXC_129, VM_PATH: KPRO6_VM_140, **files})


def refused(facts: HostFacts, spec: Spec) -> list[tuple[str, str]]:
    with pytest.raises(PlanError) as err:
        plan(facts, spec)
    return codes(err.value)


def test_vm_without_mapping_is_refused() -> None:
    """hostpci lines name a mapping; a VM pool without one is refused by plan()."""
    assert refused(host(), built_spec(vm_mapping=None)) == [("vm-without-mapping", "pool 'vm'")]


def test_vm_numa_over_two_nodes_is_refused() -> None:
    """NUMA pinning needs one node; a VM pool with GPUs on two cannot be pinned to both."""
    spec = built_spec(vm_gpus=("71:00.0", "81:00.0"))
    spec = attrs.evolve(
        spec, pools=(attrs.evolve(spec.pools[0], numa_node=None, count=1), spec.pools[1])
    )
    assert refused(host(), spec) == [("vm-numa-ambiguous", VM_PATH)]


def test_same_mapping_id_twice_is_refused() -> None:
    """Two pools under one mapping id would hand a VM GPUs of either pool."""
    spec = built_spec(lxc_mapping="pro6000-vm")
    assert refused(host(), spec) == [
        ("mapping-id-twice", "etc/pve/mapping/pci.cfg mapping 'pro6000-vm'")
    ]


def test_broken_pci_cfg_is_refused() -> None:
    """A pci.cfg Proxmox would misread is not patched: plan() names its line."""
    broken = KPRO6_PCI_CFG.replace("\n\npro6000\n", "\npro6000\n")
    facts = host(**{"etc/pve/mapping/pci.cfg": broken})
    assert refused(facts, built_spec()) == [("pcicfg-syntax", "etc/pve/mapping/pci.cfg line 4")]


def test_raw_lines_without_uvm_major_are_refused() -> None:
    """Raw cgroup rules need nvidia-uvm's dynamic major; without the module loaded there
    is none to write, so plan() refuses (devN style only warns)."""
    facts = host()
    facts = attrs.evolve(
        facts, char_majors=tuple(c for c in facts.char_majors if c.name != "nvidia-uvm")
    )
    assert refused(facts, built_spec(style=DeviceStyle.RAW)) == [
        ("nvidia-uvm-major-unknown", LXC_PATH)
    ]
    assert {f.code for f in plan(facts, built_spec()).findings} >= {"nvidia-uvm-not-loaded"}


def test_every_existing_file_problem_comes_at_once() -> None:
    """No devN slot left, a raw hostpci line mixing a pool GPU with the container's one
    (which the VM would take from it), and NUMA pinning without `memory:`: one PlanError
    with all four."""
    lxc = "".join(f"dev{i}: /dev/loop{i}\n" for i in range(256)) + KPRO6_LXC_129
    vm = KPRO6_VM_140.replace("memory: 262144\n", "").replace(
        "machine: q35\n", "hostpci9: 0000:81:00;0000:01:00\nmachine: q35\n"
    )
    number = vm.splitlines().index("hostpci9: 0000:81:00;0000:01:00") + 1
    assert refused(kpro6_facts({LXC_PATH: lxc, VM_PATH: vm}), built_spec()) == [
        ("lxc-dev-slots-full", "devN entries"),
        ("vm-hostpci-mixed", f"{VM_PATH} line {number}"),
        ("vm-memory-unset", VM_PATH),
        ("vm-takes-pool-gpu", f"{VM_PATH} line {number}"),
    ]


def test_facts_lookups_see_the_facts_they_belong_to(kpro6: HostFacts) -> None:
    """Lookups are indexed once per facts value; an evolved copy indexes its own."""
    gpu = kpro6.gpus[0]
    assert kpro6.gpu(gpu.address) == gpu
    assert kpro6.function(gpu.address) == gpu.function
    assert kpro6.slot_functions(gpu.address) == gpu.functions
    assert kpro6.file("etc/pve/lxc/129.conf") is not None
    fewer = attrs.evolve(kpro6, gpus=kpro6.gpus[1:], files=())
    assert fewer.gpu(gpu.address) is None
    assert fewer.file("etc/pve/lxc/129.conf") is None
    assert fewer == attrs.evolve(kpro6, gpus=kpro6.gpus[1:], files=())


def test_raw_mode_says_the_uvm_major_can_change() -> None:
    """Raw lines carry nvidia-uvm's major, which the kernel assigns at module load: the
    plan says so (and that `check` catches a stale one); devN lines need no major."""
    from bundled import example_plan

    (raw,) = [f for f in example_plan("kpro6-raw").findings if f.code == "nvidia-uvm-major-dynamic"]
    assert raw.subject == "etc/pve/lxc/129.conf"
    assert "major 509" in raw.message and "pvegpu check" in raw.message
    assert not [f for f in example_plan("kpro6").findings if f.code == "nvidia-uvm-major-dynamic"]
