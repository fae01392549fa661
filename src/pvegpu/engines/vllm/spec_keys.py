"""The keys of the spec's serving table that only vLLM reads: declared here, judged by the
spec loader (spec/engine_keys.py) through the registry (`Engine.spec_keys`)."""

from __future__ import annotations

from pvegpu.model.schema import ServingSpec
from pvegpu.spec.engine_keys import EngineKey
from pvegpu.spec.rules import int_range

PP = "pipeline_parallel_size"
"""Pipeline stages; TP is then the pool's GPU count divided by them."""
PCP = "prefill_context_parallel_size"
"""(0.12 on) prefill context-parallel ranks; each is a TP x PP group of its own GPUs, so
TP is the pool's GPU count over PP x PCP."""
DCP = "decode_context_parallel_size"
"""(0.10 on) decode context-parallel ranks; they reuse the TP ranks and add no GPUs (the
release's rule: it divides TP)."""

SPEC_KEYS = tuple(EngineKey(name, int, int_range(1, 64)) for name in (PP, PCP, DCP))


def size(spec: ServingSpec, key: str) -> int | None:
    """The size the spec sets for `key` (one of the above); None when it sets none (or
    one of another type, which the loader and the planner refuse)."""
    value = spec.engine_key(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
