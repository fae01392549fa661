"""The methods pvegpu's attrs classes share, written once instead of generated per class.

attrs writes each class's methods as Python source and compiles them when the class is
created, at import: a frozen class costs about 270 us on the development machine, and a
`render` creates over 150 classes before it does any work (docs/performance.md). The
methods that do not depend on the class's shape can be written once:

- `__repr__` (about a third of the cost): only a person reading a traceback, a debugger
  or a test failure sees it. It prints what attrs' generated repr prints
  (`PcieLink(speed='16.0 GT/s PCIe', width=16)`: the class's name, then each field that
  has `repr=True`, or its own repr callable, in field order).
- `__eq__` and `__hash__` (about another third): equal when of the same class with equal
  fields (those with `eq=True`, in field order), hashed over the fields with `hash`
  (else `eq`) and the class, as attrs' generated ones are. A C `operator.attrgetter` per
  class reads the fields, so comparing costs what attrs' generated code does.

    @value_class
    @attrs.frozen(eq=False, repr=False)
    class PcieLink: ...

A class with `order=True` keeps attrs' own comparisons (attrs orders only with its own
`__eq__`) and shares only the repr: `@value_repr` above `@attrs.frozen(order=True,
repr=False)`.
"""

from __future__ import annotations

import reprlib
from operator import attrgetter
from typing import Any, TypeVar

import attrs

_Class = TypeVar("_Class", bound=type)


@reprlib.recursive_repr("...")
def _attrs_repr(self: Any) -> str:
    parts = []
    for field in type(self).__attrs_attrs__:
        if field.repr is False:
            continue
        value = getattr(self, field.name, attrs.NOTHING)
        shown = repr(value) if field.repr is True else field.repr(value)
        parts.append(f"{field.name}={shown}")
    # attrs' own form: a class made inside a function shows its name, not `<locals>`.
    name = type(self).__qualname__.rsplit(">.", 1)[-1]
    return f"{name}({', '.join(parts)})"


def value_repr(cls: _Class) -> _Class:
    """Give an attrs class made with `repr=False` the shared repr (the decorator above
    `@attrs.frozen(repr=False)`)."""
    if "__attrs_attrs__" not in vars(cls):  # made by attrs itself, not only a subclass of one
        raise TypeError(f"{cls.__qualname__}: value_repr goes above an attrs decorator")
    type.__setattr__(cls, "__repr__", _attrs_repr)
    return cls


def _eq(self: Any, other: Any) -> object:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = self.__value_eq__
    # In a 1-tuple, as attrs compares: a field equal by identity (a NaN) is equal.
    return bool((key(self),) == (key(other),))


def _hash(self: Any) -> int:
    return hash((self.__value_salt__, self.__value_hash__(self)))


def _no_fields(_: object) -> tuple[()]:
    return ()


def _getter(names: tuple[str, ...]) -> object:
    """The fields' values of an instance, as a class attribute: attrgetter is no
    descriptor, and the function for no fields is kept from binding by staticmethod."""
    return attrgetter(*names) if names else staticmethod(_no_fields)


def value_class(cls: _Class) -> _Class:
    """Give an attrs class made with `eq=False, repr=False` the shared repr, `==` and hash
    (the decorator above `@attrs.frozen(eq=False, repr=False)`)."""
    value_repr(cls)
    if "__eq__" in vars(cls):
        raise TypeError(
            f"{cls.__qualname__}: value_class needs attrs' eq=False (order=True: value_repr)"
        )
    fields = attrs.fields(cls)
    if any(f.eq_key is not None for f in fields):
        raise TypeError(f"{cls.__qualname__}: a field compared by a key is attrs' own to do")
    compared = tuple(f.name for f in fields if f.eq)
    hashed = tuple(f.name for f in fields if (f.eq if f.hash is None else f.hash))
    for name, method in (
        ("__eq__", _eq),
        ("__hash__", _hash),
        ("__value_eq__", _getter(compared)),
        ("__value_hash__", _getter(hashed)),
        # attrs hashes the class in too: equal fields of two classes hash apart.
        ("__value_salt__", hash(cls.__qualname__)),
    ):
        type.__setattr__(cls, name, method)
    return cls
