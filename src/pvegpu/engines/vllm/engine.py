"""vLLM behind the `Engine` protocol: what the registry hands the planner and renderers."""

from __future__ import annotations

import attrs

from pvegpu.engines import Engine
from pvegpu.engines.common.installed_files import RootFiles
from pvegpu.engines.common.server import health_url
from pvegpu.engines.vllm.build import decide_serving
from pvegpu.engines.vllm.decision import VllmServing
from pvegpu.engines.vllm.installed_files import read_installed_vllm
from pvegpu.engines.vllm.unit import unit_content
from pvegpu.errors import PvegpuError
from pvegpu.model.decision import DecidedServer
from pvegpu.model.facts import ConfigFile
from pvegpu.model.plan import Finding
from pvegpu.model.schema import ServingSpec
from pvegpu.serving.context import ServingContext
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class VllmEngine:
    """vLLM: `vllm serve MODEL` (the script of the unit's python) in a systemd unit."""

    name: str = "vllm"
    label: str = "vLLM"

    def decide(
        self, context: ServingContext, spec: ServingSpec
    ) -> tuple[DecidedServer, tuple[Finding, ...]] | PvegpuError:
        return decide_serving(context, spec)

    def unit_content(self, serving: DecidedServer) -> str:
        assert isinstance(serving, VllmServing), "decided by this engine"
        return unit_content(serving)

    def installed_files(
        self, reader: RootFiles, rootfs: str, python: str
    ) -> tuple[ConfigFile, ...]:
        return read_installed_vllm(reader, rootfs, python)

    def health_url(self, serving: DecidedServer) -> str:
        # vLLM's OpenAI server has answered GET /health since `vllm serve` came, as
        # SGLang's does.
        return health_url(serving)


VLLM = VllmEngine()
ENGINE: Engine = VLLM
"""What the registry (`pvegpu.engines`) hands out for `engine = "vllm"`."""
