"""POSIX sh quoting for the values generated scripts and runbook commands carry.

Registered as the template filters `sh` (one word) and `dq` (inside "..."): every value a
script interpolates goes through one of them, so a unit name with a backslash or a path
with a space or a `$` stays one argument instead of becoming another command.
"""

from __future__ import annotations

import re
import shlex

_DOUBLE_QUOTED_SPECIAL = re.compile(r'([\\"$`])')


def word(value: object) -> str:
    """`value` as one shell word: unchanged when it needs no quotes, else single-quoted."""
    return shlex.quote(str(value))


def in_double_quotes(value: object) -> str:
    """`value` for use between double quotes: the four characters sh still reads there
    (`\\`, `"`, `$`, a backquote) get a backslash, so the text stays literal while a
    `$ROOT` written beside it in the template still expands."""
    return _DOUBLE_QUOTED_SPECIAL.sub(r"\\\1", str(value))
