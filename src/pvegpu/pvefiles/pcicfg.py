"""/etc/pve/mapping/pci.cfg: parse, print in Proxmox's canonical form, patch by mapping id.

The file is a PVE SectionConfig: a bare id line, TAB-indented `key value` lines, a blank
line after every section. The mappings pvegpu owns are printed canonically, as Proxmox's
own write prints them, so a later GUI edit of them produces no diff; every other byte of
the file (other mappings, their key order, `#` comments between them) is kept as it was:
pvegpu changes only what its plan shows. The rules, in our words: docs/formats.md,
"pci.cfg".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from enum import Enum
from functools import lru_cache
from types import MappingProxyType

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import RenderError
from pvegpu.values import value_class

PATH = "etc/pve/mapping/pci.cfg"

# pve_verify_configid: a letter, then at least one of [a-z0-9_-], case-insensitive. ASCII:
# Unicode case folding would let the Kelvin sign pass as a `k`.
_MAPPING_ID = re.compile(r"[a-z][a-z0-9_-]+", re.IGNORECASE | re.ASCII)
# Every pattern is used with fullmatch (`$` would let a trailing newline through), and
# its classes are ASCII ranges: `str.isdigit` takes `٣` and int() reads it as 3.
_VENDOR_DEVICE = re.compile(r"[0-9a-f]{4}:[0-9a-f]{4}")
# Proxmox's schema for `id` and `subsystem-id` on a line it reads takes either case (it
# then compares the text with sysfs's lowercase: an uppercase id is stale, not invalid).
_VENDOR_DEVICE_READ = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{4}")
# Domain required (4 to 8 hex digits: the kernel's domain is 32 bits, 10000 behind VMD)
# and lowercase, as sysfs names it.
_PATH_PART = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-1][0-9a-f](?:\.[0-7])?")
# PVE's node name format (pve-node): a DNS label.
_NODE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?")
# An IOMMU group number as the kernel names its directory (an int), in ASCII digits.
_GROUP = re.compile(r"[0-9]{1,10}")
# SectionConfig's property line: indented key, whitespace, value trimmed at both ends.
_PROPERTY = re.compile(r"^\s+(\S+)(?:\s+(.*\S))?\s*$")
_HEADER = re.compile(r"^(\S+)\s*$")
_COMMENT = re.compile(r"^\s*#")

_REQUIRED_MAP_KEYS = ("id", "node", "path")
_BOOLEAN_OPTIONS = ("live-migration-capable", "mdev")
_TRUE = {"1", "yes", "on", "true"}
_FALSE = {"0", "no", "off", "false"}


@value_class
@attrs.frozen(eq=False, repr=False)
class PciMap:
    """One `map` line of pci.cfg. Keys as Proxmox names them."""

    id: str
    node: str
    path: str
    iommugroup: int | None = None
    subsystem_id: str | None = None
    description: str | None = None


@value_class
@attrs.frozen(eq=False, repr=False)
class PciMapping:
    """One section of /etc/pve/mapping/pci.cfg."""

    id: str
    maps: tuple[PciMap, ...] = ()
    description: str | None = None
    live_migration_capable: bool | None = None
    mdev: bool | None = None


@value_class
@attrs.frozen(eq=False, repr=False)
class MapLine:
    """One `map` line as stored: Proxmox keeps the property string verbatim."""

    value: str
    line: int
    fields: tuple[tuple[str, str], ...]

    def get(self, key: str) -> str | None:
        # A loop, not next(generator): every node of a cluster reads every line's node.
        for k, v in self.fields:
            if k == key:
                return v
        return None

    @property
    def node(self) -> str:
        return self._node

    _node: str = attrs.field(init=False, default="", repr=False)
    """The `node=` value, kept: every node of a cluster reads every line's node."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_node", self.get("node") or "")

    def to_map(self) -> PciMap:
        """The known keys as a PciMap; keys pvegpu does not know stay only in `value`."""
        group = self.get("iommugroup")
        return PciMap(
            id=self.get("id") or "",
            node=self.node,
            path=self.get("path") or "",
            # parse() let only ASCII digits through (_GROUP): int() cannot fail.
            iommugroup=int(group) if group is not None else None,
            subsystem_id=self.get("subsystem-id"),
            description=self.get("description"),
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class PciCfgSection:
    """One mapping as read, with line numbers for messages."""

    id: str
    line: int
    maps: tuple[MapLine, ...]
    options: tuple[tuple[str, str], ...]
    """Every non-`map` property in file order, unknown keys included."""
    end: int
    """Its last line (a property, `#` or whitespace-only line): the empty line after it,
    or the end of the file, ends the section."""

    def option(self, key: str) -> str | None:
        return next((v for k, v in self.options if k == key), None)

    @property
    def mapping(self) -> PciMapping:
        def flag(key: str) -> bool | None:
            value = self.option(key)
            return None if value is None else value.lower() in _TRUE

        return PciMapping(
            id=self.id,
            maps=tuple(m.to_map() for m in self.maps),
            description=self.option("description"),
            live_migration_capable=flag("live-migration-capable"),
            mdev=flag("mdev"),
        )


def _syntax(path: str, line: int, message: str, fix: str | None = None) -> RenderError:
    return RenderError(
        [
            Diagnostic.error(
                "pcicfg-syntax",
                f"{path} line {line}",
                message,
                fix
                or "fix the line by hand (or recreate the mapping under Datacenter > Resource "
                "Mappings), then run pvegpu again",
            )
        ]
    )


def _shown(value: str) -> str:
    """A value for a message: quoted, and cut when absurdly long (a 5,000-digit group)."""
    if len(value) <= 40:
        return repr(value)
    return f"{value[:24]!r}... ({len(value)} characters)"


def _odd_value(
    path: str, line: int, mapping_id: str, key: str, value: str, want: str
) -> RenderError:
    return _syntax(
        path,
        line,
        f"mapping {mapping_id!r}: map {key} {_shown(value)} is not {want}, so the line "
        "names no device pvegpu can judge (Proxmox skips such a line, or refuses to start "
        "the mapping's VMs)",
        f"correct {key} on line {line} by hand, or select the device again under "
        f"Datacenter > Resource Mappings > {mapping_id} (Proxmox fills id, subsystem-id and "
        "iommugroup from sysfs), then run pvegpu again",
    )


def _parse_map(value: str, path: str, line: int, mapping_id: str) -> MapLine:
    fields: list[tuple[str, str]] = []
    for part in value.split(","):
        key, sep, item = part.partition("=")
        if not sep or not key or not item:
            raise _syntax(path, line, f"map entry {_shown(part)} is not key=value")
        if key in (k for k, _ in fields):
            raise _syntax(path, line, f"map key {key!r} given twice")
        fields.append((key, item))
    entry = MapLine(value, line, tuple(fields))
    missing = [k for k in _REQUIRED_MAP_KEYS if entry.get(k) is None]
    if missing:
        raise _syntax(path, line, f"map line lacks {', '.join(missing)} (Proxmox requires them)")
    for key in ("id", "subsystem-id"):
        ids = entry.get(key)
        if ids is not None and not _VENDOR_DEVICE_READ.fullmatch(ids):
            raise _odd_value(path, line, mapping_id, key, ids, "vendor:device (4 hex digits each)")
    if not _NODE.fullmatch(entry.node):
        raise _odd_value(path, line, mapping_id, "node", entry.node, "a Proxmox node name")
    bad = [p for p in (entry.get("path") or "").split(";") if not _PATH_PART.fullmatch(p)]
    if bad:
        raise _odd_value(path, line, mapping_id, "path", bad[0], "dddd:bb:dd[.f] (lowercase)")
    group = entry.get("iommugroup")
    if group is not None and not _GROUP.fullmatch(group):
        raise _odd_value(
            path, line, mapping_id, "iommugroup", group, "an IOMMU group number (ASCII digits)"
        )
    return entry


@lru_cache(maxsize=8)  # one cluster file, read by every node's plan: parsed once
def parse(text: str, path: str = PATH) -> tuple[PciCfgSection, ...]:
    """Sections in file order; RenderError (`pcicfg-syntax`) naming file and line.

    Mirrors PVE::SectionConfig: `#` lines are skipped anywhere, an empty line ends a
    section, whitespace-only lines are ignored.
    """
    sections: list[PciCfgSection] = []
    seen: dict[str, int] = {}
    current: tuple[str, int] | None = None
    maps: list[MapLine] = []
    options: list[tuple[str, str]] = []
    end = 0

    def close() -> None:
        if current is not None:
            section = PciCfgSection(current[0], current[1], tuple(maps), tuple(options), end)
            sections.append(section)

    for number, line in enumerate(text.split("\n"), start=1):
        if line == "":
            close()
            current, maps, options = None, [], []
            continue
        if current is not None:
            end = number  # a comment inside a section is part of its bytes
        if _COMMENT.match(line) or not line.strip():
            continue
        if current is None:
            if line[0].isspace():
                raise _syntax(
                    path,
                    number,
                    f"property line {line.strip()!r} outside any section (an empty line "
                    "ended the section above it, or its mapping id line is missing)",
                )
            header = _HEADER.match(line)
            if header is None:
                raise _syntax(
                    path, number, f"expected a mapping id at the start of a section, got {line!r}"
                )
            mapping_id = header[1]
            if not _MAPPING_ID.fullmatch(mapping_id):
                raise _syntax(path, number, f"{mapping_id!r} is not a valid mapping id")
            if mapping_id in seen:
                raise _syntax(
                    path,
                    number,
                    f"mapping {mapping_id!r} already defined at line {seen[mapping_id]}",
                )
            seen[mapping_id] = number
            current, end = (mapping_id, number), number
            continue
        if not line[0].isspace():
            # SectionConfig only leaves a section at an empty line: without one, Proxmox
            # ignores this header and everything below it until the next blank line.
            raise _syntax(
                path,
                number,
                f"{line.strip()!r} starts a new section without the blank line that must "
                f"end section {current[0]!r}",
            )
        prop = _PROPERTY.match(line)
        if prop is None or prop[2] is None:
            raise _syntax(path, number, f"property line {line.strip()!r} has no value")
        key, value = prop[1], prop[2]
        if key == "map":
            maps.append(_parse_map(value, path, number, current[0]))
            continue
        if key in (k for k, _ in options):
            raise _syntax(path, number, f"{key!r} repeated in section {current[0]!r}")
        if key in _BOOLEAN_OPTIONS and value.lower() not in _TRUE | _FALSE:
            raise _syntax(path, number, f"{key} {value!r} is not a boolean (1/0)")
        options.append((key, value))
    close()
    return tuple(sections)


@lru_cache(maxsize=8)  # as parse: every node of a cluster asks for the one file's mappings
def parse_mappings(text: str, path: str = PATH) -> tuple[PciMapping, ...]:
    return tuple(section.mapping for section in parse(text, path))


def comment_lines(text: str) -> tuple[int, ...]:
    """Line numbers of `#` lines, which a write drops (Proxmox does the same)."""
    return tuple(n for n, line in enumerate(text.split("\n"), start=1) if _COMMENT.match(line))


def _invalid(mapping_id: str, message: str) -> RenderError:
    return RenderError(
        [
            Diagnostic.error(
                "pcicfg-value",
                f"{PATH} mapping {mapping_id!r}",
                message,
                "this value cannot be written to pci.cfg; fix the spec or the discovered facts",
            )
        ]
    )


def _clean_text(value: str) -> bool:
    """Survives a write and a re-read: one line, no leading/trailing blanks."""
    return bool(value) and "\n" not in value and value == value.strip()


def _map_value(mapping_id: str, entry: PciMap) -> str:
    if not _VENDOR_DEVICE.fullmatch(entry.id):
        raise _invalid(mapping_id, f"map id {entry.id!r} is not lowercase vendor:device")
    if not _NODE.fullmatch(entry.node):
        raise _invalid(mapping_id, f"node {entry.node!r} is not a Proxmox node name")
    if not all(_PATH_PART.fullmatch(p) for p in entry.path.split(";")):
        raise _invalid(mapping_id, f"path {entry.path!r} is not dddd:bb:dd[.f] in lowercase")
    if entry.iommugroup is not None and entry.iommugroup < 0:
        raise _invalid(mapping_id, f"iommugroup {entry.iommugroup} is negative")
    if entry.subsystem_id is not None and not _VENDOR_DEVICE.fullmatch(entry.subsystem_id):
        raise _invalid(mapping_id, f"subsystem-id {entry.subsystem_id!r} is not xxxx:xxxx")
    if entry.description is not None and (
        not _clean_text(entry.description) or "," in entry.description
    ):
        # Property strings split on `,`: a comma would cut the description in two.
        raise _invalid(
            mapping_id, f"map description {entry.description!r} must be one line without commas"
        )
    fields = {
        "description": entry.description,
        "id": entry.id,
        "iommugroup": None if entry.iommugroup is None else str(entry.iommugroup),
        "node": entry.node,
        "path": entry.path,
        "subsystem-id": entry.subsystem_id,
    }
    # Alphabetical, as the GUI writes the property string (it sorts the key=value parts).
    return ",".join(f"{k}={v}" for k, v in sorted(fields.items()) if v is not None)


def _options(mapping: PciMapping) -> list[tuple[str, str]]:
    if mapping.description is not None and not _clean_text(mapping.description):
        raise _invalid(mapping.id, f"description {mapping.description!r} must be one line")
    options: list[tuple[str, str]] = []
    if mapping.description is not None:
        options.append(("description", mapping.description))
    for key, flag in (
        ("live-migration-capable", mapping.live_migration_capable),
        ("mdev", mapping.mdev),
    ):
        if flag is not None:
            options.append((key, "1" if flag else "0"))
    return options


def _emit(mapping_id: str, maps: Iterable[str], options: Iterable[tuple[str, str]]) -> str:
    lines = [f"{mapping_id}\n", *(f"\tmap {m}\n" for m in maps)]
    for key, value in sorted(options):
        # SectionConfig re-encodes booleans on write, so `yes` read becomes `1` written.
        if key in _BOOLEAN_OPTIONS:
            value = "1" if value.lower() in _TRUE else "0"
        lines.append(f"\t{key} {value}\n")
    return "".join(lines) + "\n"


def _checked_id(mapping: PciMapping) -> str:
    if not _MAPPING_ID.fullmatch(mapping.id):
        raise _invalid(
            mapping.id, "a mapping id is a letter, then one or more letters, digits, _ or -"
        )
    if not mapping.maps:
        raise _invalid(mapping.id, "a mapping needs at least one map line (device)")
    return mapping.id


# Named after what it does to the file, used qualified (`pcicfg.format`); it shadows the
# builtin only inside this module, which never calls the builtin.
def format(mappings: Iterable[PciMapping]) -> str:
    """pci.cfg text in Proxmox's canonical form: `map` lines, then options sorted."""
    return "".join(
        _emit(_checked_id(m), [_map_value(m.id, e) for e in m.maps], _options(m)) for m in mappings
    )


def value_problems(mapping: PciMapping) -> tuple[Diagnostic, ...]:
    """Why this mapping cannot be written (`pcicfg-value`), or nothing.

    plan() asks before anything is formatted, so that `format` and `patch` of a planned
    mapping cannot fail; they still refuse the same values for any other caller.
    """
    try:
        format([mapping])
    except RenderError as error:
        return error.problems
    return ()


def syntax_problems(text: str, path: str = PATH) -> tuple[Diagnostic, ...]:
    """Why Proxmox would misread this existing file (`pcicfg-syntax`), or nothing."""
    try:
        parse(text, path)
    except RenderError as error:
        return error.problems
    return ()


def _merge(section: PciCfgSection, mapping: PciMapping) -> str:
    """The section rewritten with this node's devices and the mapping's options.

    pci.cfg is cluster-wide: map lines of other nodes belong to those nodes and stay,
    in their place. Options the new mapping leaves unset (None) keep their old value.
    """
    nodes = {entry.node for entry in mapping.maps}
    new = [_map_value(mapping.id, e) for e in mapping.maps]
    maps: list[str] = []
    for old in section.maps:
        if old.node not in nodes:
            maps.append(old.value)
        elif new:
            maps.extend(new)
            new = []
    maps.extend(new)
    options = dict(section.options)
    options.update(_options(mapping))
    return _emit(section.id, maps, options.items())


def patch(
    existing: str,
    mappings: Sequence[PciMapping],
    path: str = PATH,
    *,
    drop: Mapping[str, Collection[str]] = MappingProxyType({}),
) -> str:
    """Replace the sections with these ids in place, append new ones, keep every other byte.

    A replaced section is printed canonically (its `#` lines go, as on any Proxmox write
    of it); every other section keeps its bytes: key order, spacing, `#` lines, unknown
    keys, and so do the `#` and blank lines between sections. `drop`: map strings
    (verbatim) to leave out of other sections, by mapping id: devices that move to one of
    `mappings`; only those lines go, and a section left without any map line goes whole.
    """
    wanted = {_checked_id(m): m for m in mappings}
    lines = existing.split("\n")
    out: list[str] = []
    done = 0  # lines of `existing` already copied, replaced or dropped
    for section, fate in _fates(parse(existing, path), wanted.keys(), drop):
        out += lines[done : section.line - 1]  # what lies between sections, as it was
        done = section.end
        if fate is _Fate.KEPT:
            out += lines[section.line - 1 : section.end]
            continue
        if fate is _Fate.LOSES_LINES:
            gone = {m.line for m in section.maps if m.value in drop.get(section.id, ())}
            span = range(section.line, section.end + 1)
            out += [lines[n - 1] for n in span if n not in gone]
            continue
        if done < len(lines) and lines[done] == "":
            done += 1  # the empty line that ended it: written anew below, or gone with it
        if fate is _Fate.REPLACED:
            out += _merge(section, wanted.pop(section.id)).split("\n")[:-1]
    out += lines[done:]
    body = "\n".join(out)
    if wanted and body and not body.endswith("\n\n"):
        body += "\n" if body.endswith("\n") else "\n\n"  # end the last section first
    return body + format(wanted.values())


def dropped_comment_lines(
    existing: str,
    mapping_ids: Collection[str],
    drop: Mapping[str, Collection[str]] = MappingProxyType({}),
) -> tuple[int, ...]:
    """Line numbers of the `#` lines `patch` leaves out: those inside the sections it
    prints anew (`mapping_ids`) or removes (left without map lines by `drop`)."""
    return dropped_comments(parse(existing), comment_lines(existing), mapping_ids, drop)


def dropped_comments(
    sections: Iterable[PciCfgSection],
    comments: Iterable[int],
    mapping_ids: Collection[str],
    drop: Mapping[str, Collection[str]] = MappingProxyType({}),
) -> tuple[int, ...]:
    """`dropped_comment_lines` of a file already parsed: its `sections` and the line
    numbers of its `#` lines (`comment_lines`)."""
    gone = {
        n
        for section, fate in _fates(sections, mapping_ids, drop)
        if fate in (_Fate.REPLACED, _Fate.REMOVED)
        for n in range(section.line, section.end + 1)
    }
    return tuple(n for n in comments if n in gone)


class _Fate(Enum):
    KEPT = "kept"
    REPLACED = "replaced"
    LOSES_LINES = "loses lines"
    REMOVED = "removed"


def _fates(
    sections: Iterable[PciCfgSection],
    mapping_ids: Collection[str],
    drop: Mapping[str, Collection[str]],
) -> Iterator[tuple[PciCfgSection, _Fate]]:
    """What a patch does to each existing section."""
    for section in sections:
        gone = [m for m in section.maps if m.value in drop.get(section.id, ())]
        if section.id in mapping_ids:
            yield section, _Fate.REPLACED
        elif not gone:
            yield section, _Fate.KEPT
        elif len(gone) < len(section.maps):
            yield section, _Fate.LOSES_LINES
        else:
            yield section, _Fate.REMOVED
