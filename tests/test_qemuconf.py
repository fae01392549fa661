from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pvegpu.errors import RenderError
from pvegpu.model.facts import ConfigFile
from pvegpu.model.guest_config import GuestConfig
from pvegpu.pci import CpuList
from pvegpu.pvefiles import hostpci, qemuconf
from strategies import MAPPED_PATHS, MAPPING, GuestConf, vm_configs

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
    assert GuestConfig(ConfigFile("vm.conf", text)).is_q35 is q35


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


# VM 110 on the workstation: the A4000 passed by raw address before it had a mapping.
WORKSTATION = """\
#Windows workstation VM with the A4000
bios: ovmf
cores: 16
hostpci0: 0000:39:00,pcie=1,x-vga=1
hostpci1: 0000:17:00.0
machine: pc-q35-9.0
memory: 65536

[PENDING]
hostpci2: 0000:39:00

[before-gpu]
hostpci0: 0000:39:00,pcie=1,x-vga=1
snaptime: 1700000000
"""
A4000 = ("0000:39:00",)


def _hostpci(text: str) -> list[str]:
    return [line for line in main_keys(text) if line.startswith("hostpci")]


def test_raw_address_of_a_mapped_device_becomes_the_mapping_in_place() -> None:
    """The raw line for the mapped GPU turns into the mapping line: same index, x-vga kept."""
    patched = qemuconf.patch_hostpci(WORKSTATION, "a4000", 1, mapped=A4000)
    assert _hostpci(patched.text) == [
        "hostpci0: mapping=a4000,pcie=1,x-vga=1",
        "hostpci1: 0000:17:00.0",
    ]
    assert (patched.indices, patched.converted) == ((0,), (0,))
    # Pending and snapshot sections still name the raw address: they are other states.
    assert patched.text.endswith(WORKSTATION[WORKSTATION.index("\n[PENDING]") :])


@pytest.mark.parametrize(
    "value",
    [
        "0000:39:00",
        "0000:39:00.0",
        "39:00.0",
        "0000:39:00.1",
        "host=0000:39:00.0",
        "0000:39:00.0;0000:39:00.1",
        "0000:39:00.0;39:00.1",
    ],
)
def test_every_spelling_of_a_mapped_device_is_recognised(value: str) -> None:
    """Slot or function, with or without domain, `host=` or default key, `;` lists."""
    text = f"cores: 1\nhostpci3: {value},rombar=0,romfile=a4000.rom\nmachine: q35\n"
    patched = qemuconf.patch_hostpci(text, "a4000", 1, mapped=A4000)
    assert _hostpci(patched.text) == ["hostpci3: mapping=a4000,pcie=1,rombar=0,romfile=a4000.rom"]
    assert patched.converted == (3,)


@pytest.mark.parametrize(
    ("value", "mapped"),
    [
        ("0000:3a:00", A4000),
        ("0000:39:01.0", A4000),
        ("0001:39:00.0", A4000),
        # The mapping hands over only .0 (audio in its own IOMMU group): .1 stays raw.
        ("0000:39:00.1", ("0000:39:00.0",)),
        ("mapping=nic", A4000),
        ("0000:39:00", ()),
    ],
)
def test_raw_line_of_a_device_outside_the_mapping_stays(
    value: str, mapped: tuple[str, ...]
) -> None:
    """Other slots, other functions, other mappings, or no mapped paths: left untouched."""
    text = f"cores: 1\nhostpci0: {value},pcie=1\nmachine: q35\n"
    patched = qemuconf.patch_hostpci(text, "a4000", 1, mapped=mapped)
    assert _hostpci(patched.text) == [f"hostpci0: {value},pcie=1", "hostpci1: mapping=a4000,pcie=1"]
    assert patched.converted == ()


def test_raw_function_against_a_function_path_is_recognised() -> None:
    """A mapping of `;`-listed functions claims a raw line naming their slot."""
    text = "hostpci0: 0000:39:00\n"
    patched = qemuconf.patch_hostpci(text, "a4000", 1, mapped=["0000:39:00.0;0000:39:00.1"])
    assert _hostpci(patched.text) == ["hostpci0: mapping=a4000"]


def test_raw_line_mixing_mapped_and_other_devices_is_refused() -> None:
    """A `;` list of the mapped GPU and a foreign device cannot be split: refused by line."""
    text = WORKSTATION.replace("0000:39:00,pcie=1", "0000:39:00.0;0000:17:00.0,pcie=1", 1)
    with pytest.raises(RenderError) as caught:
        qemuconf.patch_hostpci(text, "a4000", 1, mapped=A4000, subject="110.conf")
    (problem,) = caught.value.problems
    assert (problem.code, problem.subject) == ("vm-hostpci-mixed", "110.conf line 4")
    assert "`hostpci0: 0000:39:00.0;0000:17:00.0,pcie=1,x-vga=1`" in problem.message
    assert "0000:17:00.0" in problem.fix


