"""Serving engines: the one plug-in point for what runs a pool's inference server.

An engine is one package here (`sglang/`, `vllm/`) behind the `Engine` protocol; the spec's
`engine` value picks it through `engine_for`, the only place an engine name is compared.
What any engine's server needs decided the same way (the GPUs, P2P, NUMA pinning, memory
fit, the container's files and NVIDIA userspace) is engine-neutral and lives in
`pvegpu.serving`, the decided values in `pvegpu.model.decision`; an engine reads its own
release in the container, checks its own command line, and writes its own unit.

Importing this package is light on purpose: an engine's modules load only when
`engine_for` is asked for that engine. Discovery asks the engine too, for the files of
its release installed in a container (`installed_files`), through this registry: `host/`
reads them for the engine and imports none.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pvegpu.diagnostic import Diagnostic
    from pvegpu.engines.common.installed_files import RootFiles
    from pvegpu.engines.common.server_line import ServerLine
    from pvegpu.errors import PvegpuError
    from pvegpu.model.decision import DecidedServer
    from pvegpu.model.facts import ConfigFile
    from pvegpu.model.schema import ServingSpec
    from pvegpu.serving.context import ServingContext
    from pvegpu.spec.engine_keys import EngineKey, SpecEngine


class Engine(Protocol):
    """What the planner and the renderers ask of a serving engine."""

    @property
    def name(self) -> str:
        """The spec's `engine` value that selects it."""
        ...

    @property
    def label(self) -> str:
        """The engine as the project spells it, in messages and the review (`SGLang`)."""
        ...

    @property
    def spec_keys(self) -> tuple[EngineKey, ...]:
        """The keys of the spec's serving table that only this engine reads (their TOML
        type and rule): the loader takes them out of the table and judges them by this,
        and refuses them for another engine (spec/engine_keys.py, `spec_engines`)."""
        ...

    @property
    def server_line(self) -> ServerLine:
        """How its server shows on a unit's command line and the GPUs that opens: a
        container's old units are read by it (`planning/unit_gpus.py`)."""
        ...

    def tp_groups(self, spec: ServingSpec, gpus: int) -> int:
        """The TP groups the server `spec` asks for makes of the pool's `gpus` (TP is
        `gpus` over them), asked before any decision; 1 when they do not divide `gpus`
        (`decide` refuses that)."""
        ...

    def decide(
        self, context: ServingContext, spec: ServingSpec
    ) -> tuple[DecidedServer, tuple[Diagnostic, ...]] | PvegpuError:
        """The server `spec` asks of the context's pool and its findings, or every problem
        (the context's first) as an error.

        `context`: the engine-neutral decisions, made once before any engine runs (GPUs
        and visible devices, P2P, NUMA, the model's config, the container's userspace).
        """
        ...

    def unit_content(self, serving: DecidedServer) -> str:
        """The systemd unit text of a decided server: formats, decides nothing."""
        ...

    def installed_files(
        self, reader: RootFiles, rootfs: str, python: str
    ) -> tuple[ConfigFile, ...]:
        """The files of the container whose root file system is `rootfs` (root-relative)
        that its `decide` reads the release installed for `python` from, read through
        `reader` (the one thing that opens a path under the root) into the facts."""
        ...

    def health_url(self, serving: DecidedServer) -> str:
        """Where the decided server answers once it is ready, as seen from inside the
        container: the runbook and `pvegpu apply` wait on it after the restart."""
        ...


def _plugin(package: str) -> Callable[[], Engine]:
    """The engine `pvegpu.engines.<package>.engine.ENGINE`, imported when first asked for."""

    def load() -> Engine:
        module = importlib.import_module(f"pvegpu.engines.{package}.engine")
        engine: Engine = module.ENGINE
        return engine

    return load


_REGISTRY: dict[str, Callable[[], Engine]] = {
    "sglang": _plugin("sglang"),
    "vllm": _plugin("vllm"),
}
"""The spec's `engine` value -> its engine: one line per engine, its package's name."""

ENGINE_NAMES: tuple[str, ...] = tuple(_REGISTRY)
"""Every `engine` value pvegpu can serve with."""


def engine_for(name: str) -> Engine | None:
    """The engine the spec's `engine = name` selects; None when pvegpu has none by that name."""
    factory = _REGISTRY.get(name)
    return factory() if factory is not None else None


def installed_files(reader: RootFiles, serving: ServingSpec, rootfs: str) -> tuple[ConfigFile, ...]:
    """What the engine of `serving` reads of its release in the container at `rootfs`:
    how discovery (`pipeline.discover_for`, `pvegpu snapshot --spec`) asks the engine,
    handed to `host.serving_files` so that host/ imports no engine. Nothing for an
    engine pvegpu has none of (planning refuses it by name)."""
    engine = engine_for(serving.engine)
    return engine.installed_files(reader, rootfs, serving.python) if engine is not None else ()


def spec_engines() -> tuple[SpecEngine, ...]:
    """What every engine adds to the spec, its name and its own keys: the spec loader,
    below this layer, takes them from whoever loads a spec (`pvegpu.pipeline.parse_spec`)."""
    from pvegpu.spec.engine_keys import SpecEngine

    return tuple(SpecEngine(engine.name, engine.spec_keys) for engine in every_engine())


def every_engine() -> tuple[Engine, ...]:
    """Every engine of the registry, in its order."""
    return tuple(factory() for factory in _REGISTRY.values())


def engine_label(name: str) -> str:
    """How messages and the review name the engine of the spec's `engine = name` (the
    name itself for one pvegpu has none of)."""
    engine = engine_for(name)
    return engine.label if engine is not None else name


def health_url(serving: DecidedServer) -> str:
    """The health check of a decided server, from its engine (the runbook, the apply
    contract and the manual revert ask here)."""
    engine = engine_for(serving.engine)
    assert engine is not None, f"decided with an engine pvegpu has: {serving.engine}"
    return engine.health_url(serving)
