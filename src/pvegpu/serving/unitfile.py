"""Reading a systemd unit file back: sections, settings, ExecStart= words, Environment= names.

Just enough of systemd.syntax(7) and systemd.exec(5) to compare the unit a container has
with the one pvegpu renders: comment lines, line continuations, repeated keys, and the
empty assignment that resets a list setting. Pure; no systemd needed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

import attrs

from pvegpu.values import value_class

SERVICE = "Service"
EXEC_START = "ExecStart"
ENVIRONMENT = "Environment"
ENVIRONMENT_FILE = "EnvironmentFile"
# ExecStart= prefixes (systemd.service(5)): ignore failure, argv[0], privileges, ...
_EXEC_PREFIXES = "-@:+!|"
_UNQUOTED = re.compile(r"[^\"'\\]*")
"""A value without quotes or backslashes: shlex would only split it at its whitespace."""
_SHLEX_WORD = re.compile(r"[^ \t\r\n]+")
"""A word between shlex's whitespace: space, tab, CR, LF (not a vertical tab, say)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class UnitFile:
    """The settings of a unit, in file order: (section, key, value), resets applied."""

    settings: tuple[tuple[str, str, str], ...]

    def values(self, section: str, key: str) -> tuple[str, ...]:
        return tuple(v for s, k, v in self.settings if s == section and k == key)

    def settings_named(self) -> tuple[tuple[str, str], ...]:
        """(section, key) of every setting, each once, in file order."""
        return tuple(dict.fromkeys((s, k) for s, k, _ in self.settings))


def _logical_lines(text: str) -> list[str]:
    """Lines with continuations joined; comments dropped, also inside a continuation."""
    out: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("#", ";")):
            continue  # systemd skips comment lines, even between continued lines
        if pending is not None:
            line = f"{pending} {line}"
            pending = None
        if line.endswith("\\"):
            # systemd replaces the backslash (and newline) by a space and reads on.
            pending = line[:-1].rstrip()
            continue
        out.append(line)
    if pending is not None:
        out.append(pending)
    return out


def parse_unit(text: str) -> UnitFile:
    """The settings of a unit file; an empty `Key=` forgets the key's earlier values."""
    return merge_units((text,))


def merge_units(texts: Iterable[str]) -> UnitFile:
    """A unit and its drop-ins, in the order systemd reads them, as one set of settings.

    Each file starts outside any section (a drop-in names its own `[Service]`); an empty
    `Key=` in a later file forgets what earlier files set (`ExecStart=` then a new
    `ExecStart=` replaces the command), like a repeated key within one file.
    """
    settings: list[tuple[str, str, str]] = []
    for text in texts:
        settings = _apply(settings, text)
    return UnitFile(tuple(settings))


def _apply(settings: list[tuple[str, str, str]], text: str) -> list[tuple[str, str, str]]:
    section = ""
    for line in _logical_lines(text):
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        key, eq, value = line.partition("=")
        if not eq:
            continue  # systemd warns and ignores a line without `=`
        key, value = key.strip(), value.strip()
        if value == "":
            settings = [s for s in settings if (s[0], s[1]) != (section, key)]
            continue
        settings.append((section, key, value))
    return settings


def unit_words(value: str) -> tuple[str, ...]:
    """Words of a setting as systemd splits them: quotes and backslash escapes removed.

    shlex's POSIX rules match systemd's for the quoting units use (double and single
    quotes, `\\"`, `\\\\`); unbalanced quotes fall back to splitting on whitespace, so
    a broken old unit is still compared rather than refused.
    """
    if _UNQUOTED.fullmatch(value):
        # Most values (targets, plain assignments, an unquoted command line): the same
        # words without shlex's character-by-character reader.
        return tuple(_SHLEX_WORD.findall(value))
    try:
        return tuple(shlex.split(value, posix=True))
    except ValueError:
        return tuple(value.split())


def _unspecify(word: str) -> str:
    # `%%` is a literal `%`; other specifiers stay as written (they name host values
    # pvegpu cannot resolve, and the same text in both units compares equal anyway).
    return word.replace("%%", "%")


def exec_words(value: str) -> tuple[str, ...]:
    """The argv an ExecStart= value runs: prefixes dropped, `%%` and `$$` unescaped."""
    stripped = value.lstrip(_EXEC_PREFIXES)
    return tuple(_unspecify(w).replace("$$", "$") for w in unit_words(stripped))


def environment_pairs(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(name, value) of every Environment= assignment, later ones winning, in order."""
    found: dict[str, str] = {}
    for value in values:
        for word in unit_words(value):
            name, eq, assigned = word.partition("=")
            if eq and name:
                found.pop(name, None)
                found[name] = _unspecify(assigned)
    return tuple(found.items())
