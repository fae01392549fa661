"""SGLang's command line: the options pvegpu derives, by the names the version's table uses."""

from __future__ import annotations

from collections.abc import Collection

from pvegpu.engines.common import command
from pvegpu.engines.sglang import versions
from pvegpu.engines.sglang.installed import serving_release
from pvegpu.engines.sglang.option_check import ParsedCommandLine, parse_command_line
from pvegpu.engines.sglang.options import OptionTable
from pvegpu.engines.sglang.versions import When
from pvegpu.model.decision import P2PDecision
from pvegpu.serving.checks import Checks

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
SPECULATIVE_ALGORITHM = versions.RULES.spellings("speculative algorithm")

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
    *(versions.RULES.spellings(setting) for setting in versions.RULES.settings),
    *(spellings for spellings, _ in OWNED),
)

KV_CACHE_DTYPE = ("--kv-cache-dtype",)

# KV cache element size by --kv-cache-dtype, for the fit estimate.
KV_CACHE_DTYPE_BITS = {
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "mxfp8": 8,
    "bf16": 16,
    "bfloat16": 16,
    "fp4_e2m1": 4,
    "nvfp4": 4,
}


def kv_cache_bits(table: OptionTable | None, extra: ParsedCommandLine | None) -> int | None:
    """The element size extra_args' --kv-cache-dtype gives (None: the model's dtype)."""
    return command.kv_cache_bits(table, extra, KV_CACHE_DTYPE, KV_CACHE_DTYPE_BITS)


def option_table(checks: Checks, rootfs: str | None) -> tuple[str, OptionTable | None]:
    """The SGLang release the server runs and its option table (None, with a problem, if none).

    The release is the one installed in the container when that is readable, else the
    spec's (`installed.serving_release`); `rootfs` is the container's root file system
    under the host root, None when it was not read. The release is "" when none could be
    decided.
    """
    version, table = serving_release(checks, rootfs)
    return version or "", table


def extra_args(checks: Checks, table: OptionTable | None) -> ParsedCommandLine | None:
    """The spec's extra_args as `table` reads them; one setting an OWNED option is a problem."""
    if table is None:
        return None
    return command.extra_args(
        checks,
        table,
        lambda args, subject: parse_command_line(table, args, subject=subject, complete=False),
        OWNED,
    )


def launch_options(
    checks: Checks,
    table: OptionTable,
    version: str,
    holds: Collection[When],
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
    # The version rules table decides the MTP flags and their spelling for this version.
    for rule in versions.RULES.options_for(version, holds):
        spellings = versions.RULES.spellings(rule.setting)
        if rule.tunable and extra is not None and extra.of(table.find(*spellings)) is not None:
            continue  # extra_args tunes it: only its value is written
        add((rule.option,), rule.value)
    if extra is not None:
        options.extend(o.tokens for o in extra.options)
    return tuple(options)
