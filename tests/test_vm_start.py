"""A VM that gets GPUs can start (issue 29, item 3): what Proxmox and QEMU need at its start.

Discovery reads each GPU's BARs (`resource`), `boot_vga` and `removable`, each NUMA
node's memory (`meminfo`) and the CPU's physical address width (`/proc/cpuinfo`). The
plan then judges each vfio pool's VM:

- `pve-wrx`: four 128 GiB BARs for VM 200, whose CPU type (x86-64-v2-AES) gives the
  guest 40 bits: refused, with `qm set 200 --cpu host`; two of them fit the address
  space but not OVMF's window: refused too.
- `pve-nps4`: an EPYC in NPS4, VM 300 bound to a 192 GB node with 256 GiB: refused.
- `mixed`: the Radeon that is the host's boot display goes to VM 300: a warning.
- `pve-tb`: an RTX 4070 in a Thunderbolt enclosure in a pool: refused.
- a VM on i440fx with a pcie=1 line of its own; a VM yet to be created whose GPUs need
  more than a default CPU type gives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

from bundled import copy_tree, example_plan, fixture_root, host_facts
from fixture_hosts import HDA_BARS, PRO6000_BARS
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import DiscoveryError
from pvegpu.host.discover import discover
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.resources import Bar, HostCpu
from pvegpu.pci import PciAddress
from pvegpu.planning.guest_address import guest_cpu, mmio_window, pack, ram_end
from pvegpu.planning.planner import plan
from pvegpu.spec.load import parse_spec
from test_whole_host_guests import of, refused, text

Golden = Callable[[str], SnapshotAssertion]
GIB = 1 << 30

VM200 = "etc/pve/qemu-server/200.conf"
VM300 = "etc/pve/qemu-server/300.conf"
WRX_SPEC = """\
node = "pve-wrx"

[[pools]]
name = "sim"
gpus = {gpus}
mapping = {{ id = "pro6000" }}

[pools.vfio.vm]
vmid = 200
"""
FOUR = '["01:00.0", "21:00.0", "41:00.0", "61:00.0"]'
TWO = '["01:00.0", "21:00.0"]'
NPS4_SPEC = """\
node = "pve-nps4"

[[pools]]
name = "train"
numa_node = 2
mapping = { id = "l40s" }

[pools.vfio.vm]
vmid = 300
"""
TB_SPEC = """\
node = "pve-tb"

[[pools]]
name = "egpu"
gpus = ["2e:00.0"]
mapping = { id = "egpu" }

[pools.vfio.vm]
vmid = 500
"""


def with_file(facts: HostFacts, path: str, content: str) -> HostFacts:
    """The facts with one config file's content replaced (or added)."""
    files = [f for f in facts.files if f.path != path] + [ConfigFile(path, content)]
    return attrs.evolve(facts, files=tuple(sorted(files, key=lambda f: f.path)))


def edited(facts: HostFacts, path: str, old: str, new: str) -> HostFacts:
    found = facts.file(path)
    assert found is not None and old in found.content
    return with_file(facts, path, found.content.replace(old, new))


def codes(problems: tuple[Diagnostic, ...]) -> list[str]:
    return [p.code for p in problems]


# -- discovery


def test_a_gpus_bars_boot_display_and_port_are_read() -> None:
    kpro6 = host_facts("kpro6")
    gpu = kpro6.function(PciAddress.parse("0000:01:00.0"))
    audio = kpro6.function(PciAddress.parse("0000:01:00.1"))
    assert gpu is not None and audio is not None
    assert gpu.bars == PRO6000_BARS
    assert audio.bars == HDA_BARS
    assert not gpu.boot_vga and not gpu.removable
    workstation = host_facts("workstation")
    assert [str(f.address) for f in workstation.functions if f.boot_vga] == ["0000:17:00.0"]
    tb = host_facts("pve-tb")
    assert [str(f.address) for f in tb.functions if f.removable and not f.is_bridge] == [
        "0000:2e:00.0",
        "0000:2e:00.1",
    ]


