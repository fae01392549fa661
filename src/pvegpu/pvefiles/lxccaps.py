"""MIG capability nodes in an LXC container config: which ones its main section hands
over, and the lines that hand over a given set, in either device style.

A container that uses a MIG instance needs the instance's capability node
(`/dev/nvidia-caps/nvidia-cap<X>` for NVIDIA, `MigSource`) besides its GPU's node, as a
`devN` entry or as a `c <caps major>:<X>` rule with a bind mount. The node's shape is the
vendor's `MigSource`, passed in: the file format knows no vendor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from pvegpu.pvefiles.guestconf import ConfLine, LineKind, join, parse_lines, split_sections
from pvegpu.pvefiles.lxcconf import CGROUP_ALLOW, MOUNT_ENTRY, DeviceStyle, GpuLines
from pvegpu.values import value_class
from pvegpu.vendors.partitions import MigSource

_DEV_KEY = re.compile(r"^dev\d+$")
_RULE = re.compile(r"^c\s+([0-9]+):(\*|[0-9]+)(?:\s+[rwm]+)?\s*$")


@value_class
@attrs.frozen(eq=False, repr=False)
class CapsHeld:
    """The capability nodes a container's main section hands over."""

    minors: frozenset[int] = frozenset()
    every: bool = False
    """A bind of the whole capability directory: all of them."""
    keys: tuple[str, ...] = ()
    """The keys of those lines, in file order."""
    entries: tuple[tuple[int, str], ...] = ()
    """(minor, value) of its `devN` entries for one node each: kept as they are written."""

    @property
    def any(self) -> bool:
        return self.every or bool(self.minors)


def _path(value: str) -> str:
    return value.split(",", 1)[0].removeprefix("path=")


def caps_line(line: ConfLine, mig: MigSource, caps_major: int | None) -> int | str | None:
    """The capability minor a line hands over, `"*"` for all of them, None for another line."""
    if line.kind is LineKind.KEY and _DEV_KEY.match(line.key):
        node = mig.node.match(_path(line.value))
        return int(node[1]) if node else None
    if line.kind is not LineKind.RAW:
        return None
    if line.key == MOUNT_ENTRY:
        source = line.value.split(maxsplit=1)[:1]
        if source == [mig.directory] or source == [mig.directory + "/"]:
            return "*"
        node = mig.node.match(source[0]) if source else None
        return int(node[1]) if node else None
    if line.key == CGROUP_ALLOW and caps_major is not None:
        rule = _RULE.match(line.value.strip())
        if rule is None or int(rule[1]) != caps_major:
            return None
        return "*" if rule[2] == "*" else int(rule[2])
    return None


def caps_held(main: Iterable[ConfLine], mig: MigSource, caps_major: int | None) -> CapsHeld:
    """What the main section (its lines, as model/guests.py's GuestConfig parsed them)
    hands over: pending and snapshot sections are other states."""
    minors: set[int] = set()
    every = False
    keys: list[str] = []
    entries: dict[int, str] = {}
    for line in main:
        found = caps_line(line, mig, caps_major)
        if found is None:
            continue
        keys.append(line.key)
        if found == "*":
            # A bind of the directory shows every node; a `c <caps major>:*` rule alone
            # only permits them: the nodes it has are still those bound or created.
            every = every or line.key == MOUNT_ENTRY
        elif isinstance(found, int):
            minors.add(found)
            if line.kind is LineKind.KEY:
                entries.setdefault(found, line.value.strip())
    return CapsHeld(frozenset(minors), every, tuple(keys), tuple(sorted(entries.items())))


def caps_lines(
    mig: MigSource,
    minors: Iterable[int],
    style: DeviceStyle,
    *,
    mode: str = "0666",
    gid: int | None = None,
    caps_major: int | None = None,
    written: Iterable[tuple[int, str]] = (),
) -> GpuLines:
    """The lines for these capability nodes, in the order given, in the style of the
    container's GPU lines (raw style needs the capabilities' dynamic major). `written`:
    devN values the container has for some of them (`CapsHeld.entries`), kept as they are
    (their mode and gid are the admin's)."""
    minors = list(dict.fromkeys(minors))
    paths = [mig.path(m) for m in minors]
    if style is DeviceStyle.RAW and caps_major is not None:
        rules = [(CGROUP_ALLOW, f"c {caps_major}:{m} rwm") for m in minors]
        mounts = [(MOUNT_ENTRY, f"{p} {p[1:]} none bind,optional,create=file") for p in paths]
        return GpuLines(raw=tuple(rules + mounts))
    options = (f",gid={gid}" if gid is not None else "") + f",mode={mode}"
    kept = dict(written)
    return GpuLines(
        devices=tuple(kept.get(m, p + options) for m, p in zip(minors, paths, strict=True))
    )


@value_class
@attrs.frozen(eq=False, repr=False)
class CapsRemoval:
    """Capability nodes that go from a container that keeps some of its GPUs."""

    mig: MigSource
    minors: tuple[int, ...]
    caps_major: int | None = None


def remove_caps(text: str, removal: CapsRemoval) -> str:
    """The config without the main section's lines for exactly these capability nodes;
    every other line, and the sections after main, keep their bytes."""
    main, *others = split_sections(text)
    kept = [
        line
        for line in parse_lines(main.text)
        if caps_line(line, removal.mig, removal.caps_major) not in removal.minors
    ]
    return join(kept) + "".join(s.text for s in others)


def with_caps(lines: GpuLines, caps: GpuLines) -> GpuLines:
    """The GPU lines followed by the capability lines."""
    return GpuLines(devices=lines.devices + caps.devices, raw=lines.raw + caps.raw)
