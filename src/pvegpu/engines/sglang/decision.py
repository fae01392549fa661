"""SGLang's decided server: `DecidedServer` with SGLang's command, built by
`engines.sglang.build.decide_serving` only."""

from __future__ import annotations

from typing import ClassVar

import attrs

from pvegpu.model.decision import DecidedServer
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class SglangServing(DecidedServer):
    """A pool's SGLang server: `python -m sglang.launch_server` with the decided options
    (TP is the pool's GPU count; SGLang's servers have one TP group)."""

    engine: ClassVar[str] = "sglang"

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.python, "-m", "sglang.launch_server", *(w for o in self.options for w in o))
