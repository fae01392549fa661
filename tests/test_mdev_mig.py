"""Virtual GPUs (issue 19, item 2) and MIG (item 3) on hosts built with pvegpu.testing.

vgpu1: a Tesla T4 with mediated device types and one mediated device, VM 101 on it by
address; an L40S whose SR-IOV virtual functions carry NVIDIA's vGPU types, VM 102 on
one of them by a mapping; a plain RTX A4000. mig1: two H100s on nvidia, the first with
two MIG GPU instances, a container holding the capability nodes of one of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

import fixture_hosts
from pvegpu.apply.check import check
from pvegpu.cli.discover import format_table
from pvegpu.errors import DiscoveryError, PlanError
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json, facts_to_json
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.facts import HostFacts, MdevInstance, MdevType, MigCap
from pvegpu.pci import PciAddress
from pvegpu.planning.planner import plan
from pvegpu.rendering.lxc import render_lxc_configs
from pvegpu.rendering.pci_cfg import render_pci_cfg
from pvegpu.spec.load import parse_spec
from pvegpu.testing import (
    DeviceSpec,
    HostSpec,
    IommuUnit,
    MdevSpec,
    MdevTypeSpec,
    MigInstance,
    NvidiaInfo,
    NvidiaModule,
    VgpuSpec,
    caps_minor,
    write_host,
)

VM_140 = "etc/pve/qemu-server/140.conf"
T4_MDEV = "c0ffee00-0000-4000-8000-000000000101"
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root intel_iommu=on"


def _port(address: str, group: int) -> DeviceSpec:
    return DeviceSpec(
        address=address, vendor=0x8086, device=0x352A, pci_class=0x060400,
        driver="pcieport", iommu_group=group, numa_node=0,
    )  # fmt: skip


def _gpu(
    address: str, parent: str, device: int, model: str, minor: int, group: int,
    mdev_types: tuple[MdevTypeSpec, ...] = (), mig: tuple[MigInstance, ...] = (),
) -> DeviceSpec:  # fmt: skip
    return DeviceSpec(
        address=address, parent=parent, vendor=0x10DE, device=device, pci_class=0x030200,
        subsystem_vendor=0x10DE, subsystem_device=0x1234, driver="nvidia", iommu_group=group,
        numa_node=0, nvidia=NvidiaInfo(model=model, minor=minor, mig=mig),
        mdev_types=mdev_types,
    )  # fmt: skip


VM_101 = """\
boot: order=scsi0
cores: 8
machine: q35
memory: 16384
hostpci0: 0000:02:00.0,mdev=nvidia-222,pcie=1
name: vdi-1
"""
VM_102 = """\
cores: 8
machine: q35
memory: 16384
hostpci0: mapping=l40s-vgpu,mdev=nvidia-1414,pcie=1
name: vdi-2
"""
PCI_CFG_VGPU = """\
l40s-vgpu
\tmap id=10de:26b9,iommugroup=5,node=vgpu1,path=0000:01:00.4,subsystem-id=10de:1234
\tmdev 1

