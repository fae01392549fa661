"""Where in the TOML text a spec path is set: `pools[0].lxc.vmid` -> line 14.

tomllib gives values, not positions, so refusals would name the key only. This is a
light scan of the text for what a spec is made of: `[table]` and `[[array]]` headers,
`key = value` lines (dotted keys too) and the keys of a one-line inline table. It never
decides what the spec means (the loader does); a line it cannot place is simply not
given, so a refusal then names the key alone. Lines inside multi-line strings and arrays
are skipped, and an element of an array (`gpus[1]`) or a key inside a table it did not
see set is placed at its closest parent that was.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from pvegpu.diagnostic import Diagnostic

_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"\s*(\[\[?)\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = re.compile(rf"\s*({_DOTTED})\s*=\s*(.*)$")
_INLINE_KEY = re.compile(rf"[{{,]\s*({_DOTTED})\s*=")
_PART = re.compile(_KEY)
_SPEC_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\]|\.[A-Za-z0-9_-]+)*")
_LAST = re.compile(r"(?:\[\d+\]|\.[A-Za-z0-9_-]+)$")


def _parts(dotted: str) -> list[str]:
    return [p.strip("\"'") for p in _PART.findall(dotted)]


def _depth(value: str) -> tuple[int, str]:
    """How many brackets and braces `value` leaves open, and the delimiter of a
    multi-line string it leaves open ("" if none). Quoted text and a comment do not count."""
    depth, i = 0, 0
    while i < len(value):
        char = value[i]
        if value.startswith(('"""', "'''"), i):
            end = value.find(value[i : i + 3], i + 3)
            if end < 0:
                return depth, value[i : i + 3]
            i = end + 3
            continue
        if char in "\"'":
            end = i + 1
            while end < len(value) and value[end] != char:
                end += 2 if char == '"' and value[end] == "\\" else 1
            i = end + 1
            continue
        if char == "#":
            break
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        i += 1
    return depth, ""


class _Tables:
    """The spec path of each header: `[[pools]]` counts its entries, so the second
    `[pools.lxc]` is `pools[1].lxc`."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def path(self, parts: list[str], *, new_entry: bool) -> str:
        path = ""
        for n, part in enumerate(parts):
            path = f"{path}.{part}" if path else part
            last = n == len(parts) - 1
            if last and new_entry:
                self.counts[path] = self.counts.get(path, 0) + 1
            if path in self.counts:
                path = f"{path}[{self.counts[path] - 1}]"
        return path


def key_lines(text: str) -> dict[str, int]:
    """Spec path -> the 1-based line that sets it (a table: its header line)."""
    lines: dict[str, int] = {}
    tables = _Tables()
    table = ""
    depth, string = 0, ""
    for number, line in enumerate(text.splitlines(), 1):
        if string:
            # Inside a multi-line string: no key, up to its closing quotes.
            end = line.find(string)
            if end >= 0:
                opened, string = _depth(line[end + 3 :])
                depth += opened
            continue
        if depth > 0:
            # Inside a value that spans lines (an array): its lines set no key.
            opened, string = _depth(line)
            depth += opened
            continue
        header = _HEADER.match(line)
        if header is not None:
            table = tables.path(_parts(header.group(2)), new_entry=header.group(1) == "[[")
            lines.setdefault(table, number)
            continue
        assign = _ASSIGN.match(line)
        if assign is None:
            continue
        key = ".".join(_parts(assign.group(1)))
        path = f"{table}.{key}" if table else key
        lines.setdefault(path, number)
        value = assign.group(2)
        depth, string = _depth(value)
        if value.startswith("{") and depth == 0:
            for inner in _INLINE_KEY.findall(value):
                lines.setdefault(f"{path}.{'.'.join(_parts(inner))}", number)
    return lines


def line_of(lines: dict[str, int], subject: str) -> int | None:
    """The line of spec path `subject`, else of its closest parent set in the text; None
    when `subject` is no spec path (a file, a device) or nothing of it is in the text."""
    if not _SPEC_PATH.fullmatch(subject):
        return None
    path = subject
    while path:
        if path in lines:
            return lines[path]
        path = _LAST.sub("", path) if _LAST.search(path) else ""
    return None


def locate(problems: Iterable[Diagnostic], text: str) -> tuple[Diagnostic, ...]:
    """`problems` with the line of each spec-path subject in the spec `text`."""
    lines: dict[str, int] | None = None
    located = []
    for problem in problems:
        if problem.line is None and _SPEC_PATH.fullmatch(problem.subject):
            lines = key_lines(text) if lines is None else lines
            problem = attrs.evolve(problem, line=line_of(lines, problem.subject))
        located.append(problem)
    return tuple(located)
