"""SGLang's command line: the options pvegpu derives, by the names the version's table uses."""

from __future__ import annotations

import attrs

from pvegpu.errors import RenderError
from pvegpu.serving.checks import Checks
from pvegpu.serving.decision import P2PDecision
from pvegpu.serving.model_config import ModelConfig
from pvegpu.serving.options import OptionTable, ParsedCommandLine, load_table, version_key

# The options pvegpu writes, by every spelling SGLang has used for them (first: the
# preferred one). The table of the version picks the entry and its canonical name.
MODEL_PATH = ("--model-path", "--model")
SERVED_MODEL_NAME = ("--served-model-name",)
HOST_OPT = ("--host",)
PORT_OPT = ("--port",)
TP_SIZE = ("--tp-size", "--tensor-parallel-size")
CONTEXT_LENGTH = ("--context-length",)
MEM_FRACTION = ("--mem-fraction-static",)
DISABLE_CUSTOM_ALL_REDUCE = ("--disable-custom-all-reduce",)
NUMA_NODE = ("--numa-node",)
SPECULATIVE_ALGORITHM = ("--speculative-algorithm",)
# The version matrix (docs/serving.md): the mamba cache strategy option was renamed in
# 0.5.14 and the old name removed in 0.5.20.
MAMBA_STRATEGY_OLD = ("--mamba-scheduler-strategy",)
MAMBA_STRATEGY_NEW = ("--mamba-radix-cache-strategy",)

# MTP defaults: a greedy chain (top-k 1) of 3 drafted tokens, verified together with the
# current one (draft tokens = steps + 1 when top-k is 1). extra_args may set any of them.
MTP_TUNING: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--speculative-num-steps",), "3"),
    (("--speculative-eagle-topk",), "1"),
    (("--speculative-num-draft-tokens",), "4"),
)

# Options pvegpu derives from the spec and the facts; extra_args may not set them, or the
# unit would say two things (argparse keeps the last) and the checks here would be wrong.
OWNED: tuple[tuple[tuple[str, ...], str], ...] = (
    (MODEL_PATH, "model_path"),
    (SERVED_MODEL_NAME, "served_model_name"),
    (HOST_OPT, "host"),
    (PORT_OPT, "port"),
    (TP_SIZE, "the pool's GPUs (TP = GPU count)"),
    (CONTEXT_LENGTH, "context_length"),
    (MEM_FRACTION, "mem_fraction_static"),
    (NUMA_NODE, "the pool's NUMA node (systemd pins the service)"),
    (SPECULATIVE_ALGORITHM, "mtp = true"),
)

# Owned options whose value pvegpu decides from the facts, never from the spec: an old
# unit's value for them is replaced by the decision, not dropped.
DERIVED: tuple[tuple[tuple[str, ...], str], ...] = (
    (TP_SIZE, "TP is the pool's GPU count"),
    (NUMA_NODE, "systemd pins the service to the pool's NUMA node"),
)

# Every spelling SGLang has used for one option, across versions: an old unit's spelling
# of an option the version's table no longer knows by that name.
RENAMED: tuple[tuple[str, ...], ...] = (
    MAMBA_STRATEGY_NEW + MAMBA_STRATEGY_OLD,
    *(spellings for spellings, _ in OWNED),
    *(spellings for spellings, _ in MTP_TUNING),
)


def option_table(checks: Checks) -> OptionTable | None:
    """The option table of the spec's SGLang version; None (with a problem) if it has none."""
    if checks.spec.engine != "sglang":
        checks.problem(
            "serving-engine-unknown",
            f"engine {checks.spec.engine!r}: pvegpu renders SGLang servers only",
            'set engine = "sglang"',
        )
        return None
    try:
        return load_table(checks.spec.version)
    except RenderError as err:
        checks.render_problems.extend(
            attrs.evolve(p, subject=f"{checks.where}.version") for p in err.problems
        )
        return None


def extra_args(checks: Checks, table: OptionTable | None) -> ParsedCommandLine | None:
    """The spec's extra_args as `table` reads them; one setting an OWNED option is a problem."""
    if table is None:
        return None
    subject = f"{checks.where}.extra_args"
    parsed = table.parse(checks.spec.extra_args, subject=subject, complete=False)
    checks.render_problems.extend(parsed.problems)
    for spellings, owner in OWNED:
        option = parsed.of(table.find(*spellings))
        if option is not None:
            checks.problem(
                "serving-extra-arg-owned",
                f"`{option.written}` is rendered from {owner}; extra_args may not set it",
                f"remove `{' '.join(option.tokens)}` from extra_args"
                + ("" if " " in owner else f" and set {owner} in the spec"),
                subject=subject,
            )
    return parsed


def launch_options(
    checks: Checks,
    table: OptionTable,
    model: ModelConfig | None,
    tp: int,
    p2p: P2PDecision,
    extra: ParsedCommandLine | None,
) -> tuple[tuple[str, ...], ...]:
    """The launch_server options, one tuple per ExecStart line, extra_args last."""
    spec = checks.spec
    options: list[tuple[str, ...]] = []

    def add(spellings: tuple[str, ...], *values: str) -> None:
        found = table.find(*spellings)
        # Not in this version: written as pvegpu knows it, so the table check of the
        # whole line reports it with the version's own suggestions.
        options.append((found.canonical if found else spellings[0], *values))

    add(MODEL_PATH, spec.model_path)
    if spec.served_model_name is not None:
        add(SERVED_MODEL_NAME, spec.served_model_name)
    add(HOST_OPT, spec.host)
    add(PORT_OPT, str(spec.port))
    add(TP_SIZE, str(tp))
    if spec.context_length is not None:
        add(CONTEXT_LENGTH, str(spec.context_length))
    if spec.mem_fraction_static is not None:
        add(MEM_FRACTION, repr(spec.mem_fraction_static))
    if not p2p.enabled:
        # Custom all-reduce does its own P2P outside NCCL: off whenever P2P is.
        add(DISABLE_CUSTOM_ALL_REDUCE)
    if spec.mtp:
        add(SPECULATIVE_ALGORITHM, "NEXTN")
        for spellings, value in MTP_TUNING:
            if extra is None or extra.of(table.find(*spellings)) is None:
                add(spellings, value)
        if model is not None and model.is_hybrid:
            add(_mamba_strategy(spec.version), "extra_buffer")
    if extra is not None:
        options.extend(o.tokens for o in extra.options)
    return tuple(options)


def _mamba_strategy(version: str) -> tuple[str, ...]:
    """The mamba cache strategy option of this version (renamed in 0.5.14)."""
    return MAMBA_STRATEGY_OLD if version_key(version) < (0, 5, 14) else MAMBA_STRATEGY_NEW