"""


def vgpu_host(*, vms: bool = True, mdev: bool = True, t4_on_vfio: bool = False) -> HostSpec:
    l40s_vf = {"parent": "0000:00:01.0", "vendor": 0x10DE, "device": 0x26B9,
               "pci_class": 0x030200, "physfn": "0000:01:00.0", "numa_node": 0}  # fmt: skip
    devices = (
        _port("0000:00:01.0", 1),
        _gpu("0000:01:00.0", "0000:00:01.0", 0x26B9, "NVIDIA L40S", 0, 2),
        DeviceSpec(address="0000:01:00.4", iommu_group=5, **l40s_vf,  # type: ignore[arg-type]
                   vgpu=VgpuSpec(creatable=((1414, "NVIDIA L40S-1B"), (1415, "NVIDIA L40S-2B")),
                                 current=1414 if mdev else 0)),
        DeviceSpec(address="0000:01:00.5", iommu_group=6, **l40s_vf,  # type: ignore[arg-type]
                   vgpu=VgpuSpec(creatable=((1414, "NVIDIA L40S-1B"),))),
        _port("0000:00:02.0", 3),
        _gpu("0000:02:00.0", "0000:00:02.0", 0x1EB8, "Tesla T4", 1, 4,
             mdev_types=(MdevTypeSpec("nvidia-222", "GRID T4-1B", 15),
                         MdevTypeSpec("nvidia-223", "GRID T4-2B", 8))),
        _port("0000:00:03.0", 7),
        *([] if not t4_on_vfio else [DeviceSpec(
            address="0000:04:00.0", vendor=0x10DE, device=0x1EB8, pci_class=0x030200,
            subsystem_vendor=0x10DE, subsystem_device=0x1234, driver="vfio-pci",
            iommu_group=9, numa_node=0)]),
        _gpu("0000:03:00.0", "0000:00:03.0", 0x24B0, "NVIDIA RTX A4000", 2, 8),
    )  # fmt: skip
    files = {"etc/pve/mapping/pci.cfg": PCI_CFG_VGPU}
    if t4_on_vfio:  # a second T4, already split off to vfio-pci, still named by a vGPU VM
        files["etc/pve/qemu-server/103.conf"] = VM_101.replace("02:00.0", "04:00.0")
    if vms:
        files |= {"etc/pve/qemu-server/101.conf": VM_101, "etc/pve/qemu-server/102.conf": VM_102}
    return HostSpec(
        hostname="vgpu1", cmdline=CMDLINE, devices=devices, iommu_units=(IommuUnit("dmar0"),),
        nvidia=NvidiaModule(version="550.127.06", open=False), files=files,
        mdevs=(MdevSpec(T4_MDEV, "0000:02:00.0", "nvidia-222"),) if mdev else (),
    )  # fmt: skip


CT_200_DEV = """\
arch: amd64
cores: 16
hostname: infer
memory: 65536
dev0: /dev/nvidia0,mode=0666
dev1: /dev/nvidiactl,mode=0666
dev2: /dev/nvidia-uvm,mode=0666
dev3: /dev/nvidia-uvm-tools,mode=0666
dev4: /dev/nvidia-caps/nvidia-cap1,mode=0666
dev5: /dev/nvidia-caps/nvidia-cap2,mode=0666
dev6: /dev/nvidia-caps/nvidia-cap{gi}
dev7: /dev/nvidia-caps/nvidia-cap{ci}
ostype: debian
rootfs: local-zfs:subvol-200-disk-0,size=64G
"""
CT_200_RAW = """\
arch: amd64
cores: 16
hostname: infer
memory: 65536
ostype: debian
rootfs: local-zfs:subvol-200-disk-0,size=64G
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.cgroup2.devices.allow: c 510:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-caps /dev/nvidia-caps none bind,optional,create=dir
"""
GI1, CI1 = caps_minor(0, 1), caps_minor(0, 1, 0)
NO_CAPS = "\n".join(line for line in CT_200_DEV.splitlines() if "caps" not in line) + "\n"
GI2, CI2 = caps_minor(0, 2), caps_minor(0, 2, 0)


def mig_host(ct: str = CT_200_DEV) -> HostSpec:
    devices = (
        _port("0000:00:01.0", 1),
        _gpu("0000:01:00.0", "0000:00:01.0", 0x2330, "NVIDIA H100 80GB HBM3", 0, 2,
             mig=(MigInstance(1), MigInstance(2))),
        _port("0000:00:02.0", 3),
        _gpu("0000:02:00.0", "0000:00:02.0", 0x2330, "NVIDIA H100 80GB HBM3", 1, 4),
    )  # fmt: skip
    return HostSpec(
        hostname="mig1", cmdline=CMDLINE, devices=devices, iommu_units=(IommuUnit("dmar0"),),
        nvidia=NvidiaModule(version="580.95.05", open=True, caps_major=510),
        files={"etc/pve/lxc/200.conf": ct.format(gi=GI1, ci=CI1)},
    )  # fmt: skip


def _facts(tmp_path: Path, host: HostSpec) -> HostFacts:
    root = tmp_path / host.hostname
    write_host(host, root)
    return discover(root)


def _codes(err: pytest.ExceptionInfo[PlanError]) -> list[tuple[str, str]]:
    return sorted((p.code, p.subject) for p in err.value.problems)


VFIO = """\
node = "{node}"

