"""SGLang behind the `Engine` protocol: what the registry hands the planner and renderers.

Light to import: its name, label and `server_line` are read wherever a container's old
units are (`check` too, which renders nothing); deciding, the unit and the installed
release load their modules when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from pvegpu.engines.common.server_line import ServerLine
from pvegpu.engines.sglang.server_line import SERVER_LINE
from pvegpu.values import value_class

if TYPE_CHECKING:
    from pvegpu.diagnostic import Diagnostic
    from pvegpu.engines import Engine
    from pvegpu.engines.common.installed_files import RootFiles
    from pvegpu.errors import PvegpuError
    from pvegpu.model.decision import DecidedServer
    from pvegpu.model.facts import ConfigFile
    from pvegpu.model.schema import ServingSpec
    from pvegpu.serving.context import ServingContext
    from pvegpu.spec.engine_keys import EngineKey


@value_class
@attrs.frozen(eq=False, repr=False)
class SglangEngine:
    """SGLang: `python -m sglang.launch_server` in a systemd unit of the container."""

    name: str = "sglang"
    label: str = "SGLang"
    spec_keys: tuple[EngineKey, ...] = ()
    """None: every key SGLang reads is the schema's own (extra_args carries the rest)."""
    server_line: ServerLine = SERVER_LINE

    def tp_groups(self, spec: ServingSpec, gpus: int) -> int:
        # Pipeline and data parallelism are extra_args' (engines/sglang/parallel.py): TP
        # is the pool's GPU count.
        return 1

    def decide(
        self, context: ServingContext, spec: ServingSpec
    ) -> tuple[DecidedServer, tuple[Diagnostic, ...]] | PvegpuError:
        from pvegpu.engines.sglang.build import decide_serving

        return decide_serving(context, spec)

    def unit_content(self, serving: DecidedServer) -> str:
        from pvegpu.engines.sglang.decision import SglangServing
        from pvegpu.engines.sglang.unit import unit_content

        assert isinstance(serving, SglangServing), "decided by this engine"
        return unit_content(serving)

    def installed_files(
        self, reader: RootFiles, rootfs: str, python: str
    ) -> tuple[ConfigFile, ...]:
        from pvegpu.engines.sglang.installed_files import read_installed_sglang

        return read_installed_sglang(reader, rootfs, python)

    def health_url(self, serving: DecidedServer) -> str:
        from pvegpu.engines.common.server import health_url

        return health_url(serving)


SGLANG = SglangEngine()
ENGINE: Engine = SGLANG
"""What the registry (`pvegpu.engines`) hands out for `engine = "sglang"`."""
