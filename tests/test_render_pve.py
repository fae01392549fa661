from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

from pvegpu.errors import RenderError
from pvegpu.host.facts import HostFacts
from pvegpu.planning.plan import LxcContainer, PciMapping, Plan, Pool, PoolKind, VmGuest
from pvegpu.pvefiles import pcicfg
from pvegpu.rendering.artifact import HOST, REVIEW, Artifact
from pvegpu.rendering.pve import render_lxc_configs, render_pci_cfg, render_vm_configs
from pvegpu.spec.schema import (
    DeviceStyle,
    LxcSpec,
    MappingSpec,
    PoolSpec,
    ServingSpec,
    Spec,
    VfioSpec,
    VmSpec,
)
from strategies import KPRO6_LXC_129, KPRO6_PCI_CFG, KPRO6_VM_140, kpro6

Golden = Callable[[str], SnapshotAssertion]
LXC_PATH = "etc/pve/lxc/129.conf"
VM_PATH = "etc/pve/qemu-server/140.conf"


def kpro6_plan(
    style: DeviceStyle = DeviceStyle.DEV,
    *,
    files: dict[str, str] | None = None,
    numa: bool = True,
    facts: HostFacts | None = None,
) -> Plan:
    """The kpro6 split as plan() makes it: NUMA 0 GPUs (minors 0-3) to LXC 129, NUMA 1
    GPUs to vfio-pci behind mapping pro6000-vm for VM 140; both pools own a mapping."""
    if files is None:
        files = {LXC_PATH: KPRO6_LXC_129, pcicfg.PATH: KPRO6_PCI_CFG, VM_PATH: KPRO6_VM_140}
    facts = facts or kpro6(files)
    spec = Spec(
        "kpro6",
        (
            PoolSpec(
                "sglang",
                numa_node=0,
                lxc=LxcSpec(129, style),
                mapping=MappingSpec("pro6000", "LXC-side GPUs on NUMA 0"),
            ),
            PoolSpec(
                "snp-vm",
                numa_node=1,
                vfio=VfioSpec(VmSpec(140, numa)),
                mapping=MappingSpec("pro6000-vm", "VM-side GPUs on NUMA 1"),
            ),
        ),
    )
    host, vm = facts.gpus[:4], facts.gpus[4:]
    pools = (
        Pool(
            "sglang",
            PoolKind.LXC,
            host,
            tuple(f for g in host for f in g.functions),
            "nvidia",
            (0,),
            lxc=LxcContainer(129, style, "0666", None, facts.file(LXC_PATH)),
            mapping=PciMapping("pro6000", description="LXC-side GPUs on NUMA 0"),
        ),
        Pool(
            "snp-vm",
            PoolKind.VFIO,
            vm,
            tuple(f for g in vm for f in g.functions),
            "vfio-pci",
            (1,),
            vm=VmGuest(140, numa, facts.file(VM_PATH)),
            mapping=PciMapping("pro6000-vm", description="VM-side GPUs on NUMA 1"),
        ),
    )
    return Plan(facts, spec, pools)


def only(artifacts: tuple[Artifact, ...]) -> Artifact:
    assert len(artifacts) == 1
    return artifacts[0]


def problems(render: Callable[[Plan], object], plan: Plan) -> list[tuple[str, str]]:
    with pytest.raises(RenderError) as caught:
        render(plan)
    return [(p.code, p.subject) for p in caught.value.problems]


def test_lxc_config_dev_style(golden: Golden) -> None:
    """kpro6 LXC 129: the four NUMA 0 GPUs by minor as devN entries; snapshot untouched."""
    plan = kpro6_plan()
    artifact = only(render_lxc_configs(plan))
    assert (artifact.path, artifact.mode, artifact.target) == (LXC_PATH, 0o640, HOST)
    assert artifact.base == plan.facts.file(LXC_PATH)
    assert artifact.reason == (
        "LXC 129: GPUs nvidia0, nvidia1, nvidia2, nvidia3 + nvidiactl, nvidia-uvm, "
        "nvidia-uvm-tools as devN entries, replacing 13 old GPU lines; other lines and "
        "snapshots kept"
    )
    assert artifact.content == golden("conf")


def test_lxc_config_raw_style(golden: Golden) -> None:
    """Raw style: per-minor cgroup rules and binds for exactly the pool's GPUs."""
    artifact = only(render_lxc_configs(kpro6_plan(DeviceStyle.RAW)))
    assert "c 195:*" not in artifact.content.split("[pre-split]")[0]
    assert artifact.content == golden("conf")


