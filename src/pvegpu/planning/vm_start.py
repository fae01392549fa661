"""Whether the VM of a vfio pool can start with its GPUs, and use them.

What Proxmox and QEMU need at the VM's start, judged from its config and the host's
facts (docs/formats.md, "VM config"):

- vfio pins all of the guest's memory when the VM starts. Memory bound to NUMA nodes
  (`numa = true`, which writes `numa0: ...,hostnodes=<the GPUs' node>,memory=<all of
  it>,policy=bind`, or the VM's own `numaN ... policy=bind` lines) must fit those nodes'
  memory (`meminfo`'s MemTotal): more is refused (`vm-numa-memory-beyond-node`), most of
  it, or more than is free, is a warning (`vm-numa-memory-tight`).
- The GPUs' 64-bit BARs must fit the guest's physical address space and its firmware's
  64-bit MMIO window (`planning/guest_address.py`): a BAR the firmware cannot place
  leaves the GPU without memory in the guest (`vm-bars-beyond-address-space`,
  `vm-bars-beyond-mmio-window`; `vm-new-needs-phys-bits` for a VM yet to be created).
- `pcie=1` needs a q35 machine: qemu-server refuses to start a VM with such a line on
  another machine (`vm-hostpci-pcie-not-q35`; pvegpu's own lines leave it out there).
- The host's boot display (`boot_vga`) going to vfio-pci takes the host's local console
  with it (`vfio-boot-display`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import HostFacts, PciFunction
from pvegpu.model.guests import guests
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.plan import Pool, PoolKind, VmGuest
from pvegpu.model.resources import Bar
from pvegpu.pci import PciAddress
from pvegpu.planning.guest_address import (
    GIB,
    MIB,
    GuestCpu,
    Window,
    bars_text,
    fits,
    guest_cpu,
    mmio_window,
    pack,
    ram_end,
    size_text,
)
from pvegpu.planning.vm_numa import hostnodes
from pvegpu.pvefiles import hostpci, qemuconf
from pvegpu.pvefiles.guestconf import ConfLine, LineKind
from pvegpu.values import value_class

OVMF_PREFIX = "OVMF's "
TIGHT_SHARE = 0.9
"""Bound memory above this share of its nodes is a warning: the host needs the rest."""
_NUMA_KEY = re.compile(r"numa[0-9]+")
_MMIO64 = re.compile(r"opt/ovmf/X-PciMmio64Mb,string=([0-9]+)")
_FB_OFF = (("initcall_blacklist", "sysfb_init"), ("video", "efifb:off"), ("video", "simplefb:off"))
"""Kernel parameters that keep the firmware's framebuffer off the boot display."""


def _main_lines(facts: HostFacts, vm: VmGuest) -> tuple[ConfLine, ...]:
    assert vm.config is not None
    return guests(facts).config(vm.config).main


def _value(lines: Sequence[ConfLine], key: str) -> tuple[int, str] | None:
    """(line number, value) of the main section's `key`."""
    for number, line in enumerate(lines, start=1):
        if line.kind is LineKind.KEY and line.key == key:
            return number, line.value.strip()
    return None


def _vms(pools: Sequence[Pool]) -> Iterator[tuple[Pool, VmGuest]]:
    for pool in pools:
        if pool.kind is PoolKind.VFIO and pool.vm is not None:
            yield pool, pool.vm


# -- memory bound to NUMA nodes


@value_class
@attrs.frozen(eq=False, repr=False)
class _Binding:
    """Memory of a VM bound to host NUMA nodes, and what those nodes hold."""

    vm: VmGuest
    subject: str
    """The config line that binds it: `memory:` under numa = true, else the `numaN`."""
    what: str
    """For a message: `numa0 (policy=bind)`, `numa = true (numa0: ...)`."""
    nodes: tuple[int, ...]
    mib: int
    total_kib: int
    """The nodes' MemTotal together."""
    free_kib: int | None

    @property
    def kib(self) -> int:
        return self.mib * 1024

    @property
    def text(self) -> str:
        nodes = ", ".join(map(str, self.nodes))
        which = f"NUMA node {nodes}" if len(self.nodes) == 1 else f"NUMA nodes {nodes}"
        size = size_text(self.mib * MIB)
        return f"{self.what} binds {size} of VM {self.vm.vmid}'s memory to {which}"


