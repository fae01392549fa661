"""Where a VM's firmware puts its devices' 64-bit BARs, and whether they fit.

A passed-through device's BARs are mapped into the guest's physical address space.
Those of a large-memory GPU (the 96 GB RTX PRO 6000: a 128 GiB BAR1) go above 4 GiB,
into a 64-bit MMIO window the firmware opens above the guest's memory, and everything must
lie below 2^(the guest's physical address bits). The rules, from the sources:

- qemu-server: `phys-bits=N` gives the guest N bits; `phys-bits=host`, and CPU types
  `host` and `max` (QEMU turns on host-phys-bits for them), the host's
  (`/proc/cpuinfo` `address sizes`); every other type QEMU's default, 40 bits (1 TiB).
  No `cpu:` line is kvm64. The generic types (kvm64, qemu64 and Proxmox's x86-64-v2-AES
  and kin, all qemu64 underneath) show the guest the host's vendor and lack `pdpe1gb`
  (1 GiB pages) unless `flags=+pdpe1gb` adds it.
- OVMF (edk2 OvmfPkg PlatformInitLib, `PlatformAddressWidthFromCpuid` and
  `PlatformDynamicMmioWindow`): it trusts the CPU's bits when they are 41 or more (or
  `guest-phys-bits` is set), or 40 on an AMD vendor (36 and 39 on Intel); it then uses at
  most 46 of them (four-level paging), and 40 without 1 GiB pages, and opens the window
  over the top eighth of that space. Otherwise it keeps its classic window: 32 GiB right
  above the memory (`PcdPciMmio64Size`), or the size `-fw_cfg
  name=opt/ovmf/X-PciMmio64Mb,string=<MiB>` sets. PciBusDxe packs BARs largest
  alignment first; a bridge's window (a q35 root port, what `pcie=1` puts each device
  behind) holds all its device's BARs and is aligned to the largest, so a 128 GiB BAR
  next to a 32 MiB one takes 256 GiB unless it comes last.
- SeaBIOS (the default `bios`): the window lies above the memory and below 2^bits,
  below 2^44 when the guest has more bits and less than 1 TiB of memory above 4 GiB.
- QEMU puts 2 GiB of memory below 4 GiB on q35 (3 GiB on i440fx) once the VM has more
  than 2.75 GiB (3.5 GiB), the rest from 4 GiB up.

A BAR the firmware cannot place stays unassigned: the VM starts, but the guest's driver
finds no memory behind the GPU. Memory hotplug's reserved area, Proxmox's custom CPU
models and the 1 TiB relocation of memory on large AMD guests are not modelled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import attrs

from pvegpu.model.resources import Bar, HostCpu
from pvegpu.pvefiles.hostpci import options
from pvegpu.values import value_class

MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40
QEMU_DEFAULT_BITS = 40
OVMF_MAX_BITS = 46
OVMF_CLASSIC_WINDOW = 32 * GIB
SEABIOS_MAX_BITS = 44
DEFAULT_CPU = "kvm64"
"""qemu-server's CPU type for a VM without a `cpu:` line (KVM on x86_64)."""
HOST_TYPES = frozenset({"host", "max"})
GENERIC_TYPES = frozenset(
    {"kvm32", "kvm64", "qemu32", "qemu64", "x86-64-v2", "x86-64-v2-AES", "x86-64-v3", "x86-64-v4"}
)
"""qemu-server's generic CPU types: the host's vendor, no `pdpe1gb`."""
_AMD_TYPES = ("EPYC", "Opteron", "phenom", "athlon")
AMD = "AuthenticAMD"
INTEL = "GenuineIntel"


@value_class
@attrs.frozen(eq=False, repr=False)
class GuestCpu:
    """What a VM's `cpu:` option shows the guest about its physical addresses."""

    cputype: str
    bits: int | None
    """Physical address bits the guest sees; None: `host` bits on a host whose are unknown."""
    why: str
    """Whose bits they are, for a message: `the host's, by CPU type host`."""
    guest_phys_bits: int | None = None
    pdpe1gb: bool = True
    vendor: str | None = None
    custom: bool = False
    """A Proxmox custom model (`custom-...`): its settings are in a file not read."""


def guest_cpu(value: str | None, host: HostCpu | None) -> GuestCpu:
    """The guest's addressing from a VM's `cpu:` value (None: no such line)."""
    parts = dict(options(value or ""))
    cputype = (parts.pop("", None) or parts.pop("cputype", None) or DEFAULT_CPU).strip()
    flags = {f.strip() for f in parts.get("flags", "").split(";")}
    phys = parts.get("phys-bits", "").strip()
    guest_phys = parts.get("guest-phys-bits", "").strip()
    host_bits = host.phys_bits if host is not None else None
    host_vendor = host.vendor if host is not None else None
    if cputype.startswith(_AMD_TYPES):
        vendor: str | None = AMD
    elif cputype in GENERIC_TYPES or cputype in HOST_TYPES:
        vendor = host_vendor
    else:
        vendor = INTEL
    pdpe1gb = "+pdpe1gb" in flags or (cputype not in GENERIC_TYPES and "-pdpe1gb" not in flags)
    if phys == "host" or (not phys and cputype in HOST_TYPES):
        bits = host_bits
        why = f"the host's, by {'phys-bits=host' if phys else f'CPU type {cputype}'}"
    elif phys.isascii() and phys.isdigit():
        bits, why = int(phys), f"its phys-bits={phys}"
    else:
        bits = QEMU_DEFAULT_BITS
        why = f"QEMU's default, which its CPU type {cputype} keeps (all but host and max do)"
    return GuestCpu(
        cputype,
        bits,
        why,
        guest_phys_bits=int(guest_phys) if guest_phys.isascii() and guest_phys.isdigit() else None,
        pdpe1gb=pdpe1gb,
        vendor=vendor,
        custom=cputype.startswith("custom-"),
    )