def test_lxc_config_rendered_twice_is_a_stated_no_op() -> None:
    """Rendering against the already-patched file gives it back, saying so."""
    first = only(render_lxc_configs(kpro6_plan()))
    again = only(
        render_lxc_configs(
            kpro6_plan(
                files={LXC_PATH: first.content, pcicfg.PATH: KPRO6_PCI_CFG, VM_PATH: KPRO6_VM_140}
            )
        )
    )
    assert again.content == first.content
    assert again.reason.startswith("LXC 129 already has exactly these GPU lines")


def test_lxc_config_missing_is_refused() -> None:
    """Containers are created by Proxmox: a missing config is an error with the fix."""
    plan = kpro6_plan(files={})
    with pytest.raises(RenderError) as caught:
        render_lxc_configs(plan)
    (problem,) = caught.value.problems
    assert (problem.code, problem.subject) == ("lxc-config-missing", LXC_PATH)
    assert "pct create 129" in problem.fix


def test_lxc_problems_of_all_pools_come_together() -> None:
    """Two broken pools give two problems in one error, not the first only."""
    plan = kpro6_plan(files={})
    second = attrs.evolve(
        plan.pools[0], name="b", lxc=LxcContainer(130, DeviceStyle.DEV, "0666", None, None)
    )
    plan = attrs.evolve(plan, pools=(*plan.pools, second))
    assert problems(render_lxc_configs, plan) == [
        ("lxc-config-missing", LXC_PATH),
        ("lxc-config-missing", "etc/pve/lxc/130.conf"),
    ]


def test_lxc_dev_style_without_uvm_warns_in_the_reason() -> None:
    """devN for /dev/nvidia-uvm fails the start while nvidia-uvm is not loaded: say so."""
    plan = kpro6_plan()
    facts = attrs.evolve(
        plan.facts, char_majors=tuple(c for c in plan.facts.char_majors if c.name != "nvidia-uvm")
    )
    artifact = only(render_lxc_configs(attrs.evolve(plan, facts=facts)))
    assert artifact.reason.endswith(
        "nvidia-uvm is not loaded: load it before starting the container"
    )


SERVING = ServingSpec("0.5.23", "/models/qwen")


def serving_plan(lxc_conf: str = KPRO6_LXC_129) -> Plan:
    """kpro6_plan with SGLang served from LXC 129 (so its unit is pinned to NUMA node 0)."""
    plan = kpro6_plan(files={LXC_PATH: lxc_conf})
    return attrs.evolve(plan, pools=(attrs.evolve(plan.pools[0], serving=SERVING),))


def _main(text: str) -> list[str]:
    return text.split("\n[pre-split]\n")[0].splitlines()


def test_lxc_serving_pool_pins_the_container_cpuset() -> None:
    """A serving pool on one node owns lxc.cgroup2.cpuset.cpus: that node's CPUs, so the
    unit's CPUAffinity is inside the container's CPU set; the reason says so."""
    artifact = only(render_lxc_configs(serving_plan()))
    main = _main(artifact.content)
    assert [line for line in main if "cpuset" in line] == ["lxc.cgroup2.cpuset.cpus: 0-31,64-95"]
    assert (
        main.index("lxc.cgroup2.cpuset.cpus: 0-31,64-95")
        == main.index("lxc.apparmor.profile: unconfined") + 1
    )
    assert (
        "; lxc.cgroup2.cpuset.cpus: 0-31,64-95 pins the container to NUMA node 0, the serving "
        "unit's CPUAffinity; other lines and snapshots kept"
    ) in artifact.reason
    assert "lower cores" not in artifact.reason


def test_lxc_serving_cpuset_replaces_an_old_pin_and_is_a_no_op_twice() -> None:
    """An old cpuset line gives way to the node's; rendering the result again changes
    nothing and says so."""
    old = KPRO6_LXC_129.replace(
        "lxc.apparmor.profile: unconfined\n",
        "lxc.apparmor.profile: unconfined\nlxc.cgroup2.cpuset.cpus: 32-47\n",
        1,
    )
    first = only(render_lxc_configs(serving_plan(old)))
    assert "32-47" not in first.content
    again = only(render_lxc_configs(serving_plan(first.content)))
    assert again.content == first.content
    assert again.reason == (
        "LXC 129 already has exactly these GPU lines (nvidia0, nvidia1, nvidia2, nvidia3) "
        "and CPU set (NUMA node 0)"
    )


def test_lxc_cores_beyond_the_node_are_warned_about() -> None:
    """More cores than the node has CPUs cannot be honoured inside the pinned cpuset."""
    plan = serving_plan(KPRO6_LXC_129.replace("cores: 64\n", "cores: 96\n", 1))
    artifact = only(render_lxc_configs(plan))
    assert artifact.reason.endswith("; cores: 96 > 64 CPUs of NUMA node 0: lower cores")