[[pools]]
name = "vm"
gpus = [{gpus}]
mapping = {{ id = "pass" }}

[pools.vfio.vm]
vmid = {vmid}
"""
LXC = """\
node = "mig1"

[[pools]]
name = "ct"
gpus = [{gpus}]

[pools.lxc]
vmid = 200
devices = "{style}"
"""


# -- discovery


def test_vgpu_host_is_read(tmp_path: Path) -> None:
    facts = _facts(tmp_path, vgpu_host())
    vf, t4 = PciAddress.parse("0000:01:00.4"), PciAddress.parse("0000:02:00.0")
    assert MdevType(t4, "nvidia-222", "GRID T4-1B", 15) in facts.mdev_types
    assert MdevType(vf, "nvidia-1415", "NVIDIA L40S-2B") in facts.mdev_types
    assert facts.mdev_instances == (
        MdevInstance(vf, "nvidia-1414"),
        MdevInstance(t4, "nvidia-222", T4_MDEV),
    )
    # The VFs are not GPUs, the T4 and the L40S are mdev capable (Proxmox wants mdev 1).
    assert [str(g.address) for g in facts.gpus] == ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]
    assert [g.function.mdev_capable for g in facts.gpus] == [False, True, False]


def test_mig_host_is_read(tmp_path: Path) -> None:
    facts = _facts(tmp_path, mig_host())
    assert facts.char_major("nvidia-caps") == 510
    assert facts.mig_caps[:2] == (MigCap(1, name="mig/config"), MigCap(2, name="mig/monitor"))
    assert MigCap(GI2, 0, 2, name="gpu0/mig/gi2") in facts.mig_caps
    assert MigCap(CI1, 0, 1, 0, name="gpu0/mig/gi1/ci0") in facts.mig_caps
    assert len(facts.mig_caps) == 6


def test_discover_shows_vgpus_and_mig_instances(tmp_path: Path) -> None:
    text = format_table(_facts(tmp_path, vgpu_host()))
    assert (
        "vGPU 02:00.0: types nvidia-222 (GRID T4-1B), nvidia-223 (GRID T4-2B); in use: "
        f"nvidia-222 {T4_MDEV}\n"
    ) in text
    assert "vGPU 01:00.5: types nvidia-1414 (NVIDIA L40S-1B); in use: none\n" in text
    text = format_table(_facts(tmp_path, mig_host()))
    assert (
        "MIG 01:00.0 (/dev/nvidia0): gi1 cap12, gi1/ci0 cap13, gi2 cap21, gi2/ci0 cap22\n" in text
    )
    assert "MIG host-wide: mig/config cap1, mig/monitor cap2\n" in text


@pytest.mark.parametrize("host", [vgpu_host, mig_host])
def test_snapshot_keeps_the_partitions(tmp_path: Path, host: Callable[[], HostSpec]) -> None:
    """What discovery reads of vGPUs and MIG lands in a snapshot: planned elsewhere, the
    facts are the same."""
    root = tmp_path / "root"
    write_host(host(), root)
    result = snapshot(root, tmp_path / "host.tar.gz")
    assert result.error is None
    facts = discover(unpack(result.path, tmp_path / "unpacked"))
    assert facts == discover(root)
    assert facts.mdev_instances or facts.mig_caps


def test_facts_json_round_trip_and_absent_keys(tmp_path: Path) -> None:
    for host in (vgpu_host(), mig_host()):
        facts = _facts(tmp_path, host)
        text = facts_to_json(facts)
        assert facts_from_json(text) == facts
        doc = json.loads(text)
        assert ("mig_caps" in doc) is bool(facts.mig_caps)
        assert ("mdev_types" in doc) is bool(facts.mdev_types)
    plain = _facts(tmp_path / "plain", vgpu_host(vms=False, mdev=False))
    doc = json.loads(facts_to_json(attrs.evolve(plain, mdev_types=(), mdev_instances=())))
    assert not {"mdev_types", "mdev_instances", "mig_caps"} & set(doc)


@pytest.mark.parametrize(
    ("path", "text", "says"),
    [
        ("proc/driver/nvidia/capabilities/gpu0/mig/gi1/access", "DeviceFileMode: 292\n",
         "DeviceFileMinor"),
        ("proc/driver/nvidia/capabilities/gpu0/mig/gi2/ci0/access",
         f"DeviceFileMinor: {GI1}\nDeviceFileMode: 292\n", "has too"),
        ("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.4/nvidia/current_vgpu_type", "x\n",
         "vGPU type id"),
        ("sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0/mdev_supported_types/nvidia-222/"
         "available_instances", "many\n", "number"),
    ],
)  # fmt: skip
def test_malformed_partition_files_name_the_file(
    tmp_path: Path, path: str, text: str, says: str
) -> None:
    root = tmp_path / "host"
    host = mig_host() if "capabilities" in path else vgpu_host()
    write_host(host, root)
    (root / path).write_text(text)
    with pytest.raises(DiscoveryError) as err:
        discover(root)
    (problem,) = err.value.problems
    assert problem.code == "bad-value"
    assert path.rpartition("/")[0].rpartition("/")[2] in problem.subject
    assert says in problem.message


# -- mdev: a GPU with vGPUs on it is not moved to vfio-pci


def test_vfio_pool_on_a_gpu_with_mdev_guests_is_refused(tmp_path: Path) -> None:
    facts = _facts(tmp_path, vgpu_host())
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(VFIO.format(node="vgpu1", gpus='"02:00.0"', vmid=120)))
    (problem,) = [p for p in err.value.problems if p.code == "gpu-has-mdev-guests"]
    assert problem.subject == "0000:02:00.0"
    assert "VM 101 (hostpci0: mdev=nvidia-222)" in problem.message
    assert f"mediated device {T4_MDEV} (nvidia-222)" in problem.message
    assert "qm set 101 --delete hostpci0" in problem.fix


def test_vgpu_vf_by_mapping_holds_its_pf(tmp_path: Path) -> None:
    """VM 102's vGPU is on a VF of the L40S, named by mapping: moving the PF takes it."""
    facts = _facts(tmp_path, vgpu_host(mdev=False))
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(VFIO.format(node="vgpu1", gpus='"01:00.0"', vmid=120)))
    (problem,) = [p for p in err.value.problems if p.code == "gpu-has-mdev-guests"]
    assert problem.subject == "0000:01:00.0"
    assert "VM 102 (hostpci0: mdev=nvidia-1414 on mapping l40s-vgpu)" in problem.message


