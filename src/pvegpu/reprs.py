"""One `__repr__` for pvegpu's attrs classes, written once instead of generated per class.

attrs writes each class's methods as Python source and compiles them when the class is
created, at import. The repr is the largest of them: about 90 us of a frozen class's
270 us on the development machine (docs/performance.md), and a `render` creates over 160
classes before it does any work. Only a person reading a traceback, a debugger or a test
failure sees a repr, so the classes on the commands' paths share this one: it prints what
attrs' generated repr prints (`PcieLink(speed='16.0 GT/s PCIe', width=16)`: the class's
name, then each field that has `repr=True`, or its own repr callable, in field order).

    @value_repr
    @attrs.frozen(repr=False)
    class PcieLink: ...
"""

from __future__ import annotations

import reprlib
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
