"""SGLang behind the `Engine` protocol: what the registry hands the planner and renderers."""

from __future__ import annotations

import attrs

from pvegpu.engines import Engine
from pvegpu.engines.common.installed_files import RootFiles
from pvegpu.engines.common.server import health_url
from pvegpu.engines.sglang.build import decide_serving
from pvegpu.engines.sglang.decision import SglangServing
from pvegpu.engines.sglang.installed_files import read_installed_sglang
from pvegpu.engines.sglang.unit import unit_content
from pvegpu.errors import PvegpuError
from pvegpu.model.decision import DecidedServer
from pvegpu.model.facts import ConfigFile
from pvegpu.model.plan import Finding
from pvegpu.model.schema import ServingSpec
from pvegpu.serving.context import ServingContext
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class SglangEngine:
    """SGLang: `python -m sglang.launch_server` in a systemd unit of the container."""

    name: str = "sglang"
    label: str = "SGLang"

    def decide(
        self, context: ServingContext, spec: ServingSpec
    ) -> tuple[DecidedServer, tuple[Finding, ...]] | PvegpuError:
        return decide_serving(context, spec)

    def unit_content(self, serving: DecidedServer) -> str:
        assert isinstance(serving, SglangServing), "decided by this engine"
        return unit_content(serving)

    def installed_files(
        self, reader: RootFiles, rootfs: str, python: str
    ) -> tuple[ConfigFile, ...]:
        return read_installed_sglang(reader, rootfs, python)

    def health_url(self, serving: DecidedServer) -> str:
        return health_url(serving)


SGLANG = SglangEngine()
ENGINE: Engine = SGLANG
"""What the registry (`pvegpu.engines`) hands out for `engine = "sglang"`."""
