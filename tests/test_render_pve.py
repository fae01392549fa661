from __future__ import annotations

import re
from collections.abc import Callable

import attrs
from hypothesis import event, given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from depth import examples
from pvegpu.diagnostic import Severity
from pvegpu.errors import PlanError
from pvegpu.model.artifact import HOST, REVIEW, Artifact
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.model.schema import (
    DeviceStyle,
    LxcSpec,
    MappingSpec,
    PoolSpec,
    ServingSpec,
    Spec,
    VfioSpec,
    VmSpec,
)
from pvegpu.planning import planner
from pvegpu.pvefiles import pcicfg
from pvegpu.rendering.lxc import render_lxc_configs
from pvegpu.rendering.pci_cfg import render_pci_cfg
from pvegpu.rendering.vm import render_vm_configs
from strategies import (
    KPRO6_LXC_129,
    KPRO6_PCI_CFG,
    KPRO6_VM_140,
    kpro6,
    lxc_configs,
    pci_mappings,
    vm_configs,
)

Golden = Callable[[str], SnapshotAssertion]
LXC_PATH = "etc/pve/lxc/129.conf"
VM_PATH = "etc/pve/qemu-server/140.conf"
KPRO6_FILES = {LXC_PATH: KPRO6_LXC_129, pcicfg.PATH: KPRO6_PCI_CFG, VM_PATH: KPRO6_VM_140}


def kpro6_plan(
    style: DeviceStyle = DeviceStyle.DEV,
    *,
    files: dict[str, str] | None = None,
    numa: bool = True,
    facts: HostFacts | None = None,
    serving: ServingSpec | None = None,
    lxc_gpus: tuple[str, ...] | None = None,
    vm: bool = True,
) -> Plan:
    """The kpro6 split as plan() makes it: NUMA 0 GPUs (minors 0-3) to LXC 129, NUMA 1
    GPUs to vfio-pci behind mapping pro6000-vm for VM 140; both pools own a mapping."""
    facts = facts or kpro6(KPRO6_FILES if files is None else files)
    container = PoolSpec(
        "sglang",
        numa_node=None if lxc_gpus else 0,
        gpus=lxc_gpus,
        lxc=LxcSpec(129, style, serving=serving),
        mapping=MappingSpec("pro6000", "LXC-side GPUs on NUMA 0"),
    )
    machine = PoolSpec(
        "snp-vm",
        numa_node=1,
        vfio=VfioSpec(VmSpec(140, numa)),
        mapping=MappingSpec("pro6000-vm", "VM-side GPUs on NUMA 1"),
    )
    return planner.plan(facts, Spec("kpro6", (container, machine) if vm else (container,)))


def only(artifacts: tuple[Artifact, ...]) -> Artifact:
    assert len(artifacts) == 1
    return artifacts[0]


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


def test_lxc_dev_style_without_uvm_is_a_finding_not_a_reason() -> None:
    """devN for /dev/nvidia-uvm fails the start while nvidia-uvm is not loaded: said on the
    container's config, with the nodes unit that loads it before the container starts (in
    the runbook and at every boot); the artifact's reason only says what changes."""
    facts = kpro6(KPRO6_FILES)
    facts = attrs.evolve(
        facts, char_majors=tuple(c for c in facts.char_majors if c.name != "nvidia-uvm")
    )
    result = kpro6_plan(facts=facts)
    (finding,) = [f for f in result.findings if f.code == "nvidia-uvm-not-loaded"]
    assert (finding.severity, finding.subject) == (Severity.INFO, LXC_PATH)
    assert "pvegpu-device-nodes.service loads it" in finding.message
    assert "nvidia-modprobe -u -c=0" in finding.message
    assert "nvidia-uvm is not loaded" not in only(render_lxc_configs(result)).reason
    assert "nvidia-uvm-not-loaded" not in {f.code for f in kpro6_plan().findings}


SERVING = ServingSpec(version="0.5.23", model_path="/models/qwen")


def serving_plan(lxc_conf: str = KPRO6_LXC_129) -> Plan:
    """LXC 129 alone, serving SGLang (so its unit is pinned to NUMA node 0)."""
    return kpro6_plan(files={LXC_PATH: lxc_conf}, serving=SERVING, vm=False)


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


