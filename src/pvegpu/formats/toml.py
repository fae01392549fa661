"""TOML values as the spec loader (tomllib) reads them back: basic strings and comments.

A basic string escapes `"` and `\\` and every control character (`\\uXXXX`, DEL too,
which TOML refuses raw); JSON's string escapes are all TOML escapes, so json.dumps does
the work and DEL is added. A comment is one line: a newline in a value written into a
comment would end it and make the rest TOML.
"""

from __future__ import annotations

import json


def basic_string(value: str) -> str:
    """`value` as a TOML basic string, quotes included."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def comment(text: str) -> str:
    """`text` as the body of a `#` comment: control characters (a newline) as spaces."""
    return "".join(" " if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text).rstrip()
