"""The unit file text of a vLLM server: what render_serving writes and drops.py compares.

The same systemd unit as SGLang's (the one template both engines fill): the reviewer's
notes, Environment=, EnvironmentFile=, NUMA pinning, then `vllm serve MODEL` and one
option per ExecStart line.
"""

from __future__ import annotations

import textwrap

from pvegpu.formats.templating import render_template
from pvegpu.model.decision import P2PSource, VllmServing
from pvegpu.serving.systemd import environment_assignment, exec_option, exec_word, unit_text

COMMENT_WIDTH = 86
TEMPLATE = "sglang.service.j2"
"""The service template: nothing in it is SGLang's own (its name predates vLLM)."""


def _fit_line(serving: VllmServing) -> str | None:
    fit = serving.fit
    if fit is None:
        return None
    gib = 1024**3
    text = (
        f"weights {fit.weights_per_gpu / gib:.1f} GiB/GPU of {fit.gpu_memory_bytes / gib:.1f} "
        f"GiB, gpu_memory_utilization {fit.mem_fraction_static}"
    )
    if fit.kv_tokens is not None:
        text += f", KV cache <= {fit.kv_tokens:,} tokens"
    return text


def unit_content(serving: VllmServing) -> str:
    """The unit file text: `vllm serve MODEL`, then one option per ExecStart line."""
    name = serving.served_model_name or serving.model_path
    model, *options = serving.options
    exec_lines = [
        " ".join(exec_word(w) for w in (serving.executable, "serve", *model)),
        *(exec_option(option) for option in options),
    ]
    p2p = serving.p2p
    origin = "spec override" if p2p.source is P2PSource.SPEC else "facts"
    layout = f"TP={serving.tp_size}" + (f" x PP={serving.pp_size}" if serving.pp_size > 1 else "")
    notes = [
        f"Rendered by pvegpu for pool {serving.pool} (LXC {serving.vmid}). Edit the split "
        f"spec, not this file: /{serving.unit_path} is the only copy systemd runs.",
        f"{layout} over {' '.join(str(g.address) for g in serving.gpus)} (CUDA "
        f"{','.join(map(str, serving.cuda_visible_devices))}, PCI order).",
        f"P2P {'on' if p2p.enabled else 'off'} ({origin}): {p2p.reason}",
    ]
    fit = _fit_line(serving)
    if fit:
        notes.append(f"Memory estimate: {fit}")
    # Wrapped, and never ending in a backslash (a user's p2p_reason could), which systemd
    # might read as a line continuation.
    comments = [line.rstrip("\\") for note in notes for line in textwrap.wrap(note, COMMENT_WIDTH)]
    return render_template(
        TEMPLATE,
        comments=comments,
        description=unit_text(
            f"vLLM {serving.version} {name} ({layout}, pvegpu pool {serving.pool})"
        ),
        user=None if serving.user is None else unit_text(serving.user),
        working_directory=(
            None if serving.working_directory is None else unit_text(serving.working_directory)
        ),
        limit_nofile=serving.limit_nofile,
        environment_file=(
            None if serving.environment_file is None else unit_text(serving.environment_file)
        ),
        environment=[environment_assignment(k, v) for k, v in serving.environment],
        numa=serving.numa,
        exec_lines=exec_lines,
    )
