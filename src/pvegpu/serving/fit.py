"""Does the model fit the pool: its config.json against TP, its weights against GPU memory."""

from __future__ import annotations

import posixpath

from pvegpu.diagnostic import Severity
from pvegpu.errors import PlanError
from pvegpu.model.checkpoint import INDEX, checkpoints
from pvegpu.model.decision import MemoryFit
from pvegpu.model.model_config import (
    ModelConfig,
    kv_bytes_per_token,
    problem_tp,
    tp_divides,
    valid_tp_sizes,
)
from pvegpu.serving.checks import Checks
from pvegpu.serving.pool_gpus import pool_models, smallest
from pvegpu.vendors import ComputeRuntime

MIB = 1024**2
GIB = 1024**3

DEFAULT_MEM_FRACTION = 0.88
"""mem_fraction_static of the fit estimate when the spec sets none. Not rendered: SGLang
then computes its own from GPU memory and TP, by rules that change between versions, so
the finding names the value used and the spec can pin it."""


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def checked_model(checks: Checks, tp: int) -> ModelConfig | None:
    """The model's config.json, checked against TP, MTP and the context length."""
    spec = checks.spec
    if spec.model_config is None:
        return None
    path = checks.path("model_config", spec.model_config)
    if path is None:
        return None
    try:
        model = checkpoints(checks.facts).config(path)
    except PlanError as err:
        checks.add(err.problems)
        return None
    if model is None:
        checks.problem(
            "model-config-missing",
            f"{path} was not read from the host: no such file under the root",
            "check model_config (relative to the root, host view of the model directory)",
            subject=path,
        )
        return None
    if not tp_divides(model, tp):
        checks.add([problem_tp(model, tp, checks.where)])
    if spec.mtp:
        if model.mtp_layers == 0:
            checks.problem(
                "model-has-no-mtp-layers",
                f"{path} has no MTP (NEXTN) layers, so mtp = true cannot draft tokens",
                "set mtp = false, or serve a checkpoint with MTP layers",
            )
        elif model.mtp_layers is None:
            checks.finding(
                Severity.WARNING,
                "serving-mtp-layers-unknown",
                f"{path} does not say whether it has MTP layers (no mtp_num_hidden_layers "
                "or num_nextn_predict_layers); the server fails at load if it has none",
            )
    ctx = spec.context_length
    if ctx is not None and model.max_position_embeddings and ctx > model.max_position_embeddings:
        checks.finding(
            Severity.WARNING,
            "serving-context-exceeds-model",
            f"context_length {ctx} exceeds max_position_embeddings "
            f"{model.max_position_embeddings} of {path}; the server refuses it unless the "
            "model's rope scaling allows more or it is told to allow it (SGLang: "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, vLLM: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)",
        )
    return model


def _gpu_memory(checks: Checks, runtime: ComputeRuntime) -> tuple[int, str] | None:
    if checks.spec.gpu_memory_bytes is not None:
        return checks.spec.gpu_memory_bytes, "spec gpu_memory_bytes"
    models = pool_models(checks.pool.gpus)
    least = smallest(models)
    if least is None or least.memory is None:
        ids = sorted(m.vendor_device for m in models if m.memory is None)
        checks.problem(
            "gpu-memory-unknown",
            f"pvegpu does not know the memory of {', '.join(ids)}, so it cannot check "
            "that the model fits",
            f"set gpu_memory_bytes ({runtime.memory_total})",
        )
        return None
    # Every GPU holds the same share, so the one with the least memory is the bound
    # (serving/pool_gpus.py); a pool of one model has just that one.
    source = least.label if len(models) == 1 else f"{least.label}, the pool's smallest GPU"
    return least.memory, source


