"""systemd's quoting, for the values the unit file carries (systemd.exec(5), systemd.unit(5))."""

from __future__ import annotations

import re

from pvegpu.redact import is_secret_option
from pvegpu.spec.rules import REFERENCE

# Words that need no quotes in ExecStart= (after % and $ are doubled).
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./%$-]+$")


def exec_word(word: str) -> str:
    """One ExecStart= word: `%` and `$` doubled (specifier/variable expansion), quoted if needed."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if word and _PLAIN_WORD.fullmatch(word):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_option(option: tuple[str, ...]) -> str:
    """One launch_server option with its values, as ExecStart= words.

    The value of a secret option (`--api-key`) may be a `${NAME}` reference: that one word
    is written as is, so systemd substitutes it from EnvironmentFile= at start and the
    secret itself never appears in the unit (the spec refuses a literal value there).
    """
    name, eq, value = option[0].partition("=")
    if is_secret_option(name) and eq and REFERENCE.fullmatch(value):
        return " ".join((f"{name}={value}", *(exec_word(w) for w in option[1:])))
    if is_secret_option(name) and len(option) == 2 and REFERENCE.fullmatch(option[1]):
        return f"{exec_word(name)} {option[1]}"
    return " ".join(exec_word(w) for w in option)


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