def test_lxc_without_a_single_serving_node_leaves_the_cpuset_alone() -> None:
    """No serving section, or GPUs over two nodes (the unit is not pinned): no cpuset line,
    and an existing one stays as it was."""
    old = KPRO6_LXC_129.replace(
        "lxc.apparmor.profile: unconfined\n",
        "lxc.apparmor.profile: unconfined\nlxc.cgroup2.cpuset.cpus: 32-47\n",
        1,
    )
    plain = kpro6_plan(files={LXC_PATH: old})
    spread = serving_plan(old)
    spread = attrs.evolve(spread, pools=(attrs.evolve(spread.pools[0], numa_nodes=(0, 1)),))
    for plan in (plain, spread):
        artifact = only(render_lxc_configs(plan))
        assert [line for line in _main(artifact.content) if "cpuset" in line] == [
            "lxc.cgroup2.cpuset.cpus: 32-47"
        ]
        assert "cpuset" not in artifact.reason


def test_pci_cfg(golden: Golden) -> None:
    """pro6000 shrinks to the NUMA 0 GPUs in place, pro6000-vm is appended, the NIC stays."""
    plan = kpro6_plan()
    artifact = only(render_pci_cfg(plan))
    assert (artifact.path, artifact.mode) == (pcicfg.PATH, 0o640)
    assert artifact.base == plan.facts.file(pcicfg.PATH)
    assert artifact.reason == (
        "PCI mappings pro6000 (4 devices), pro6000-vm (4 devices) on kpro6, "
        "from discovered sysfs values"
    )
    assert [m.id for m in pcicfg.parse_mappings(artifact.content)] == [
        "nic-x710",
        "pro6000",
        "pro6000-vm",
    ]
    assert artifact.content == golden("cfg")


def test_pci_cfg_created_when_absent() -> None:
    """No pci.cfg yet: a new file (no base) in canonical form."""
    artifact = only(render_pci_cfg(kpro6_plan(files={})))
    assert artifact.base is None
    assert pcicfg.parse(artifact.content)[1].maps[0].value == (
        "id=10de:2bb5,iommugroup=40,node=kpro6,path=0000:81:00,subsystem-id=10de:204b"
    )


def test_pci_cfg_uses_the_plans_map_lines_as_given() -> None:
    """Map lines the plan already built are written as they are, not rebuilt."""
    plan = kpro6_plan()
    given = pcicfg.mapping_for_pool(plan.facts, plan.pools[1], "pro6000-vm")
    given = attrs.evolve(given, maps=given.maps[:1])
    plan = attrs.evolve(plan, pools=(attrs.evolve(plan.pools[1], mapping=given),))
    out = {m.id: m for m in pcicfg.parse_mappings(only(render_pci_cfg(plan)).content)}
    assert out["pro6000-vm"].maps == given.maps
    # The LXC pool is not in this plan: its old section stays as it was.
    assert len(out["pro6000"].maps) == 8


def test_pci_cfg_reports_dropped_comments() -> None:
    """Comments do not survive a write (Proxmox drops them too): the reason says so."""
    files = {pcicfg.PATH: "# do not edit\n" + KPRO6_PCI_CFG}
    artifact = only(render_pci_cfg(kpro6_plan(files=files)))
    assert artifact.reason.endswith("drops 1 # comment line, as every Proxmox write does")


def test_pci_cfg_nothing_to_map() -> None:
    """No pool with a mapping: pci.cfg is not touched at all."""
    plan = kpro6_plan()
    plan = attrs.evolve(plan, pools=tuple(attrs.evolve(p, mapping=None) for p in plan.pools))
    assert render_pci_cfg(plan) == ()


def test_pci_cfg_same_mapping_id_twice_is_refused() -> None:
    """Two pools under one mapping id would hand a VM GPUs of either pool."""
    plan = kpro6_plan()
    clash = attrs.evolve(plan.pools[0], mapping=PciMapping("pro6000-vm"))
    plan = attrs.evolve(plan, pools=(clash, plan.pools[1]))
    assert problems(render_pci_cfg, plan) == [
        ("mapping-id-twice", f"{pcicfg.PATH} mapping 'pro6000-vm'")
    ]


def test_pci_cfg_broken_existing_file_is_refused() -> None:
    """A pci.cfg Proxmox would misread is not patched: the problem names its line."""
    files = {pcicfg.PATH: KPRO6_PCI_CFG.replace("\n\npro6000\n", "\npro6000\n")}
    assert problems(render_pci_cfg, kpro6_plan(files=files)) == [
        ("pcicfg-syntax", f"{pcicfg.PATH} line 4")
    ]