def ram_end(memory_mib: int, q35: bool) -> int:
    """The end of the guest's memory: 4 GiB plus what QEMU puts above it."""
    memory = memory_mib * MIB
    low, limit = (2 * GIB, 0xB0000000) if q35 else (3 * GIB, 0xE0000000)
    above = memory - low if memory >= limit else 0
    return 4 * GIB + above


@value_class
@attrs.frozen(eq=False, repr=False)
class Window:
    """The guest physical range the firmware places 64-bit BARs in."""

    start: int
    end: int
    what: str
    """For a message: `OVMF's classic 64-bit MMIO window (32 GiB above the memory)`."""
    limit: int
    """Where the addresses the firmware and the guest can reach end: a window past it
    is of no use (OVMF maps only the bits it settled on)."""


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def _floor_pow2(value: int) -> int:
    return 1 << (value.bit_length() - 1) if value > 0 else 1


def _trusted(cpu: GuestCpu, bits: int) -> bool:
    """Whether OVMF and SeaBIOS take the CPU's bits as the truth (QEMU's 40 may lie)."""
    if cpu.guest_phys_bits or bits >= 41:
        return True
    return (cpu.vendor == INTEL and bits in (36, 39)) or (cpu.vendor == AMD and bits == 40)


def mmio_window(
    cpu: GuestCpu, bits: int, *, ovmf: bool, end_of_ram: int, classic_mib: int | None = None
) -> Window:
    """The 64-bit MMIO window the firmware opens for a guest of `bits` physical bits."""
    base = _align(end_of_ram, GIB)
    if not ovmf:
        top = 1 << bits
        if _trusted(cpu, bits) and bits > SEABIOS_MAX_BITS and end_of_ram - 4 * GIB < TIB:
            top = 1 << SEABIOS_MAX_BITS
        return Window(base, top, f"SeaBIOS's 64-bit MMIO window (up to {size_text(top)})", top)
    classic = OVMF_CLASSIC_WINDOW if classic_mib is None else classic_mib * MIB
    base = _align(base, _floor_pow2(classic))
    limit = 1 << bits
    if _trusted(cpu, bits):
        width = min(bits, cpu.guest_phys_bits or bits, OVMF_MAX_BITS)
        if not cpu.pdpe1gb and width > QEMU_DEFAULT_BITS:
            width = QEMU_DEFAULT_BITS
        limit = 1 << width
        dynamic = 1 << (width - 3)
        if classic < dynamic and base + dynamic < limit:
            what = f"OVMF's 64-bit MMIO window (the top eighth of {width} bits)"
            return Window(limit - dynamic, limit, what, limit)
    source = "X-PciMmio64Mb" if classic_mib is not None else "its default"
    what = f"OVMF's classic 64-bit MMIO window ({size_text(classic)} above the memory, {source})"
    return Window(base, base + classic, what, limit)


def pack(devices: Iterable[tuple[Bar, ...]], behind_ports: bool) -> tuple[int, int]:
    """(bytes, alignment) the 64-bit BARs of `devices` take, packed as firmware packs
    them: largest alignment first, each at an offset aligned to it. With
    `behind_ports`, each device's BARs first go into its port's window (1 MiB granular,
    aligned to its largest BAR)."""
    nodes: list[tuple[int, int]] = []
    for bars in devices:
        sizes = [b.size for b in bars if b.is_64bit]
        if not sizes:
            continue
        if behind_ports:
            length, alignment = _pack_nodes([(s, s) for s in sizes])
            nodes.append((_align(length, MIB), alignment))
        else:
            nodes.extend((s, s) for s in sizes)
    return _pack_nodes(nodes)


def _pack_nodes(nodes: list[tuple[int, int]]) -> tuple[int, int]:
    offset = 0
    for length, alignment in sorted(nodes, key=lambda n: -n[1]):
        offset = _align(offset, alignment) + length
    return offset, max((a for _, a in nodes), default=1)


def fits(window: Window, need: tuple[int, int]) -> bool:
    """Whether `need` (from `pack`) fits in the window, below its limit."""
    total, alignment = need
    end = min(window.end, window.limit)
    return total == 0 or _align(window.start, alignment) + total <= end


def size_text(size: int) -> str:
    """`128 GiB`, `32 MiB`, `1 TiB`; `896.03 GiB` in the largest unit it reaches."""
    for unit, name in ((TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")):
        if size >= unit:
            return f"{size // unit} {name}" if size % unit == 0 else f"{size / unit:.2f} {name}"
    return f"{size} bytes"


def bars_text(devices: Iterable[tuple[Bar, ...]]) -> str:
    """`4 x 128 GiB + 4 x 32 MiB`: the 64-bit BARs by size, largest first."""
    sizes = Counter(b.size for bars in devices for b in bars if b.is_64bit)
    return " + ".join(
        f"{n} x {size_text(s)}" if n > 1 else size_text(s) for s, n in sorted(sizes.items())[::-1]
    )
