"""/etc/pve/qemu-server/<vmid>.conf: hostpci lines over a PCI mapping, optional NUMA pinning.

qemu-server writes `#` description lines, then keys sorted as plain strings (`hostpci10`
before `hostpci2`), then `[PENDING]`, `[special:cloudinit]` and snapshot sections. Only
the main section is edited, and new keys go where that writer would put them. The rules,
in our words: docs/formats.md, "VM config".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from pvegpu.errors import Problem, RenderError
from pvegpu.pci import CpuList
from pvegpu.pvefiles.guestconf import (
    ConfLine,
    LineKind,
    join,
    key_position,
    parse_lines,
    section_named,
    split_sections,
    used_indices,
)

MAX_HOSTPCI_INDEX = 15
"""qemu-server knows hostpci0 .. hostpci15."""

_HOSTPCI_KEY = re.compile(r"^hostpci(\d+)$")
_NUMA_NODE_KEY = re.compile(r"^numa\d+$")
# The options pvegpu owns on its hostpci lines; any other (rombar, x-vga, driver) is kept.
_OWN_OPTIONS = ("mapping", "pcie", "host")
# qemu-server's host id: domain and function optional (`01:00` is all functions of
# 0000:01:00); several are joined by `;`.
_HOST_ID = re.compile(
    r"^(?:([0-9a-f]{4,}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.([0-7]))?$", re.IGNORECASE
)


@attrs.frozen
class HostId:
    """A host device as hostpci and pci.cfg name it: a slot, or one function of it."""

    domain: int
    bus: int
    device: int
    function: int | None
    """None: every function of the slot."""

    @classmethod
    def parse(cls, text: str) -> HostId | None:
        """`0000:39:00.0`, `0000:39:00`, `39:00.0` or `39:00`; None if it is none of them."""
        match = _HOST_ID.match(text.strip())
        if match is None:
            return None
        domain, bus, device, function = match.groups()
        return cls(
            int(domain or "0", 16),
            int(bus, 16),
            int(device, 16),
            None if function is None else int(function),
        )

    def overlaps(self, other: HostId) -> bool:
        """Whether both hand over some function in common (a slot covers all of its own)."""
        if (self.domain, self.bus, self.device) != (other.domain, other.bus, other.device):
            return False
        return self.function is None or other.function is None or self.function == other.function


@attrs.frozen
class NumaPin:
    """Pin the guest to one host NUMA node: its memory there, its vCPU threads on its CPUs."""

    hostnode: int
    cpus: CpuList
    """The node's host cpulist, for `affinity`."""


@attrs.frozen
class QemuPatch:
    text: str
    pcie: bool
    """Whether `pcie=1` was written: only a q35 machine has PCIe root ports for it."""
    indices: tuple[int, ...]
    """The hostpciN indices the mapping now occupies."""
    converted: tuple[int, ...] = ()
    """Indices of raw-address lines that named the mapping's devices and were replaced."""


def _options(value: str) -> list[tuple[str, str]]:
    """A property string's parts; a part without `=` is the default key (`host`)."""
    parts: list[tuple[str, str]] = []
    for part in value.split(","):
        key, sep, item = part.partition("=")
        parts.append((key, item) if sep else ("", key))
    return parts


def _uses_mapping(line: ConfLine, mapping_id: str) -> bool:
    return bool(_HOSTPCI_KEY.match(line.key)) and ("mapping", mapping_id) in _options(line.value)


def host_ids(paths: Iterable[str]) -> tuple[HostId, ...]:
    """The devices of pci.cfg `path` values (`;` lists allowed), unparsable parts left out."""
    return tuple(host for path in paths for part in path.split(";") if (host := HostId.parse(part)))


def _raw_hosts(line: ConfLine) -> list[str] | None:
    """The host ids a raw-address hostpci line names; None for a mapping or another key."""
    if not _HOSTPCI_KEY.match(line.key):
        return None
    options = _options(line.value)
    if any(key == "mapping" for key, _ in options):
        return None
    host = next((item for key, item in options if key in ("", "host")), None)
    return None if host is None else host.split(";")


@attrs.frozen
class HostpciUse:
    """What one `hostpciN` line hands to the VM: a mapping's devices, or host devices."""

    key: str
    mapping: str | None
    """The `mapping=` id; None for a line by raw host address."""
    hosts: tuple[HostId, ...] = ()
    """The raw host ids (every `;` part); empty for a mapping line."""


