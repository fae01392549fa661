"""Serving on AMD GPUs, and what `check` and the plan judge of any vendor's container nodes.

`amd-instinct` (fixtures/sysfs, examples/amd-instinct.toml): eight Instinct MI300X, NUMA
0's four serving SGLang's ROCm build in CT 150 (unprivileged, devN with mode 0660 and the
container's render gid 993, user sglang a member), NUMA 1's to VM 450 on vfio-pci; the
IOMMU translates DMA, so P2P is off.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

import fixture_hosts
from bundled import FIXTURES, copy_tree, example_plan
from pvegpu.apply.bundle import read_bundle_dir
from pvegpu.apply.check import check
from pvegpu.errors import PlanError
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json, facts_to_json
from pvegpu.model.decision import DecidedServer
from pvegpu.model.plan import Plan
from pvegpu.pipeline import check_host, discover_for, running_unit
from pvegpu.planning.planner import plan
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.registry import render
from pvegpu.spec.load import parse_spec
from pvegpu.testing import write_host
from pvegpu.vendors.amd import ROCM
from pvegpu.vendors.nvidia import CUDA

EXAMPLE = "amd-instinct"
SPEC_TEXT = (Path(__file__).parent.parent / "examples" / f"{EXAMPLE}.toml").read_text()
CT = "rpool/data/subvol-150-disk-0"
UNIT = f"{CT}/etc/systemd/system/sglang-qwen.service"
UNCHECKED = "container-runtime-unchecked"
NOBODY_IN_RENDER = fixture_hosts._UBUNTU_GROUP.replace("render:x:993:sglang", "render:x:993:")


def planned(text: str, root: Path = FIXTURES / EXAMPLE) -> Plan:
    spec = parse_spec(text)
    return plan(discover_for(spec, root), spec)


def serving_of(result: Plan) -> DecidedServer:
    (serving,) = [p.serving for p in result.pools if p.serving is not None]
    return serving


def refused(text: str, root: Path = FIXTURES / EXAMPLE) -> list[tuple[str, str]]:
    with pytest.raises(PlanError) as info:
        planned(text, root)
    return [(p.code, p.message) for p in info.value.problems]


# --- the server's environment


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_rocm_server_names_its_gpus_for_hip_and_turns_p2p_off(engine: str) -> None:
    text = (
        SPEC_TEXT
        if engine == "sglang"
        else SPEC_TEXT.replace('version = "0.5.23"', 'engine = "vllm"')
    )
    serving = serving_of(planned(text))
    env = dict(serving.environment)
    assert serving.runtime is ROCM and serving.tp_size == 4
    assert env["HIP_VISIBLE_DEVICES"] == "0,1,2,3"
    # No CUDA variable: HIP would narrow its GPUs by CUDA_VISIBLE_DEVICES too.
    assert not {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"} & set(env)
    # Translated DMA: RCCL reads NCCL's switch, and the custom all-reduce goes too.
    assert env["NCCL_P2P_DISABLE"] == "1" and not serving.p2p.enabled
    assert ("--disable-custom-all-reduce",) in serving.options
    assert serving.fit is not None and serving.fit.gpu_memory_bytes == 206141652992


def test_the_cuda_server_keeps_its_pci_order() -> None:
    serving = serving_of(example_plan("kpro6"))
    assert serving.runtime is CUDA
    assert serving.environment[:2] == (
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
    )


@pytest.mark.parametrize(
    "name", ["CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"]
)
def test_a_rocm_server_may_not_narrow_its_gpus_another_way(name: str) -> None:
    text = SPEC_TEXT.replace(
        'working_directory = "/home/sglang"',
        f'working_directory = "/home/sglang"\nenvironment = {{ {name} = "0" }}',
    )
    problems = refused(text)
    assert [c for c, _ in problems] == ["serving-env-selects-gpus"]
    assert name in problems[0][1] and "HIP_VISIBLE_DEVICES" in problems[0][1]


def test_intel_gpus_have_no_runtime_to_serve_on() -> None:
    text = (
        'node = "pve-media"\n\n[[pools]]\nname = "jellyfin"\ngpus = ["00:02.0"]\n\n'
        '[pools.lxc]\nvmid = 120\n\n[pools.lxc.serving]\nunit = "llm"\n'
        'python = "/usr/bin/python3"\nmodel_path = "/m"\nversion = "0.5.23"\n'
        'container_rootfs = "rpool/data/subvol-120-disk-0"\n'
    )
    problems = refused(text, FIXTURES / "intel-media")
    assert [c for c, _ in problems] == ["serving-gpu-no-runtime"]
    assert "8086:4690" in problems[0][1] and "CUDA or ROCm" in problems[0][1]


def test_unknown_memory_asks_the_vendors_tool(tmp_path: Path) -> None:
    """An MI325X (1002:74a5) is not in the table: the fix names rocm-smi, not nvidia-smi."""
    host = fixture_hosts.amd_instinct()
    devices = tuple(
        attrs.evolve(d, device=0x74A5, subsystem_device=0x74A5) if d.device == 0x74A1 else d
        for d in host.devices
    )
    write_host(attrs.evolve(host, devices=devices), tmp_path)
    with pytest.raises(PlanError) as info:
        planned(SPEC_TEXT, tmp_path)
    (problem,) = info.value.problems
    assert problem.code == "gpu-memory-unknown" and "rocm-smi --showmeminfo vram" in problem.fix


# --- the container's userspace and its user


def test_the_rocm_release_is_named_and_not_paired_with_amdgpu(tmp_path: Path) -> None:
    (finding,) = [
        f for f in example_plan(EXAMPLE).findings if f.code == "container-runtime-unchecked"
    ]
    assert "ROCm 6.4.1-120 (/opt/rocm/.info/version)" in finding.message
    assert "not compared" in finding.message
    root = copy_tree(FIXTURES / EXAMPLE, tmp_path / "root")
    (root / CT / "opt/rocm/.info/version").unlink()
    (finding,) = [
        f for f in planned(SPEC_TEXT, root).findings if f.code == "container-runtime-unchecked"
    ]
    assert "has no /opt/rocm/.info/version" in finding.message
    assert "amdgpu (the kernel's own: no /sys/module/amdgpu/version)" in finding.message
    (root / "sys/module/amdgpu").mkdir(parents=True, exist_ok=True)
    (root / "sys/module/amdgpu/version").write_text("6.12.12\n")
    (finding,) = [f for f in planned(SPEC_TEXT, root).findings if f.code == UNCHECKED]
    assert "the host runs amdgpu 6.12.12 (/sys/module/amdgpu/version" in finding.message


def test_an_nvidia_server_still_has_its_driver_compared() -> None:
    codes = {f.code for f in example_plan("kpro6").findings}
    assert "container-runtime-unchecked" not in codes


def _with_group(tmp_path: Path, group: str) -> Path:
    root = copy_tree(FIXTURES / EXAMPLE, tmp_path / "root")
    (root / CT / "etc/group").write_text(group)
    return root


def test_the_server_user_must_be_in_the_nodes_group(tmp_path: Path) -> None:
    problems = refused(SPEC_TEXT, _with_group(tmp_path, NOBODY_IN_RENDER))
    assert [c for c, _ in problems] == ["serving-user-cannot-open-gpus"]
    assert "group render (993)" in problems[0][1]
    # Everyone may open 0666 nodes: the group does not matter then.
    serving_of(planned(SPEC_TEXT.replace('mode = "0660"', 'mode = "0666"'), tmp_path / "root"))


def test_a_primary_group_counts_and_an_unknown_user_is_refused(tmp_path: Path) -> None:
    root = _with_group(
        tmp_path, fixture_hosts._UBUNTU_GROUP.replace("render:x:993:sglang", "render:x:993:")
    )
    passwd = root / CT / "etc/passwd"
    passwd.write_text(passwd.read_text().replace("sglang:x:1000:1000:", "sglang:x:1000:993:"))
    serving_of(planned(SPEC_TEXT, root))
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert [c for c, _ in refused(SPEC_TEXT, root)] == ["serving-user-unknown"]


# --- the runbook and check


def test_the_runbook_checks_the_nodes_group_and_mode() -> None:
    contract = render(example_plan(EXAMPLE))
    (summary,) = [a for a in contract if a.path == "SUMMARY.md"]
    assert "stat -c '%n %t:%T %g %a' /dev/dri/renderD128" in summary.content
    assert "/dev/dri/renderD128 e2:80 993 660" in summary.content
    assert "/dev/kfd eb:0 993 660" in summary.content


def test_check_reads_the_planned_hip_variable(tmp_path: Path) -> None:
    result = example_plan(EXAMPLE)
    bundle_dir = tmp_path / "out"
    write_bundle(render(result), bundle_dir, plan=result, spec=f"{EXAMPLE}.toml")
    manifest = json.loads((bundle_dir / "MANIFEST.json").read_text())
    assert [s["hip_visible_devices"] for s in manifest["apply"]["serving"]] == ["0,1,2,3"]
    root = copy_tree(FIXTURES / EXAMPLE, tmp_path / "root")
    unit = (bundle_dir / "ct/150/etc/systemd/system/sglang-qwen.service").read_text()
    (root / UNIT).parent.mkdir(parents=True, exist_ok=True)
    (root / UNIT).write_text(unit.replace("HIP_VISIBLE_DEVICES=0,1,2,3", "HIP_VISIBLE_DEVICES=0,1"))
    running = running_unit(check_host(root, {150: ["sglang-qwen"]})[1], 150, "sglang-qwen")
    assert running is not None and running.variable("HIP_VISIBLE_DEVICES") == "0,1"
    report = check(root, read_bundle_dir(bundle_dir))
    (wrong,) = [f for f in report.findings if f.code == "serving-visible-devices"]
    assert "HIP_VISIBLE_DEVICES=0,1, the plan says 0,1,2,3" in wrong.message


def test_check_finds_a_node_no_gpu_has_and_a_changed_render_group(tmp_path: Path) -> None:
    root = copy_tree(FIXTURES / EXAMPLE, tmp_path / "root")
    config = root / "etc/pve/lxc/150.conf"
    config.write_text(
        config.read_text() + "dev0: /dev/dri/renderD128,gid=993,mode=0660\n"
        "dev1: /dev/dri/renderD140,gid=993,mode=0660\ndev2: /dev/kfd,gid=993,mode=0660\n"
    )
    found = {f.code: f for f in check(root, None).findings}
    assert "/dev/dri/renderD140" in found["container-node-missing"].message
    assert "renderD128" not in found["container-node-missing"].message
    assert "container-node-group-changed" not in found
    group = root / CT / "etc/group"
    group.write_text(group.read_text().replace("render:x:993:", "render:x:994:"))
    changed = {f.code: f for f in check(root, None).findings}["container-node-group-changed"]
    assert "gid 993, but its render group is 994" in changed.message


def test_check_of_an_nvidia_container_naming_a_gone_minor(tmp_path: Path) -> None:
    root = copy_tree(FIXTURES / "kpro6", tmp_path / "root")
    config = root / "etc/pve/lxc/129.conf"
    config.write_text(config.read_text().replace("dev7: /dev/nvidia7", "dev7: /dev/nvidia9", 1))
    (missing,) = [f for f in check(root, None).findings if f.code == "container-node-missing"]
    assert "/dev/nvidia9" in missing.message


# --- a container's own server on ROCm


OWN_SERVER = SPEC_TEXT[: SPEC_TEXT.index("[pools.lxc.serving]")] + SPEC_TEXT[
    SPEC_TEXT.index('[[pools]]\nname = "vm"') :
].replace("[[pools]]", "\n[[pools]]", 1)
VLLM_UNIT = """\
[Service]
Environment=HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
ExecStart=/home/sglang/venv/bin/vllm serve /shared/models/m --tensor-parallel-size 8
Restart=always
"""


def test_a_containers_own_rocm_server_is_judged_by_its_hip_variable(tmp_path: Path) -> None:
    """CT 150 holds all eight render nodes today, and its own vLLM runs TP=8 on them;
    the plan leaves it four: refused, naming HIP_VISIBLE_DEVICES, never CUDA's."""
    root = copy_tree(FIXTURES / EXAMPLE, tmp_path / "root")
    config = root / "etc/pve/lxc/150.conf"
    nodes = "".join(f"dev{i}: /dev/dri/renderD{128 + i},gid=993,mode=0660\n" for i in range(8))
    config.write_text(config.read_text() + nodes + "dev8: /dev/kfd,gid=993,mode=0660\n")
    units = root / CT / "etc/systemd/system"
    units.mkdir(parents=True, exist_ok=True)
    (units / "vllm.service").write_text(VLLM_UNIT)
    (units / "multi-user.target.wants").mkdir()
    (units / "multi-user.target.wants/vllm.service").symlink_to("/etc/systemd/system/vllm.service")
    assert "[pools.lxc.serving]" not in OWN_SERVER and 'name = "vm"' in OWN_SERVER
    problems = refused(OWN_SERVER, root)
    (needs,) = [m for c, m in problems if c == "container-unit-needs-gpus"]
    assert "HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 shows it 4 of them" in needs
    assert "CUDA" not in needs