def test_only_gpu_slots_are_read(tmp_path: Path) -> None:
    """A NIC's `resource` is not read: only GPUs (and what moves with them) go to a VM,
    and three more files per function are what discovery of a large host cannot spare."""
    root = copy_tree(fixture_root("kpro6"), tmp_path / "kpro6")
    nic = next(root.glob("sys/devices/pci0000:c0/*/0000:c1:00.0"))
    (nic / "resource").write_text("not a resource table\n")
    facts = discover(root)
    found = facts.function(PciAddress.parse("0000:c1:00.0"))
    assert found is not None and found.bars == ()
    gpu = next(root.glob("sys/devices/pci0000:00/*/0000:01:00.0"))
    (gpu / "resource").write_text("not a resource table\n")
    with pytest.raises(DiscoveryError) as error:
        discover(root)
    problem = error.value.problems[0]
    assert (problem.code, problem.subject) == (
        "bad-value",
        "sys/bus/pci/devices/0000:01:00.0/resource",
    )


def test_node_memory_and_cpu() -> None:
    facts = host_facts("pve-nps4")
    assert [n.memory_kib for n in facts.numa_nodes] == [197761433, 198076006, 198076006, 198076006]
    assert facts.numa_nodes[2].free_kib == 189792256
    assert facts.cpu == HostCpu("AuthenticAMD", 52)
    # A host whose tree has neither (snapshots from before they were read) has none.
    shared = host_facts("shared-group")
    assert shared.cpu is None and shared.numa_nodes[0].memory_kib is None


# -- BARs against the guest's physical address bits


def test_four_large_bars_need_more_than_40_bits(golden: Golden) -> None:
    """VM 200 gets four 128 GiB BARs and its CPU type gives the guest QEMU's default 40
    bits: behind their root ports they take 896 GiB above its 256 GiB of memory."""
    problems = refused(host_facts("pve-wrx"), WRX_SPEC.format(gpus=FOUR))
    assert codes(problems) == ["vm-bars-beyond-address-space"]
    (problem,) = problems
    assert problem.subject == f"{VM200} line 5"
    assert "4 x 128 GiB + 4 x 32 MiB" in problem.message
    assert "896.03 GiB" in problem.message and "40 physical address bits (1 TiB)" in problem.message
    assert problem.fix.startswith("qm set 200 --cpu host (the host's 52 bits")
    assert "x86-64-v2-AES,phys-bits=host,flags=+pdpe1gb" in problem.fix
    assert text(problems) == golden("txt")


def test_two_large_bars_fit_40_bits_but_not_ovmfs_window(golden: Golden) -> None:
    """Two fit below 1 TiB, but OVMF opens only the top eighth of 40 bits (128 GiB)."""
    problems = refused(host_facts("pve-wrx"), WRX_SPEC.format(gpus=TWO))
    assert codes(problems) == ["vm-bars-beyond-mmio-window"]
    assert "spans only 128 GiB" in problems[0].message
    assert "X-PciMmio64Mb,string=524288" in problems[0].fix
    assert text(problems) == golden("txt")


@pytest.mark.parametrize(
    "cpu",
    [
        "host",
        "x86-64-v2-AES,phys-bits=host,flags=+pdpe1gb",
        "x86-64-v2-AES,phys-bits=48,flags=+pdpe1gb",
    ],
)
def test_the_fix_makes_them_fit(cpu: str) -> None:
    facts = edited(host_facts("pve-wrx"), VM200, "cpu: x86-64-v2-AES\n", f"cpu: {cpu}\n")
    result = plan(facts, parse_spec(WRX_SPEC.format(gpus=FOUR)))
    assert result.pools[0].vm is not None


def test_without_cpuinfo_the_fix_still_names_the_host_type() -> None:
    """A snapshot without /proc/cpuinfo: QEMU's 40 bits are known, the host's are not."""
    facts = attrs.evolve(host_facts("pve-wrx"), cpu=None)
    problems = refused(facts, WRX_SPEC.format(gpus=FOUR))
    assert codes(problems) == ["vm-bars-beyond-address-space"]
    assert problems[0].fix.startswith("qm set 200 --cpu host (the host's bits, which discovery")