def test_lxc_cores_beyond_the_node_are_a_finding() -> None:
    """More cores than the node has CPUs cannot be honoured inside the pinned cpuset: a
    warning on the container's config, not a clause of the artifact's reason."""
    result = serving_plan(KPRO6_LXC_129.replace("cores: 64\n", "cores: 96\n", 1))
    (finding,) = [f for f in result.findings if f.code == "lxc-cores-beyond-node"]
    assert (finding.severity, finding.subject) == (Severity.WARNING, LXC_PATH)
    assert finding.message.startswith("cores: 96 > 64 CPUs of NUMA node 0")
    assert "cores" not in only(render_lxc_configs(result)).reason
    assert "lxc-cores-beyond-node" not in {f.code for f in serving_plan().findings}


def test_lxc_without_a_single_serving_node_leaves_the_cpuset_alone() -> None:
    """No serving section, or GPUs over two nodes (the unit is not pinned): no cpuset line,
    and an existing one stays as it was."""
    old = KPRO6_LXC_129.replace(
        "lxc.apparmor.profile: unconfined\n",
        "lxc.apparmor.profile: unconfined\nlxc.cgroup2.cpuset.cpus: 32-47\n",
        1,
    )
    plain = kpro6_plan(files={LXC_PATH: old}, vm=False)
    spread = kpro6_plan(
        files={LXC_PATH: old},
        serving=attrs.evolve(SERVING, allow_multi_numa=True),
        lxc_gpus=("01:00.0", "11:00.0", "81:00.0", "91:00.0"),
        vm=False,
    )
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
    artifact = only(render_pci_cfg(kpro6_plan(files={LXC_PATH: KPRO6_LXC_129})))
    assert artifact.base is None
    assert pcicfg.parse(artifact.content)[1].maps[0].value == (
        "id=10de:2bb5,iommugroup=40,node=kpro6,path=0000:81:00,subsystem-id=10de:204b"
    )


def test_pci_cfg_uses_the_plans_map_lines_as_given() -> None:
    """Map lines the plan already built are written as they are, not rebuilt."""
    plan = kpro6_plan()
    given = plan.pools[1].mapping
    assert given is not None
    given = attrs.evolve(given, maps=given.maps[:1])
    plan = attrs.evolve(plan, pools=(attrs.evolve(plan.pools[1], mapping=given),))
    out = {m.id: m for m in pcicfg.parse_mappings(only(render_pci_cfg(plan)).content)}
    assert out["pro6000-vm"].maps == given.maps
    # The LXC pool is not in this plan: its old section stays as it was.
    assert len(out["pro6000"].maps) == 8


def test_pci_cfg_dropped_comments_are_a_finding() -> None:
    """Comments inside a pool's mapping do not survive its write (Proxmox's drops them
    too): an info finding on pci.cfg names them; the artifact's reason only says what
    changes. A comment outside the pools' mappings is kept, like every other byte."""
    cfg = "# do not edit\n" + KPRO6_PCI_CFG.replace("pro6000\n", "pro6000\n# was 8 GPUs\n")
    result = kpro6_plan(files={**KPRO6_FILES, pcicfg.PATH: cfg})
    (finding,) = [f for f in result.findings if f.code == "pcicfg-comments-dropped"]
    assert (finding.severity, finding.subject) == (Severity.INFO, pcicfg.PATH)
    assert "drops 1 # comment line (line 7) inside the mappings it writes anew" in finding.message
    artifact = only(render_pci_cfg(result))
    assert "comment" not in artifact.reason
    assert artifact.content.startswith("# do not edit\nnic-x710\n")
    assert "# was 8 GPUs" not in artifact.content
    assert "pcicfg-comments-dropped" not in {f.code for f in kpro6_plan().findings}


def test_pci_cfg_nothing_to_map() -> None:
    """No pool with a mapping: pci.cfg is not touched at all."""
    plan = kpro6_plan()
    plan = attrs.evolve(plan, pools=tuple(attrs.evolve(p, mapping=None) for p in plan.pools))
    assert render_pci_cfg(plan) == ()


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


def test_vm_config_not_q35_is_a_finding() -> None:
    """An i440fx VM gets hostpci without pcie=1; a warning on the VM's config gives the
    fix, and the artifact's reason only says what changes."""
    files = {**KPRO6_FILES, VM_PATH: KPRO6_VM_140.replace("machine: q35\n", "")}
    result = kpro6_plan(files=files, numa=False)
    (finding,) = [f for f in result.findings if f.code == "vm-not-q35"]
    assert (finding.severity, finding.subject) == (Severity.WARNING, VM_PATH)
    assert "qm set 140 --machine q35" in finding.message
    artifact = only(render_vm_configs(result))
    assert "pcie=1" not in artifact.content
    assert artifact.reason == (
        "VM 140: hostpci0, hostpci1, hostpci2, hostpci3 use mapping pro6000-vm"
    )
    assert "vm-not-q35" not in {f.code for f in kpro6_plan().findings}