def hostpci_use(line: ConfLine) -> HostpciUse | None:
    """The devices a `hostpciN` line names, in any section; None for any other line."""
    if line.kind is not LineKind.KEY or not _HOSTPCI_KEY.match(line.key):
        return None
    mapping = next((item for key, item in _options(line.value) if key == "mapping"), None)
    if mapping is not None:
        return HostpciUse(line.key, mapping)
    return HostpciUse(line.key, None, host_ids(_raw_hosts(line) or ()))


def _claims(
    line: ConfLine, mapping_id: str, owned: tuple[HostId, ...], subject: str, number: int
) -> bool | Problem:
    """Whether a main-section line is the mapping's: it uses the mapping, or names by raw
    address only devices the mapping hands over. A raw line mixing those with others
    cannot be split by pvegpu: that is a Problem."""
    if line.kind is not LineKind.KEY:
        return False
    if _uses_mapping(line, mapping_id):
        return True
    hosts = _raw_hosts(line)
    if not hosts or not owned:
        return False
    ours = [h for h in hosts if (p := HostId.parse(h)) and any(p.overlaps(o) for o in owned)]
    if not ours:
        return False
    if len(ours) == len(hosts):
        return True
    others = [h for h in hosts if h not in ours]
    return Problem(
        "vm-hostpci-mixed",
        f"{subject} line {number}",
        f"`{line.raw.rstrip()}` passes {';'.join(ours)} (given to the VM by mapping "
        f"{mapping_id} now) together with {';'.join(others)} (not the pool's): the "
        "mapping line would leave out the others, the raw line would pass the GPU twice",
        f"move {';'.join(others)} to a hostpci line of its own (qm set <vmid> --hostpciN "
        f"{';'.join(others)}) and run pvegpu again",
    )


def is_q35(text: str) -> bool:
    """`machine: q35`, a versioned `pc-q35-9.0`, or `type=q35,viommu=...` (PVE 8)."""
    main = split_sections(text)[0]
    machine = _options(_vm_value(list(main.lines), "machine") or "")
    return any(key in ("", "type") and "q35" in item for key, item in machine)


def hostpci_value(mapping_id: str, pcie: bool, extra: str = "") -> str:
    return f"mapping={mapping_id}" + (",pcie=1" if pcie else "") + (f",{extra}" if extra else "")


def _vm_value(lines: list[ConfLine], key: str) -> str | None:
    return next((ln.value for ln in lines if ln.kind is LineKind.KEY and ln.key == key), None)


def _memory_mib(value: str) -> int | None:
    # PVE 8.1+ also writes `memory: current=4096` (virtio-mem); the default key is `current`.
    for key, item in _options(value):
        if key in ("", "current") and item.isdigit():
            return int(item)
    return None


def numa_values(lines: list[ConfLine], pin: NumaPin, subject: str) -> list[tuple[str, str]]:
    """`numa`, `numa0` and `affinity` for a guest placed wholly on one host node."""
    memory = _memory_mib(_vm_value(lines, "memory") or "")
    if memory is None:
        raise RenderError([_memory_unset(subject)])
    cores = int(_vm_value(lines, "cores") or "1")
    sockets = int(_vm_value(lines, "sockets") or "1")
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


def _hostpci_full(subject: str, mapping_id: str, count: int, free: int) -> Problem:
    return Problem(
        "vm-hostpci-full",
        subject,
        f"needs {count} hostpci slots for mapping {mapping_id!r} but only "
        f"{free} of hostpci0..hostpci{MAX_HOSTPCI_INDEX} are free",
        "remove hostpci entries the VM no longer needs",
    )


def _memory_unset(subject: str) -> Problem:
    # numaN memory must add up to `memory`, and its default differs between PVE
    # releases, so it is never guessed.
    return Problem(
        "vm-memory-unset",
        subject,
        "NUMA pinning needs the VM's memory size, and the config has no `memory:`",
        "set it explicitly (qm set <vmid> --memory <MiB>) and run pvegpu again",
    )