def _checkpoint(checks: Checks, model_dir: str) -> tuple[int, str] | None:
    if checks.spec.checkpoint_bytes is not None:
        return checks.spec.checkpoint_bytes, "spec checkpoint_bytes"
    try:
        found = checkpoints(checks.facts).weights(model_dir)
    except PlanError as err:
        checks.add(err.problems)
        return None
    if found is None:
        checks.problem(
            "checkpoint-size-unknown",
            f"no {INDEX} and no *.safetensors in {model_dir}",
            "set checkpoint_bytes (total size of the weights) in the serving spec",
        )
    return found


def memory_fit(
    checks: Checks,
    runtime: ComputeRuntime,
    model: ModelConfig,
    tp: int,
    kv_bits: int | None,
    *,
    default_fraction: float | None = None,
) -> MemoryFit | None:
    """The per-GPU memory estimate at TP=tp, with its findings; None if it cannot be made.

    `default_fraction`: the engine's own default of the memory fraction (vLLM's
    --gpu-memory-utilization 0.9), used when the spec sets none.
    """
    memory = _gpu_memory(checks, runtime)
    checkpoint = _checkpoint(checks, posixpath.dirname(model.path))
    if memory is None or checkpoint is None:
        return None
    gpu_memory, memory_source = memory
    total, _ = checkpoint
    spec = checks.spec
    fraction = spec.mem_fraction_static or (default_fraction or DEFAULT_MEM_FRACTION)
    fraction_source = (
        "spec"
        if spec.mem_fraction_static
        else f"{checks.engine_label}'s default"
        if default_fraction
        else "pvegpu's estimate default"
    )
    weights = -(-total // tp)
    if weights > gpu_memory:
        fitting = [t for t in valid_tp_sizes(model) if -(-total // t) < gpu_memory]
        checks.problem(
            "model-does-not-fit",
            f"the weights ({_gib(total)}, {model.path}) need {_gib(weights)} per GPU at "
            f"TP={tp}, more than the {_gib(gpu_memory)} of each GPU ({memory_source})",
            f"use a pool of at least {fitting[0]} GPUs"
            if fitting
            else "serve a smaller or quantized checkpoint",
        )
        return None
    budget = int(gpu_memory * fraction) - weights
    context = spec.context_length or model.max_position_embeddings
    per_token = None if model.mla else kv_bytes_per_token(model, tp, kv_bits)
    tokens = None if per_token is None else max(0, budget) // per_token
    fit = MemoryFit(
        gpu_memory_bytes=gpu_memory,
        gpu_memory_source=memory_source,
        mem_fraction_static=fraction,
        mem_fraction_source=fraction_source,
        checkpoint_bytes=total,
        weights_per_gpu=weights,
        budget_bytes=budget,
        kv_bytes_per_token=per_token,
        kv_tokens=tokens,
        context_length=context,
    )
    head = (
        f"TP={tp}: weights {_gib(weights)} per GPU of {_gib(gpu_memory)}; at "
        f"mem_fraction_static {fraction} ({fraction_source}) {_gib(budget)} left"
    )
    if budget <= 0:
        checks.finding(
            Severity.WARNING,
            "serving-no-kv-budget",
            f"{head}: no room for a KV cache; raise mem_fraction_static or add GPUs",
        )
    elif per_token is None or tokens is None:
        checks.finding(
            Severity.INFO,
            "serving-memory",
            f"{head}; {model.path} uses latent attention (MLA), so pvegpu does not "
            "estimate its KV cache",
        )
    else:
        checks.finding(
            Severity.INFO,
            "serving-memory",
            f"{head} for the KV cache: {per_token} bytes per token "
            f"({model.full_attention_layers} KV layers) -> at most {tokens:,} tokens "
            f"(an upper bound: {checks.engine_label} also reserves activations, CUDA "
            "graphs and, for hybrid models, the recurrent state)",
        )
        if context is not None and tokens < context:
            checks.finding(
                Severity.WARNING,
                "serving-kv-below-context",
                f"KV cache for at most {tokens:,} tokens is less than one full context "
                f"of {context:,}: long requests will be refused or preempted",
            )
    return fit
