"""Serving engines: the one plug-in point for what runs a pool's inference server.

An engine is one package here (`sglang/`) behind the `Engine` protocol; the spec's
`engine` value picks it through `engine_for`, the only place an engine name is compared.
What any engine's server needs decided the same way (the GPUs, P2P, NUMA pinning, memory
fit, the container's files and NVIDIA userspace) is engine-neutral and lives in
`pvegpu.serving`, the decided values in `pvegpu.model.decision`; an engine reads its own
release in the container, checks its own command line, and writes its own unit.

Importing this package is light on purpose: `host/` imports `engines.sglang.options`
and `installed` (which initialises this package first), so an engine's deciding modules
(`build`, `engine`) load only when `engine_for` is asked for that engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pvegpu.errors import PvegpuError
    from pvegpu.model.decision import SglangServing
    from pvegpu.model.facts import HostFacts
    from pvegpu.model.plan import Finding, Pool
    from pvegpu.model.schema import ServingSpec


class Engine(Protocol):
    """What the planner and the renderers ask of a serving engine."""

    @property
    def name(self) -> str:
        """The spec's `engine` value that selects it."""
        ...

    def decide(
        self,
        facts: HostFacts,
        pools: Sequence[Pool],
        pool: Pool,
        spec: ServingSpec,
        where: str,
    ) -> tuple[SglangServing, tuple[Finding, ...]] | PvegpuError:
        """The server `spec` asks of `pool` and its findings, or every problem as an error.

        `pools`: every pool of the plan (the container's CUDA indices count all that feed
        it); `where`: the spec path problems point at (`pools[0].lxc.serving`).
        """
        ...

    def unit_content(self, serving: SglangServing) -> str:
        """The systemd unit text of a decided server: formats, decides nothing."""
        ...


def _sglang() -> Engine:
    from pvegpu.engines.sglang.engine import SGLANG

    return SGLANG


_REGISTRY: dict[str, Callable[[], Engine]] = {"sglang": _sglang}

ENGINE_NAMES: tuple[str, ...] = tuple(_REGISTRY)
"""Every `engine` value pvegpu can serve with."""


def engine_for(name: str) -> Engine | None:
    """The engine the spec's `engine = name` selects; None when pvegpu has none by that name."""
    factory = _REGISTRY.get(name)
    return factory() if factory is not None else None
