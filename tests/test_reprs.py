"""The shared repr (pvegpu/reprs.py) prints what attrs' generated one would, for every class
that uses it; the modules on the commands' paths use it for every attrs class."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType
from typing import Any

import attrs
import pytest

import pvegpu
from pvegpu.reprs import _attrs_repr, value_repr

SHARED_REPR_MODULES = (
    "pvegpu.errors",
    "pvegpu.pci",
    "pvegpu.model.artifact",
    "pvegpu.model.bootconfig",
    "pvegpu.model.facts",
    "pvegpu.model.model_config",
    "pvegpu.model.plan",
    "pvegpu.model.ports",
    "pvegpu.model.released",
    "pvegpu.model.schema",
    "pvegpu.host",
    "pvegpu.pvefiles",
    "pvegpu.rendering",
    "pvegpu.spec",
)
"""Modules (and packages) whose attrs classes all use the shared repr: the ones discover
and render import, so each class spares its compiled `__repr__` at every start."""


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
        {f.name: attrs.field(repr=f.repr, init=f.init, alias=f.alias) for f in fields},
        frozen=True,
    )
    twin.__qualname__ = cls.__qualname__
    return twin


def test_shared_repr_is_used() -> None:
    # The classes below are most of a render's: the check would pass vacuously on none.
    assert len(SHARED) > 80


@pytest.mark.parametrize("cls", SHARED, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
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


@pytest.mark.parametrize("name", SHARED_REPR_MODULES)
def test_the_commands_modules_share_one_repr(name: str) -> None:
    """A class added to one of these modules with a plain `@attrs.frozen` compiles its
    own repr at every start of discover or render: use `@value_repr` above
    `@attrs.frozen(repr=False)` (pvegpu/reprs.py says why)."""
    modules = [m for m in _modules() if m.__name__ == name or m.__name__.startswith(name + ".")]
    own = [
        f"{cls.__module__}.{cls.__qualname__}"
        for module in modules
        for cls in _attrs_classes(module)
        if not _shares(cls)
    ]
    assert own == []