def test_phys_bits_without_1g_pages_stay_at_40_under_ovmf() -> None:
    """OVMF caps a CPU without pdpe1gb at 40 bits: phys-bits=host alone is no fix for a
    generic type (qemu-server warns of it too)."""
    facts = edited(
        host_facts("pve-wrx"), VM200, "cpu: x86-64-v2-AES\n", "cpu: x86-64-v2-AES,phys-bits=host\n"
    )
    problems = refused(facts, WRX_SPEC.format(gpus=TWO))
    assert codes(problems) == ["vm-bars-beyond-mmio-window"]
    assert "the host's, by phys-bits=host" in problems[0].message


def test_seabios_and_the_default_cpu() -> None:
    """amd-instinct's VM 450 (SeaBIOS) with four 256 GiB BARs: fine with `cpu: host`,
    refused without a cpu line (kvm64, 40 bits)."""
    spec = (
        'node = "pve-mi300x"\n\n[[pools]]\nname = "vm"\nnuma_node = 1\n'
        'mapping = { id = "mi300x-vm" }\n\n[pools.vfio.vm]\nvmid = 450\n'
    )
    facts = host_facts("amd-instinct")
    assert plan(facts, parse_spec(spec)).pools[0].vm is not None
    without = edited(facts, "etc/pve/qemu-server/450.conf", "cpu: host\n", "")
    problems = refused(without, spec)
    assert codes(problems) == ["vm-bars-beyond-address-space"]
    assert "4 x 256 GiB + 4 x 2 MiB" in problems[0].message
    assert "CPU type kvm64" in problems[0].message


def test_a_vm_yet_to_be_created_is_told_its_cpu_type(golden: Golden) -> None:
    """kpro6-raw's VM 200 does not exist: its snippet cannot say the CPU type, a finding
    does; mixed's VM 300 gets a 256 MiB BAR, which any CPU type holds."""
    found = of(example_plan("kpro6-raw").findings, "vm-new-needs-phys-bits")
    assert [f.subject for f in found] == [VM200]
    assert "896.03 GiB" in found[0].message and "--cpu host" in found[0].message
    assert text(found) == golden("txt")
    assert not of(example_plan("mixed").findings, "vm-new-needs-phys-bits")


# -- memory bound to a NUMA node


def test_memory_bound_beyond_its_node_is_refused(golden: Golden) -> None:
    """VM 300's own numa0 binds 256 GiB to node 2, a 192 GB quadrant; with numa = true
    pvegpu would write the same binding."""
    problems = refused(host_facts("pve-nps4"), NPS4_SPEC)
    assert codes(problems) == ["vm-numa-memory-beyond-node"]
    assert problems[0].subject == f"{VM300} line 10"
    assert "256 GiB" in problems[0].message and "188.9 GiB" in problems[0].message
    assert "--numa0 cpus=0-31,hostnodes=2,memory=174080,policy=bind" in problems[0].fix
    numa_on = refused(host_facts("pve-nps4"), NPS4_SPEC + "numa = true\n")
    assert codes(numa_on) == ["vm-numa-memory-beyond-node"]
    assert numa_on[0].subject == f"{VM300} line 7"
    assert "numa = false" in numa_on[0].fix
    assert text((*problems, *numa_on)) == golden("txt")


@pytest.mark.parametrize(("memory", "warned"), [(131072, False), (180000, True), (262144, False)])
def test_memory_near_its_node_is_a_warning(memory: int, warned: bool) -> None:
    """Most of a node (over 90 %) is a warning; spread over two nodes, 256 GiB fits."""
    facts = host_facts("pve-nps4")
    nodes = "2-3" if memory == 262144 else "2"
    facts = edited(facts, VM300, "memory: 262144\n", f"memory: {memory}\n")
    facts = edited(facts, VM300, "hostnodes=2,memory=262144", f"hostnodes={nodes},memory={memory}")
    found = of(plan(facts, parse_spec(NPS4_SPEC)).findings, "vm-numa-memory-tight")
    assert bool(found) is warned
    if warned:
        assert "more than 90% of their 188.9 GiB" in found[0].message