def test_live_vgpu_without_a_vm_line_refuses_too(tmp_path: Path) -> None:
    facts = _facts(tmp_path, vgpu_host(vms=False))
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(VFIO.format(node="vgpu1", gpus='"01:00.0"', vmid=120)))
    (problem,) = [p for p in err.value.problems if p.code == "gpu-has-mdev-guests"]
    assert "the vGPU on 0000:01:00.4 (nvidia-1414)" in problem.message


def test_pool_vm_mdev_line_is_never_made_a_mapping_line(tmp_path: Path) -> None:
    """VM 101 is the pool's own VM: its raw mdev line would have become
    `mapping=pass,pcie=1,mdev=nvidia-222` on a vfio-pci device. It is refused instead."""
    facts = _facts(tmp_path, vgpu_host())
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(VFIO.format(node="vgpu1", gpus='"02:00.0"', vmid=101)))
    assert ("gpu-has-mdev-guests", "0000:02:00.0") in _codes(err)


def test_gpu_without_vgpus_moves_and_its_mapping_says_no_mdev(tmp_path: Path) -> None:
    facts = _facts(tmp_path, vgpu_host())
    result = plan(facts, parse_spec(VFIO.format(node="vgpu1", gpus='"03:00.0"', vmid=120)))
    assert [str(f.address) for f in result.pools[0].functions] == ["0000:03:00.0"]
    (pci_cfg,) = render_pci_cfg(result)
    assert "pass\n" in pci_cfg.content and "\tmdev 1" not in pci_cfg.content.split("pass\n")[1]
    # The T4 (mdev capable on nvidia), with its guests gone, moves. On vfio-pci it has no
    # mdev_supported_types, and Proxmox compares the mapping's `mdev` with that at VM
    # start: `mdev 1` would refuse the start.
    bare = _facts(tmp_path / "bare", vgpu_host(vms=False, mdev=False))
    assert bare.gpu(PciAddress.parse("0000:02:00.0")).function.mdev_capable  # type: ignore[union-attr]
    result = plan(bare, parse_spec(VFIO.format(node="vgpu1", gpus='"02:00.0"', vmid=120)))
    (pci_cfg,) = render_pci_cfg(result)
    assert "\tmdev" not in pci_cfg.content.split("pass\n")[1]