def _bound(
    vm: VmGuest, lines: Sequence[ConfLine]
) -> Iterator[tuple[str, tuple[int, ...], int, int]]:
    """(what binds it, host nodes, MiB, its line number) for each binding of its memory."""
    if vm.numa and vm.numa_pin is not None:
        found = _value(lines, "memory")
        mib = qemuconf.memory_mib(found[1]) if found is not None else None
        if found is not None and mib is not None:
            what = f"numa = true (numa0: ...,hostnodes={vm.numa_pin.hostnode},memory={mib})"
            yield what, (vm.numa_pin.hostnode,), mib, found[0]
        return
    bound: dict[tuple[int, ...], list[tuple[str, int, int]]] = {}
    for number, line in enumerate(lines, start=1):
        if line.kind is not LineKind.KEY or not _NUMA_KEY.fullmatch(line.key):
            continue
        parts = dict(hostpci.options(line.value))
        memory = parts.get("memory", "").strip()
        if parts.get("policy") != "bind" or not (memory.isascii() and memory.isdigit()):
            continue  # preferred and interleave fall back to other nodes
        try:
            nodes = hostnodes(line.value)
        except ValueError:
            continue  # refused by vm_numa_problems
        if nodes:
            entry = (line.key, int(memory), number)
            bound.setdefault(tuple(sorted(set(nodes))), []).append(entry)
    for nodes, entries in bound.items():
        keys = " and ".join(key for key, _, _ in entries)
        yield f"{keys} (policy=bind)", nodes, sum(mib for _, mib, _ in entries), entries[0][2]


def _node_memory(facts: HostFacts, nodes: tuple[int, ...]) -> tuple[int, int | None] | None:
    """(MemTotal, MemFree) of the nodes together in KiB; None when one is unknown."""
    known = {n.id: n for n in facts.numa_nodes}
    found = [known.get(n) for n in nodes]
    totals = [n.memory_kib if n is not None else None for n in found]
    if any(t is None for t in totals):
        return None
    frees = [n.free_kib if n is not None else None for n in found]
    free = None if any(f is None for f in frees) else sum(f or 0 for f in frees)
    return sum(t or 0 for t in totals), free


def _gib(kib: int) -> str:
    return f"{kib / (1 << 20):.1f} GiB"


def _bindings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[_Binding]:
    """Each binding of a pool VM's memory to nodes whose memory discovery read."""
    for _, vm in _vms(pools):
        if vm.config is None:
            continue
        for what, nodes, mib, number in _bound(vm, _main_lines(facts, vm)):
            memory = _node_memory(facts, nodes)
            if memory is not None:
                subject = f"{vm.config_path} line {number}"
                yield _Binding(vm, subject, what, nodes, mib, *memory)


def _numa_fix(facts: HostFacts, binding: _Binding) -> str:
    vm = binding.vm
    most = int(binding.total_kib * TIGHT_SHARE) // 1024 // 1024 * 1024
    if vm.numa:
        return (
            f"give the VM at most {most} MiB (qm set {vm.vmid} --memory {most}), or set "
            "numa = false in the pool's vm table (its memory is then not bound)"
        )
    lines = [ln for ln in _main_lines(facts, vm) if _NUMA_KEY.fullmatch(ln.key)]
    if len(lines) == 1 and binding.what.startswith(f"{lines[0].key} "):
        # The VM's one NUMA node: its memory and the line's shrink together.
        parts = [(k, most if k == "memory" else v) for k, v in hostpci.options(lines[0].value)]
        value = ",".join(f"{k}={v}" if k else str(v) for k, v in parts)
        shrink = f"qm set {vm.vmid} --memory {most} --{lines[0].key} {value}"
    else:
        shrink = f"qm set {vm.vmid} --memory {most} and the numaN memory values to match"
    return (
        f"give the VM at most {most} MiB ({shrink}), bind its memory to more nodes, or use "
        "policy=preferred, which falls back to other nodes when one is full"
    )


def _numa_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    for binding in _bindings(facts, pools):
        if binding.kib <= binding.total_kib:
            continue
        have = "has" if len(binding.nodes) == 1 else "have"
        yield Diagnostic.error(
            "vm-numa-memory-beyond-node",
            binding.subject,
            f"{binding.text}, which {have} {_gib(binding.total_kib)} (MemTotal): vfio pins "
            "all of a guest's memory when it starts, so the VM cannot start",
            _numa_fix(facts, binding),
        )


