"""A serving pool's GPUs by model: which models, how many of each, and each one's memory.

One server runs its tensor-parallel group in lockstep: every GPU holds the same share of
the weights and of the KV cache, and every step waits for the slowest. So a pool of two
models serves like a pool of its smallest and slowest one, and both engines size the KV
cache by the GPU with the least memory (SGLang takes the least free memory of any rank,
vLLM the fewest KV blocks any worker can hold); the larger GPUs' extra memory stays
unused. The memory fit (`serving.fit`) uses the smallest GPU for the same reason, and an
engine that refuses unequal memory says so itself (SGLang: `engines/sglang/balance.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from pvegpu.diagnostic import Severity
from pvegpu.hardware import GPU_MEMORY
from pvegpu.model.facts import GPU
from pvegpu.serving.checks import Checks
from pvegpu.values import value_class

GIB = 1024**3
SAME_SIZE = GIB
"""Memory that differs by less is called the same size (a 4090 has 12 MiB less than a
3090 after the driver's reservation); what the fit uses is still the smaller."""


@value_class
@attrs.frozen(eq=False, repr=False)
class GpuModel:
    """One model among a pool's GPUs."""

    vendor_device: str
    """`10de:2684`: how pvegpu tells models apart (and finds their memory)."""
    name: str
    """What hardware.py (else the driver) calls it; the id when neither says."""
    count: int
    memory: int | None
    """Bytes of each GPU (hardware.py's GPU_MEMORY); None: pvegpu does not know it."""

    @property
    def label(self) -> str:
        """`GeForce RTX 4090 (10de:2684)`."""
        if self.name == self.vendor_device:
            return self.name
        return f"{self.name} ({self.vendor_device})"

    @property
    def said(self) -> str:
        """`GeForce RTX 4090 (10de:2684, 24.0 GiB)`, the memory where it is known."""
        if self.memory is None:
            return self.label
        size = f"{self.memory / GIB:.1f} GiB"
        if self.name == self.vendor_device:
            return f"{self.name} ({size})"
        return f"{self.name} ({self.vendor_device}, {size})"


def pool_models(gpus: Sequence[GPU]) -> tuple[GpuModel, ...]:
    """The models among `gpus`, in the order they first appear (PCI order)."""
    counts: dict[str, int] = {}
    names: dict[str, str] = {}
    for gpu in gpus:
        key = gpu.vendor_device
        counts[key] = counts.get(key, 0) + 1
        names.setdefault(key, gpu.model or key)
    models = []
    for key, count in counts.items():
        known = GPU_MEMORY.get(key)
        name = known[1] if known is not None else names[key]
        models.append(GpuModel(key, name, count, known[0] if known is not None else None))
    return tuple(models)


def smallest(models: Sequence[GpuModel]) -> GpuModel | None:
    """The model with the least memory; None when any model's memory is unknown."""
    if not models or any(m.memory is None for m in models):
        return None
    return min(models, key=lambda m: m.memory or 0)


def largest(models: Sequence[GpuModel]) -> GpuModel | None:
    """The model with the most memory; None when any model's memory is unknown."""
    if not models or any(m.memory is None for m in models):
        return None
    return max(models, key=lambda m: m.memory or 0)


def mixed_models_finding(checks: Checks) -> None:
    """Warn what one tensor-parallel group over two or more GPU models means (nothing for
    a pool of one model): the slowest sets the pace, the smallest the KV cache."""
    models = pool_models(checks.pool.gpus)
    if len(models) < 2:
        return
    listed = " and ".join(f"{m.count} x {m.said}" for m in models)
    head = (
        f"one tensor-parallel group over GPU models: {listed}. Each GPU holds the same "
        "share of the weights and the KV cache and every step waits for the slowest, so "
        "the server runs at the pace of its slowest model"
    )
    low, high = smallest(models), largest(models)
    spec_size = checks.spec.gpu_memory_bytes
    fit = (
        f"the memory fit uses the spec's gpu_memory_bytes ({_gib(spec_size)})"
        if spec_size is not None
        else f"the memory fit uses {low.name}'s {_gib(low.memory or 0)}"
        if low is not None
        else "the memory fit needs gpu_memory_bytes"
    )
    if low is None or high is None:
        unknown = ", ".join(m.label for m in models if m.memory is None)
        tail = (
            f"; pvegpu does not know the memory of {unknown}, and {checks.engine_label} "
            f"sizes every GPU's KV cache by the one with the least, so {fit}"
        )
    elif (high.memory or 0) - (low.memory or 0) < SAME_SIZE:
        tail = f"; their memory is the same size (within 1 GiB), and {fit}"
    else:
        tail = (
            f"; {checks.engine_label} sizes every GPU's KV cache by the one with the least "
            f"memory, {low.name}, so {_gib((high.memory or 0) - (low.memory or 0))} of each "
            f"{high.name} stays unused, and {fit}"
        )
    checks.finding(Severity.WARNING, "serving-gpus-mixed", head + tail)


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"
