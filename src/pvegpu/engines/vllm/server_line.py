"""vLLM's server on a unit's command line (`engines.common.server_line`).

`vllm serve`, `-m vllm.entrypoints.openai.api_server` (or `.api_server`). GPUs:
`--tensor-parallel-size`/`-tp` x `--pipeline-parallel-size`/`-pp` x
`--prefill-context-parallel-size`/`-pcp` (0.12 on), times `--data-parallel-size-local`/
`-dpl` (else `--data-parallel-size`/`-dp`). vLLM's world size is PP x TP x PCP
(`ParallelConfig.__post_init__` in `vllm/config/parallel.py` of vLLM 0.12.0 and 0.33.0);
`--decode-context-parallel-size`/`-dcp` reuses the TP ranks and adds none. vLLM's parser
takes `--tensor_parallel_size` for `--tensor-parallel-size`.
"""

from __future__ import annotations

from collections.abc import Mapping

from pvegpu.engines.common.server_line import ServerLine


def _gpus(size: Mapping[str, int], dp_attention: bool) -> int:
    tp, pp = size.get("tp", 1), size.get("pp", 1)
    return tp * pp * size.get("pcp", 1) * size.get("dpl", size.get("dp", 1))


SERVER_LINE = ServerLine(
    modules=("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"),
    command="vllm",
    sizes=(
        ("--tensor-parallel-size", "tp"),
        ("-tp", "tp"),
        ("--pipeline-parallel-size", "pp"),
        ("-pp", "pp"),
        ("--data-parallel-size", "dp"),
        ("-dp", "dp"),
        ("--data-parallel-size-local", "dpl"),
        ("-dpl", "dpl"),
        ("--prefill-context-parallel-size", "pcp"),
        ("-pcp", "pcp"),
    ),
    count=_gpus,
    underscores=True,
)
