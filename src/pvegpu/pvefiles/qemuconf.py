"""/etc/pve/qemu-server/<vmid>.conf: hostpci lines over a PCI mapping, optional NUMA pinning.

qemu-server writes `#` description lines, then keys sorted as plain strings (`hostpci10`
before `hostpci2`), then `[PENDING]`, `[special:cloudinit]` and snapshot sections. Only
the main section is edited, and new keys go where that writer would put them. Rules:
/work/shared/reference/proxmox-formats.md, "VM config".
"""

from __future__ import annotations

import re

import attrs

from pvegpu.errors import RenderError
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


def _options(value: str) -> list[tuple[str, str]]:
    """A property string's parts; a part without `=` is the default key (`host`)."""
    parts: list[tuple[str, str]] = []
    for part in value.split(","):
        key, sep, item = part.partition("=")
        parts.append((key, item) if sep else ("", key))
    return parts


def _uses_mapping(line: ConfLine, mapping_id: str) -> bool:
    return bool(_HOSTPCI_KEY.match(line.key)) and ("mapping", mapping_id) in _options(line.value)


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
        # numaN memory must add up to `memory`, and its default differs between PVE
        # releases, so it is never guessed.
        raise RenderError.one(
            "vm-memory-unset",
            subject,
            "NUMA pinning needs the VM's memory size, and the config has no `memory:`",
            "set it explicitly (qm set <vmid> --memory <MiB>) and run pvegpu again",
        )
    cores = int(_vm_value(lines, "cores") or "1")
    sockets = int(_vm_value(lines, "sockets") or "1")
    vcpus = cores * sockets
    cpus = "0" if vcpus == 1 else f"0-{vcpus - 1}"
    return [
        ("affinity", str(pin.cpus)),
        ("numa", "1"),
        ("numa0", f"cpus={cpus},hostnodes={pin.hostnode},memory={memory},policy=bind"),
    ]


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
    subject: str = "VM config",
) -> QemuPatch:
    """`count` hostpciN lines over `mapping_id`, replacing those that already use it.

    Several hostpciN naming one mapping each take the next free device of it. Lines of
    other mappings or raw host addresses stay; options such as rombar or x-vga on a
    replaced line carry over to the new line at the same position.
    """
    main, *others = split_sections(text)
    rest = "".join(s.text for s in others)
    use_pcie = pcie and is_q35(text)
    kept: list[ConfLine] = []
    replaced: list[tuple[int, str]] = []
    taken = used_indices(section_named(text, "PENDING"), "hostpci")
    for line in parse_lines(main.text):
        if line.kind is LineKind.KEY and _uses_mapping(line, mapping_id):
            own = ("", *_OWN_OPTIONS)
            extra = ",".join(f"{k}={v}" for k, v in _options(line.value) if k not in own)
            replaced.append((int(line.key.removeprefix("hostpci")), extra))
            continue
        if line.kind is LineKind.KEY and (match := _HOSTPCI_KEY.match(line.key)):
            taken.add(int(match[1]))
        kept.append(line)

    free = [i for i in range(MAX_HOSTPCI_INDEX + 1) if i not in taken][:count]
    if len(free) < count:
        raise RenderError.one(
            "vm-hostpci-full",
            subject,
            f"needs {count} hostpci slots for mapping {mapping_id!r} but only {len(free)} of "
            f"hostpci0..hostpci{MAX_HOSTPCI_INDEX} are free",
            "remove hostpci entries the VM no longer needs",
        )
    # Pair by numeric index, not file order: the file sorts `hostpci10` before `hostpci5`.
    extras = [extra for _, extra in sorted(replaced)]
    for ordinal, index in enumerate(free):
        extra = extras[ordinal] if ordinal < len(extras) else ""
        _set(kept, f"hostpci{index}", hostpci_value(mapping_id, use_pcie, extra))
    if numa is not None:
        for key, value in numa_values(kept, numa, subject):
            _set(kept, key, value)
        # Only numa0 may remain: the numaN memory values must add up to `memory`.
        kept = [ln for ln in kept if not (_NUMA_NODE_KEY.match(ln.key) and ln.key != "numa0")]
    return QemuPatch(join(kept) + rest, use_pcie, tuple(free))


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