def test_vm_missing_gets_a_review_snippet(golden: Golden) -> None:
    """pvegpu never creates a VM: a missing one gets review-only lines to add."""
    artifact = only(render_vm_configs(kpro6_plan(files={LXC_PATH: KPRO6_LXC_129})))
    assert (artifact.path, artifact.target, artifact.base) == (
        "snippets/qemu-server/140.conf",
        REVIEW,
        None,
    )
    assert artifact.content == golden("conf")


def vm_with(line: str) -> dict[str, str]:
    """VM 140's config with one more line, where qemu-server sorts it (before `machine`)."""
    return {
        **KPRO6_FILES,
        VM_PATH: KPRO6_VM_140.replace("machine: q35\n", f"{line}\nmachine: q35\n"),
    }


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
    """A raw line for a GPU in no pool (71:00.0, on nvidia) is not the pool's. (One of a
    container pool's GPUs would be refused: vm-takes-pool-gpu, test_whole_host_guests.)"""
    files = vm_with("hostpci0: 0000:71:00")
    lxc_gpus = ("01:00.0", "11:00.0", "61:00.0")
    artifact = only(render_vm_configs(kpro6_plan(files=files, numa=False, lxc_gpus=lxc_gpus)))
    assert "hostpci0: 0000:71:00\n" in artifact.content
    assert "raw host address" not in artifact.reason


# --- renderers only format: every plan() accepts renders -------------------------------

_REFUSABLE_VM_LINES = (
    "hostpci14: 0000:81:00;0000:01:00",  # a pool GPU with a host-side one: vm-hostpci-mixed
    *(f"hostpci{i}: 0000:c{i:x}:00" for i in range(10, 16)),  # fills slots: vm-hostpci-full
)


@st.composite
def kpro6_files(draw: st.DrawFn) -> dict[str, str]:
    """Existing guest configs and pci.cfg as hand edits leave them, some of which plan()
    must refuse: devN slots used up, a mixed raw hostpci line, no `memory:` for NUMA
    pinning, a pci.cfg section without its closing blank line."""
    lxc, vm = draw(lxc_configs()), draw(vm_configs())
    lxc_text = lxc.text
    if draw(st.booleans()):
        taken = draw(st.integers(240, 256))
        lxc_text = "".join(f"dev{i}: /dev/loop{i}\n" for i in range(21, taken)) + lxc_text
    vm_text = vm.text
    if draw(st.booleans()):
        vm_text = re.sub(r"(?m)^memory: .*\n", "", vm_text)
    extra = draw(st.lists(st.sampled_from(_REFUSABLE_VM_LINES), unique=True, max_size=7))
    vm_text = "".join(f"{line}\n" for line in extra) + vm_text
    files = {LXC_PATH: lxc_text, VM_PATH: vm_text}
    mappings = draw(st.none() | pci_mappings)
    if mappings is not None:
        text = pcicfg.format(mappings)
        if draw(st.booleans()):
            text = "# kept by hand\n" + text.replace("\n\n", "\n", 1)
        files[pcicfg.PATH] = text
    return files


@settings(max_examples=examples(150), deadline=None)
@given(kpro6_files(), st.sampled_from(DeviceStyle), st.booleans())
def test_render_never_refuses_an_accepted_plan(
    files: dict[str, str], style: DeviceStyle, numa: bool
) -> None:
    """plan() finds every problem of the existing files; a renderer raising on a plan it
    accepted would be a bug. Refused plans must name one of the existing files' codes."""
    try:
        result = kpro6_plan(style, files=files, numa=numa)
    except PlanError as error:
        codes = {p.code for p in error.problems}
        assert codes <= {
            "lxc-dev-slots-full",
            "vm-hostpci-mixed",
            "vm-hostpci-full",
            "vm-memory-unset",
            "pcicfg-syntax",
            # the raw line above also hands the VM 01:00, LXC 129's GPU
            "vm-takes-pool-gpu",
            # `lxc.cgroup2.devices.allow: a` also grants the VM's GPUs to the container
            "lxc-grants-all-gpus",
            # a pending devN for a VM GPU
            "pending-grants-pool-gpu",
            # a /dev/nvidia-caps node, and kpro6 has no MIG instance it could belong to
            "lxc-mig-caps-unknown",
        }
        event("refused")
        return
    event("accepted")
    render_lxc_configs(result)
    render_pci_cfg(result)
    render_vm_configs(result)