def test_another_containers_rocm_server_losing_its_gpus_is_read_and_judged(
    tmp_path: Path,
) -> None:
    """CT 151, in no pool, holds NUMA 1's render nodes, which go to VM 450: its units are
    read (it holds DRM nodes, not /dev/nvidiaN) and its TP=4 server is refused."""
    root = copy_tree(FIXTURES / EXAMPLE, tmp_path / "root")
    ct = "rpool/data/subvol-151-disk-0"
    nodes = "".join(f"dev{i}: /dev/dri/renderD{132 + i},mode=0666\n" for i in range(4))
    (root / "etc/pve/lxc/151.conf").write_text(
        "arch: amd64\n" + nodes + "rootfs: local-zfs:subvol-151-disk-0,size=8G\n"
    )
    units = root / ct / "etc/systemd/system"
    (units / "multi-user.target.wants").mkdir(parents=True)
    unit = VLLM_UNIT.replace("0,1,2,3,4,5,6,7", "0,1,2,3").replace("size 8", "size 4")
    (units / "vllm.service").write_text(unit)
    (units / "multi-user.target.wants/vllm.service").symlink_to("/etc/systemd/system/vllm.service")
    (needs,) = [m for c, m in refused(SPEC_TEXT, root) if c == "container-unit-needs-gpus"]
    assert "CT 151" in needs and "HIP_VISIBLE_DEVICES=0,1,2,3 shows it 0 of them" in needs


