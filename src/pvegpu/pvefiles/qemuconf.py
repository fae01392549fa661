"""/etc/pve/qemu-server/<vmid>.conf: hostpci lines over a PCI mapping, optional NUMA pinning.

qemu-server writes `#` description lines, then keys sorted as plain strings (`hostpci10`
before `hostpci2`), then `[PENDING]`, `[special:cloudinit]` and snapshot sections. Only
the main section is edited, and new keys go where that writer would put them. The rules,
in our words: docs/formats.md, "VM config".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import RenderError
from pvegpu.pci import CpuList
from pvegpu.pvefiles.guestconf import (
    ConfLine,
    LineKind,
    config_integer,
    join,
    key_position,
    parse_lines,
    section_named,
    split_sections,
    used_indices,
)

# One hostpci line's syntax (hostpci.py); this module patches whole VM configs with it.
from pvegpu.pvefiles.hostpci import HOSTPCI_KEY as _HOSTPCI_KEY
from pvegpu.pvefiles.hostpci import (
    MAX_HOSTPCI_INDEX,
    Conversion,
    host_ids,
    hostpci_value,
)
from pvegpu.pvefiles.hostpci import claims as _claims
from pvegpu.pvefiles.hostpci import kept_options as _kept_options
from pvegpu.pvefiles.hostpci import old_mapping as _old_mapping
from pvegpu.pvefiles.hostpci import options as _options
from pvegpu.pvefiles.hostpci import uses_mapping as _uses_mapping
from pvegpu.values import value_class

_NUMA_NODE_KEY = re.compile(r"^numa\d+$")


@value_class
@attrs.frozen(eq=False, repr=False)
class NumaPin:
    """Pin the guest to one host NUMA node: its memory there, its vCPU threads on its CPUs."""

    hostnode: int
    cpus: CpuList
    """The node's host cpulist, for `affinity`."""


@value_class
@attrs.frozen(eq=False, repr=False)
class QemuPatch:
    text: str
    pcie: bool
    """Whether `pcie=1` was written: only a q35 machine has PCIe root ports for it."""
    indices: tuple[int, ...]
    """The hostpciN indices the mapping now occupies."""
    converted: tuple[int, ...] = ()
    """Indices of raw-address lines that named the mapping's devices and were replaced."""
    conversions: tuple[Conversion, ...] = ()
    """Each raw or old-mapping line that became a line of the mapping, in index order;
    such lines beyond `count` are dropped and listed nowhere here."""


def is_q35(main: Iterable[ConfLine]) -> bool:
    """`machine: q35`, a versioned `pc-q35-9.0`, or `type=q35,viommu=...` (PVE 8), in the
    main section's lines (as model/guests.py's GuestConfig parsed them)."""
    machine = _options(_vm_value(list(main), "machine") or "")
    return any(key in ("", "type") and "q35" in item for key, item in machine)


def _vm_value(lines: list[ConfLine], key: str) -> str | None:
    return next((ln.value for ln in lines if ln.kind is LineKind.KEY and ln.key == key), None)


# qemu-server's minimum of each size numa0 is computed from. cores and sockets default to
# 1; memory has no default pvegpu may assume (it differs between PVE releases).
_MINIMUM = {"memory": 16, "cores": 1, "sockets": 1}


def memory_mib(value: str) -> int | None:
    """`4096`, or `current=4096` (PVE 8.1+): its one key, so any other part voids the line."""
    parts = [(key, item) for key, item in _options(value) if (key or item).strip()]
    if len(parts) != 1 or parts[0][0] not in ("", "current"):
        return None
    return config_integer(parts[0][1], _MINIMUM["memory"])


def _vm_size(lines: list[ConfLine], subject: str) -> tuple[int, int, int] | list[Diagnostic]:
    """(memory MiB, cores, sockets) that numa0 is sized by, or the problems with them."""
    sizes: dict[str, int] = {}
    problems: list[Diagnostic] = []
    for key, minimum in _MINIMUM.items():
        text = _vm_value(lines, key)
        if text is None:
            size = None if key == "memory" else 1
        else:
            size = memory_mib(text) if key == "memory" else config_integer(text, minimum)
        if size is None:
            problems.append(_size_problem(subject, key, text, minimum))
        sizes[key] = size or 1
    return problems or (sizes["memory"], sizes["cores"], sizes["sockets"])


