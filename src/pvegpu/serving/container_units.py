"""A container's systemd units as the facts' files say, worked out once per facts value.

Discovery reads the units and drop-ins of a container's root file system
(`host/container_units.py`); what serving, the engines and planning ask of them is
answered here (`container_units(facts, rootfs)`): the files of /etc/systemd/system by
their place there (a unit, an enabling link, a drop-in), each parsed once, and a unit by
name as systemd finds it (its /etc file, the first in its search path, its other
copies). So none of them looks a unit up by path or parses one. A view of serving, not
of `model/`, because the unit parser is serving's (`serving/unitfile.py`). No I/O here.
"""

from __future__ import annotations

import posixpath

from pvegpu.model.container_files import ContainerTree, container_files
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.paths import SYSTEM_UNIT_PATH, UNIT_DIR
from pvegpu.serving.unitfile import UnitFile, parse_unit


def container_units(facts: HostFacts, rootfs: str) -> ContainerUnits:
    """The units of the container root file system at `rootfs` (relative to the host
    root), worked out once per facts value."""
    return facts.derived(_Trees).at(facts, rootfs)


class UnitEntry:
    """A file of the container's /etc/systemd/system and where it is there (its parse:
    `ContainerUnits.parsed`). A plain class, never compared or shown."""

    __slots__ = ("directory", "file", "name")

    def __init__(self, directory: str, name: str, file: ConfigFile) -> None:
        self.directory = directory
        """Its directory relative to /etc/systemd/system: "" for a unit installed there,
        `multi-user.target.wants` for an enabling link, `x.service.d` for a drop-in."""
        self.name = name
        self.file = file
        """The file as read (its root-relative path, its text)."""


class NamedUnit:
    """Unit `name` of a container as systemd finds it. A plain class."""

    __slots__ = ("base", "copies", "loaded")

    def __init__(
        self, base: ConfigFile | None, loaded: ConfigFile | None, copies: tuple[ConfigFile, ...]
    ) -> None:
        self.base = base
        """/etc/systemd/system/<name> as read; None when there is none."""
        self.loaded = loaded
        """The file systemd loads: the first of its search path (`SYSTEM_UNIT_PATH`)."""
        self.copies = copies
        """Every other file of that name in the container (another unit directory, an
        admin's home), in the facts' order."""


class ContainerUnits:
    """The units of one container root file system. A plain class, never compared or
    shown; each answer on first use."""

    __slots__ = ("_parsed", "_tree", "entries")

    def __init__(self, tree: ContainerTree) -> None:
        self._tree = tree
        prefix = f"{UNIT_DIR}/"
        entries = []
        for inside, file in tree.files.items():
            if inside.startswith(prefix):
                directory, _, name = inside[len(prefix) :].rpartition("/")
                entries.append(UnitEntry(directory, name, file))
        self.entries: tuple[UnitEntry, ...] = tuple(entries)
        """Every file under /etc/systemd/system, in the facts' order."""
        self._parsed: dict[str, tuple[ConfigFile, UnitFile]] = {}

    @property
    def path(self) -> str:
        """The root file system's directory, relative to the host root."""
        return self._tree.path

    def parsed(self, file: ConfigFile) -> UnitFile:
        """A unit file of this container as systemd reads it (`unitfile.parse_unit`),
        parsed once per facts value."""
        found = self._parsed.get(file.path)
        if found is not None and found[0] is file:
            return found[1]
        unit = parse_unit(file.content)
        self._parsed[file.path] = (file, unit)
        return unit

    def named(self, name: str) -> NamedUnit:
        """Unit `name` (`x.service`): its /etc file, the one systemd loads, its copies."""
        base_at = f"{UNIT_DIR}/{name}"
        base = self._tree.file(base_at)
        loaded = next((f for d in SYSTEM_UNIT_PATH if (f := self._tree.file(f"{d}/{name}"))), None)
        copies = tuple(
            file
            for inside, file in self._tree.files.items()
            if inside != base_at and posixpath.basename(inside) == name
        )
        return NamedUnit(base, loaded, copies)


class _Trees:
    """A HostFacts' container units by root file system (`HostFacts.derived`)."""

    __slots__ = ("_units",)

    def __init__(self, _facts: HostFacts) -> None:
        self._units: dict[str, ContainerUnits] = {}

    def at(self, facts: HostFacts, rootfs: str) -> ContainerUnits:
        found = self._units.get(rootfs)
        if found is None:
            found = ContainerUnits(container_files(facts).at(rootfs))
            self._units[rootfs] = found
        return found
