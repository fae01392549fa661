"""Adding an engine is its package and one registry line: a third engine, written here as
its package would be and registered by that one line, is loaded from a spec with a key of
its own, planned, rendered and found in an old unit's command line through the registry
alone, no other module changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import attrs
import pytest

from bundled import EXAMPLES, example_facts
from pvegpu import engines
from pvegpu.diagnostic import Diagnostic
from pvegpu.engines.common.installed_files import RootFiles
from pvegpu.engines.common.old_unit import unit_base
from pvegpu.engines.common.server import health_url
from pvegpu.engines.common.server_line import ServerLine
from pvegpu.errors import PvegpuError, SpecError
from pvegpu.model.artifact import ArtifactRole
from pvegpu.model.decision import DECIDED, DecidedServer
from pvegpu.model.facts import ConfigFile
from pvegpu.model.schema import ServingSpec
from pvegpu.pipeline import parse_spec
from pvegpu.planning.planner import plan as pvegpu_plan
from pvegpu.planning.unit_gpus import unit_demand
from pvegpu.rendering.registry import render
from pvegpu.serving.context import ServingContext
from pvegpu.serving.unitfile import parse_unit
from pvegpu.spec.engine_keys import EngineKey
from pvegpu.spec.rules import int_range
from pvegpu.values import value_class

# --- what engines/toy/ would hold -----------------------------------------------------


@value_class
@attrs.frozen(eq=False, repr=False)
class ToyServing(DecidedServer):
    """engines/toy/decision.py: the toy engine's own decided settings."""

    engine: ClassVar[str] = "toy"

    batch: int

    @property
    def argv(self) -> tuple[str, ...]:
        return ("/usr/bin/toy", "serve", *(w for o in self.options for w in o))


def _gpus(size: Mapping[str, int], dp_attention: bool) -> int:
    return size.get("tp", 1) * size.get("replicas", 1)


TOY_LINE = ServerLine(
    modules=("toy.server",),
    command="toy",
    sizes=(("--shards", "tp"), ("--replicas", "replicas")),
    count=_gpus,
)
"""engines/toy/server_line.py: the toy server on a unit's command line."""


TOY_KEYS = (EngineKey("batch", int, int_range(1, 512)),)
"""engines/toy/spec_keys.py: the serving table's keys only the toy engine reads."""


@attrs.frozen
class ToyEngine:
    """engines/toy/engine.py: the toy engine behind the `Engine` protocol."""

    name: str = "toy"
    label: str = "Toy"
    spec_keys: tuple[EngineKey, ...] = TOY_KEYS
    server_line: ServerLine = TOY_LINE

    def tp_groups(self, spec: ServingSpec, gpus: int) -> int:
        return 1

    def decide(
        self, context: ServingContext, spec: ServingSpec
    ) -> tuple[DecidedServer, tuple[Diagnostic, ...]] | PvegpuError:
        checks = context.checks(spec)
        old = unit_base(checks, context.vmid, context.rootfs)
        serving = ToyServing(
            pool=context.pool.name,
            vmid=context.vmid,
            version=spec.version or "1",
            unit=spec.unit,
            python=spec.python,
            model_path=spec.model_path,
            served_model_name=spec.served_model_name,
            host=spec.host,
            port=spec.port,
            runtime=context.runtime,
            visible_devices=context.visible_devices,
            gpus=context.gpus,
            tp_size=context.tp,
            options=(("--model", spec.model_path), ("--shards", str(context.tp))),
            environment=(),
            p2p=context.p2p,
            numa=context.numa,
            fit=None,
            model=context.model,
            container_driver=context.container_driver,
            base=old.base,
            unit_unread=old.unread,
            dropins=old.changes,
            user=None,
            working_directory=None,
            limit_nofile=None,
            environment_file=None,
            _key=DECIDED,
            batch=int(spec.engine_key("batch") or 1),
        )
        return serving, tuple(checks.findings)

    def unit_content(self, serving: DecidedServer) -> str:
        assert isinstance(serving, ToyServing)
        return f"[Service]\nExecStart={' '.join(serving.argv)} --batch {serving.batch}\n"

    def installed_files(
        self, reader: RootFiles, rootfs: str, python: str
    ) -> tuple[ConfigFile, ...]:
        return ()

    def health_url(self, serving: DecidedServer) -> str:
        return health_url(serving)


# --- the registry line ----------------------------------------------------------------


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ToyEngine:
    engine = ToyEngine()
    monkeypatch.setitem(engines._REGISTRY, "toy", lambda: engine)  # the one registry line
    return engine


