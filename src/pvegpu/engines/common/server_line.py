"""How an engine's server shows on a unit's command line, and the GPUs that line opens.

A container's old units (`planning/unit_gpus.py`) are read for every server pvegpu knows:
each engine hands its `ServerLine` (its package's `server_line.py`) through the registry,
and the reader, which knows no engine, finds the server by it, collects the size options
it names, and asks it how many GPUs they open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from pvegpu.engines.common.deprecations import FlagDeprecation
from pvegpu.values import value_class

GpuCount = Callable[[Mapping[str, int], bool], int]
"""The devices a server opens from its sizes by kind (`tp`: 4) and whether attention data
parallelism is on (`ServerLine.dp_attention` written)."""


def _no_deprecation(flag: str) -> FlagDeprecation | None:
    return None


@value_class
@attrs.frozen(eq=False, repr=False)
class ServerLine:
    """An engine's server as a unit's ExecStart= starts it."""

    modules: tuple[str, ...]
    """`python -m MODULE` that starts it (`sglang.launch_server`)."""
    command: str
    """The console script whose `serve` subcommand starts it (`sglang`, `vllm`)."""
    sizes: tuple[tuple[str, str], ...]
    """Each option that sets a size, with its kind: `tp`, `pp`, `dp` and the engine's own
    (`nnodes`, `base`, `step`; `dpl`, `pcp`), as `count` reads them."""
    count: GpuCount
    underscores: bool = False
    """The parser reads `--tensor_parallel_size` as `--tensor-parallel-size` (vLLM's)."""
    dp_attention: str | None = None
    """The flag that turns data parallelism into attention DP (SGLang's
    `--enable-dp-attention`), which `count` is told of."""
    deprecation: Callable[[str], FlagDeprecation | None] = _no_deprecation
    """The release table's deprecation of a flag as written, if it has one."""

    @property
    def size_kinds(self) -> Mapping[str, str]:
        return dict(self.sizes)

    def option_name(self, word: str) -> str:
        """The option a word names, as the engine's parser reads it (`--tp=4` -> `--tp`)."""
        name = word.partition("=")[0]
        if self.underscores and name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        return name