def _size_problem(subject: str, key: str, text: str | None, minimum: int) -> Diagnostic:
    unit = "MiB" if key == "memory" else "N"
    fix = f"set it explicitly (qm set <vmid> --{key} <{unit}>) and run pvegpu again"
    if text is None:  # only memory: the numaN memory must add up to it, so never guessed
        message = "NUMA pinning needs the VM's memory size, and the config has no `memory:`"
        return Diagnostic.error("vm-memory-unset", subject, message, fix)
    message = (
        f"{key} is {text!r}, not a number Proxmox can use here (ASCII digits, {minimum} "
        "or more): qemu-server skips such a line, so numa0 cannot be sized by it"
    )
    return Diagnostic.error("vm-config-value-invalid", subject, message, fix)


def numa_values(lines: list[ConfLine], pin: NumaPin, subject: str) -> list[tuple[str, str]]:
    """`numa`, `numa0` and `affinity` for a guest placed wholly on one host node."""
    size = _vm_size(lines, subject)
    if isinstance(size, list):
        raise RenderError(size)
    memory, cores, sockets = size
    vcpus = cores * sockets
    cpus = "0" if vcpus == 1 else f"0-{vcpus - 1}"
    return [
        ("affinity", str(pin.cpus)),
        ("numa", "1"),
        ("numa0", f"cpus={cpus},hostnodes={pin.hostnode},memory={memory},policy=bind"),
    ]


def _indices(replaced: Iterable[int], taken: set[int], count: int) -> tuple[list[int], list[int]]:
    """The hostpci indices for `count` lines: replaced ones kept, then the lowest free.

    A replaced line keeps its index: the index decides the device's PCI address in the
    guest, and Windows takes a device at a new address for a new one. A pending change
    on that index would win at the next start, so such an index is not reused.
    """
    reused = sorted(i for i in replaced if i not in taken)[:count]
    fresh = [i for i in range(MAX_HOSTPCI_INDEX + 1) if i not in taken and i not in reused]
    return reused, fresh[: count - len(reused)]


def _hostpci_full(subject: str, mapping_id: str, count: int, free: int) -> Diagnostic:
    return Diagnostic.error(
        "vm-hostpci-full",
        subject,
        f"needs {count} hostpci slots for mapping {mapping_id!r} but only "
        f"{free} of hostpci0..hostpci{MAX_HOSTPCI_INDEX} are free",
        "remove hostpci entries the VM no longer needs",
    )


def hostpci_problems(
    main: Sequence[ConfLine],
    pending: Iterable[ConfLine],
    mapping_id: str,
    count: int,
    *,
    numa: bool = False,
    mapped: Iterable[str] = (),
    old: Iterable[str] = (),
    subject: str = "VM config",
) -> tuple[Diagnostic, ...]:
    """Everything `patch_hostpci` with these arguments would refuse, all at once.

    plan() asks before anything is formatted: mixed raw lines, too few free hostpci
    indices, and NUMA pinning without `memory:` or with a `memory`, `cores` or `sockets`
    Proxmox cannot read. `main`, `pending`: the lines of the main and `[PENDING]` sections.
    """
    owned, old = host_ids(mapped), tuple(old)
    problems: list[Diagnostic] = []
    replaced: list[int] = []
    taken = used_indices(pending, "hostpci")
    for number, line in enumerate(main, start=1):
        claim = _claims(line, mapping_id, owned, subject, number, old)
        if isinstance(claim, Diagnostic):
            problems.append(claim)
        elif claim:
            replaced.append(int(line.key.removeprefix("hostpci")))
        elif line.kind is LineKind.KEY and (match := _HOSTPCI_KEY.match(line.key)):
            taken.add(int(match[1]))
    reused, fresh = _indices(replaced, taken, count)
    if len(reused) + len(fresh) < count:
        problems.append(_hostpci_full(subject, mapping_id, count, len(reused) + len(fresh)))
    if numa and isinstance(size := _vm_size(list(main), subject), list):
        problems.extend(size)
    return tuple(problems)


def _set(lines: list[ConfLine], key: str, value: str) -> None:
    """Replace the key's line in place (dropping duplicates), else insert it sorted."""
    new = ConfLine.new(key, value)
    hits = [i for i, ln in enumerate(lines) if ln.kind is LineKind.KEY and ln.key == key]
    if hits:
        lines[hits[0]] = new
        for index in reversed(hits[1:]):
            del lines[index]
    else:
        lines.insert(key_position(lines, key), new)