def _numa_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    for binding in _bindings(facts, pools):
        total, free = binding.total_kib, binding.free_kib
        if binding.kib > total:
            continue  # refused
        reasons = []
        if binding.kib > total * TIGHT_SHARE:
            reasons.append(f"more than {TIGHT_SHARE:.0%} of their {_gib(total)}")
        if free is not None and binding.kib > free:
            reasons.append(
                f"more than the {_gib(free)} free there at discovery (unless the VM was "
                "running then, holding its own)"
            )
        if not reasons:
            continue
        yield Diagnostic(
            Severity.WARNING,
            "vm-numa-memory-tight",
            binding.subject,
            f"{binding.text}, {' and '.join(reasons)}: vfio pins all of it when the VM "
            "starts, and the kernel, other guests and the ZFS ARC on those nodes need theirs; "
            f"a start that finds too little fails. To leave room: {_numa_fix(facts, binding)}",
        )


# -- the GPUs' BARs in the guest's physical address space


def _devices(facts: HostFacts, pool: Pool, vm: VmGuest) -> list[tuple[str, tuple[Bar, ...]]]:
    """(name, BARs) of each device the VM's hostpci lines give it: the pool's GPUs (with
    the functions that move with them), then its other lines' devices whose BARs
    discovery read (GPUs by raw address or by another mapping on this node)."""
    devices = [(str(g.address), tuple(b for f in g.functions for b in f.bars)) for g in pool.gpus]
    if vm.config is None:
        return devices
    owned = hostpci.host_ids(vm.mapped)
    maps = _mapping_hosts(facts)
    for line in _main_lines(facts, vm):
        use = hostpci.hostpci_use(line)
        if use is None or use.mapping in (vm.mapping_id, *vm.old_mappings):
            continue
        hosts = use.hosts if use.mapping is None else maps.get(use.mapping, ())[:1]
        if use.mapping is None and any(h.overlaps(o) for h in hosts for o in owned):
            continue  # a raw line of the pool's devices: the mapping's lines replace it
        functions = [f for h in hosts for f in _functions(facts, h)]
        bars = tuple(b for f in functions for b in f.bars)
        if bars:
            devices.append((f"{line.key} ({', '.join(str(f.address) for f in functions)})", bars))
    return devices


def _functions(facts: HostFacts, host: hostpci.HostId) -> tuple[PciFunction, ...]:
    """The host's functions a hostpci host id names: a slot's all, or one of them."""
    try:
        address = PciAddress(host.domain, host.bus, host.device, host.function or 0)
    except ValueError:
        return ()  # no function of this host can have it
    return tuple(
        f
        for f in facts.slot_functions(address)
        if host.function is None or f.address.function == host.function
    )


def _mapping_hosts(facts: HostFacts) -> dict[str, tuple[hostpci.HostId, ...]]:
    # A broken pci.cfg has no sections here: it is refused on its own (pci_cfg_problems).
    return pci_cfg(facts).node_hosts(facts.node)


def _cpu_without(value: str | None, *drop: str) -> list[tuple[str, str]]:
    """The `cpu:` options but the CPU type and `drop`, as written."""
    return [
        (k, v) for k, v in hostpci.options(value or "") if k not in ("", "cputype", *drop) and v
    ]


def _cpu_value(cputype: str, rest: list[tuple[str, str]]) -> str:
    return ",".join([cputype, *(f"{k}={v}" for k, v in rest)])


def _wider(vm: VmGuest, cpu: GuestCpu, value: str | None, ovmf: bool) -> list[str]:
    """`--cpu` values with the host's bits: `host`, and the CPU type kept with
    phys-bits=host (live migration needs a type every node has), 1 GiB pages added to a
    generic type under OVMF, which otherwise stops at 40 bits."""
    rest = _cpu_without(value, "phys-bits", "guest-phys-bits")
    wider = [_cpu_value("host", rest)]
    if cpu.cputype not in ("host", "max"):
        kept = [*rest, ("phys-bits", "host")]
        if ovmf and not cpu.pdpe1gb:
            flags = next((v for k, v in rest if k == "flags"), "")
            kept = [(k, v) for k, v in kept if k != "flags"]
            kept.append(("flags", ";".join(f for f in (flags, "+pdpe1gb") if f)))
        wider.append(_cpu_value(cpu.cputype, kept))
    return [f"qm set {vm.vmid} --cpu {w}" for w in wider]


