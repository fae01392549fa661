"""systemd's quoting, for the values the unit file carries (systemd.exec(5), systemd.unit(5))."""

from __future__ import annotations

import re

# Words that need no quotes in ExecStart= (after % and $ are doubled).
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./%$-]+$")


def exec_word(word: str) -> str:
    """One ExecStart= word: `%` and `$` doubled (specifier/variable expansion), quoted if needed."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if word and _PLAIN_WORD.match(word):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def environment_assignment(name: str, value: str) -> str:
    """One quoted Environment= assignment.

    Environment= unquotes C-style (`\\\\`, `\\"`) and expands specifiers (`%` -> `%%`), but
    does no variable expansion: `$` has no special meaning there (systemd.exec(5)), so a
    `$` is written as is, and `$HOME` in a value stays the four characters `$HOME`.
    """
    text = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{text}"'


def unit_text(text: str) -> str:
    """A value for a plain unit setting (Description=): specifiers only."""
    return text.replace("%", "%%")