def test_check_flags_a_rocm_server_with_p2p_on_under_translation(tmp_path: Path) -> None:
    root = copy_tree(FIXTURES / EXAMPLE, tmp_path / "root")
    artifacts = [a for a in render(example_plan(EXAMPLE)) if a.bundle == "apply"]
    (config,) = [a for a in artifacts if a.path == "etc/pve/lxc/150.conf"]
    (root / "etc/pve/lxc/150.conf").write_text(config.content)
    (unit,) = [a for a in artifacts if a.path.endswith("sglang-qwen.service")]
    (root / UNIT).parent.mkdir(parents=True, exist_ok=True)
    (root / UNIT).write_text(unit.content)
    assert not [f for f in check(root, None).findings if f.code == "p2p-under-translation"]
    (root / UNIT).write_text(unit.content.replace('Environment="NCCL_P2P_DISABLE=1"\n', ""))
    (p2p,) = [f for f in check(root, None).findings if f.code == "p2p-under-translation"]
    assert p2p.subject == "CT 150:/etc/systemd/system/sglang-qwen.service"


# --- Instinct compute partitions


def _partitioned(tmp_path: Path, mode: str) -> Path:
    """amd-instinct with its first MI300X in `mode` (amdgpu's current_compute_partition)."""
    host = fixture_hosts.amd_instinct()
    device = "sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0"
    files = {**host.files, f"{device}/current_compute_partition": f"{mode}\n"}
    write_host(attrs.evolve(host, files=files), tmp_path)
    return tmp_path