def _bar_problem(
    facts: HostFacts, pool: Pool, vm: VmGuest, lines: Sequence[ConfLine]
) -> Diagnostic | None:
    found = _value(lines, "cpu")
    value = found[1] if found is not None else None
    cpu = guest_cpu(value, facts.cpu)
    if cpu.custom or cpu.bits is None:
        return None  # a custom model's bits are in a file not read; unknown host bits
    devices = _devices(facts, pool, vm)
    need = pack((bars for _, bars in devices), vm.pcie)
    if not need[0]:
        return None
    bios = _value(lines, "bios")
    ovmf = bios is not None and bios[1] == "ovmf"
    memory = _value(lines, "memory")
    mib = (qemuconf.memory_mib(memory[1]) if memory is not None else None) or 0
    end = ram_end(mib, vm.pcie)
    args = _value(lines, "args")
    classic = _MMIO64.search(args[1]) if args is not None else None
    classic_mib = int(classic.group(1)) if classic is not None else None

    def window(guest: GuestCpu) -> Window | None:
        if guest.bits is None:
            return None
        return mmio_window(guest, guest.bits, ovmf=ovmf, end_of_ram=end, classic_mib=classic_mib)

    space = Window(end, 1 << cpu.bits, "", 1 << cpu.bits)
    firmware = window(cpu)
    assert firmware is not None  # cpu.bits is known
    if fits(space, need) and fits(firmware, need):
        return None
    names = ", ".join(name for name, bars in devices if any(b.is_64bit for b in bars))
    where = "behind their PCIe root ports" if vm.pcie else "packed together"
    said = (
        f"VM {vm.vmid}'s hostpci lines give it {bars_text(b for _, b in devices)} of 64-bit "
        f"BARs ({names}), which take {size_text(need[0])} of guest physical addresses "
        f"{where}, above its memory (which ends at {size_text(end)})"
    )
    host_cpu = guest_cpu(_cpu_value("host", []), facts.cpu)
    host_window = window(host_cpu)
    if host_window is None or fits(host_window, need):
        host, *kept = _wider(vm, cpu, value, ovmf)
        if host_window is None:
            fix = f"{host} (the host's bits, which discovery could not read: no /proc/cpuinfo)"
        else:
            span = size_text(host_window.end - host_window.start)
            fix = f"{host} (the host's {host_cpu.bits} bits; {host_window.what} then spans {span})"
        if kept:
            fix += f", or keep the CPU type (live migration needs one every node has): {kept[0]}"
    else:
        bits = "unknown" if host_cpu.bits is None else str(host_cpu.bits)
        fix = (
            f"even the host's own {bits} physical address bits are too few: give the VM "
            "fewer of these GPUs (one pool per VM) or less memory"
        )
    subject = vm.config_path if found is None else f"{vm.config_path} line {found[0]}"
    if not fits(space, need):
        return Diagnostic.error(
            "vm-bars-beyond-address-space",
            subject,
            f"{said}. The guest has {cpu.bits} physical address bits "
            f"({size_text(1 << cpu.bits)}), {cpu.why}, so no firmware can place them and the "
            "guest finds no memory behind its GPUs",
            fix,
        )
    if ovmf and args is None:
        # A classic window that size, where OVMF then puts it, inside the guest's bits.
        wide = _align_mib(need[0])
        opened = mmio_window(cpu, cpu.bits, ovmf=True, end_of_ram=end, classic_mib=wide)
        if fits(opened, need):
            fix += (
                f", or give OVMF a {size_text(wide * MIB)} window instead: qm set {vm.vmid} "
                f"--args '-fw_cfg name=opt/ovmf/X-PciMmio64Mb,string={wide}'"
            )
    return Diagnostic.error(
        "vm-bars-beyond-mmio-window",
        subject,
        f"{said}. The guest has {cpu.bits} physical address bits, {cpu.why}, but "
        f"{firmware.what} spans only {size_text(firmware.end - firmware.start)}, so the "
        "firmware leaves the GPUs' BARs unassigned and the guest finds no memory behind them",
        fix,
    )


def _align_mib(size: int) -> int:
    """The window in MiB X-PciMmio64Mb takes: `size` up to the next power of two."""
    return max(1 << (size - 1).bit_length(), GIB) // MIB


def _bar_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    for pool, vm in _vms(pools):
        if vm.config is not None:
            problem = _bar_problem(facts, pool, vm, _main_lines(facts, vm))
            if problem is not None:
                yield problem


