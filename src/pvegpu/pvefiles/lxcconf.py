"""/etc/pve/lxc/<vmid>.conf: swap the container's GPU device lines, keep every other byte.

Which lines are GPU lines is the vendor's `DeviceNodes` (its node paths and majors),
passed in by the caller: the file format knows no vendor.

Only the main section is edited: `[pve:pending]` and snapshot sections describe other
states of the container and are carried over byte for byte. The rules, in our words:
docs/formats.md, "LXC container config".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError, RenderError
from pvegpu.pci import CpuList
from pvegpu.pvefiles.guestconf import (
    ConfLine,
    LineKind,
    config_integer,
    end_of_content,
    join,
    key_position,
    parse_lines,
    section_named,
    split_sections,
    used_indices,
)
from pvegpu.values import value_class
from pvegpu.vendors import DeviceNodes

if TYPE_CHECKING:
    # Only a type: the codec reads a GPU's minor, it needs no facts module to run.
    from pvegpu.model.facts import GPU

MAX_DEV_INDEX = 255
"""pve-container knows dev0 .. dev255."""

CGROUP_ALLOW = "lxc.cgroup2.devices.allow"
MOUNT_ENTRY = "lxc.mount.entry"
CPUSET = "lxc.cgroup2.cpuset.cpus"
"""Pins the container's CPU set; without it pvestatd picks `cores` CPUs and moves them."""
STAGED_USERSPACE = "/var/lib/pvegpu/userspace/current"
"""pvegpu's copy of the host's GPU driver userspace of the loaded module's version, made
at every boot (`userspace = "host"`, docs/upgrades.md): a container's bind mount of it is
one of its GPU lines, written, replaced and removed with them."""
DRIVER_MOUNT_POINT = "opt/pvegpu/driver"
"""Where the container sees it, relative to its root."""
CGROUP1_ALLOW = "lxc.cgroup.devices.allow"
CPUSET_V1 = "lxc.cgroup.cpuset.cpus"
"""The legacy hierarchy's keys: live only on a host booted with cgroup v1's devices and
cpuset controllers (PVE 7/8 with `systemd.unified_cgroup_hierarchy=0`)."""
_DEV_KEY = re.compile(r"^dev(\d+)$")
_CGROUP_RULE = re.compile(r"^c\s+(\d+):")
# A devices.allow rule: type (a: every device, b, c), then optionally major:minor (`*`
# for any) and access; a bare `a` allows everything. LXC (and the kernel, for cgroup v1)
# read at most three access letters and ignore what follows them (`c 195:3 rwm  # GPU`).
_ALLOW_RULE = re.compile(r"^([abc])(?:\s+(\*|\d+):(\*|\d+))?(?:\s+(?:[rwm]{3}.*|[rwm]{1,2}))?\s*$")
# LXC's other spelling: a device path and access (`/dev/nvidia0 rwm`); it stats the path
# on the host at start and allows that node's number.
_PATH_RULE = re.compile(r"^(/\S+)(?:\s|$)")
_MODE = re.compile(r"^[0-7]{3,4}$")


