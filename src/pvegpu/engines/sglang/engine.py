"""SGLang behind the `Engine` protocol: what the registry hands the planner and renderers."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from pvegpu.engines.sglang.build import decide_serving
from pvegpu.engines.sglang.unit import unit_content
from pvegpu.errors import PvegpuError
from pvegpu.model.decision import SglangServing
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Finding, Pool
from pvegpu.model.schema import ServingSpec


@attrs.frozen
class SglangEngine:
    """SGLang: `python -m sglang.launch_server` in a systemd unit of the container."""

    name: str = "sglang"

    def decide(
        self,
        facts: HostFacts,
        pools: Sequence[Pool],
        pool: Pool,
        spec: ServingSpec,
        where: str,
    ) -> tuple[SglangServing, tuple[Finding, ...]] | PvegpuError:
        return decide_serving(facts, pools, pool, spec, where)

    def unit_content(self, serving: SglangServing) -> str:
        return unit_content(serving)


SGLANG = SglangEngine()
