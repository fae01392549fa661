"""The unit file text of an SGLang server: what render_serving writes and drops.py compares.

The unit is every engine's (`engines.common.unit`); SGLang's is its command,
`python -m sglang.launch_server` with one option per ExecStart line.
"""

from __future__ import annotations

from pvegpu.engines.common.unit import server_unit
from pvegpu.engines.sglang.decision import SglangServing
from pvegpu.serving.systemd import exec_option, exec_word


def unit_content(serving: SglangServing) -> str:
    """The unit file text: one launch_server option per ExecStart line, for review."""
    exec_lines = [
        " ".join(exec_word(w) for w in (serving.python, "-m", "sglang.launch_server")),
        *(exec_option(option) for option in serving.options),
    ]
    return server_unit(
        serving,
        exec_lines,
        title="SGLang",
        layout=f"TP={serving.tp_size}",
        fraction="mem_fraction_static",
    )