def test_preferred_memory_is_not_bound() -> None:
    facts = edited(host_facts("pve-nps4"), VM300, "policy=bind", "policy=preferred")
    assert plan(facts, parse_spec(NPS4_SPEC)).pools[0].vm is not None


# -- the host's boot display, a Thunderbolt GPU, pcie=1 without q35


def test_the_boot_display_going_to_a_vm_is_a_warning(golden: Golden) -> None:
    """mixed's Radeon is its only VGA function: the host's console goes with it."""
    found = of(example_plan("mixed").findings, "vfio-boot-display")
    assert [f.subject for f in found] == ["0000:04:00.0"]
    assert "no local console left" in found[0].message
    assert text(found) == golden("txt")
    # A boot display that stays on the host (amd-rocm's W7900, in a container) is quiet.
    assert not of(example_plan("amd-rocm").findings, "vfio-boot-display")


def test_a_framebuffer_kept_off_is_said() -> None:
    facts = attrs.evolve(
        host_facts("mixed"), cmdline=host_facts("mixed").cmdline + " initcall_blacklist=sysfb_init"
    )
    spec = (
        'node = "pve-mixed"\n\n[[pools]]\nname = "radeon"\ngpus = ["04:00.0"]\n'
        'mapping = { id = "rx7900" }\n\n[pools.vfio.vm]\nvmid = 300\n'
    )
    (found,) = of(plan(facts, parse_spec(spec)).findings, "vfio-boot-display")
    assert "keeps the firmware framebuffer off already" in found.message


def test_a_thunderbolt_gpu_in_a_pool_is_refused(golden: Golden) -> None:
    problems = refused(host_facts("pve-tb"), TB_SPEC)
    assert codes(problems) == ["gpu-removable"]
    assert "qm set 500 --hostpciN 0000:2e:00,pcie=1" in problems[0].fix
    assert text(problems) == golden("txt")


def test_a_thunderbolt_gpu_without_a_split_is_not_the_splits_concern() -> None:
    """No vfio pool, no split script to refuse at boot."""
    spec = 'node = "pve-tb"\n\n[[pools]]\nname = "egpu"\ngpus = ["2e:00.0"]\n'
    spec += "\n[pools.lxc]\nvmid = 140\n"
    facts = with_file(host_facts("pve-tb"), "etc/pve/lxc/140.conf", "arch: amd64\nostype: debian\n")
    assert plan(facts, parse_spec(spec)).pools[0].lxc is not None


def test_pcie_without_q35_is_a_warning(golden: Golden) -> None:
    """A VM on i440fx with a hostpci line of its own asking for pcie=1 does not start."""
    facts = host_facts("pve-ws")
    facts = edited(facts, "etc/pve/qemu-server/110.conf", "machine: pc-q35-9.0\n", "")
    facts = edited(
        facts,
        "etc/pve/qemu-server/110.conf",
        "hostpci0: 0000:39:00,pcie=1,x-vga=1\n",
        "hostpci0: 0000:39:00,x-vga=1\nhostpci1: 0000:01:00.0,pcie=1\n",
    )
    spec = (
        'node = "pve-ws"\n\n[[pools]]\nname = "cad"\ngpus = ["0000:39:00.0"]\n'
        'mapping = { id = "a4000" }\n\n[pools.vfio.vm]\nvmid = 110\n'
    )
    found = of(plan(facts, parse_spec(spec)).findings, "vm-hostpci-pcie-not-q35")
    assert [f.subject for f in found] == ["etc/pve/qemu-server/110.conf line 8"]
    assert text(found) == golden("txt")
    q35 = of(example_plan("workstation").findings, "vm-hostpci-pcie-not-q35")
    assert not q35


def test_bar_sizes_count_in_the_facts() -> None:
    """The BARs are facts, not guesses: VM 200 with the RTX PRO 6000's 128 GiB BAR1
    shrunk to 256 MiB fits the default CPU type."""
    facts = host_facts("pve-wrx")
    small = tuple(
        attrs.evolve(f, bars=tuple(Bar(b.index, 256 << 20, b.is_64bit, b.prefetchable)
                                   if b.size == 128 * GIB else b for b in f.bars))
        for f in facts.functions
    )  # fmt: skip
    gpus = tuple(
        attrs.evolve(g, function=next(f for f in small if f.address == g.address),
                     companions=tuple(next(f for f in small if f.address == c.address)
                                      for c in g.companions))
        for g in facts.gpus
    )  # fmt: skip
    result = plan(
        attrs.evolve(facts, functions=small, gpus=gpus), parse_spec(WRX_SPEC.format(gpus=FOUR))
    )
    assert result.pools[0].vm is not None