def test_renamed_mapping_line_with_mdev_is_refused_not_converted(tmp_path: Path) -> None:
    """kpro6-split: VM 140's line on the old mapping of the vfio pool's GPUs carries
    `mdev=`: it used to follow the GPUs as `mapping=snp-gpus,pcie=1,mdev=nvidia-1092`."""
    host = fixture_hosts.kpro6_split()
    vm = "cores: 8\nhostpci0: mapping=pro6000-vm,pcie=1,mdev=nvidia-1092\nmachine: q35\n"
    write_host(attrs.evolve(host, files={**host.files, VM_140: vm}), tmp_path / "kpro6")
    spec = (
        'node = "kpro6"\n[[pools]]\nname = "vm"\nnuma_node = 1\n'
        'mapping = { id = "snp-gpus" }\nvfio = { vm = { vmid = 140, numa = false } }\n'
    )
    with pytest.raises(PlanError) as err:
        plan(discover(tmp_path / "kpro6"), parse_spec(spec))
    refused = [p for p in err.value.problems if p.code == "gpu-has-mdev-guests"]
    assert [p.subject for p in refused] == ["0000:81:00.0", "0000:91:00.0", "0000:e1:00.0",
                                            "0000:f1:00.0"]  # fmt: skip
    assert "VM 140 (hostpci0: mdev=nvidia-1092 on mapping pro6000-vm)" in refused[0].message


# -- MIG: a container keeps the capability nodes of its instances


def _ct(facts: HostFacts, spec: str) -> tuple[str, list[tuple[str, str]]]:
    result = plan(facts, parse_spec(spec))
    (artifact,) = [a for a in render_lxc_configs(result) if a.path.endswith("200.conf")]
    return artifact.content, [(f.code, f.subject) for f in result.findings]


def test_container_keeps_its_mig_caps_when_its_lines_are_rewritten(tmp_path: Path) -> None:
    facts = _facts(tmp_path, mig_host())
    content, findings = _ct(facts, LXC.format(gpus='"01:00.0"', style="dev"))
    caps = [line for line in content.splitlines() if "nvidia-caps" in line]
    # Exactly the nodes it had, each line as the admin wrote it (mode, gid).
    before = CT_200_DEV.format(gi=GI1, ci=CI1).splitlines()
    assert caps == [line for line in before if "nvidia-caps" in line]
    assert ("lxc-mig-caps-kept", "etc/pve/lxc/200.conf") in findings
    # A second plan on the result keeps the same lines (the patch recognises its own).
    again = attrs.evolve(facts, files=tuple(
        attrs.evolve(f, content=content) if f.path.endswith("200.conf") else f
        for f in facts.files
    ))  # fmt: skip
    assert _ct(again, LXC.format(gpus='"01:00.0"', style="dev"))[0] == content


def test_container_moved_to_another_gpu_loses_the_old_gpus_caps_and_says_so(
    tmp_path: Path,
) -> None:
    facts = _facts(tmp_path, mig_host())
    content, findings = _ct(facts, LXC.format(gpus='"02:00.0"', style="dev"))
    assert "nvidia-caps" not in content
    assert ("lxc-mig-caps-dropped", "etc/pve/lxc/200.conf") in findings


def test_raw_container_binding_all_caps_keeps_those_of_its_gpu(tmp_path: Path) -> None:
    facts = _facts(tmp_path, mig_host(CT_200_RAW))
    content, findings = _ct(facts, LXC.format(gpus='"01:00.0"', style="raw"))
    rules = [line for line in content.splitlines() if line.startswith("lxc.cgroup2")]
    assert [r for r in rules if " 510:" in r] == [
        f"lxc.cgroup2.devices.allow: c 510:{m} rwm"
        for m in (1, 2, GI1, CI1, GI2, caps_minor(0, 2, 0))
    ]
    assert "lxc.mount.entry: /dev/nvidia-caps dev" not in content
    assert f"lxc.mount.entry: /dev/nvidia-caps/nvidia-cap{GI2} dev/nvidia-caps/" in content
    assert ("lxc-mig-caps-kept", "etc/pve/lxc/200.conf") in findings


