"""The shared methods (pvegpu/values.py) do what attrs' generated ones would, for every class
that uses them: its repr prints the same, its `==` and hash agree on the same fields; and
every attrs class of pvegpu uses them."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType
from typing import Any

import attrs
import pytest

import pvegpu
from pvegpu.values import _attrs_repr, _eq, value_class, value_repr

MUTABLE = {
    "pvegpu.engines.common.tables",
    "pvegpu.planning.host_guests",
    "pvegpu.testing.synthetic",
}
"""Modules whose `attrs.define` classes are working state, compared by identity or not at
all: their generated methods are attrs' own."""


@functools.cache
def _modules() -> list[ModuleType]:
    found = []
    for info in pkgutil.walk_packages(pvegpu.__path__, "pvegpu."):
        if not info.name.endswith(".__main__"):  # runs the CLI when imported
            found.append(importlib.import_module(info.name))
    return found


def _attrs_classes(module: ModuleType) -> list[type]:
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and value.__module__ == module.__name__
        and "__attrs_attrs__" in vars(value)
    ]


def _shares(cls: type) -> bool:
    shown: object = vars(cls).get("__repr__")
    return shown is _attrs_repr


ALL_CLASSES = [cls for module in _modules() for cls in _attrs_classes(module)]
SHARED = [cls for cls in ALL_CLASSES if _shares(cls)]
SHARED_EQ = [cls for cls in SHARED if vars(cls).get("__eq__") is _eq]


def _ids(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _bare(cls: type, values: dict[str, Any]) -> Any:
    """An instance of cls holding `values`, made without its __init__ (no validators or
    converters to satisfy: the repr only reads the fields)."""
    instance: Any = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(instance, name, value)
    return instance


def _generated_twin(cls: type) -> type:
    """A class attrs makes with its own generated repr, with cls's name and the same
    fields in the same order, each shown (or not) and by the same callable."""
    fields = attrs.fields(cls)
    twin = attrs.make_class(
        cls.__name__,
        {
            f.name: attrs.field(repr=f.repr, init=f.init, alias=f.alias, eq=f.eq, hash=f.hash)
            for f in fields
        },
        frozen=True,
    )
    twin.__qualname__ = cls.__qualname__
    return twin


def test_shared_repr_is_used() -> None:
    # The classes below are most of a render's: the check would pass vacuously on none.
    assert len(SHARED) > 80


@pytest.mark.parametrize("cls", SHARED, ids=_ids)
def test_shared_repr_prints_what_attrs_prints(cls: type) -> None:
    fields = attrs.fields(cls)
    # Strings, numbers, None and a nested tuple: each field its own value, one left unset
    # when attrs' __init__ does not set it (attrs shows NOTHING for it).
    values: dict[str, Any] = {}
    for index, f in enumerate(fields):
        if not f.init and index % 2:
            continue
        values[f.name] = (f"v{index}", index, None, ("a", 1))[index % 4]
    ours, theirs = _bare(cls, values), _bare(_generated_twin(cls), values)
    assert repr(ours) == repr(theirs)


def test_shared_repr_of_a_value_holding_itself_ends() -> None:
    @value_repr
    @attrs.frozen(repr=False)
    class Box:
        items: list[Any]
        hidden: int = attrs.field(default=0, repr=False)
        shown: int = attrs.field(default=7, repr=lambda v: f"<{v}>")

    @attrs.frozen
    class Twin:
        items: list[Any]
        hidden: int = attrs.field(default=0, repr=False)
        shown: int = attrs.field(default=7, repr=lambda v: f"<{v}>")

    box, twin = Box([1]), Twin([1])
    box.items.append(box)
    twin.items.append(twin)
    assert repr(box) == "Box(items=[1, ...], shown=<7>)"
    assert repr(box) == repr(twin).replace("Twin", "Box")


def test_shared_repr_needs_an_attrs_class() -> None:
    class Plain:
        pass

    with pytest.raises(TypeError, match="above an attrs decorator"):
        value_repr(Plain)


def _values(cls: type, shift: int = 0) -> dict[str, Any]:
    return {f.name: (f"v{i + shift}", i + shift) for i, f in enumerate(attrs.fields(cls))}


@pytest.mark.parametrize("cls", SHARED_EQ, ids=_ids)
def test_shared_eq_and_hash_agree_with_attrs(cls: type) -> None:
    """Equal fields: equal and one hash, as attrs' twin; each compared field changed alone:
    unequal as the twin is; a field attrs does not compare (eq=False) changed: still equal."""
    twin = _generated_twin(cls)
    base = _values(cls)
    one, two = _bare(cls, base), _bare(cls, dict(base))
    assert one == two and hash(one) == hash(two)
    assert (one != two) is False
    assert (_bare(twin, base) == _bare(twin, dict(base))) is True
    for f in attrs.fields(cls):
        changed = {**base, f.name: ("other", -1)}
        ours = one == _bare(cls, changed)
        theirs = _bare(twin, base) == _bare(twin, changed)
        assert ours == theirs, f.name
    assert one != _bare(twin, base)  # another class, even with the same fields


def test_shared_methods_are_used() -> None:
    # Most of pvegpu's classes: the checks above would pass vacuously on none.
    assert len(SHARED_EQ) > 150


def test_a_value_class_is_hashable_and_keeps_eq_false_fields_out() -> None:
    @value_class
    @attrs.frozen(eq=False, repr=False)
    class Pair:
        a: int
        b: float
        note: str = attrs.field(default="", eq=False)

    nan = float("nan")
    # One NaN object in both: equal by identity, as attrs compares; two NaNs are not.
    assert Pair(1, nan) == Pair(1, nan)
    assert Pair(1, float("nan")) != Pair(1, float("nan"))
    assert Pair(1, 2.0, "x") == Pair(1, 2.0, "y")
    assert len({Pair(1, 2.0, "x"), Pair(1, 2.0, "y"), Pair(2, 2.0)}) == 2

    @value_class
    @attrs.frozen(eq=False, repr=False)
    class Empty:
        pass

    assert Empty() == Empty() and hash(Empty()) == hash(Empty())


def test_value_class_refuses_what_it_cannot_share() -> None:
    with pytest.raises(TypeError, match="eq=False"):

        @value_class
        @attrs.frozen(repr=False)
        class Compared:
            a: int

    with pytest.raises(TypeError, match="by a key"):

        @value_class
        @attrs.frozen(eq=False, repr=False)
        class Keyed:
            a: str = attrs.field(eq=str.lower)


def test_every_attrs_class_shares_the_methods() -> None:
    """A class added with a plain `@attrs.frozen` compiles its own repr, `==` and hash at
    every start: use `@value_class` above `@attrs.frozen(eq=False, repr=False)`, or
    `@value_repr` for `order=True` (pvegpu/values.py says why)."""
    own = [
        _ids(cls)
        for module in _modules()
        if module.__name__ not in MUTABLE
        for cls in _attrs_classes(module)
        if not _shares(cls)
    ]
    assert own == []
