"""The line layout pve-container and qemu-server share for guest configs.

A guest config is a main section, then `[name]` sections (pending changes,
`[special:cloudinit]`, snapshots). Patches edit the main section line by line and carry
every other byte over untouched, so this model keeps each line exactly as read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from enum import StrEnum

import attrs

from pvegpu.values import value_class

# The headers pve-container and qemu-server recognise: `[pve:pending]` (LXC), `[PENDING]`
# and `[special:cloudinit]` (VM), and snapshot names. Any other bracketed line is a stray
# line of the current section for them, so it is for us too.
_SECTION_HEADER = re.compile(
    r"^\[(pve:pending|special:cloudinit|[a-z][a-z0-9_\-]+)\]\s*$", re.IGNORECASE
)
# Perl's \s, which Proxmox's "blank line" test uses; Python's str.strip() strips more.
_BLANK = re.compile(r"^[ \t\r\f\v]*$")
# qemu-server's key regex (`key: value`); the `-` is for keys like `amd-sev`.
_KEY_LINE = re.compile(r"^([a-z][a-z_\-]*\d*):\s*(\S.*?)\s*$")
# pve-container accepts raw LXC keys with `:` or `=`.
_RAW_LXC_LINE = re.compile(r"^(lxc\.[a-z0-9_\-.]+)(?::|\s*=)\s*(.*?)\s*$")


class LineKind(StrEnum):
    BLANK = "blank"
    COMMENT = "comment"
    """`#` lines: the guest's description (Proxmox collects them from anywhere)."""
    KEY = "key"
    RAW = "raw"
    """`lxc.*` keys, which Proxmox keeps in order after all normal keys."""
    OTHER = "other"
    """Anything Proxmox's parser would warn about and skip; kept as is."""


@value_class
@attrs.frozen(eq=False, repr=False)
class ConfLine:
    raw: str
    """The line exactly as in the file, newline included (absent on an unterminated last line)."""
    kind: LineKind
    key: str = ""
    value: str = ""

    @classmethod
    def parse(cls, raw: str) -> ConfLine:
        text = raw.rstrip("\n")
        if _BLANK.match(text):
            return cls(raw, LineKind.BLANK)
        if text.startswith("#"):
            return cls(raw, LineKind.COMMENT)
        if match := _RAW_LXC_LINE.match(text):
            return cls(raw, LineKind.RAW, match[1], match[2])
        if match := _KEY_LINE.match(text):
            return cls(raw, LineKind.KEY, match[1], match[2])
        return cls(raw, LineKind.OTHER)

    @classmethod
    def new(cls, key: str, value: str) -> ConfLine:
        """A line as Proxmox writes it: `key: value`."""
        return cls.parse(f"{key}: {value}\n")


@value_class
@attrs.frozen(eq=False, repr=False)
class Section:
    name: str | None
    """None for the main section, else the text between the brackets."""
    text: str
    """Raw text, header line included; concatenating all sections gives the file back."""

    @property
    def lines(self) -> tuple[ConfLine, ...]:
        return parse_lines(self.text)


def split_lines(text: str) -> list[str]:
    """Lines ending in `\\n` only, as Proxmox splits (str.splitlines also splits on \\f etc.)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def parse_lines(text: str) -> tuple[ConfLine, ...]:
    return tuple(ConfLine.parse(raw) for raw in split_lines(text))


def split_sections(text: str) -> tuple[Section, ...]:
    """Main section first (possibly empty), then one Section per `[name]` header."""
    sections: list[Section] = []
    name: str | None = None
    chunk: list[str] = []
    for raw in split_lines(text):
        if match := _SECTION_HEADER.match(raw.rstrip("\n")):
            sections.append(Section(name, "".join(chunk)))
            name, chunk = match[1], []
        chunk.append(raw)
    sections.append(Section(name, "".join(chunk)))
    return tuple(sections)


PENDING_SECTIONS = frozenset({"pve:pending", "pending"})
"""Lower-cased names of the pending sections: `[pve:pending]` (LXC), `[PENDING]` (VM)."""


def is_pending(section: Section) -> bool:
    """Changes Proxmox applies at the guest's next start (or `pct/qm set --revert`)."""
    return (section.name or "").lower() in PENDING_SECTIONS


def is_snapshot(section: Section) -> bool:
    """A snapshot: a named section that is neither pending nor `[special:...]`."""
    name = (section.name or "").lower()
    return bool(name) and name not in PENDING_SECTIONS and not name.startswith("special:")


def section_named(text: str, *names: str) -> Section | None:
    """The first section whose name is one of `names` (case-insensitive, like Proxmox)."""
    wanted = {n.lower() for n in names}
    return next(
        (s for s in split_sections(text) if s.name is not None and s.name.lower() in wanted), None
    )


def used_indices(section: Section | Iterable[ConfLine] | None, prefix: str) -> set[int]:
    """Indices of `<prefix>N` keys set or deleted in a section (or in its parsed lines).

    Used on the pending section: a pending `devN:` or `delete: devN` is applied at the
    next start and would overwrite or drop whatever the main section has at that index.
    """
    if section is None:
        return set()
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
    found: set[int] = set()
    for line in section.lines if isinstance(section, Section) else section:
        if line.kind is not LineKind.KEY:
            continue
        names = re.split(r"[,;\s]+", line.value) if line.key == "delete" else [line.key]
        found.update(int(m[1]) for n in names if (m := pattern.match(n)))
    return found


def key_position(lines: Sequence[ConfLine], key: str) -> int:
    """Where Proxmox's writer would put `key`: keys are sorted as plain strings.

    Before the first normal key that sorts after it, else after the last normal key
    (so before any raw `lxc.*` lines), else after the leading description.
    """
    last_key = -1
    for index, line in enumerate(lines):
        if line.kind is LineKind.KEY:
            if line.key > key:
                return index
            last_key = index
    if last_key >= 0:
        return last_key + 1
    return end_of_content(lines)


def end_of_content(lines: Sequence[ConfLine]) -> int:
    """After the last non-blank line: the blank line before the next section stays last."""
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].kind is not LineKind.BLANK:
            return index + 1
    return 0


def join(lines: Iterable[ConfLine]) -> str:
    """Concatenate lines, terminating any unterminated line that is no longer last."""
    raws = [line.raw for line in lines]
    for index in range(len(raws) - 1):
        if not raws[index].endswith("\n"):
            raws[index] += "\n"
    return "".join(raws)


# Proxmox's schema reads an integer with Perl's `^[+-]?\d+$` on the file's bytes, so only
# ASCII digits count: Python's int() would also take ' 4 ', '4_0', '٤' or a fullwidth 4,
# and str.isdigit() says yes to '²', which int() then refuses.
_CONFIG_INTEGER = re.compile(r"[+-]?[0-9]+")
MAX_CONFIG_DIGITS = 18
"""More digits than any count or size a guest has; also keeps int() far from Python's
4300-digit limit."""


def config_integer(value: str, minimum: int) -> int | None:
    """`value` as Proxmox reads an integer key of at least `minimum`; None where Proxmox
    would skip the line (not ASCII digits, below the minimum) or the number is absurd."""
    if not _CONFIG_INTEGER.fullmatch(value) or len(value.lstrip("+-")) > MAX_CONFIG_DIGITS:
        return None
    number = int(value)
    return number if number >= minimum else None