# -- the address arithmetic, one rule at a time

AMD52 = HostCpu("AuthenticAMD", 52)
INTEL46 = HostCpu("GenuineIntel", 46)
MIB = 1 << 20


@pytest.mark.parametrize(
    ("value", "host", "bits", "pdpe1gb", "vendor"),
    [
        (None, AMD52, 40, False, "AuthenticAMD"),  # no cpu line: kvm64
        ("x86-64-v2-AES", INTEL46, 40, False, "GenuineIntel"),
        ("host", AMD52, 52, True, "AuthenticAMD"),
        ("cputype=max,hidden=1", INTEL46, 46, True, "GenuineIntel"),
        ("x86-64-v2-AES,phys-bits=host,flags=+aes;+pdpe1gb", AMD52, 52, True, "AuthenticAMD"),
        ("EPYC-Genoa,phys-bits=44", INTEL46, 44, True, "AuthenticAMD"),
        ("Skylake-Server", AMD52, 40, True, "GenuineIntel"),
        ("host", None, None, True, None),  # the host's bits, unknown
    ],
)
def test_guest_cpu(
    value: str | None,
    host: HostCpu | None,
    bits: int | None,
    pdpe1gb: bool,
    vendor: str | None,
) -> None:
    cpu = guest_cpu(value, host)
    assert (cpu.bits, cpu.pdpe1gb, cpu.vendor) == (bits, pdpe1gb, vendor)


@pytest.mark.parametrize(
    ("memory_mib", "q35", "end"),
    [(2048, True, 4 * GIB), (16384, True, 18 * GIB), (16384, False, 17 * GIB), (0, True, 4 * GIB)],
)
def test_ram_end(memory_mib: int, q35: bool, end: int) -> None:
    """q35 keeps 2 GiB below 4 GiB (i440fx 3 GiB) once the VM is big enough."""
    assert ram_end(memory_mib, q35) == end


def test_ovmf_windows() -> None:
    """40 bits on Intel are not trusted (QEMU's default may lie): the classic 32 GiB
    window above the memory; on AMD they are: the top eighth of 1 TiB; the host's bits
    stop at 46; X-PciMmio64Mb sizes the classic one."""
    end = ram_end(65536, True)
    intel = mmio_window(guest_cpu("kvm64", INTEL46), 40, ovmf=True, end_of_ram=end)
    assert (intel.start, intel.end - intel.start) == (96 * GIB, 32 * GIB)
    amd = mmio_window(guest_cpu("kvm64", AMD52), 40, ovmf=True, end_of_ram=end)
    assert (amd.start, amd.end) == (896 * GIB, 1024 * GIB)
    host = mmio_window(guest_cpu("host", AMD52), 52, ovmf=True, end_of_ram=end)
    assert host.end - host.start == 8 << 40
    wide = mmio_window(
        guest_cpu("kvm64", INTEL46), 40, ovmf=True, end_of_ram=end, classic_mib=262144
    )
    assert (wide.start, wide.end) == (256 * GIB, 512 * GIB)
    seabios = mmio_window(guest_cpu("host", AMD52), 52, ovmf=False, end_of_ram=end)
    assert seabios.end == 1 << 44


def test_pack_behind_ports() -> None:
    """Behind its root port a GPU's window is aligned to its largest BAR: the next one
    starts 256 GiB on; packed together, the BARs only add up."""
    devices = [PRO6000_BARS + HDA_BARS] * 4
    assert pack(devices, True) == (896 * GIB + 32 * MIB, 128 * GIB)
    assert pack(devices, False) == (512 * GIB + 128 * MIB, 128 * GIB)
    assert pack([HDA_BARS], True) == (0, 1)
