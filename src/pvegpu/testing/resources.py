"""The parts of a fake host a VM's start depends on: BARs, node memory, the CPU.

A function's `DeviceSpec.bars` become the lines of its `resource` file, placed where a
kernel would put them (each aligned to its size: 64-bit BARs above 4 GiB, the others
below); `HostSpec.node_memory` becomes each node's `meminfo`, `HostSpec.cpu` the host's
`/proc/cpuinfo`, one block per CPU of the NUMA nodes' lists. Neither is written when not
given, as in snapshots taken before pvegpu read them.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from pvegpu.model.resources import ROM_INDEX, Bar
from pvegpu.pci import CpuList
from pvegpu.values import value_class

KIB_PER_GIB = 1 << 20
_BRIDGE_CLASS = 0x0604

# The kernel's resource flags (include/linux/ioport.h) and the BAR type bits it keeps in
# the low nibble of a memory resource's flags.
_MEM = 0x200
_PREFETCH = 0x2000
_READONLY = 0x4000
_SIZEALIGN = 0x40000
_MEM_64 = 0x100000
_TYPE_64 = 0x4
_TYPE_PREFETCH = 0x8

_ZERO_LINE = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
ENDPOINT_RESOURCES = 13
"""6 BARs, the ROM, 6 SR-IOV BARs: PCI_BRIDGE_RESOURCES lines for an endpoint."""
BRIDGE_RESOURCES = 17
"""...plus the 4 bridge windows: DEVICE_COUNT_RESOURCE lines for a bridge."""

_LOW_START = 0x80000000
_LOW_END = 0xFE000000
"""The 32-bit window below 4 GiB the writer places the other BARs and ROMs in."""
_HIGH_START = 0x30000000000
"""Where the writer starts the 64-bit BARs (3 TiB: above any fixture host's memory)."""


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class CpuSpec:
    """The host's processors as `/proc/cpuinfo` shows each of them."""

    vendor: str = "AuthenticAMD"
    model_name: str = "AMD EPYC 9354 32-Core Processor"
    family: int = 25
    model: int = 17
    stepping: int = 1
    phys_bits: int = 52
    virt_bits: int = 57
    sockets: int = 1
    """`physical id` runs over the sockets, the NUMA nodes split evenly among them."""
    flags: str = (
        "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush "
        "mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good "
        "nopl nonstop_tsc cpuid pni pclmulqdq monitor ssse3 fma cx16 pcid sse4_1 sse4_2 "
        "x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic "
        "cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext "
        "perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 hw_pstate ssbd "
        "mba ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a "
        "avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni "
        "avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves sev sev_es sev_snp"
    )


@value_class
@attrs.frozen(eq=False, repr=False)
class NodeMemory:
    """A NUMA node's memory as its `meminfo` counts it."""

    total_kib: int
    free_kib: int

    @classmethod
    def gib(cls, total: float, free: float) -> NodeMemory:
        return cls(int(total * KIB_PER_GIB), int(free * KIB_PER_GIB))


def check_bars(address: str, pci_class: int, bars: tuple[Bar, ...]) -> str | None:
    """Why these BARs could not be a function's, or None."""
    taken: set[int] = set()
    for bar in bars:
        if not 0 <= bar.index <= ROM_INDEX or bar.index in taken:
            return f"{address}: BAR {bar.index} is no free BAR index (0-5, 6 the ROM)"
        if bar.size < 16 or bar.size & (bar.size - 1):
            return f"{address}: BAR {bar.index} of {bar.size} bytes is no power of two >= 16"
        if bar.is_64bit and bar.index >= ROM_INDEX - 1:
            return f"{address}: a 64-bit BAR takes two registers, BAR {bar.index} has no second"
        taken.add(bar.index)
        if bar.is_64bit:
            taken.add(bar.index + 1)
    if bars and pci_class >> 8 == _BRIDGE_CLASS and max(b.index for b in bars) > 1:
        return f"{address}: a bridge has BARs 0 and 1 only (its windows come after the ROM)"
    return None


class BarPlacer:
    """Addresses for BARs, handed out in the order functions are written."""

    def __init__(self) -> None:
        self.low = _LOW_START
        self.high = _HIGH_START

    def place(self, address: str, bars: tuple[Bar, ...]) -> dict[int, int]:
        """Each BAR's start, by index: largest first, each aligned to its size."""
        starts: dict[int, int] = {}
        for bar in sorted(bars, key=lambda b: -b.size):
            if bar.is_64bit:
                starts[bar.index] = self.high = _align(self.high, bar.size)
                self.high += bar.size
                continue
            starts[bar.index] = self.low = _align(self.low, bar.size)
            self.low += bar.size
            if self.low > _LOW_END:
                raise ValueError(f"{address}: the 32-bit BARs of the host pass 4 GiB")
        return starts


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def resource_text(bars: tuple[Bar, ...], starts: Mapping[int, int], bridge: bool) -> str:
    """`resource` as the kernel prints it: `0x%016llx 0x%016llx 0x%016llx` per line."""
    lines = [_ZERO_LINE] * (BRIDGE_RESOURCES if bridge else ENDPOINT_RESOURCES)
    for bar in bars:
        start = starts[bar.index]
        if bar.is_rom:
            flags = _MEM | _PREFETCH | _READONLY | _SIZEALIGN
        else:
            flags = _MEM | _SIZEALIGN
            flags |= (_PREFETCH | _TYPE_PREFETCH) if bar.prefetchable else 0
            flags |= (_MEM_64 | _TYPE_64) if bar.is_64bit else 0
        lines[bar.index] = f"0x{start:016x} 0x{start + bar.size - 1:016x} 0x{flags:016x}\n"
    return "".join(lines)


def meminfo_text(node: int, memory: NodeMemory) -> str:
    """A node's `meminfo` in the kernel's format (`Node 0 MemTotal:       263856764 kB`)."""
    used = memory.total_kib - memory.free_kib
    rows = [
        ("MemTotal", memory.total_kib),
        ("MemFree", memory.free_kib),
        ("MemUsed", used),
        ("SwapCached", 0),
        ("Active", used // 4),
        ("Inactive", used // 2),
        ("Unevictable", 0),
        ("Mlocked", 0),
        ("Dirty", 0),
        ("Writeback", 0),
        ("FilePages", used // 2),
        ("Mapped", used // 16),
        ("AnonPages", used // 4),
        ("Shmem", 0),
        ("KernelStack", 20480),
        ("PageTables", used // 512),
        ("Slab", used // 8),
        ("SReclaimable", used // 16),
        ("SUnreclaim", used // 16),
        ("AnonHugePages", 0),
    ]
    text = "".join(f"Node {node} {key + ':':<15} {value:>8} kB\n" for key, value in rows)
    for key in ("HugePages_Total", "HugePages_Free", "HugePages_Surp"):
        text += f"Node {node} {key + ':'} {0:>5}\n"
    return text


def cpuinfo_text(cpu: CpuSpec, nodes: tuple[CpuList, ...]) -> str:
    """`/proc/cpuinfo`: a block per CPU of the nodes' lists, in CPU order."""
    node_of = {c: i for i, cpus in enumerate(nodes) for c in cpus.cpus}
    per_socket = max(1, len(nodes) // max(1, cpu.sockets))
    siblings = len(node_of) // max(1, cpu.sockets)
    blocks = []
    for number in sorted(node_of):
        socket = min(node_of[number] // per_socket, cpu.sockets - 1)
        blocks.append(
            f"processor\t: {number}\n"
            f"vendor_id\t: {cpu.vendor}\n"
            f"cpu family\t: {cpu.family}\n"
            f"model\t\t: {cpu.model}\n"
            f"model name\t: {cpu.model_name}\n"
            f"stepping\t: {cpu.stepping}\n"
            f"physical id\t: {socket}\n"
            f"siblings\t: {siblings}\n"
            f"core id\t\t: {number % max(1, siblings // 2)}\n"
            f"cpu cores\t: {max(1, siblings // 2)}\n"
            "fpu\t\t: yes\n"
            f"flags\t\t: {cpu.flags}\n"
            f"address sizes\t: {cpu.phys_bits} bits physical, {cpu.virt_bits} bits virtual\n"
            "power management:\n"
            "\n"
        )
    return "".join(blocks)
