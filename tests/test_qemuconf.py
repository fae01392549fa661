from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pvegpu.errors import RenderError
from pvegpu.pci import CpuList
from pvegpu.pvefiles import qemuconf
from strategies import MAPPING, GuestConf, vm_configs

# A SEV-SNP guest on kpro6 as `qm create` leaves it, one leftover raw hostpci line.
VM = """\
#Confidential inference VM (SEV-SNP)
amd-sev: type=snp,allow-smt=1,kernel-hashes=1
bios: ovmf
boot: order=scsi0
cores: 32
cpu: EPYC-Genoa
efidisk0: local-zfs:vm-140-disk-0,efitype=4m,size=1M
hostpci0: 0000:41:00,pcie=1
hostpci1: mapping=pro6000-vm,pcie=1,rombar=0
machine: q35
memory: 262144
name: snp-gpu
net0: virtio=BC:24:11:5E:7A:01,bridge=vmbr0,firewall=1
numa1: cpus=16-31,hostnodes=0,memory=131072,policy=bind
ostype: l26
scsi0: local-zfs:vm-140-disk-1,iothread=1,size=400G
scsihw: virtio-scsi-single
sockets: 1

[PENDING]
hostpci3: mapping=other

[before-gpu]
bios: ovmf
hostpci1: mapping=pro6000-vm,pcie=1
snaptime: 1733000000
"""
NODE1 = qemuconf.NumaPin(1, CpuList.parse("32-63,96-127"))


def main_keys(text: str) -> list[str]:
    main = text.split("\n[")[0]
    return [line for line in main.split("\n") if line and not line.startswith("#")]


def test_hostpci_lines_replace_the_mapping_and_sort_like_proxmox() -> None:
    """Old lines of the mapping go, new ones take free indices in sorted key order."""
    patched = qemuconf.patch_hostpci(VM, MAPPING, 4)
    keys = main_keys(patched.text)
    assert [k for k in keys if k.startswith("hostpci")] == [
        "hostpci0: 0000:41:00,pcie=1",
        "hostpci1: mapping=pro6000-vm,pcie=1,rombar=0",
        "hostpci2: mapping=pro6000-vm,pcie=1",
        "hostpci4: mapping=pro6000-vm,pcie=1",
        "hostpci5: mapping=pro6000-vm,pcie=1",
    ]
    assert keys == sorted(keys, key=lambda line: line.split(":")[0])
    assert patched.indices == (1, 2, 4, 5)
    assert patched.pcie is True


def test_sections_after_main_are_untouched() -> None:
    """`[PENDING]` and snapshot sections come back byte for byte."""
    patched = qemuconf.patch_hostpci(VM, MAPPING, 4, numa=NODE1)
    assert patched.text.endswith(VM[VM.index("\n[PENDING]") :])
    assert patched.text.startswith("#Confidential inference VM (SEV-SNP)\naffinity: ")


def test_pcie_only_on_q35() -> None:
    """Without `machine: q35` there are no PCIe ports: pcie=1 is left out and reported."""
    i440fx = VM.replace("machine: q35\n", "")
    patched = qemuconf.patch_hostpci(i440fx, MAPPING, 1)
    assert "hostpci1: mapping=pro6000-vm,rombar=0\n" in patched.text
    assert patched.pcie is False


@pytest.mark.parametrize(
    ("machine", "q35"),
    [
        ("q35", True),
        ("pc-q35-9.0", True),
        ("type=q35,viommu=virtio", True),
        ("viommu=intel,type=pc-q35-8.1", True),
        ("pc-i440fx-9.0", False),
        ("", False),
    ],
)
def test_q35_detection(machine: str, q35: bool) -> None:
    """Every spelling of a q35 machine counts, i440fx and the default do not."""
    text = f"cores: 1\nmachine: {machine}\n" if machine else "cores: 1\n"
    assert qemuconf.is_q35(text) is q35