def test_raw_caps_lines_without_the_caps_major_are_refused(tmp_path: Path) -> None:
    host = mig_host()
    assert host.nvidia is not None
    host = attrs.evolve(host, nvidia=attrs.evolve(host.nvidia, caps_major=None))
    facts = _facts(tmp_path, host)
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(LXC.format(gpus='"01:00.0"', style="raw")))
    assert _codes(err) == [("mig-caps-major-unknown", "etc/pve/lxc/200.conf")]
    # devN entries need no major: the same plan in dev style keeps the nodes.
    content, _ = _ct(facts, LXC.format(gpus='"01:00.0"', style="dev"))
    assert f"/dev/nvidia-caps/nvidia-cap{CI1}" in content


def test_container_without_caps_on_a_mig_gpu_is_warned(tmp_path: Path) -> None:
    facts = _facts(tmp_path, mig_host(NO_CAPS))
    content, findings = _ct(facts, LXC.format(gpus='"01:00.0", "02:00.0"', style="dev"))
    assert "nvidia-caps" not in content
    # GPU 0 has MIG instances, GPU 1 none: only GPU 0 is named.
    assert findings.count(("lxc-mig-without-caps", "etc/pve/lxc/200.conf")) == 1


def test_a_caps_wildcard_rule_grants_only_the_nodes_bound(tmp_path: Path) -> None:
    """`c 510:* rwm` with binds of single nodes (a common hand-made MIG container): the
    container has those nodes, not every instance's; the wildcard becomes exact rules."""
    ct = CT_200_RAW.replace(
        "lxc.mount.entry: /dev/nvidia-caps /dev/nvidia-caps none bind,optional,create=dir\n",
        "".join(
            f"lxc.mount.entry: /dev/nvidia-caps/nvidia-cap{m} dev/nvidia-caps/nvidia-cap{m} "
            "none bind,optional,create=file\n"
            for m in (1, 2, GI2, caps_minor(0, 2, 0))
        ),
    )
    content, _ = _ct(_facts(tmp_path, mig_host(ct)), LXC.format(gpus='"01:00.0"', style="raw"))
    rules = [line.split()[-2] for line in content.splitlines() if " 510:" in line]
    assert rules == ["510:1", "510:2", f"510:{GI2}", f"510:{caps_minor(0, 2, 0)}"]


def test_caps_of_no_instance_are_refused(tmp_path: Path) -> None:
    ct = CT_200_DEV.replace("nvidia-cap{ci}", "nvidia-cap999")
    facts = _facts(tmp_path, mig_host(ct))
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(LXC.format(gpus='"01:00.0"', style="dev")))
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("lxc-mig-caps-unknown", "etc/pve/lxc/200.conf")
    assert "/dev/nvidia-caps/nvidia-cap999" in problem.message


def test_other_container_losing_a_mig_gpu_loses_its_caps_too(tmp_path: Path) -> None:
    """CT 201 has both H100s and GPU 0's instance; the pool gives GPU 0 to CT 200, so CT
    201 keeps nvidia1 and loses nvidia0 with the capability nodes of its instance (and
    config/monitor: it holds no other instance)."""
    host = mig_host()
    other = CT_200_DEV.format(gi=GI1, ci=CI1).replace(
        "dev3:", "dev8: /dev/nvidia1,mode=0666\ndev3:"
    )
    host = attrs.evolve(host, files={**host.files, "etc/pve/lxc/201.conf": other})
    facts = _facts(tmp_path, host)
    result = plan(facts, parse_spec(LXC.format(gpus='"01:00.0"', style="dev")))
    (artifact,) = [a for a in render_lxc_configs(result) if a.path.endswith("201.conf")]
    assert "nvidia-caps" not in artifact.content
    assert "dev8: /dev/nvidia1,mode=0666\n" in artifact.content
    assert "dev0: /dev/nvidia0" not in artifact.content
    (dropped,) = [f for f in result.findings if f.subject == "etc/pve/lxc/201.conf"
                  and f.code == "lxc-mig-caps-dropped"]  # fmt: skip
    assert f"/dev/nvidia-caps/nvidia-cap{CI1} (gpu0/mig/gi1/ci0)" in dropped.message
    # The reason names the nodes that go with the GPU (as rendering/lxc.py names nodes).
    reason = artifact.reason.partition("; with them ")[2]
    assert re.findall(r"cap(\d+)\b", reason) == [str(m) for m in (1, 2, GI1, CI1)]


