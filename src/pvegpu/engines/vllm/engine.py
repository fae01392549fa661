"""vLLM behind the `Engine` protocol: what the registry hands the planner and renderers.

Light to import, as SGLang's: deciding, the unit and the installed release load their
modules when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from pvegpu.engines.common.server_line import ServerLine
from pvegpu.engines.vllm.server_line import SERVER_LINE
from pvegpu.engines.vllm.spec_keys import PCP, PP, SPEC_KEYS, size
from pvegpu.spec.engine_keys import EngineKey
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


@value_class
@attrs.frozen(eq=False, repr=False)
class VllmEngine:
    """vLLM: `vllm serve MODEL` (the script of the unit's python) in a systemd unit."""

    name: str = "vllm"
    label: str = "vLLM"
    spec_keys: tuple[EngineKey, ...] = SPEC_KEYS
    server_line: ServerLine = SERVER_LINE

    def tp_groups(self, spec: ServingSpec, gpus: int) -> int:
        # Pipeline stages x prefill context-parallel ranks: vLLM's world size over TP.
        stages = (size(spec, PP) or 1) * (size(spec, PCP) or 1)
        return stages if stages >= 1 and gpus % stages == 0 else 1

    def decide(
        self, context: ServingContext, spec: ServingSpec
    ) -> tuple[DecidedServer, tuple[Diagnostic, ...]] | PvegpuError:
        from pvegpu.engines.vllm.build import decide_serving

        return decide_serving(context, spec)

    def unit_content(self, serving: DecidedServer) -> str:
        from pvegpu.engines.vllm.decision import VllmServing
        from pvegpu.engines.vllm.unit import unit_content

        assert isinstance(serving, VllmServing), "decided by this engine"
        return unit_content(serving)

    def installed_files(
        self, reader: RootFiles, rootfs: str, python: str
    ) -> tuple[ConfigFile, ...]:
        from pvegpu.engines.vllm.installed_files import read_installed_vllm

        return read_installed_vllm(reader, rootfs, python)

    def health_url(self, serving: DecidedServer) -> str:
        # vLLM's OpenAI server has answered GET /health since `vllm serve` came, as
        # SGLang's does.
        from pvegpu.engines.common.server import health_url

        return health_url(serving)


VLLM = VllmEngine()
ENGINE: Engine = VLLM
"""What the registry (`pvegpu.engines`) hands out for `engine = "vllm"`."""