def test_numa_pinning_from_the_vm_size() -> None:
    """numa0 covers all vCPUs and all memory on the GPUs' node; other numaN go."""
    text = VM.replace("sockets: 1", "sockets: 2").replace("memory: 262144", "memory: current=65536")
    keys = main_keys(qemuconf.patch_hostpci(text, MAPPING, 4, numa=NODE1).text)
    assert "affinity: 32-63,96-127" in keys
    assert "numa: 1" in keys
    assert "numa0: cpus=0-63,hostnodes=1,memory=65536,policy=bind" in keys
    assert not any(k.startswith("numa1") for k in keys)


def test_numa_replaces_existing_settings_in_place() -> None:
    """An existing `numa: 0` and `affinity` are rewritten where they stand."""
    text = "affinity: 0-7\ncores: 1\nmemory: 2048\nnuma: 0\n"
    out = qemuconf.patch_hostpci(text, MAPPING, 1, numa=NODE1).text
    assert out == (
        "affinity: 32-63,96-127\n"
        "cores: 1\n"
        "hostpci0: mapping=pro6000-vm\n"
        "memory: 2048\n"
        "numa: 1\n"
        "numa0: cpus=0,hostnodes=1,memory=2048,policy=bind\n"
    )


def test_numa_without_memory_is_refused() -> None:
    """numaN memory must add up to `memory`; without it pvegpu will not guess."""
    with pytest.raises(RenderError) as caught:
        qemuconf.patch_hostpci("cores: 4\n", MAPPING, 1, numa=NODE1, subject="x.conf")
    (problem,) = caught.value.problems
    assert (problem.code, problem.subject) == ("vm-memory-unset", "x.conf")


def test_too_many_devices_is_refused() -> None:
    """hostpci0..15 is all there is; a pool that does not fit is refused."""
    text = "".join(f"hostpci{i}: 0000:{i + 1:02x}:00\n" for i in range(14))
    with pytest.raises(RenderError, match="vm-hostpci-full"):
        qemuconf.patch_hostpci(text, MAPPING, 4)


def test_snippet_for_a_missing_vm() -> None:
    """A VM that does not exist gets the lines to add, with what depends on its size left out."""
    text = qemuconf.snippet(140, MAPPING, 2, NODE1, "kpro6")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [
        "hostpci0: mapping=pro6000-vm,pcie=1",
        "hostpci1: mapping=pro6000-vm,pcie=1",
        "affinity: 32-63,96-127",
        "numa: 1",
    ]
    assert "qm create 140 --machine q35" in text


def _mapping_lines(text: str) -> list[str]:
    main = text.split("\n[")[0]
    return [
        line for line in main.split("\n") if re.match(rf"hostpci\d+: mapping={MAPPING}\b", line)
    ]


@given(vm_configs(), st.integers(1, 6), st.booleans())
def test_patch_is_idempotent(conf: GuestConf, count: int, numa: bool) -> None:
    """Patching the patched config again changes nothing."""
    pin = NODE1 if numa else None
    once = qemuconf.patch_hostpci(conf.text, MAPPING, count, numa=pin).text
    assert qemuconf.patch_hostpci(once, MAPPING, count, numa=pin).text == once


@given(vm_configs(), st.integers(1, 6))
def test_patch_keeps_other_lines(conf: GuestConf, count: int) -> None:
    """Only the mapping's hostpci lines change: count of them, on indices nobody else uses."""
    out = qemuconf.patch_hostpci(conf.text, MAPPING, count)
    assert out.text.endswith(conf.rest)
    ours = _mapping_lines(out.text)
    assert len(ours) == count
    assert not set(out.indices) & conf.taken
    # split("\n"), not splitlines(): descriptions may hold \x85 and friends.
    main = out.text[: len(out.text) - len(conf.rest)].split("\n")[:-1]
    assert [line for line in main if line not in ours] == conf.others