def hostpci_problems(
    text: str,
    mapping_id: str,
    count: int,
    *,
    numa: bool = False,
    mapped: Iterable[str] = (),
    subject: str = "VM config",
) -> tuple[Problem, ...]:
    """Everything `patch_hostpci` with these arguments would refuse, all at once.

    plan() asks before anything is formatted: mixed raw lines, too few free hostpci
    indices, and NUMA pinning without `memory:`.
    """
    main = split_sections(text)[0]
    owned = host_ids(mapped)
    problems: list[Problem] = []
    replaced: list[int] = []
    taken = used_indices(section_named(text, "PENDING"), "hostpci")
    lines = parse_lines(main.text)
    for number, line in enumerate(lines, start=1):
        claim = _claims(line, mapping_id, owned, subject, number)
        if isinstance(claim, Problem):
            problems.append(claim)
        elif claim:
            replaced.append(int(line.key.removeprefix("hostpci")))
        elif line.kind is LineKind.KEY and (match := _HOSTPCI_KEY.match(line.key)):
            taken.add(int(match[1]))
    reused, fresh = _indices(replaced, taken, count)
    if len(reused) + len(fresh) < count:
        problems.append(_hostpci_full(subject, mapping_id, count, len(reused) + len(fresh)))
    if numa and _memory_mib(_vm_value(list(lines), "memory") or "") is None:
        problems.append(_memory_unset(subject))
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
    subject: str = "VM config",
) -> QemuPatch:
    """`count` hostpciN lines over `mapping_id`, replacing those that already use it.

    Several hostpciN naming one mapping each take the next free device of it. `mapped`:
    the pci.cfg paths the mapping hands over on this node; a line passing one of those
    devices by raw host address becomes a mapping line too, or the VM would get the device
    twice and not start. Lines of other mappings or other raw addresses stay. A replaced
    line keeps its index and options (rombar, x-vga); lines beyond `count` go.
    """
    main, *others = split_sections(text)
    rest = "".join(s.text for s in others)
    use_pcie = pcie and is_q35(text)
    owned = host_ids(mapped)
    kept: list[ConfLine] = []
    replaced: dict[int, str] = {}
    raw: set[int] = set()
    taken = used_indices(section_named(text, "PENDING"), "hostpci")
    for number, line in enumerate(parse_lines(main.text), start=1):
        claim = _claims(line, mapping_id, owned, subject, number)
        if isinstance(claim, Problem):
            raise RenderError([claim])
        if claim:
            own = ("", *_OWN_OPTIONS)
            extra = ",".join(f"{k}={v}" for k, v in _options(line.value) if k not in own)
            index = int(line.key.removeprefix("hostpci"))
            replaced.setdefault(index, extra)
            if not _uses_mapping(line, mapping_id):
                raw.add(index)
            continue
        if line.kind is LineKind.KEY and (match := _HOSTPCI_KEY.match(line.key)):
            taken.add(int(match[1]))
        kept.append(line)

    reused, fresh = _indices(replaced, taken, count)
    if len(reused) + len(fresh) < count:
        raise RenderError([_hostpci_full(subject, mapping_id, count, len(reused) + len(fresh))])
    # Options of replaced lines whose index could not be reused go to the new indices,
    # in index order (not file order: the file sorts `hostpci10` before `hostpci5`).
    leftover = [replaced[i] for i in sorted(replaced) if i not in reused][: len(fresh)]
    values = {i: replaced[i] for i in reused}
    values |= dict(zip(fresh, leftover + [""] * (len(fresh) - len(leftover)), strict=True))
    for index in sorted(values):
        _set(kept, f"hostpci{index}", hostpci_value(mapping_id, use_pcie, values[index]))
    if numa is not None:
        for key, value in numa_values(kept, numa, subject):
            _set(kept, key, value)
        # Only numa0 may remain: the numaN memory values must add up to `memory`.
        kept = [ln for ln in kept if not (_NUMA_NODE_KEY.match(ln.key) and ln.key != "numa0")]
    return QemuPatch(join(kept) + rest, use_pcie, tuple(sorted(values)), tuple(sorted(raw)))


def snippet(
    vmid: int, mapping_id: str, count: int, numa: NumaPin | None = None, node: str = ""
) -> str:
    """Lines to add to a VM that does not exist yet (pvegpu never creates guests)."""
    where = f" on {node}" if node else ""
    lines = [
        f"# pvegpu: VM {vmid} does not exist{where} yet. Create it with a q35 machine",
        f"# (qm create {vmid} --machine q35 ...), then add these lines to",
        f"# /etc/pve/qemu-server/{vmid}.conf and run pvegpu again to check them.",
    ]
    lines += [f"hostpci{i}: {hostpci_value(mapping_id, True)}" for i in range(count)]
    if numa is not None:
        lines += [
            f"affinity: {numa.cpus}",
            "numa: 1",
            "# numa0 depends on the VM's size: vCPUs = cores*sockets, memory in MiB",
            f"# numa0: cpus=0-<vCPUs-1>,hostnodes={numa.hostnode},memory=<memory>,policy=bind",
        ]
    return "\n".join(lines) + "\n"