def _new_vm_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """A VM yet to be created whose GPUs need more than a default CPU type gives."""
    for pool, vm in _vms(pools):
        if vm.config is not None:
            continue
        devices = _devices(facts, pool, vm)
        need = pack((bars for _, bars in devices), True)
        default = guest_cpu("x86-64-v2-AES", facts.cpu)
        assert default.bits is not None
        window = mmio_window(default, default.bits, ovmf=True, end_of_ram=4 * GIB)
        if fits(window, need):
            continue
        host = guest_cpu("host", facts.cpu)
        bits = f"the host's {host.bits} bits" if host.bits is not None else "the host's bits"
        yield Diagnostic(
            Severity.WARNING,
            "vm-new-needs-phys-bits",
            vm.config_path,
            f"VM {vm.vmid} does not exist yet: its GPUs' 64-bit BARs "
            f"({bars_text(b for _, b in devices)}) take {size_text(need[0])} of guest "
            "physical addresses behind their PCIe root ports, more than QEMU's default of 40 "
            "physical address bits leaves them, which every CPU type but host and max keeps "
            "(x86-64-v2-AES, the GUI's choice; kvm64 without a cpu line): under OVMF "
            f"the {window.what.removeprefix(OVMF_PREFIX)} spans "
            f"{size_text(window.end - window.start)}. Create it with --cpu host ({bits}), "
            "or keep a CPU type every node has and add phys-bits=host (and flags=+pdpe1gb "
            "to x86-64-v2-AES and the other generic types under OVMF); then run pvegpu again "
            "to check it",
        )


# -- pcie=1 on a machine that is not q35


def _pcie_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    for _, vm in _vms(pools):
        if vm.config is None or vm.pcie:
            continue
        for number, line in enumerate(_main_lines(facts, vm), start=1):
            use = hostpci.hostpci_use(line)
            if use is None or use.mapping in (vm.mapping_id, *vm.old_mappings):
                continue
            if ("pcie", "1") not in hostpci.options(line.value):
                continue
            yield Diagnostic(
                Severity.WARNING,
                "vm-hostpci-pcie-not-q35",
                f"{vm.config_path} line {number}",
                f"`{line.raw.rstrip()}` asks for pcie=1, which needs a q35 machine: "
                f"qemu-server refuses to start VM {vm.vmid} (q35 machine model is not "
                f"enabled). Make it q35 (qm set {vm.vmid} --machine q35) or take pcie=1 off "
                "that line",
            )


# -- the host's boot display


def _framebuffer_off(facts: HostFacts) -> bool:
    """Whether this boot and the next keep the firmware framebuffer off (sysfb)."""
    lines = [facts.cmdline_params, *(c.params for c in facts.boot.cmdlines)]
    return all(any(p in _FB_OFF for p in params) for params in lines)


def _boot_display_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    moved = {f.address for p in pools if p.kind is PoolKind.VFIO for f in p.functions}
    for pool in pools:
        if pool.kind is not PoolKind.VFIO:
            continue
        for function in pool.functions:
            if not function.boot_vga:
                continue
            others = [
                f.address
                for f in facts.functions
                if f.pci_class >> 8 == 0x0300 and f.address not in moved
            ]
            left = (
                f"the host's other display ({', '.join(map(str, others))}) gets a console only "
                "if its driver provides one"
                if others
                else "the host has no other display: it has no local console left"
            )
            framebuffer = (
                "the kernel command line keeps the firmware framebuffer off already"
                if _framebuffer_off(facts)
                else "vfio-pci removes the firmware framebuffer (simpledrm, efifb) from it as "
                "it binds (Linux 6.0 and later; with an older kernel the framebuffer keeps "
                "its BAR and the VM's GPU fails: add initcall_blacklist=sysfb_init to the "
                "kernel command line)"
            )
            yield Diagnostic(
                Severity.WARNING,
                "vfio-boot-display",
                str(function.address),
                f"is the host's boot display (boot_vga = 1), the local console, and pool "
                f"{pool.name!r} moves it to vfio-pci at every boot: {framebuffer}, so the "
                f"host's screen goes dark after the first boot messages, and {left}. Manage "
                "the host over the network or its BMC, or make another GPU the primary "
                "display in the firmware setup and discover again",
            )


# -- entry points


def vm_start_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """What keeps a pool's VM from starting, or from using its GPUs once it has."""
    yield from _numa_problems(facts, pools)
    yield from _bar_problems(facts, pools)


def vm_start_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """What a reviewer should know about the VMs' start and the host's console."""
    yield from _numa_findings(facts, pools)
    yield from _new_vm_findings(facts, pools)
    yield from _pcie_findings(facts, pools)
    yield from _boot_display_findings(facts, pools)
