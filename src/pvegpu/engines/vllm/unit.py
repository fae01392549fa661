"""The unit file text of a vLLM server: what render_serving writes and drops.py compares.

The unit is every engine's (`engines.common.unit`, the one template both fill); vLLM's is
its command, `vllm serve MODEL` and one option per ExecStart line, the pipeline stages in
its layout, and its name for the memory share.
"""

from __future__ import annotations

from pvegpu.engines.common.unit import server_unit
from pvegpu.engines.vllm.decision import VllmServing
from pvegpu.serving.systemd import exec_option, exec_word


def unit_content(serving: VllmServing) -> str:
    """The unit file text: `vllm serve MODEL`, then one option per ExecStart line."""
    model, *options = serving.options
    exec_lines = [
        " ".join(exec_word(w) for w in (serving.executable, "serve", *model)),
        *(exec_option(option) for option in options),
    ]
    layout = f"TP={serving.tp_size}" + (f" x PP={serving.pp_size}" if serving.pp_size > 1 else "")
    layout += f" x PCP={serving.pcp_size}" if serving.pcp_size > 1 else ""
    layout += f", DCP={serving.dcp_size}" if serving.dcp_size > 1 else ""
    return server_unit(
        serving, exec_lines, title="vLLM", layout=layout, fraction="gpu_memory_utilization"
    )
