"""The serving-engine plug-in point: the registry picks the engine, the planner and the
renderer call it only through the protocol, and importing an engine's tables stays light."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from pvegpu import engines
from pvegpu.diagnostic import Diagnostic
from pvegpu.engines import ENGINE_NAMES, Engine, engine_for
from pvegpu.engines.common.installed_files import RootFiles
from pvegpu.engines.common.server_line import ServerLine
from pvegpu.engines.sglang.engine import SGLANG
from pvegpu.errors import PlanError, PvegpuError
from pvegpu.model.decision import DecidedServer
from pvegpu.model.facts import ConfigFile
from pvegpu.model.plan import Plan
from pvegpu.model.schema import P2PSetting, ServingSpec
from pvegpu.planning import decide
from pvegpu.planning.decide import decided_servings
from pvegpu.rendering.serving import render_serving
from pvegpu.serving.context import ServingContext
from pvegpu.spec.engine_keys import EngineKey
from strategies_serving import kpro6_plan, qwen_serving


def test_the_spec_engine_value_picks_the_engine() -> None:
    assert ENGINE_NAMES == ("sglang", "vllm")
    engine = engine_for("sglang")
    assert engine is SGLANG
    assert engine.name == "sglang"
    assert engine_for("tgi") is None
    assert engine_for("SGLang") is None


def test_an_engine_pvegpu_has_none_of_is_refused_by_name() -> None:
    """A spec built in code may name any engine (the loader allows only known ones)."""
    with pytest.raises(PlanError) as err:
        decided_servings(kpro6_plan(qwen_serving(engine="tgi")))
    (problem,) = err.value.problems
    assert problem.code == "serving-engine-unknown"
    assert problem.subject == "pools[0].lxc.serving"
    assert problem.message == 'engine \'tgi\': pvegpu renders "sglang", "vllm" servers only'


@attrs.frozen
class _Recording:
    """An engine that records what it is asked and hands it to SGLang."""

    asked: list[str]
    name: str = "sglang"
    label: str = "SGLang"
    spec_keys: tuple[EngineKey, ...] = ()
    server_line: ServerLine = SGLANG.server_line

    def tp_groups(self, spec: ServingSpec, gpus: int) -> int:
        return SGLANG.tp_groups(spec, gpus)

    def decide(
        self, context: ServingContext, spec: ServingSpec
    ) -> tuple[DecidedServer, tuple[Diagnostic, ...]] | PvegpuError:
        self.asked.append(f"decide {context.pool.name} {context.where}")
        return SGLANG.decide(context, spec)

    def unit_content(self, serving: DecidedServer) -> str:
        self.asked.append(f"unit {serving.pool}")
        return SGLANG.unit_content(serving)

    def installed_files(
        self, reader: RootFiles, rootfs: str, python: str
    ) -> tuple[ConfigFile, ...]:
        self.asked.append(f"installed {rootfs} {python}")
        return SGLANG.installed_files(reader, rootfs, python)

    def health_url(self, serving: DecidedServer) -> str:
        self.asked.append(f"health {serving.unit}")
        return SGLANG.health_url(serving)


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


def test_the_runbook_waits_on_the_engines_health_check(
    kpro6: Plan, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The health check the runbook, the apply contract and the manual revert wait on is
    the engine's: SUMMARY.md and MANIFEST.json ask the registry, not a renderer's copy."""
    plan = kpro6
    recording = _Recording([])
    engine: Engine = recording
    monkeypatch.setitem(engines._REGISTRY, "sglang", lambda: engine)
    from pvegpu.rendering.registry import render

    artifacts = render(plan)
    (pool,) = [p for p in plan.pools if p.serving is not None]
    assert pool.serving is not None
    assert f"health {pool.serving.unit}" in recording.asked
    summary = next(a.content for a in artifacts if a.path == "SUMMARY.md")
    assert SGLANG.health_url(pool.serving) in summary


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


@attrs.frozen
class _Stub:
    """An engine that keeps the context it is handed, then lets SGLang decide."""

    name: str
    contexts: list[ServingContext]
    label: str = "Stub"
    spec_keys: tuple[EngineKey, ...] = ()
    server_line: ServerLine = SGLANG.server_line

    def tp_groups(self, spec: ServingSpec, gpus: int) -> int:
        return SGLANG.tp_groups(spec, gpus)

    def decide(
        self, context: ServingContext, spec: ServingSpec
    ) -> tuple[DecidedServer, tuple[Diagnostic, ...]] | PvegpuError:
        # Everything neutral is already decided when an engine is asked.
        assert context.visible_devices == (0, 1, 2, 3)
        assert context.tp == len(context.gpus) == 4
        assert context.p2p.reason
        assert context.numa is not None
        assert context.numa.node == 0
        assert context.model is not None
        assert context.container_driver is not None
        assert context.rootfs.path is not None
        self.contexts.append(context)
        return SGLANG.decide(context, attrs.evolve(spec, engine="sglang"))

    def unit_content(self, serving: DecidedServer) -> str:
        return SGLANG.unit_content(serving)

    def installed_files(
        self, reader: RootFiles, rootfs: str, python: str
    ) -> tuple[ConfigFile, ...]:
        return SGLANG.installed_files(reader, rootfs, python)

    def health_url(self, serving: DecidedServer) -> str:
        return SGLANG.health_url(serving)


def test_the_neutral_decisions_are_made_once_before_any_engine_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two engines asked for the same pool get the same context: P2P, NUMA, the visible
    devices, the model's config and the container's userspace are no engine's to decide."""
    contexts: list[ServingContext] = []
    stubs: dict[str, Engine] = {name: _Stub(name, contexts) for name in ("stub-a", "stub-b")}
    for name in stubs:
        monkeypatch.setitem(engines._REGISTRY, name, functools.partial(stubs.__getitem__, name))
    decided = {
        name: decided_servings(kpro6_plan(qwen_serving(engine=name)))
        for name in ("stub-a", "stub-b")
    }
    first, second = contexts
    assert first == second
    assert decided["stub-a"].pools == decided["stub-b"].pools
    assert decided["stub-a"].findings == decided["stub-b"].findings


def test_a_neutral_refusal_still_lists_the_engines_problems() -> None:
    """The context keeps its problems, so a plan refused for a neutral reason (P2P forced
    on without a reason) also lists the engine's own (an option only pvegpu may set)."""
    spec = qwen_serving(p2p=P2PSetting.ON, extra_args=("--tp-size", "2"))
    with pytest.raises(PlanError) as err:
        decided_servings(kpro6_plan(spec))
    codes = [p.code for p in err.value.problems]
    assert "serving-extra-arg-owned" in codes
    assert codes.index("p2p-override-without-reason") < codes.index("serving-extra-arg-owned")