def _toy_spec_text(key: str = "batch = 8") -> str:
    """examples/kpro6.toml with its server on the toy engine, a key of the toy's own set."""
    text = EXAMPLES.joinpath("kpro6.toml").read_text()
    release = 'version = "0.5.23"\n'
    assert text.count(release) == 1
    return text.replace(release, f'engine = "toy"\nversion = "1.2"\n{key}\n')


def test_a_third_engine_is_planned_and_rendered_through_the_registry(toy: ToyEngine) -> None:
    # Loaded as the CLI loads a spec: the engine's name and its own key are the registry's.
    spec = parse_spec(_toy_spec_text())
    plan = pvegpu_plan(example_facts("kpro6"), spec)
    (pool,) = (p for p in plan.pools if p.serving is not None)
    assert isinstance(pool.serving, ToyServing)
    assert (pool.serving.engine, pool.serving.tp_size, pool.serving.batch) == ("toy", 4, 8)
    artifacts = {a.path: a for a in render(plan) if a.role is not ArtifactRole.REVERT}
    unit = artifacts[pool.serving.unit_path]
    assert unit.content == (
        "[Service]\nExecStart=/usr/bin/toy serve --model /shared/models/Qwen3.5-122B-A10B "
        "--shards 4 --batch 8\n"
    )
    assert unit.reason.startswith("Toy 1.2 for pool ")
    summary = artifacts["SUMMARY.md"].content
    assert "Toy 1.2 serves `/shared/models/Qwen3.5-122B-A10B`" in summary
    assert toy.health_url(pool.serving) in summary


def test_a_third_engines_server_is_counted_in_an_old_unit(toy: ToyEngine) -> None:
    text = "[Service]\nExecStart=/usr/bin/toy serve --model /m --shards 2 --replicas 3\n"
    (server,) = unit_demand(parse_unit(text)).servers
    assert (server.engine, server.server, server.gpus) == ("toy", "Toy", 6)
    assert server.shown == "`--shards 2` `--replicas 3`"


def test_a_third_engines_config_file_sizes_count(toy: ToyEngine) -> None:
    """Its `--config` file is read for it (discovery reads any ExecStart='s config,
    host/container_units.py): the sizes there count, the command line's override them."""
    text = "[Service]\nExecStart=/usr/bin/toy serve --config /etc/toy.yaml --replicas 3\n"
    files = {"/etc/toy.yaml": "shards: 2\nreplicas: 5\n"}
    (server,) = unit_demand(parse_unit(text), config_text=files.get).servers
    assert (server.engine, server.gpus) == ("toy", 6)


def test_without_its_registry_line_no_module_knows_the_third_engine() -> None:
    text = "[Service]\nExecStart=/usr/bin/toy serve --model /m --shards 2\n"
    assert unit_demand(parse_unit(text)).servers == ()
    assert engines.engine_for("toy") is None


def test_the_third_engines_keys_are_its_own(toy: ToyEngine) -> None:
    """Its key is judged by its rule, and refused for another engine naming the toy;
    another engine's key is refused for it: both as the loader refuses any key."""
    with pytest.raises(SpecError) as err:
        parse_spec(_toy_spec_text("batch = 0\npipeline_parallel_size = 2"))
    assert [(p.code, p.subject, p.line, p.message) for p in err.value.problems] == [
        ("spec-invalid-value", "pools[0].lxc.serving.batch", 24, "0 is not between 1 and 512"),
        (
            "spec-engine-key",
            "pools[0].lxc.serving.pipeline_parallel_size",
            25,
            'pipeline_parallel_size is a key of engine = "vllm"; engine = "toy" does not read it',
        ),
    ]
    vllm = _toy_spec_text().replace('engine = "toy"', 'engine = "vllm"')
    with pytest.raises(SpecError) as err:
        parse_spec(vllm)
    (problem,) = err.value.problems
    assert (problem.code, problem.fix) == ("spec-engine-key", 'remove batch, or set engine = "toy"')


def test_without_its_registry_line_the_loader_refuses_the_third_engine() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(_toy_spec_text())
    assert [(p.code, p.subject, p.message) for p in err.value.problems] == [
        ("spec-invalid-value", "pools[0].lxc.serving.engine", '\'toy\' is not "sglang" or "vllm"'),
        ("spec-unknown-key", "pools[0].lxc.serving.batch", "unknown key"),
    ]
