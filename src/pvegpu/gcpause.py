"""Pause Python's cyclic garbage collector while a pure stage builds its result.

Planning allocates tens of thousands of small objects that all stay alive in the plan,
and it runs next to the host's facts (some 40,000 objects at 2,048 PCI functions). Each
full collection the allocations trigger walks that whole heap and frees nothing, so
with collections on, a plan of a large host cost far more than linear in its pools
(docs/performance.md). Reference counting still frees everything as usual; only the
cycle search waits until the stage is done.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def gc_paused(stage: Callable[P, R]) -> Callable[P, R]:
    """`stage` with cyclic collection off while it runs, as it was when it returns."""

    @functools.wraps(stage)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        if not gc.isenabled():
            # The caller turned collection off: leave it to them.
            return stage(*args, **kwargs)
        gc.disable()
        try:
            return stage(*args, **kwargs)
        finally:
            gc.enable()

    return paused