def patch_hostpci(
    text: str,
    mapping_id: str,
    count: int,
    *,
    pcie: bool = True,
    numa: NumaPin | None = None,
    mapped: Iterable[str] = (),
    old: Iterable[str] = (),
    subject: str = "VM config",
    mdev: str | None = None,
) -> QemuPatch:
    """`count` hostpciN lines over `mapping_id`, replacing those that already use it.

    Several hostpciN naming one mapping each take the next free device of it. `mapped`:
    the pci.cfg paths the mapping hands over on this node; a line passing one of those
    devices by raw host address becomes a mapping line too, or the VM would get the device
    twice and not start. `old`: mappings the pool's devices leave (a renamed mapping); a
    line on one of them becomes a line of this mapping, or it would name a mapping that
    is gone. Lines of other mappings or other raw addresses stay. A replaced line keeps
    its index and options (rombar, x-vga, mdev); lines beyond `count` go. `mdev`: the
    vGPU type of a vGPU pool, on every line in place of any the line had.
    """
    main, *others = split_sections(text)
    rest = "".join(s.text for s in others)
    use_pcie = pcie and is_q35(main.lines)
    owned, old = host_ids(mapped), tuple(old)
    kept: list[ConfLine] = []
    replaced: dict[int, ConfLine] = {}
    taken = used_indices(section_named(text, "PENDING"), "hostpci")
    for number, line in enumerate(parse_lines(main.text), start=1):
        claim = _claims(line, mapping_id, owned, subject, number, old)
        if isinstance(claim, Diagnostic):
            raise RenderError([claim])
        if claim:
            replaced.setdefault(int(line.key.removeprefix("hostpci")), line)
            continue
        if line.kind is LineKind.KEY and (match := _HOSTPCI_KEY.match(line.key)):
            taken.add(int(match[1]))
        kept.append(line)

    reused, fresh = _indices(replaced, taken, count)
    if len(reused) + len(fresh) < count:
        raise RenderError([_hostpci_full(subject, mapping_id, count, len(reused) + len(fresh))])
    # A replaced line whose index could not be reused gives its options to a new index,
    # in index order (not file order: the file sorts `hostpci10` before `hostpci5`).
    moved = [i for i in sorted(replaced) if i not in reused][: len(fresh)]
    sources: dict[int, ConfLine | None] = {i: replaced[i] for i in reused}
    sources |= dict(zip(fresh, [replaced[i] for i in moved] + [None] * len(fresh), strict=False))
    conversions: list[Conversion] = []
    for index in sorted(sources):
        source = sources[index]
        extra = _kept_options(source.value, mdev=mdev is not None) if source is not None else ""
        value = hostpci_value(mapping_id, use_pcie, extra, mdev)
        _set(kept, f"hostpci{index}", value)
        if source is not None and not _uses_mapping(source, mapping_id):
            before = source.raw.rstrip("\n")
            after = f"hostpci{index}: {value}"
            conversions.append(Conversion(before, after, _old_mapping(source, old)))
    if numa is not None:
        for key, value in numa_values(kept, numa, subject):
            _set(kept, key, value)
        # Only numa0 may remain: the numaN memory values must add up to `memory`.
        kept = [ln for ln in kept if not (_NUMA_NODE_KEY.match(ln.key) and ln.key != "numa0")]
    raw = tuple(i for i, ln in sorted(replaced.items()) if _raw(ln, mapping_id, old))
    return QemuPatch(join(kept) + rest, use_pcie, tuple(sorted(sources)), raw, tuple(conversions))


def _raw(line: ConfLine, mapping_id: str, old: Iterable[str]) -> bool:
    """A replaced line that named the devices by raw address, not by a mapping."""
    return not _uses_mapping(line, mapping_id) and _old_mapping(line, old) is None


def snippet(
    vmid: int,
    mapping_id: str,
    count: int,
    numa: NumaPin | None = None,
    node: str = "",
    mdev: str | None = None,
) -> str:
    """Lines to add to a VM that does not exist yet (pvegpu never creates guests)."""
    where = f" on {node}" if node else ""
    lines = [
        f"# pvegpu: VM {vmid} does not exist{where} yet. Create it with a q35 machine",
        f"# (qm create {vmid} --machine q35 ...), then add these lines to",
        f"# /etc/pve/qemu-server/{vmid}.conf and run pvegpu again to check them.",
    ]
    lines += [f"hostpci{i}: {hostpci_value(mapping_id, True, mdev=mdev)}" for i in range(count)]
    if numa is not None:
        lines += [
            f"affinity: {numa.cpus}",
            "numa: 1",
            "# numa0 depends on the VM's size: vCPUs = cores*sockets, memory in MiB",
            f"# numa0: cpus=0-<vCPUs-1>,hostnodes={numa.hostnode},memory=<memory>,policy=bind",
        ]
    return "\n".join(lines) + "\n"