def test_vm_config(golden: Golden) -> None:
    """VM 140: four hostpci over pro6000-vm with pcie=1, pinned to NUMA node 1."""
    plan = kpro6_plan()
    artifact = only(render_vm_configs(plan))
    assert (artifact.path, artifact.mode, artifact.base) == (
        VM_PATH,
        0o640,
        plan.facts.file(VM_PATH),
    )
    assert artifact.reason == (
        "VM 140: hostpci0, hostpci1, hostpci2, hostpci3 use mapping pro6000-vm, pcie=1; "
        "pinned to NUMA node 1 (numa0, affinity 32-63,96-127)"
    )
    assert artifact.content == golden("conf")


def test_vm_config_not_q35_says_why_pcie_is_missing() -> None:
    """An i440fx VM gets hostpci without pcie=1, and the reason gives the fix."""
    files = {VM_PATH: KPRO6_VM_140.replace("machine: q35\n", "")}
    artifact = only(render_vm_configs(kpro6_plan(files=files, numa=False)))
    assert "pcie=1" not in artifact.content
    assert artifact.reason.endswith(
        "no pcie=1: the machine is not q35 (qm set 140 --machine q35 for PCIe passthrough)"
    )


def test_vm_missing_gets_a_review_snippet(golden: Golden) -> None:
    """pvegpu never creates a VM: a missing one gets review-only lines to add."""
    artifact = only(render_vm_configs(kpro6_plan(files={})))
    assert (artifact.path, artifact.target, artifact.base) == (
        "snippets/qemu-server/140.conf",
        REVIEW,
        None,
    )
    assert artifact.content == golden("conf")


def vm_with(line: str) -> dict[str, str]:
    """VM 140's config with one more line, where qemu-server sorts it (before `machine`)."""
    return {VM_PATH: KPRO6_VM_140.replace("machine: q35\n", f"{line}\nmachine: q35\n")}


def test_vm_raw_address_of_a_pool_gpu_becomes_the_mapping() -> None:
    """A raw hostpci line for one of the pool's GPUs is converted in place, not doubled."""
    plan = kpro6_plan(files=vm_with("hostpci2: 0000:91:00,x-vga=1"), numa=False)
    artifact = only(render_vm_configs(plan))
    hostpci = [line for line in artifact.content.splitlines() if line.startswith("hostpci")]
    assert hostpci == [
        "hostpci0: mapping=pro6000-vm,pcie=1",
        "hostpci1: mapping=pro6000-vm,pcie=1",
        "hostpci2: mapping=pro6000-vm,pcie=1,x-vga=1",
        "hostpci3: mapping=pro6000-vm,pcie=1",
    ]
    assert artifact.reason == (
        "VM 140: hostpci0, hostpci1, hostpci2, hostpci3 use mapping pro6000-vm, pcie=1; "
        "raw host address of the pool's GPU on hostpci2 replaced by the mapping, options kept"
    )


def test_vm_raw_address_of_another_gpu_stays() -> None:
    """A raw line for a GPU outside the pool (NUMA 0's, on nvidia) is not the pool's."""
    artifact = only(
        render_vm_configs(kpro6_plan(files=vm_with("hostpci0: 0000:01:00"), numa=False))
    )
    assert "hostpci0: 0000:01:00\n" in artifact.content
    assert "raw host address" not in artifact.reason


def test_vm_raw_line_mixing_pool_and_other_devices_is_refused() -> None:
    """A `;` list of a pool GPU and another device cannot be split: refused, naming the line."""
    files = vm_with("hostpci0: 0000:81:00;0000:01:00")
    number = files[VM_PATH].splitlines().index("hostpci0: 0000:81:00;0000:01:00") + 1
    assert problems(render_vm_configs, kpro6_plan(files=files, numa=False)) == [
        ("vm-hostpci-mixed", f"{VM_PATH} line {number}")
    ]


def test_vm_without_mapping_is_refused() -> None:
    """hostpci lines name a mapping; a VM pool without one cannot be rendered."""
    plan = kpro6_plan()
    plan = attrs.evolve(plan, pools=(attrs.evolve(plan.pools[1], mapping=None),))
    assert problems(render_vm_configs, plan) == [("vm-without-mapping", "pool 'snp-vm'")]


def test_vm_numa_over_two_nodes_is_refused() -> None:
    """NUMA pinning needs one node; GPUs on two cannot be pinned to both."""
    plan = kpro6_plan()
    plan = attrs.evolve(plan, pools=(attrs.evolve(plan.pools[1], numa_nodes=(0, 1)),))
    assert problems(render_vm_configs, plan) == [("vm-numa-ambiguous", VM_PATH)]
