"""A spec with schema problems made whole enough to judge the rest of it, and its
problems put in the order of the spec.

cattrs reports every wrong type, missing key and unknown key of a spec at once, but the
value rules and cross-key checks (spec/rules.py, the pool rules) judge a structured
`Spec`, which a spec with one wrong type does not make: the rest of it would be judged
only in the next run, after that fix. So each broken key is set to a stand-in and the
spec structured again: an unknown key is dropped; a broken key with a default is dropped
(it takes its default); one that is required, or whose mere presence means something (a
pool's selector, its consumer, its mapping), gets a value of its type that no rule takes
and no other key equals. Whatever the rules then find at or under a broken key is the
stand-in's doing, not a second mistake, and is dropped: one mistake, one problem.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Sequence
from enum import Enum
from types import UnionType
from typing import Any

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.model.schema import PoolSpec, Spec

Route = tuple[str | int, ...]
"""A key's place in the parsed TOML: table keys and array indexes, from the top."""

_PRESENT = {(PoolSpec, n) for n in ("numa_node", "gpus", "count", "lxc", "vfio", "mapping")}
"""Keys whose being set is itself checked (one selector, one consumer, a vfio pool's
mapping): a broken one keeps a stand-in, so the pool is not also refused for lacking it."""

_ENVIRONMENT = tuple[tuple[str, str], ...]


def unoptional(kind: Any) -> Any:
    """`kind` without `| None`."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) in (typing.Union, UnionType) and args else kind


def _schema_at(route: Route) -> tuple[type[Any] | None, str | None, Any]:
    """The class owning the key at `route`, the key's name (None for an array entry) and
    its schema type; a None type when the route leaves the schema."""
    owner: type[Any] | None = None
    name: str | None = None
    kind: Any = Spec
    for step in route:
        kind = unoptional(kind)
        if isinstance(step, int):
            args = typing.get_args(kind)
            owner, name = None, None
            kind = args[0] if typing.get_origin(kind) is tuple and args else None
        elif attrs.has(kind):
            owner, name = kind, step
            kind = typing.get_type_hints(kind).get(step)
        else:
            kind = None
        if kind is None:
            return None, None, None
    return owner, name, kind


def _stand_in(kind: Any, serial: int) -> Any:
    """A TOML value of schema type `kind` that no rule accepts and no other value equals:
    below every integer range, a string holding a control character, unique by `serial`."""
    kind = unoptional(kind)
    simple: dict[Any, Any] = {bool: False, int: -1 - serial, float: -1.0, str: f"\x00{serial}"}
    if kind in simple:
        return simple[kind]
    if isinstance(kind, type) and issubclass(kind, Enum):
        return next(iter(kind)).value
    if kind == _ENVIRONMENT:
        return {}
    if typing.get_origin(kind) is tuple:
        return []
    if attrs.has(kind):
        hints = typing.get_type_hints(kind)
        return {
            f.name: _stand_in(hints[f.name], serial)
            for f in attrs.fields(kind)
            if f.default is attrs.NOTHING
        }
    return None


def _step(value: Any, step: str | int) -> tuple[bool, Any]:
    """The value one step down `value` along a route, if it is there."""
    if isinstance(value, list) and isinstance(step, int) and step < len(value):
        return True, value[step]
    if isinstance(value, dict) and isinstance(step, str) and step in value:
        return True, value[step]
    return False, None


def _keeps_default(route: Route) -> bool:
    """Whether the key at `route` may simply be dropped: it has a default, and its being
    set is not itself checked."""
    owner, name, _ = _schema_at(route)
    if owner is None or name is None or (owner, name) in _PRESENT:
        return False
    return attrs.fields_dict(owner)[name].default is not attrs.NOTHING


def _replaced(raw: dict[str, Any], route: Route, unknown: bool, serial: int) -> None:
    """Drop or stand in for the broken key at `route` of `raw`, in place: each table and
    array on the way is copied first, so the caller's parsed spec is left as it was."""
    parent: Any = raw
    for step in route[:-1]:
        there, child = _step(parent, step)
        if not there:
            return
        # A copy of this level only: a deep copy of a value nested hundreds of arrays
        # deep (TOML allows it) would run out of stack.
        if isinstance(child, dict | list):
            child = child.copy()
        parent[step] = child
        parent = child
    last = route[-1]
    kind = _schema_at(route)[2]
    if isinstance(parent, dict) and isinstance(last, str):
        if unknown or kind is None or _keeps_default(route):
            parent.pop(last, None)
        else:
            parent[last] = _stand_in(kind, serial)
    elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
        parent[last] = _stand_in(kind, serial)


def salvaged(raw: dict[str, Any], broken: Iterable[tuple[Route, bool]]) -> dict[str, Any]:
    """A copy of the parsed spec `raw` with each broken key (its route, and whether it is
    an unknown key) dropped or stood in for."""
    whole = dict(raw)
    for serial, (route, unknown) in enumerate(broken):
        if route:
            _replaced(whole, route, unknown, serial)
    return whole


def beneath(subject: str, paths: Iterable[str]) -> bool:
    """Whether spec path `subject` is one of `paths` or inside one of them."""
    return any(subject == p or subject.startswith((f"{p}.", f"{p}[")) for p in paths)


def _positions(raw: Any) -> dict[str, int]:
    """Every spec path of the parsed spec `raw` -> its place in document order. A stack,
    not recursion: a value may be nested as deep as TOML allows."""
    found: dict[str, int] = {}
    stack: list[tuple[str, Any]] = [("", raw)]
    while stack:
        path, value = stack.pop()
        found.setdefault(path, len(found))
        if isinstance(value, dict):
            items = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(items))
    return found


def _parent(path: str) -> str:
    cut = max(path.rfind("."), path.rfind("["))
    return path[:cut] if cut > 0 else ""


def in_spec_order(problems: Sequence[Diagnostic], raw: Any) -> list[Diagnostic]:
    """`problems` in the order their keys come in the spec (a key the spec does not set
    at its table's place); problems about one key keep the order they were found in."""
    positions = _positions(raw)

    def position(problem: Diagnostic) -> int:
        path = problem.subject
        while path not in positions:
            path = _parent(path)
        return positions[path]

    return sorted(problems, key=position)
