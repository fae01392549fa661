"""The serving-engine plug-in point: the registry picks the engine, the planner and the
renderer call it only through the protocol, and importing an engine's tables stays light."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from pvegpu import engines
from pvegpu.engines import ENGINE_NAMES, Engine, engine_for
from pvegpu.engines.sglang.engine import SGLANG
from pvegpu.errors import PlanError, PvegpuError
from pvegpu.model.decision import SglangServing
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Finding, Pool
from pvegpu.model.schema import ServingSpec
from pvegpu.planning import decide
from pvegpu.planning.decide import decided_servings
from pvegpu.rendering.serving import render_serving
from strategies_serving import kpro6_plan, qwen_serving


def test_the_spec_engine_value_picks_the_engine() -> None:
    assert ENGINE_NAMES == ("sglang",)
    engine = engine_for("sglang")
    assert engine is SGLANG
    assert engine.name == "sglang"
    assert engine_for("vllm") is None
    assert engine_for("SGLang") is None


def test_an_engine_pvegpu_has_none_of_is_refused_by_name() -> None:
    """A spec built in code may name any engine (the loader allows only known ones)."""
    with pytest.raises(PlanError) as err:
        decided_servings(kpro6_plan(qwen_serving(engine="vllm")))
    (problem,) = err.value.problems
    assert problem.code == "serving-engine-unknown"
    assert problem.subject == "pools[0].lxc.serving"
    assert problem.message == "engine 'vllm': pvegpu renders \"sglang\" servers only"


@attrs.frozen
class _Recording:
    """An engine that records what it is asked and hands it to SGLang."""

    asked: list[str]
    name: str = "sglang"

    def decide(
        self,
        facts: HostFacts,
        pools: Sequence[Pool],
        pool: Pool,
        spec: ServingSpec,
        where: str,
    ) -> tuple[SglangServing, tuple[Finding, ...]] | PvegpuError:
        self.asked.append(f"decide {pool.name} {where}")
        return SGLANG.decide(facts, pools, pool, spec, where)

    def unit_content(self, serving: SglangServing) -> str:
        self.asked.append(f"unit {serving.pool}")
        return SGLANG.unit_content(serving)


def test_planner_and_renderer_reach_the_engine_through_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = kpro6_plan()
    before = decided_servings(plan)
    recording = _Recording([])
    engine: Engine = recording
    monkeypatch.setitem(engines._REGISTRY, "sglang", lambda: engine)
    after = decided_servings(plan)
    (pool,) = plan.pools
    assert recording.asked == [f"decide {pool.name} pools[0].lxc.serving"]
    assert after == before
    assert render_serving(after) == render_serving(before)
    # Both renders write the unit through the engine that decided it.
    assert recording.asked[1:] == [f"unit {pool.name}"] * 2


def test_the_registry_is_the_only_way_the_planner_finds_an_engine() -> None:
    """planning/decide.py names no engine's package: a new engine is a registry line."""
    assert decide.__file__ is not None
    assert "engines.sglang" not in Path(decide.__file__).read_text(encoding="utf-8")


def test_reading_an_engines_tables_does_not_load_its_decisions() -> None:
    """host/ reads the installed release and option tables, which initialises
    pvegpu.engines first; the registry loads no engine until one is asked for."""
    code = (
        "import sys, pvegpu.engines.sglang.options, pvegpu.engines.sglang.installed; "
        "print(sorted(m for m in sys.modules if m.startswith(("
        "'pvegpu.planning.decide', 'pvegpu.engines.sglang.build', "
        "'pvegpu.engines.sglang.engine'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