def test_a_partitioned_instinct_is_discovered_and_refused_for_a_container(tmp_path: Path) -> None:
    root = _partitioned(tmp_path, "CPX")
    spec = parse_spec(SPEC_TEXT)
    facts = discover_for(spec, root)
    assert [g.compute_partition for g in facts.gpus][:2] == ["CPX", None]
    assert facts.gpus[0].partitioned and not facts.gpus[1].partitioned
    with pytest.raises(PlanError) as info:
        plan(facts, spec)
    (problem,) = [p for p in info.value.problems if p.code == "lxc-gpu-partitioned"]
    assert problem.subject == "0000:01:00.0" and "CPX" in problem.message
    assert "echo SPX > /sys/bus/pci/devices/0000:01:00.0/current_compute_partition" in problem.fix


def test_a_whole_instinct_goes_to_a_container_and_a_split_one_to_a_vm(tmp_path: Path) -> None:
    serving_of(planned(SPEC_TEXT, _partitioned(tmp_path / "spx", "SPX")))
    # The split GPU on NUMA 0 goes to the VM instead: a VM gets the whole device.
    swapped = (
        SPEC_TEXT.replace("numa_node = 0", "numa_node = 2")
        .replace("numa_node = 1", "numa_node = 0")
        .replace("numa_node = 2", "numa_node = 1")
    )
    root = _partitioned(tmp_path / "cpx", "CPX")
    result = planned(swapped.replace('mode = "0660"', 'mode = "0666"'), root)
    (vm,) = [p for p in result.pools if p.vm is not None]
    assert "0000:01:00.0" in [str(g.address) for g in vm.gpus]


def test_the_partition_mode_is_in_the_facts_json_only_where_shown(tmp_path: Path) -> None:
    root = _partitioned(tmp_path, "CPX")
    document = json.loads(facts_to_json(discover(root)))
    modes = [g.get("compute_partition") for g in document["gpus"]]
    assert modes[0] == "CPX" and modes[1:] == [None] * 7
    assert all("compute_partition" not in g for g in document["gpus"][1:])
    assert facts_from_json(facts_to_json(discover(root))).gpus[0].compute_partition == "CPX"
