"""Python's cyclic garbage collector, as the CLI process runs it.

Planning allocates tens of thousands of small objects that all stay alive in the plan,
and it runs next to the host's facts (some 40,000 objects at 2,048 PCI functions). Each
full collection the allocations trigger walks that whole heap and frees nothing, so
with collections on, a plan of a large host cost far more than linear in its pools
(docs/performance.md). Importing a command's modules makes the same kind of heap
(classes, functions, code objects that live until exit).

That is the process's business, not the stages': `plan()` and `render()` leave the
collector as their caller has it. The CLI pauses a short command as a whole
(`command_paused`) and, run as the program, leaves its heap frozen for the exit
(`frozen_for_exit`). A library caller planning large hosts can do the same around its
own work.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def command_paused() -> Iterator[None]:
    """Cyclic collection off for one command's imports and run, on again after.

    A kpro6 render's imports alone would run some 20 collections that free nothing.
    Turned back on plainly, the collector would then count every object the command made
    as new and walk them all at the first allocation after; instead they are handed to
    the oldest generation (freeze, then unfreeze), where a later full collection still
    finds any cycle among them. Where something else froze objects, they stay frozen:
    then the collector is only turned back on.
    """
    if not gc.isenabled():
        yield  # the caller turned collection off: leave it to them
        return
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        gc.enable()


def frozen_for_exit() -> None:
    """Keep every object there is now out of the collections the interpreter's exit runs.

    For a process about to end: exit walks the whole heap in full collections (about
    25 ms after a kpro6 render) to free memory the system takes back anyway. Frozen
    objects are skipped; what is not in a reference cycle is still freed as usual.
    """
    gc.freeze()