class DeviceStyle(StrEnum):
    """How GPU device nodes reach an LXC container (the spec's `lxc.devices`)."""

    DEV = "dev"
    """`devN: /dev/nvidiaN,...` entries; Proxmox writes the cgroup rules (PVE >= 8.1)."""
    RAW = "raw"
    """`lxc.cgroup2.devices.allow` + `lxc.mount.entry` lines (any PVE)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class NodeNaming:
    """How this host's container lines name GPU nodes besides `/dev/<node><minor>`: the
    devices.allow key LXC applies (cgroup2's, or v1's on a legacy-hierarchy host), and
    udev's stable names of the GPUs' DRM nodes (`/dev/dri/by-path/pci-<addr>-render`),
    each with the minor it names now."""

    allow_key: str = CGROUP_ALLOW
    stable: tuple[tuple[str, int], ...] = ()
    dead_key: str | None = None
    """The other hierarchy's devices.allow key, which does nothing on this host: a pool's
    container loses its GPU rules of it with the patch (they are its GPU lines too)."""

    @property
    def cpuset_key(self) -> str:
        """The cpuset key of the same hierarchy as `allow_key`."""
        return CPUSET if self.allow_key == CGROUP_ALLOW else CPUSET_V1

    def stable_minor(self, path: str) -> int | None:
        for name, minor in self.stable:
            if name == path:
                return minor
        return None


PLAIN = NodeNaming()
"""Numbers only, cgroup2: what every line pvegpu writes uses."""


@value_class
@attrs.frozen(eq=False, repr=False)
class GpuLines:
    """The GPU lines a container should have; devN indices are chosen by the patch."""

    devices: tuple[str, ...] = ()
    """Values of `devN:` entries (`/dev/nvidia0,mode=0666`)."""
    raw: tuple[tuple[str, str], ...] = ()
    """`lxc.*` key/value pairs, in the order they are written."""


def dev_style(
    nodes: DeviceNodes,
    minors: Iterable[int],
    mode: str = "0666",
    gid: int | None = None,
    display: Iterable[int] = (),
) -> GpuLines:
    """`devN: <node of minor M>,...` entries: Proxmox creates the node and the cgroup rule."""
    if not _MODE.match(mode):
        raise ValueError(f"device mode {mode!r} is not octal like 0666")
    # Options after the path, alphabetically (deny-write, gid, mode, uid), as Proxmox prints.
    options = (f",gid={gid}" if gid is not None else "") + f",mode={mode}"
    paths = [nodes.path(m) for m in minors] + _display_paths(nodes, list(display))
    paths += nodes.shared
    return GpuLines(devices=tuple(path + options for path in paths))


def raw_style(
    nodes: DeviceNodes,
    minors: Iterable[int],
    uvm_major: int | None,
    display: Iterable[int] = (),
    allow_key: str = CGROUP_ALLOW,
) -> GpuLines:
    """cgroup rules per minor (never `<major>:*`, which would grant other guests' GPUs) +
    binds. `uvm_major`: the major of the dynamic node (`nodes.dynamic`, from
    /proc/devices), None for nodes without one. `display`: minors of display nodes."""
    minors, display = list(minors), list(display)
    control = () if nodes.control_minor is None else (nodes.control_minor,)
    rules = [f"c {nodes.major}:{m} rwm" for m in (*minors, *display, *control)]
    if nodes.dynamic is not None and uvm_major is not None:
        rules += [f"c {uvm_major}:{m} rwm" for m in nodes.dynamic.minors]
    paths = [nodes.path(m) for m in minors] + _display_paths(nodes, display) + list(nodes.shared)
    mounts = [f"{path} {path[1:]} none bind,optional,create=file" for path in paths]
    return GpuLines(
        raw=tuple((allow_key, r) for r in rules) + tuple((MOUNT_ENTRY, m) for m in mounts)
    )


def _display_paths(nodes: DeviceNodes, minors: list[int]) -> list[str]:
    pattern = nodes.display_path
    return [pattern.format(minor=m) for m in minors] if pattern is not None else []


def gpu_lines(
    nodes: DeviceNodes,
    gpus: Sequence[GPU],
    style: DeviceStyle,
    *,
    mode: str = "0666",
    gid: int | None = None,
    uvm_major: int | None = None,
    display: bool = False,
    renumber: Mapping[int, int] | None = None,
    allow_key: str = CGROUP_ALLOW,
) -> GpuLines:
    """The lines for these GPUs by their real node minors, never their position.

    The minor is what the driver assigned at bind time; with some GPUs of the host on
    vfio-pci it is no longer the index in PCI order. plan() refuses a GPU without one
    (gpu-minor-unknown) and raw lines without the dynamic major (its -major-unknown)
    before asking for these lines, so this only formats them. `display`: the GPUs'
    display nodes too (`nodes.display_path`, DRM card nodes). `renumber`: minor now ->
    minor at the next boot, for nodes the split renumbers (planning/numbering.py).
    `allow_key`: the devices.allow key raw lines are written with (the host's cgroup).
    """
    change = renumber or {}
    minors = [change.get(m, m) for gpu in gpus if (m := gpu.container_minor) is not None]
    cards = [change.get(c, c) for gpu in gpus if (c := gpu.drm_card) is not None] if display else []
    if style is DeviceStyle.RAW and (uvm_major is not None or nodes.dynamic is None):
        return raw_style(nodes, minors, uvm_major, cards, allow_key)
    return dev_style(nodes, minors, mode, gid, cards)


def _dev_path(value: str) -> str:
    first = value.split(",", 1)[0]
    return first.removeprefix("path=")


def _dev_grant(value: str) -> tuple[str, frozenset[str]]:
    """A `devN` value as its path and the set of its options, in whichever order written."""
    path, *options = value.strip().split(",")
    return path, frozenset(o.strip() for o in options)


def dev_gid(line: ConfLine) -> int | None:
    """The `gid=` of a `devN` entry (the node's group inside the container), or None."""
    if line.kind is not LineKind.KEY or not _DEV_KEY.match(line.key):
        return None
    for option in line.value.split(",")[1:]:
        key, _, value = option.partition("=")
        if key == "gid" and value.isascii() and value.isdigit():
            return int(value)
    return None


def is_gpu_line(
    line: ConfLine,
    nodes: DeviceNodes,
    majors: Collection[int] | None = None,
    naming: NodeNaming = PLAIN,
) -> bool:
    """A line that hands the vendor's device nodes to the container, in either style.

    `majors`: the char majors whose cgroup rules count (default: the fixed one)."""
    if majors is None:
        majors = (nodes.major,)
    if line.kind is LineKind.KEY:
        return bool(_DEV_KEY.match(line.key)) and bool(nodes.any_node.match(_dev_path(line.value)))
    if line.kind is not LineKind.RAW:
        return False
    if line.key in (naming.allow_key, naming.dead_key):
        rule = _CGROUP_RULE.match(line.value)
        path = allow_path(line.value)
        if path is not None:
            return bool(nodes.any_node.match(path))
        return rule is not None and int(rule[1]) in majors
    if line.key == MOUNT_ENTRY:
        source = line.value.split(maxsplit=1)
        return bool(source) and (
            bool(nodes.any_node.match(source[0])) or source[0] == STAGED_USERSPACE
        )
    return False


def userspace_mount() -> tuple[str, str]:
    """The container's read-only bind mount of the staged host userspace (`create=dir`
    makes its mount point). Not `optional`: a host that staged nothing (its driver's
    files missing at boot) fails the start, rather than leave the server on whatever
    userspace the container has."""
    return (MOUNT_ENTRY, f"{STAGED_USERSPACE} {DRIVER_MOUNT_POINT} none bind,ro,create=dir")


def has_userspace_mount(main: Iterable[ConfLine]) -> bool:
    """Does the main section (its lines, as model/guests.py's GuestConfig parsed them, like
    the answers below) bind-mount the staged host userspace?"""
    return any(
        line.kind is LineKind.RAW
        and line.key == MOUNT_ENTRY
        and line.value.split(maxsplit=1)[:1] == [STAGED_USERSPACE]
        for line in main
    )


def unprivileged(main: Iterable[ConfLine]) -> bool:
    """The main section's `unprivileged: 1` (pve-container's default is privileged)."""
    keys = [ln for ln in main if ln.kind is LineKind.KEY and ln.key == "unprivileged"]
    return bool(keys) and keys[-1].value.strip() == "1"


def is_cpuset_line(line: ConfLine, naming: NodeNaming = PLAIN) -> bool:
    """The cpuset key of the host's hierarchy (`:` or `=`); the other one is inert and left."""
    return line.kind is LineKind.RAW and line.key == naming.cpuset_key


def _allow_rule(line: ConfLine, key: str = CGROUP_ALLOW) -> tuple[str, str, str] | None:
    """(type, major, minor) of a devices.allow line of `key` (the cgroup2 one unless
    told), `*` where any matches."""
    if line.kind is not LineKind.RAW or line.key != key:
        return None
    return allow_rule(line.value)


def allow_rule(value: str) -> tuple[str, str, str] | None:
    """(type, major, minor) of a devices.allow rule's value (`c 195:4 rwm`, `a`), `*`
    where any matches; None for a value the kernel's rule syntax does not take (and for
    a device path: `allow_path`)."""
    rule = _ALLOW_RULE.match(value)
    return None if rule is None else (rule[1], rule[2] or "*", rule[3] or "*")


def allow_path(value: str) -> str | None:
    """The device path of a devices.allow rule LXC writes by path (`/dev/nvidia0 rwm`)."""
    rule = _PATH_RULE.match(value)
    return None if rule is None else rule[1]


def dev_path(value: str) -> str:
    """The host path of a `devN:` entry's value (`path=` optional, options after it)."""
    return _dev_path(value)


def gpu_minor(line: ConfLine, nodes: DeviceNodes, naming: NodeNaming = PLAIN) -> int | None:
    """The minor of the one GPU node a line hands to the container, or None.

    A `devN` entry or `lxc.mount.entry` of the node (by number, or by a stable name
    `naming` knows), or a `c <major>:N` rule of the key LXC applies: the lines that name
    one GPU by the minor the driver gave it.
    """
    path = _node_source(line, naming.allow_key)
    if path is not None:
        node = nodes.gpu_node.match(path)
        if node is not None:
            return int(node[1])
        return naming.stable_minor(path) if nodes.drm else None
    if (rule := _allow_rule(line, naming.allow_key)) is not None:
        kind, major, minor = rule
        if kind != "b" and major.isdigit() and int(major) == nodes.major and minor.isdigit():
            # The major's other minors are shared nodes (nvidiactl), every GPU's.
            return int(minor) if int(minor) in nodes.gpu_minors else None
    return None


def _node_source(line: ConfLine, allow_key: str = CGROUP_ALLOW) -> str | None:
    """The host path a `devN` entry, an `lxc.mount.entry` or a devices.allow rule by path
    (of `allow_key`, the key LXC applies) hands over; None for other lines."""
    if line.kind is LineKind.KEY and _DEV_KEY.match(line.key):
        return _dev_path(line.value)
    if line.kind is LineKind.RAW and line.key == MOUNT_ENTRY:
        source = line.value.split(maxsplit=1)
        return source[0] if source else None
    if line.kind is LineKind.RAW and line.key == allow_key:
        return allow_path(line.value)
    return None


def node_source(line: ConfLine) -> str | None:
    """The host path a `devN` entry or `lxc.mount.entry` hands over; None for other lines."""
    return _node_source(line)


def grants_every_gpu(line: ConfLine, nodes: DeviceNodes, naming: NodeNaming = PLAIN) -> bool:
    """A rule for every minor of the GPUs' major (`c <major>:* rwm`, `c *:* rwm`, `a`): it
    reaches every GPU the driver holds, whichever guest they are meant for."""
    rule = _allow_rule(line, naming.allow_key)
    if rule is None or rule[0] == "b":
        return False
    major, minor = rule[1], rule[2]
    return minor == "*" and (major == "*" or int(major) == nodes.major)


def grants_every_device(line: ConfLine, naming: NodeNaming = PLAIN) -> bool:
    """A rule for every major (`a`, `c *:* rwm`): every device, of every driver stack."""
    rule = _allow_rule(line, naming.allow_key)
    return rule is not None and rule[0] != "b" and rule[1] == "*"


def remove_gpu_nodes(
    text: str,
    nodes: DeviceNodes,
    minors: Collection[int],
    shared_majors: Collection[int] | None = None,
    naming: NodeNaming = PLAIN,
) -> str:
    """The config without the main section's lines for the GPU nodes of `minors`
    (`gpu_minor`); every other line, and the sections after main, keep their bytes.

    `shared_majors`: the container keeps no GPU, so its lines for the nodes every GPU
    shares (`nodes.shared`, ...; `is_gpu_line` with these majors) go too."""
    main, *others = split_sections(text)
    kept = [
        line
        for line in parse_lines(main.text)
        if gpu_minor(line, nodes, naming) not in minors
        and not (shared_majors is not None and is_gpu_line(line, nodes, shared_majors, naming))
    ]
    return join(kept) + "".join(s.text for s in others)


def keeps_a_gpu(
    main: Iterable[ConfLine],
    nodes: DeviceNodes,
    minors: Collection[int],
    naming: NodeNaming = PLAIN,
) -> bool:
    """Does the main section still name a GPU (`gpu_minor`) once `minors` are removed?"""
    return any(
        (minor := gpu_minor(line, nodes, naming)) is not None and minor not in minors
        for line in main
    )


def renumber_gpu_nodes(
    text: str, nodes: DeviceNodes, change: Mapping[int, int], naming: NodeNaming = PLAIN
) -> str:
    """The config with the main section's lines for GPU nodes by number moved to the
    numbers `change` gives them (minor now -> minor at the next boot): a `devN` entry's
    path, both paths of a bind mount, a rule's minor. Stable names (`by-path`) and every
    other byte are kept; the sections after main are history or pending changes."""
    main, *others = split_sections(text)
    lines = []
    for line in parse_lines(main.text):
        minor = gpu_minor(line, nodes, attrs.evolve(naming, stable=()))
        path = _node_source(line, naming.allow_key)
        stable = path is not None and nodes.gpu_node.match(path) is None
        if minor is None or minor not in change or stable:
            lines.append(line)
            continue
        after = change[minor]
        if path is not None:
            new_path = nodes.path(after) if not nodes.drm else _drm_path(path, after)
            value = line.value.replace(path, new_path, 1)
            if line.key == MOUNT_ENTRY:
                # The node's path inside the container follows: its userspace opens the
                # node by the number the driver reports.
                value = value.replace(path[1:], new_path[1:], 1)
        else:
            value = re.sub(rf"(:){minor}\b", rf"\g<1>{after}", line.value, count=1)
        # Only the value changes: the key, its separator and the line's end keep their bytes.
        at = line.raw.find(line.value, len(line.key))
        raw = line.raw[:at] + value + line.raw[at + len(line.value) :]
        lines.append(ConfLine.parse(raw))
    return join(lines) + "".join(s.text for s in others)


def _drm_path(path: str, minor: int) -> str:
    """A DRM node's path with another minor, of the same kind (card or render)."""
    return re.sub(r"[0-9]+$", str(minor), path)


def cpuset(main: Iterable[ConfLine]) -> CpuList | None:
    """The main section's `lxc.cgroup2.cpuset.cpus` (the last one, as lxc applies it);
    None when there is none or its value is not a CPU list."""
    lines = [line for line in main if is_cpuset_line(line)]
    if not lines:
        return None
    try:
        return CpuList.parse(lines[-1].value.strip())
    except ValueError:
        return None


def raw_uvm_majors(main: Sequence[ConfLine], nodes: DeviceNodes) -> tuple[int, ...] | None:
    """The majors of the main section's `c M:...` rules, when it bind-mounts the node of
    the dynamic major (`nodes.dynamic`) in raw style; None when it does not (devN
    entries need no major) or the nodes have no dynamic one."""
    if nodes.dynamic is None:
        return None
    mounted = any(
        line.kind is LineKind.RAW
        and line.key == MOUNT_ENTRY
        and line.value.split(maxsplit=1)[:1] == [nodes.dynamic.node]
        for line in main
    )
    if not mounted:
        return None
    rules = (_allow_rule(line) for line in main)
    return tuple(
        sorted({int(r[1]) for r in rules if r is not None and r[0] == "c" and r[1].isdigit()})
    )


def shared_node_keys(
    main: Iterable[ConfLine],
    nodes: DeviceNodes,
    majors: Collection[int],
    naming: NodeNaming = PLAIN,
) -> tuple[str, ...]:
    """Keys of the main section's lines for the shared nodes (not one GPU's)."""
    return tuple(
        line.key
        for line in main
        if is_gpu_line(line, nodes, majors, naming) and gpu_minor(line, nodes, naming) is None
    )


def cores(main: Iterable[ConfLine], subject: str = "LXC config") -> int | None:
    """The main section's `cores:` (None when unset: then the container may use all CPUs).

    A value Proxmox cannot read (not ASCII digits, below 1) is a PlanError naming
    `subject`: pve-container skips such a line, so what the admin meant is unknown.
    """
    value = next((ln.value for ln in main if ln.kind is LineKind.KEY and ln.key == "cores"), None)
    if value is None:
        return None
    count = config_integer(value, 1)
    if count is None:
        raise PlanError.one(
            "lxc-config-value-invalid",
            subject,
            f"cores is {value!r}, not a number Proxmox can use here (ASCII digits, 1 or "
            "more): pve-container skips such a line",
            "set it explicitly (pct set <vmid> --cores <N>) and run pvegpu again",
        )
    return count


def _slots_full(needed: int, free: int) -> Diagnostic:
    return Diagnostic.error(
        "lxc-dev-slots-full",
        "devN entries",
        f"{needed} device entries needed but only {free} of dev0..dev{MAX_DEV_INDEX} are free",
        "remove unused devN entries from the container",
    )


def dev_slot_problems(
    main: Iterable[ConfLine],
    pending: Iterable[ConfLine],
    nodes: DeviceNodes,
    new: GpuLines,
    naming: NodeNaming = PLAIN,
) -> tuple[Diagnostic, ...]:
    """Whether `patch_gpu_lines` finds devN indices for `new` (`lxc-dev-slots-full`).

    The indices it may use are those no other device takes, in the main section (old GPU
    entries give theirs back) or as a pending change (`pending`: the lines of the
    `[pve:pending]` section).
    """
    taken = used_indices(pending, "dev")
    for line in main:
        match = _DEV_KEY.match(line.key) if line.kind is LineKind.KEY else None
        if match and not is_gpu_line(line, nodes, naming=naming):
            taken.add(int(match[1]))
    free = sum(1 for i in range(MAX_DEV_INDEX + 1) if i not in taken)
    return (_slots_full(len(new.devices), free),) if free < len(new.devices) else ()


def patch_gpu_lines(
    text: str,
    nodes: DeviceNodes,
    new: GpuLines,
    majors: Collection[int] = (),
    *,
    cpuset: CpuList | None = None,
    naming: NodeNaming = PLAIN,
) -> str:
    """The config with its GPU lines (main section only) replaced by `new`.

    `majors`: every char major of the driver stack on this host (`nodes.major` always
    counts; the dynamic ones from /proc/devices), to recognise old cgroup rules.
    `cpuset`: also own `lxc.cgroup2.cpuset.cpus`, replacing any such line with this one,
    written first among the raw lines; None leaves existing cpuset lines alone.
    devN entries take the place of the first old GPU devN (else their sorted place),
    numbered from the lowest index no other device uses; raw lines take the place of
    the first old raw GPU (or owned cpuset) line (else the end of the section, after all
    normal keys).
    """
    # The majors of the new rules count too, so a second patch recognises the first one's
    # lines even when the caller's majors are incomplete.
    own = (_CGROUP_RULE.match(v) for k, v in new.raw if k == naming.allow_key)
    every_major = {nodes.major, *majors, *(int(m[1]) for m in own if m)}
    main, *others = split_sections(text)
    rest = "".join(s.text for s in others)
    kept: list[ConfLine] = []
    dev_at: int | None = None
    raw_at: int | None = None
    taken = used_indices(section_named(text, "pve:pending"), "dev")
    written: dict[tuple[str, frozenset[str]], str] = {}
    for line in parse_lines(main.text):
        gpu = is_gpu_line(line, nodes, every_major, naming)
        if gpu or (cpuset is not None and is_cpuset_line(line, naming)):
            if line.kind is LineKind.KEY:
                dev_at = len(kept) if dev_at is None else dev_at
                written.setdefault(_dev_grant(line.value), line.value)
            else:
                raw_at = len(kept) if raw_at is None else raw_at
            continue
        if line.kind is LineKind.KEY and (match := _DEV_KEY.match(line.key)):
            taken.add(int(match[1]))
        kept.append(line)

    free = [i for i in range(MAX_DEV_INDEX + 1) if i not in taken]
    if len(free) < len(new.devices):
        raise RenderError([_slots_full(len(new.devices), len(free))])
    # A device the config already gives with the same options keeps its spelling
    # (`mode=0660,gid=44` by hand, where Proxmox prints `gid=44,mode=0660`): the same
    # grant is no change to review.
    values = [written.get(_dev_grant(v), v) for v in new.devices]
    dev_block = [ConfLine.new(f"dev{i}", v) for i, v in zip(free, values, strict=False)]
    # In the order Proxmox writes keys, as plain strings (dev1, dev10, dev2): a config
    # whose GPU lines are already these comes out unchanged, and the next `pct set`
    # does not reorder what pvegpu wrote.
    dev_block.sort(key=lambda line: line.key)
    raw_block = [ConfLine.new(k, v) for k, v in new.raw]
    if cpuset is not None:
        raw_block.insert(0, ConfLine.new(naming.cpuset_key, str(cpuset)))
    if dev_at is None and dev_block:
        dev_at = key_position(kept, dev_block[0].key)
    if raw_at is None:
        raw_at = end_of_content(kept)
    # Insert the later block first so the earlier position stays valid; at a tie the
    # device entries (normal keys) go before the raw lines.
    for at, block in sorted(
        ((raw_at, raw_block), (dev_at or 0, dev_block)), key=lambda p: p[0], reverse=True
    ):
        kept[at:at] = block
    return join(kept) + rest
