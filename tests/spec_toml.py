"""A spec document (the dict tomllib reads) written back as TOML text, any string in it.

tomllib has no writer; tests that put arbitrary text into a spec need one that escapes
every character TOML's basic strings do not take as is.
"""

from __future__ import annotations

from typing import Any


def _toml_string(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


def toml_text(doc: dict[str, Any]) -> str:
    """The spec document as TOML: inline tables, each pool on its own line."""
    lines = [f"{_toml_string(k)} = {_toml_value(v)}" for k, v in doc.items() if k != "pools"]
    pools = ",\n".join(f"  {_toml_value(p)}" for p in doc["pools"])
    return "\n".join([*lines, f"pools = [\n{pools},\n]", ""])
