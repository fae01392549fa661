"""The unit file text of a server: the one systemd unit every engine fills.

The reviewer's notes, Environment=, EnvironmentFile=, NUMA pinning, then the engine's
command, one option per ExecStart line. What an engine says is its own: the command, how
it names the share of GPU memory it takes, and the layout of its GPUs.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from pvegpu.formats.templating import render_template
from pvegpu.model.decision import DecidedServer, P2PSource
from pvegpu.serving.systemd import environment_assignment, unit_text

COMMENT_WIDTH = 86
TEMPLATE = "sglang.service.j2"
"""The service template: nothing in it is SGLang's own (its name predates vLLM)."""


def _fit_line(serving: DecidedServer, fraction: str) -> str | None:
    fit = serving.fit
    if fit is None:
        return None
    gib = 1024**3
    text = (
        f"weights {fit.weights_per_gpu / gib:.1f} GiB/GPU of {fit.gpu_memory_bytes / gib:.1f} "
        f"GiB, {fraction} {fit.mem_fraction_static}"
    )
    if fit.kv_tokens is not None:
        text += f", KV cache <= {fit.kv_tokens:,} tokens"
    return text


def server_unit(
    serving: DecidedServer,
    exec_lines: Sequence[str],
    *,
    title: str,
    layout: str,
    fraction: str,
) -> str:
    """The unit file text of `serving`, running `exec_lines` (ExecStart's, quoted).

    `title`: the engine in the description (`SGLang`); `layout`: its GPUs (`TP=4`);
    `fraction`: its name for the memory share (`mem_fraction_static`).
    """
    name = serving.served_model_name or serving.model_path
    p2p = serving.p2p
    origin = "spec override" if p2p.source is P2PSource.SPEC else "facts"
    notes = [
        f"Rendered by pvegpu for pool {serving.pool} (LXC {serving.vmid}). Edit the split "
        f"spec, not this file: /{serving.unit_path} is the only copy systemd runs.",
        f"{layout} over {' '.join(str(g.address) for g in serving.gpus)} "
        f"({serving.runtime.name} {','.join(map(str, serving.visible_devices))}, PCI order).",
        f"P2P {'on' if p2p.enabled else 'off'} ({origin}): {p2p.reason}",
    ]
    fit = _fit_line(serving, fraction)
    if fit:
        notes.append(f"Memory estimate: {fit}")
    # Comments are for the reviewer of the diff: wrapped, and never ending in a backslash
    # (a user's p2p_reason could), which systemd might read as a line continuation.
    comments = [line.rstrip("\\") for note in notes for line in textwrap.wrap(note, COMMENT_WIDTH)]
    return render_template(
        TEMPLATE,
        comments=comments,
        description=unit_text(
            f"{title} {serving.version} {name} ({layout}, pvegpu pool {serving.pool})"
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
        exec_lines=list(exec_lines),
    )
