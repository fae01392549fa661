"""Which kernel GRUB boots next, from the grub.cfg grub-mkconfig wrote and grubenv. Pure.

grub-mkconfig's header sets `default` to grubenv's `next_entry` when `grub-reboot` left
one (once), else to GRUB_DEFAULT: an index (`0`), a path into a submenu (`1>2`), an entry's
id or title (`gnulinux-advanced-<id>>gnulinux-6.8.12-9-pve-advanced-<id>`, what
`proxmox-boot-tool kernel pin` writes), or `${saved_entry}` (GRUB_DEFAULT=saved). GRUB
boots the first entry when the default names none (grub-core/normal/menu.c). An entry's
kernel is the `vmlinuz-<release>` its `linux` line loads.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

import attrs

from pvegpu.values import value_class

_VMLINUZ = re.compile(r"/vmlinuz-(?P<release>[^/\s]+)$")
_ENV_LINE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)")


@value_class
@attrs.frozen(eq=False, repr=False)
class MenuEntry:
    """A `menuentry` (kernel set) or `submenu` (entries set) of grub.cfg."""

    title: str
    entry_id: str | None
    kernel: str | None = None
    """The release its `linux` line boots; None for other entries (memtest, firmware)."""
    entries: tuple[MenuEntry, ...] = ()
    submenu: bool = False


@value_class
@attrs.frozen(eq=False, repr=False)
class GrubMenu:
    entries: tuple[MenuEntry, ...]
    default: str
    """The `set default=` grub-mkconfig wrote outside the next_entry branch."""


def parse_grub_cfg(text: str) -> GrubMenu:
    """The menu and default of a grub.cfg; ValueError (with the line) on what sh cannot
    split or braces that do not close."""
    stack: list[tuple[MenuEntry | None, list[MenuEntry]]] = [(None, [])]
    default = "0"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == "}":
            if len(stack) == 1:
                raise ValueError(f"line {number}: a `}}` closes nothing")
            entry, children = stack.pop()
            if entry is not None:
                stack[-1][1].append(attrs.evolve(entry, entries=tuple(children)))
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as err:
            raise ValueError(f"line {number}: {err}") from None
        if not words:
            continue
        if words[-1] == "{":
            stack.append((_entry(words), []))
        elif words[0] == "set" and len(words) == 2 and words[1].startswith("default="):
            value = words[1].removeprefix("default=")
            if value != "${next_entry}":
                default = value
        elif words[0] in ("linux", "linuxefi") and len(words) > 1 and stack[-1][0] is not None:
            entry, children = stack[-1]
            match = _VMLINUZ.search(words[1])
            if entry is not None and match is not None:
                stack[-1] = (attrs.evolve(entry, kernel=match["release"]), children)
    if len(stack) != 1:
        raise ValueError("a menuentry, submenu or function is never closed with `}`")
    return GrubMenu(tuple(stack[0][1]), default)


def _entry(words: Sequence[str]) -> MenuEntry | None:
    """The entry a `menuentry '<title>' ... {` / `submenu ...` line opens; None for other
    blocks (`function load_video {`)."""
    if words[0] not in ("menuentry", "submenu") or len(words) < 3:
        return None
    entry_id = None
    for index, word in enumerate(words[:-1]):
        # grub-mkconfig writes `$menuentry_id_option 'id'`, which GRUB reads as `--id`.
        if word in ("--id", "$menuentry_id_option") and index + 1 < len(words) - 1:
            entry_id = words[index + 1]
    return MenuEntry(words[1], entry_id, submenu=words[0] == "submenu")


def grubenv(text: str) -> dict[str, str]:
    """grubenv's `key=value` lines (its `#` padding skipped)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _ENV_LINE.fullmatch(line)
        if match is not None:
            found[match["key"]] = match["value"]
    return found


def chosen_kernel(menu: GrubMenu, default: str) -> str | None:
    """The release the entry `default` names boots, or the first entry's when it names
    none, as GRUB falls back; None when that entry boots no kernel of /boot."""
    entries = menu.entries
    entry: MenuEntry | None = None
    for part in default.split(">"):
        found = _find(entries, part)
        if found is None:
            entry = menu.entries[0] if menu.entries else None
            break
        entry = found
        entries = found.entries
    while entry is not None and entry.submenu:
        # A submenu as the default: its first entry.
        entry = entry.entries[0] if entry.entries else None
    return entry.kernel if entry is not None else None


def _find(entries: Sequence[MenuEntry], name: str) -> MenuEntry | None:
    if name.isascii() and name.isdigit():
        index = int(name)
        return entries[index] if index < len(entries) else None
    return next((e for e in entries if name in (e.entry_id, e.title)), None)