# -- pvegpu check: the planner's rules on the live host


def test_check_finds_a_vgpu_vm_on_a_gpu_vfio_holds(tmp_path: Path) -> None:
    root = tmp_path / "vgpu1"
    write_host(vgpu_host(t4_on_vfio=True), root)
    found = [f for f in check(root, None).findings if f.code == "gpu-has-mdev-guests"]
    assert [(str(f.severity), f.subject) for f in found] == [("error", "0000:04:00.0")]
    assert "VM 103 (hostpci0: mdev=nvidia-222)" in found[0].message
    # The GPUs still on nvidia carry their vGPUs as they should: nothing to report.
    root = tmp_path / "plain"
    write_host(vgpu_host(), root)
    assert "gpu-has-mdev-guests" not in {f.code for f in check(root, None).findings}


def test_check_finds_a_container_holding_caps_of_no_instance(tmp_path: Path) -> None:
    root = tmp_path / "mig1"
    write_host(mig_host(CT_200_DEV.replace("nvidia-cap{ci}", "nvidia-cap999")), root)
    found = [f for f in check(root, None).findings if f.code == "lxc-mig-caps-unknown"]
    assert [(str(f.severity), f.subject) for f in found] == [("error", "etc/pve/lxc/200.conf")]
    root = tmp_path / "good"
    write_host(mig_host(), root)
    assert "lxc-mig-caps-unknown" not in {f.code for f in check(root, None).findings}


# -- golden text: what the admin reads

Golden = Callable[[str], SnapshotAssertion]


def _report(facts: HostFacts, spec: str) -> list[str]:
    try:
        found = plan(facts, parse_spec(spec)).findings
    except PlanError as err:
        return [f"refused: {p}" for p in err.problems if p.code == "gpu-has-mdev-guests"]
    codes = ("lxc-mig-caps-kept", "lxc-mig-caps-dropped", "lxc-mig-without-caps")
    return [f"{f.severity}: {f.subject}: {f.message} [{f.code}]" for f in found if f.code in codes]


def test_partition_text(tmp_path: Path, golden: Golden) -> None:
    """Every new refusal and finding, as the admin reads them."""
    vgpu = _facts(tmp_path, vgpu_host())
    cases = {
        "T4 with a mediated device and VM 101 to vfio-pci": (vgpu, VFIO, '"02:00.0"'),
        "L40S whose VF VM 102 uses by mapping, to vfio-pci": (vgpu, VFIO, '"01:00.0"'),
        "CT 200 keeps GPU 0 and its MIG instance": (_facts(tmp_path, mig_host()), LXC, '"01:00.0"'),
        "CT 200 moves to GPU 1": (_facts(tmp_path / "b", mig_host()), LXC, '"02:00.0"'),
        "CT 200 without capability nodes": (
            _facts(tmp_path / "c", mig_host(NO_CAPS)),
            LXC,
            '"01:00.0"',
        ),
    }
    out: list[str] = []
    for name, (facts, template, gpus) in cases.items():
        out.append(f"## {name}")
        spec = template.format(node=facts.node, gpus=gpus, vmid=120, style="dev")
        out += _report(facts, spec)
    assert "\n".join(out) + "\n" == golden("txt")


@pytest.mark.parametrize("style", ["dev", "raw"])
def test_mig_container_config(tmp_path: Path, golden: Golden, style: str) -> None:
    """CT 200 as the bundle writes it: its GPU lines with its MIG capability nodes."""
    facts = _facts(tmp_path, mig_host(CT_200_DEV if style == "dev" else CT_200_RAW))
    content, _ = _ct(facts, LXC.format(gpus='"01:00.0"', style=style))
    assert content == golden("conf")
