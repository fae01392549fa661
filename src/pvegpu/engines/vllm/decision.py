"""vLLM's decided server: `DecidedServer` with vLLM's own sizes and command, built by
`engines.vllm.build.decide_serving` only."""

from __future__ import annotations

from typing import ClassVar

import attrs

from pvegpu.model.decision import DecidedServer
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class VllmServing(DecidedServer):
    """A pool's vLLM server: `vllm serve MODEL` with the decided options; `tp_size` is
    `--tensor-parallel-size`."""

    engine: ClassVar[str] = "vllm"

    pp_size: int
    """`--pipeline-parallel-size`: TP x PP = the pool's GPU count."""
    executable: str
    """The `vllm` console script of the unit's Python environment."""
    mtp_config: str | None
    """The `--speculative-config` JSON MTP writes, or None."""
    pcp_size: int = 1
    """`--prefill-context-parallel-size`: TP x PP x PCP = the pool's GPU count."""
    dcp_size: int = 1
    """`--decode-context-parallel-size`: reuses the TP ranks (no GPUs of its own)."""

    @property
    def pipeline_stages(self) -> int:
        """TP groups: vLLM's world size is PP x TP x PCP (vllm/config/parallel.py)."""
        return self.pp_size * self.pcp_size

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.executable, "serve", *(w for o in self.options for w in o))
