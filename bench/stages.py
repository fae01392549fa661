"""Time discover, plan and render inside one fresh process; print them as JSON.

    python bench/stages.py ROOT SPEC

Run by bench.py as a child, so no measurement profits from another tree's caches.
Also prints the Python function calls of one more plan and render (`plan calls`,
`render calls`): they grow with the work alone, where wall time also grows with the
cache misses of a bigger heap. Start-up is left out on purpose: it is measured
separately, and here it would hide how each stage grows with the host. Planning and
rendering are pure functions, so each is repeated and its fastest repetition kept: at
256 functions they take milliseconds, and one scheduler hiccup on a busy machine would
otherwise be the whole measurement.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
REPEAT = 5


def fastest(step: Callable[[], T]) -> tuple[float, T]:
    times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        result = step()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(root: Path, spec_path: Path) -> None:
    import pvegpu
    from pvegpu.gcpause import command_paused

    # As the CLI runs a command: the cyclic collector paused for the whole process (the
    # stages themselves leave it as they find it).
    with command_paused():
        _measure(pvegpu, root, spec_path)


def _measure(pvegpu: Any, root: Path, spec_path: Path) -> None:
    spec = pvegpu.load_spec(spec_path)
    start = time.perf_counter()
    facts = pvegpu.discover_for(spec, root)
    discovered = time.perf_counter() - start
    planned, plan = fastest(lambda: pvegpu.plan(facts, spec))
    rendered, artifacts = fastest(lambda: pvegpu.render(plan))
    print(
        json.dumps(
            {
                "discover": discovered,
                "plan": planned,
                "render": rendered,
                "artifacts": len(artifacts),
                "plan calls": calls(lambda: pvegpu.plan(facts, spec)),
                "render calls": calls(lambda: pvegpu.render(plan)),
            }
        )
    )


def calls(step: Callable[[], object]) -> int:
    """Python function calls of one more run, counted by cProfile (after the timed runs,
    which it would slow): the work itself, free of the machine's caches and noise."""
    profile = cProfile.Profile()
    profile.runcall(step)
    return pstats.Stats(profile).total_calls  # type: ignore[attr-defined, no-any-return]


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
