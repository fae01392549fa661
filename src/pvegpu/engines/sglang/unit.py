"""The unit file text of a server: what render_serving writes and drops.py compares."""

from __future__ import annotations

import textwrap

from pvegpu.formats.templating import render_template
from pvegpu.model.decision import P2PSource, SglangServing
from pvegpu.serving.systemd import environment_assignment, exec_option, exec_word, unit_text

COMMENT_WIDTH = 86


def _fit_line(serving: SglangServing) -> str | None:
    fit = serving.fit
    if fit is None:
        return None
    gib = 1024**3
    text = (
        f"weights {fit.weights_per_gpu / gib:.1f} GiB/GPU of {fit.gpu_memory_bytes / gib:.1f} "
        f"GiB, mem_fraction_static {fit.mem_fraction_static}"
    )
    if fit.kv_tokens is not None:
        text += f", KV cache <= {fit.kv_tokens:,} tokens"
    return text


def unit_content(serving: SglangServing) -> str:
    """The unit file text: one launch_server option per ExecStart line, for review."""
    name = serving.served_model_name or serving.model_path
    exec_lines = [
        " ".join(exec_word(w) for w in (serving.python, "-m", "sglang.launch_server")),
        *(exec_option(option) for option in serving.options),
    ]
    p2p = serving.p2p
    origin = "spec override" if p2p.source is P2PSource.SPEC else "facts"
    notes = [
        f"Rendered by pvegpu for pool {serving.pool} (LXC {serving.vmid}). Edit the split "
        f"spec, not this file: /{serving.unit_path} is the only copy systemd runs.",
        f"TP={serving.tp_size} over {' '.join(str(g.address) for g in serving.gpus)} (CUDA "
        f"{','.join(map(str, serving.cuda_visible_devices))}, PCI order).",
        f"P2P {'on' if p2p.enabled else 'off'} ({origin}): {p2p.reason}",
    ]
    fit = _fit_line(serving)
    if fit:
        notes.append(f"Memory estimate: {fit}")
    # Comments are for the reviewer of the diff: wrapped, and never ending in a backslash
    # (a user's p2p_reason could), which systemd might read as a line continuation.
    comments = [line.rstrip("\\") for note in notes for line in textwrap.wrap(note, COMMENT_WIDTH)]
    return render_template(
        "sglang.service.j2",
        comments=comments,
        description=unit_text(
            f"SGLang {serving.version} {name} (TP={serving.tp_size}, pvegpu pool {serving.pool})"
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