def test_replaced_lines_keep_their_indices() -> None:
    """Each replaced line keeps its index and options; more lines than devices: the
    lowest indices stay, the rest go; fewer: new lines take the lowest free indices."""
    text = (
        "hostpci2: 0000:81:00,x-vga=1\n"
        "hostpci5: mapping=pro6000-vm,rombar=0\n"
        "hostpci7: 0000:91:00.0\n"
    )
    mapped = ["0000:81:00", "0000:91:00"]
    two = qemuconf.patch_hostpci(text, MAPPING, 2, mapped=mapped)
    assert _hostpci(two.text) == [
        "hostpci2: mapping=pro6000-vm,x-vga=1",
        "hostpci5: mapping=pro6000-vm,rombar=0",
    ]
    four = qemuconf.patch_hostpci(text, MAPPING, 4, mapped=mapped)
    assert four.indices == (0, 2, 5, 7)
    assert _hostpci(four.text)[0] == "hostpci0: mapping=pro6000-vm"


def test_replaced_index_taken_by_pending_gives_its_options_to_a_new_index() -> None:
    """A pending change on a replaced line's index wins at the next start: not reused."""
    text = "hostpci1: 0000:81:00,x-vga=1\n\n[PENDING]\nhostpci1: mapping=other\n"
    patched = qemuconf.patch_hostpci(text, MAPPING, 1, mapped=["0000:81:00"])
    assert _hostpci(patched.text) == ["hostpci0: mapping=pro6000-vm,x-vga=1"]


def _mapping_lines(text: str) -> list[str]:
    main = text.split("\n[")[0]
    return [
        line for line in main.split("\n") if re.match(rf"hostpci\d+: mapping={MAPPING}\b", line)
    ]


@given(vm_configs(), st.integers(1, 6), st.booleans())
def test_patch_is_idempotent(conf: GuestConf, count: int, numa: bool) -> None:
    """Patching the patched config again changes nothing, raw lines of mapped devices too."""
    pin = NODE1 if numa else None
    once = qemuconf.patch_hostpci(conf.text, MAPPING, count, numa=pin, mapped=MAPPED_PATHS).text
    again = qemuconf.patch_hostpci(once, MAPPING, count, numa=pin, mapped=MAPPED_PATHS)
    assert again.text == once
    assert again.converted == ()


def _index_and_options(line: str) -> tuple[int, list[str]]:
    """A generated hostpci line's index and the options a replacement keeps."""
    key, _, value = line.partition(": ")
    own = ("mapping", "pcie", "host")
    kept = [p for p in value.split(",")[1:] if p.partition("=")[0] not in own]
    return int(key.removeprefix("hostpci")), kept


@given(vm_configs(), st.integers(1, 6))
def test_patch_keeps_other_lines(conf: GuestConf, count: int) -> None:
    """Only the mapping's lines (by mapping or by raw address of a mapped device) change:
    count of them, on indices nobody else uses, replaced ones in place with their options."""
    out = qemuconf.patch_hostpci(conf.text, MAPPING, count, mapped=MAPPED_PATHS)
    assert out.text.endswith(conf.rest)
    ours = _mapping_lines(out.text)
    assert len(ours) == count
    assert not set(out.indices) & conf.taken
    replaced = sorted(_index_and_options(line) for line, target in conf.main if target)
    reusable = [(i, opts) for i, opts in replaced if i not in conf.taken][:count]
    for index, options in reusable:
        assert (
            f"hostpci{index}: {hostpci.hostpci_value(MAPPING, out.pcie, ','.join(options))}" in ours
        )
    assert not [line for line in ours if "0000:" in line]
    # split("\n"), not splitlines(): descriptions may hold \x85 and friends.
    main = out.text[: len(out.text) - len(conf.rest)].split("\n")[:-1]
    assert [line for line in main if line not in ours] == conf.others


@st.composite
def vm_texts(draw: st.DrawFn) -> str:
    """Generated VM configs, some of which the patch refuses: a raw line mixing a mapped
    device with another, hostpci slots filled up, no `memory:`."""
    text = draw(vm_configs()).text
    if draw(st.booleans()):
        text = re.sub(r"(?m)^memory: .*\n", "", text)
    extra = [
        "hostpci15: 0000:81:00;0000:c1:00",
        *(f"hostpci{i}: 0000:4{i:x}:00" for i in range(8, 15)),
    ]
    lines = draw(st.lists(st.sampled_from(extra), unique=True, max_size=8))
    return "".join(f"{line}\n" for line in lines) + text


@given(vm_texts(), st.integers(1, 6), st.booleans())
def test_hostpci_problems_are_what_the_patch_refuses(text: str, count: int, numa: bool) -> None:
    """plan() asks hostpci_problems: empty exactly when the patch succeeds, and holding
    the problem the patch raises when it does not."""
    found = GuestConfig(ConfigFile("vm.conf", text)).hostpci_problems(
        MAPPING, count, numa=numa, mapped=MAPPED_PATHS
    )
    try:
        qemuconf.patch_hostpci(
            text,
            MAPPING,
            count,
            numa=NODE1 if numa else None,
            mapped=MAPPED_PATHS,
            subject="vm.conf",
        )
    except RenderError as error:
        (problem,) = error.problems
        assert problem in found
    else:
        assert found == ()
