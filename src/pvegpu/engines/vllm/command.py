"""vLLM's command line: the words after `vllm serve`, by the names the release's table uses."""

from __future__ import annotations

from pvegpu.engines.common import command
from pvegpu.engines.vllm import versions
from pvegpu.engines.vllm.option_check import ParsedCommandLine, parse_command_line
from pvegpu.engines.vllm.options import OptionTable
from pvegpu.engines.vllm.versions import ParallelLayout
from pvegpu.model.decision import P2PDecision
from pvegpu.serving.checks import Checks

# The options pvegpu writes, by every spelling vLLM has used for them (first: the one
# pvegpu writes when the release's table has it).
MODEL = ("--model",)
SERVED_MODEL_NAME = ("--served-model-name",)
HOST_OPT = ("--host",)
PORT_OPT = ("--port",)
TP_SIZE = ("--tensor-parallel-size", "-tp")
PP_SIZE = ("--pipeline-parallel-size", "-pp")
PCP_SIZE = ("--prefill-context-parallel-size", "-pcp")
DCP_SIZE = ("--decode-context-parallel-size", "-dcp")
DP_SIZE = ("--data-parallel-size", "-dp")
DP_LOCAL = ("--data-parallel-size-local", "-dpl")
CONTEXT_LENGTH = ("--max-model-len",)
MEM_FRACTION = ("--gpu-memory-utilization",)
DISABLE_CUSTOM_ALL_REDUCE = ("--disable-custom-all-reduce",)
SPECULATIVE_CONFIG = ("--speculative-config", "-sc")
KV_CACHE_DTYPE = ("--kv-cache-dtype",)
NUMA_BIND = (("--numa-bind",), ("--numa-bind-nodes",), ("--numa-bind-cpus",))
"""0.29 on: vLLM's own binding of each GPU worker (off by default); systemd already binds
the whole service to the pool's node, and a second binding could fight it."""
_NUMA_OWNER = "the pool's NUMA node (systemd pins the service)"

OWNED: tuple[tuple[tuple[str, ...], str], ...] = (
    (MODEL, "model_path"),
    (SERVED_MODEL_NAME, "served_model_name"),
    (HOST_OPT, "host"),
    (PORT_OPT, "port"),
    (TP_SIZE, "the pool's GPUs (TP x PP = GPU count)"),
    (PP_SIZE, "pipeline_parallel_size"),
    (PCP_SIZE, "prefill_context_parallel_size"),
    (DCP_SIZE, "decode_context_parallel_size"),
    (DP_SIZE, "the pool's GPUs (one data-parallel rank per pool)"),
    (DP_LOCAL, "the pool's GPUs (one data-parallel rank per pool)"),
    (CONTEXT_LENGTH, "context_length"),
    (MEM_FRACTION, "mem_fraction_static"),
    (SPECULATIVE_CONFIG, "mtp = true"),
    *((spellings, _NUMA_OWNER) for spellings in NUMA_BIND),
)
"""Options pvegpu derives from the spec and the facts; extra_args may not set them, or the
unit would say two things (argparse keeps the last) and the checks here would be wrong."""

DERIVED: tuple[tuple[tuple[str, ...], str], ...] = (
    (TP_SIZE, "TP is the pool's GPU count over the pipeline stages"),
    (DP_SIZE, "one data-parallel rank: the pool's GPUs are TP x PP"),
    (DP_LOCAL, "one data-parallel rank: the pool's GPUs are TP x PP"),
    *((spellings, "systemd pins the service to the pool's NUMA node") for spellings in NUMA_BIND),
)
"""Owned options whose value pvegpu decides from the facts: an old unit's value for them
is replaced by the decision, not dropped."""

KV_CACHE_DTYPE_BITS = {"fp8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "fp8_inc": 8, "bfloat16": 16}
"""KV cache element size by --kv-cache-dtype, for the fit estimate (`auto`: the model's)."""


def kv_cache_bits(table: OptionTable | None, extra: ParsedCommandLine | None) -> int | None:
    """The element size extra_args' --kv-cache-dtype gives (None: the model's dtype)."""
    return command.kv_cache_bits(table, extra, KV_CACHE_DTYPE, KV_CACHE_DTYPE_BITS)


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


def serve_options(
    checks: Checks,
    table: OptionTable,
    layout: ParallelLayout,
    p2p: P2PDecision,
    mtp: str | None,
    extra: ParsedCommandLine | None,
) -> tuple[tuple[str, ...], ...]:
    """The words after `vllm serve`: the model first, then one option per ExecStart line,
    extra_args last. `mtp`: the `--speculative-config` JSON, when MTP is on."""
    spec = checks.spec
    options: list[tuple[str, ...]] = [(spec.model_path,)]

    def add(spellings: tuple[str, ...], *values: str) -> None:
        found = table.find(*spellings)
        # Not in this release: written as pvegpu knows it, so the table check of the
        # whole line reports it with the release's own suggestions.
        options.append((found.canonical if found else spellings[0], *values))

    if spec.served_model_name is not None:
        add(SERVED_MODEL_NAME, spec.served_model_name)
    add(HOST_OPT, spec.host)
    add(PORT_OPT, str(spec.port))
    add(TP_SIZE, str(layout.tp))
    if layout.pp > 1:
        add(PP_SIZE, str(layout.pp))
    if layout.pcp > 1:
        add(PCP_SIZE, str(layout.pcp))
    if layout.dcp > 1:
        add(DCP_SIZE, str(layout.dcp))
    if spec.context_length is not None:
        add(CONTEXT_LENGTH, str(spec.context_length))
    if spec.mem_fraction_static is not None:
        add(MEM_FRACTION, repr(spec.mem_fraction_static))
    if not p2p.enabled:
        # vLLM's custom all-reduce does its own P2P (CUDA IPC) outside NCCL: off with it.
        add(DISABLE_CUSTOM_ALL_REDUCE)
    if mtp is not None:
        add(SPECULATIVE_CONFIG, mtp)
    if extra is not None:
        options.extend(o.tokens for o in extra.options)
    return tuple(options)


def mtp_config(
    checks: Checks, version: str, table: OptionTable | None, model_type: str | None
) -> str | None:
    """The `--speculative-config` value MTP needs in `version`; None (with a problem when
    MTP is asked for) where the release has no MTP method for the model."""
    spec = checks.spec
    if not spec.mtp or table is None:
        return None
    rule = versions.RULES.mtp_rule(version, model_type)
    if rule is None or table.find(*SPECULATIVE_CONFIG) is None:
        kind = f"model_type {model_type!r}" if model_type else "a model without model_config"
        checks.problem(
            "vllm-mtp-unsupported",
            f"mtp = true, but vLLM {version} has no --speculative-config MTP method for "
            f"{kind} (`mtp` is the method from 0.11; 0.9-0.10 name it per model)",
            "set mtp = false, or run a vLLM release from 0.11 on (serving.version)",
            subject=f"{checks.where}.mtp",
        )
        return None
    return versions.RULES.speculative_config(rule)
