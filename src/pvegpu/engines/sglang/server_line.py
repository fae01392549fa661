"""SGLang's server on a unit's command line (`engines.common.server_line`).

`-m sglang.launch_server`, `-m sglang_router.launch_server`, `sglang serve`. GPUs:
`--tp-size`/`--tensor-parallel-size`/`--tp` x `--pp-size`/`--pipeline-parallel-size`/
`--pp`, times `--dp-size`/`--data-parallel-size`/`--dp` replicas, divided over `--nnodes`;
`--base-gpu-id` and `--gpu-id-step` move the highest device it opens. Attention data
parallelism runs inside the TP group and adds no GPUs: `--attn-dp-size`/
`--attention-data-parallel-size` (0.5.22 on) and the deprecated `--dp-size N
--enable-dp-attention`, which SGLang reads as `--attn-dp-size N --dp-size 1` (before
0.5.22 the same count: the DP ranks share the TP GPUs). SGLang 0.5.23's
`compute_world_size` in `sglang/srt/server_args.py` is dp x tp x pp, and
`handle_deprecated_dp_attention` in `sglang/srt/arg_groups/parallel_hook.py` is the rewrite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pvegpu.engines.common.server_line import ServerLine
from pvegpu.engines.sglang import versions


def _gpus(size: Mapping[str, int], dp_attention: bool) -> int:
    tp, pp = size.get("tp", 1), size.get("pp", 1)
    dp = 1 if dp_attention else size.get("dp", 1)
    per_node = math.ceil(tp * pp * dp / max(size.get("nnodes", 1), 1))
    return size.get("base", 0) + (per_node - 1) * size.get("step", 1) + 1


SERVER_LINE = ServerLine(
    modules=("sglang.launch_server", "sglang_router.launch_server"),
    command="sglang",
    sizes=(
        ("--tp-size", "tp"),
        ("--tensor-parallel-size", "tp"),
        ("--tp", "tp"),
        ("--pp-size", "pp"),
        ("--pipeline-parallel-size", "pp"),
        ("--pp", "pp"),
        ("--dp-size", "dp"),
        ("--data-parallel-size", "dp"),
        ("--dp", "dp"),
        ("--nnodes", "nnodes"),
        ("--base-gpu-id", "base"),
        ("--gpu-id-step", "step"),
    ),
    count=_gpus,
    dp_attention="--enable-dp-attention",
    deprecation=versions.RULES.deprecation,
)
