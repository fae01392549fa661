"""The spec's keys as reference rows (key, type, default, constraint), for docs/spec.md.

Derived from the spec classes and `rules.RULES`, and from the engines' declarations
(spec/engine_keys.py: the `engine` names, each engine's own keys), so the reference lists
exactly the keys the loader accepts with the constraints it enforces;
tests/test_spec_reference.py fails when docs/spec.md and these rows disagree.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import Enum
from typing import Any, get_type_hints

import attrs

from pvegpu.model import schema
from pvegpu.spec.engine_keys import SpecEngine, engine_rule
from pvegpu.spec.rules import RULES
from pvegpu.values import value_class

_SCALARS = {int: "integer", str: "string", bool: "boolean", float: "number"}
_ENVIRONMENT = tuple[tuple[str, str], ...]


@value_class
@attrs.frozen(eq=False, repr=False)
class Row:
    key: str
    type: str
    default: str
    constraint: str

    def markdown(self) -> str:
        """The table row's first four cells, as docs/spec.md writes them."""
        return f"| `{self.key}` | {self.type} | {self.default} | {self.constraint} |"


def _unwrap(kind: Any) -> Any:
    """The type without `| None` (optional keys show it as the default `none`)."""
    args = getattr(kind, "__args__", ())
    if type(None) in args:
        return next(a for a in args if a is not type(None))
    return kind


def _describe(kind: Any) -> str:
    if kind == _ENVIRONMENT:
        return "table of strings"
    if kind in _SCALARS:
        return _SCALARS[kind]
    if isinstance(kind, type) and issubclass(kind, Enum):
        return " or ".join(f'`"{m.value}"`' for m in kind)
    if getattr(kind, "__origin__", None) is tuple:
        item = kind.__args__[0]
        if attrs.has(item):
            return "array of tables"
        return f"array of {_SCALARS[item]}s"
    if attrs.has(kind):
        return "table"
    raise TypeError(f"no description for {kind!r}")


def _default(field: attrs.Attribute[Any]) -> str:
    if field.default is attrs.NOTHING:
        return "required"
    value = field.default
    if value is None:
        return "none"
    if isinstance(value, Enum):
        return f'`"{value.value}"`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if value == ():
        return "empty"
    return f"`{value}`"


def rows(
    engines: Sequence[SpecEngine], cls: type[Any] = schema.Spec, prefix: str = ""
) -> Iterator[Row]:
    """Every key of the spec under `cls`, depth first, in declaration order; a serving
    table's engine keys after its own, in the order of `engines` (the registry's)."""
    hints = get_type_hints(cls)
    for field in attrs.fields(cls):
        if field.name in ("source", "engine_keys"):
            continue  # set by the loader, not a key
        kind = _unwrap(hints[field.name])
        key = f"{prefix}{field.name}"
        rule = RULES.get((cls, field.name))
        if (cls, field.name) == (schema.ServingSpec, "engine"):
            rule = engine_rule(engines)
        constraint = rule.text if rule is not None else ""
        yield Row(key, _describe(kind), _default(field), constraint or "-")
        if attrs.has(kind):
            yield from rows(engines, kind, f"{key}.")
        elif getattr(kind, "__origin__", None) is tuple and attrs.has(kind.__args__[0]):
            yield from rows(engines, kind.__args__[0], f"{key}[].")
    if cls is schema.ServingSpec:
        seen: set[str] = set()
        for engine in engines:
            for engine_key in engine.keys:
                if engine_key.name not in seen:
                    seen.add(engine_key.name)
                    text = engine_key.rule.text if engine_key.rule is not None else "-"
                    yield Row(
                        f"{prefix}{engine_key.name}", _describe(engine_key.kind), "none", text
                    )
