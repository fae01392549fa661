"""How hard the suite tries: quick for `make test`, thorough for `make test-thorough` (CI).

The quick run keeps every test and every kind of input, with fewer generated examples
per property and one kill point per apply step; PVEGPU_THOROUGH=1 runs the full counts
and every case marked `thorough`. Both run in CI, so a rare input still gets tried on
every change; the quick run is the one a developer waits for.
"""

from __future__ import annotations

import os

THOROUGH = os.environ.get("PVEGPU_THOROUGH", "") not in ("", "0")
QUICK_SHARE = 10
"""The quick run generates one example in this many."""


def examples(full: int, *, at_least: int = 10) -> int:
    """Hypothesis' max_examples for a property whose thorough count is `full`.

    `at_least`: a floor for properties that assert a share of their examples (a share of
    too few examples would fail by chance)."""
    return full if THOROUGH else max(at_least, full // QUICK_SHARE)
