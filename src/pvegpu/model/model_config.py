"""A model's config.json, read for what tensor parallelism and the KV cache depend on.

Numbers come from the model's own files, never from a per-model table: attention heads,
KV heads, head sizes, how many layers hold a KV cache (hybrid models such as Qwen3.5 mix
linear-attention layers, which keep a fixed per-request state, with full-attention ones),
the dtype, and the checkpoint size. Everything here is pure: text in, values out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError
from pvegpu.jsontext import load_json
from pvegpu.values import value_class

# layer_types entries whose layers keep a per-request recurrent state instead of a KV
# cache. Any other kind (full, sliding, chunked attention) is counted as holding KV:
# for the fit estimate that over-counts rather than under-counts memory.
LINEAR_LAYER_TYPES = frozenset({"linear_attention", "mamba", "mamba2", "gated_delta_net"})

# Bits per element by config dtype name. A config without a dtype is loaded as 16-bit by
# SGLang (bf16 or fp16 "auto"), so 16 is the right size for either.
DTYPE_BITS = {
    "float32": 32,
    "float": 32,
    "bfloat16": 16,
    "float16": 16,
    "half": 16,
    "bf16": 16,
    "fp16": 16,
    "float8_e4m3fn": 8,
    "float8_e5m2": 8,
}
DEFAULT_DTYPE_BITS = 16

MAX_JSON_INTEGER = 2**53
"""The largest integer pvegpu takes from a model's JSON files: past it JSON numbers are not
exact in most readers (RFC 8259, section 6), no model geometry or checkpoint comes near
it, and it keeps every product of them (bytes per token) small enough to compute and print."""

MAX_TP_SIZE = 1024
"""The largest TP size listed as valid: a pool is GPUs of one host, and listing divisors of
a head count of 10**9 one by one would take minutes."""


@value_class
@attrs.frozen(eq=False, repr=False)
class ModelConfig:
    """The attention geometry of one model, as its config.json states it."""

    path: str
    """Where the config was read (relative to the root), for messages."""
    model_type: str | None
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim_k: int
    head_dim_v: int
    full_attention_layers: int
    """Layers that hold a KV cache."""
    linear_attention_layers: int
    linear_num_key_heads: int | None
    linear_num_value_heads: int | None
    dtype: str | None
    dtype_bits: int
    max_position_embeddings: int | None
    mtp_layers: int | None
    """Multi-token-prediction (NEXTN) layers the checkpoint carries; None: not stated."""
    mla: bool = False
    """Multi-head latent attention (kv_lora_rank): the per-head KV formula does not apply."""

    @property
    def is_hybrid(self) -> bool:
        """Linear-attention (GDN/Mamba) layers next to full attention: SGLang's mamba cache."""
        return self.linear_attention_layers > 0


def _problem(
    path: str,
    message: str,
    fix: str = "point model_config at the model's own config.json (Hugging Face layout)",
) -> PlanError:
    return PlanError([Diagnostic.error("model-config-invalid", path, message, fix)])


def _shown(value: Any) -> str:
    """A JSON value for a message. Objects and arrays by kind only: Python 3.13's JSON
    reader takes some 10,000 levels, and repr() of that much nesting can raise
    RecursionError; a long one says nothing anyway. Anything else by repr, cut short."""
    if isinstance(value, dict | list):
        return "a JSON object" if isinstance(value, dict) else "a JSON array"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


class _Lookup:
    """Keys of text_config (multimodal wrappers nest the language model there) first."""

    def __init__(self, doc: Mapping[str, Any], path: str) -> None:
        nested = doc.get("text_config")
        self._layers: tuple[Mapping[str, Any], ...] = (
            (nested, doc) if isinstance(nested, dict) else (doc,)
        )
        self._path = path

    def get(self, key: str) -> Any:
        return next((layer[key] for layer in self._layers if key in layer), None)

    def integer(self, key: str, *, required: bool = False) -> int | None:
        value = self.get(key)
        if value is None:
            if required:
                raise _problem(self._path, f"no {key}")
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _problem(self._path, f"{key} is {_shown(value)}, expected a non-negative integer")
        if value > MAX_JSON_INTEGER:
            raise _problem(self._path, f"{key} is over 2**53, more than any model has")
        return value

    def positive(self, key: str) -> int:
        value = self.integer(key, required=True)
        assert value is not None
        if value == 0:
            raise _problem(self._path, f"{key} is 0")
        return value


def _layer_counts(cfg: _Lookup, layers: int, path: str) -> tuple[int, int]:
    """(KV-holding layers, linear layers) from layer_types, else full_attention_interval."""
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise _problem(path, "layer_types is not a list of strings")
        if len(types) != layers:
            raise _problem(
                path, f"layer_types lists {len(types)} layers but num_hidden_layers is {layers}"
            )
        linear = sum(1 for t in types if t in LINEAR_LAYER_TYPES)
        if linear == layers:
            raise _no_kv_layers(path, f"layer_types names only {', '.join(sorted(set(types)))}")
        return layers - linear, linear
    interval = cfg.integer("full_attention_interval")
    if interval:
        # Qwen3-Next/Qwen3.5: layer i is full attention when (i + 1) % interval == 0.
        full = layers // interval
        if full == 0:
            raise _no_kv_layers(
                path, f"full_attention_interval {interval} exceeds num_hidden_layers {layers}"
            )
        return full, layers - full
    return layers, 0


def _no_kv_layers(path: str, why: str) -> PlanError:
    # Every layer keeps a recurrent state: there is no KV cache to size, and SGLang's
    # hybrid models need full-attention layers to place one.
    return _problem(
        path,
        f"{why}: no layer holds a KV cache, so the memory fit has nothing to size",
        "check layer_types / full_attention_interval against the model card; a model "
        "without attention layers is not one pvegpu can size a server for",
    )


def parse_model_config(text: str, *, path: str) -> ModelConfig:
    """Read a config.json; PlanError `model-config-invalid` naming the path and the key."""
    try:
        doc = load_json(text)
    except ValueError as err:
        raise _problem(path, f"not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise _problem(path, "not a JSON object")
    cfg = _Lookup(doc, path)
    layers = cfg.positive("num_hidden_layers")
    heads = cfg.positive("num_attention_heads")
    kv_heads = cfg.integer("num_key_value_heads") or heads  # absent: multi-head attention
    head_dim = cfg.integer("head_dim")
    if not head_dim:
        hidden = cfg.positive("hidden_size")
        if hidden % heads:
            raise _problem(path, f"no head_dim and hidden_size {hidden} % heads {heads} != 0")
        head_dim = hidden // heads
    head_dim_v = cfg.integer("v_head_dim") or head_dim
    full, linear = _layer_counts(cfg, layers, path)
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    if dtype is not None and not isinstance(dtype, str):
        raise _problem(path, f"torch_dtype is {_shown(dtype)}, expected a string")
    if dtype is not None and dtype not in DTYPE_BITS:
        raise _problem(path, f"torch_dtype {_shown(dtype)} is not one pvegpu knows the size of")
    model_type = cfg.get("model_type")
    mtp = cfg.integer("mtp_num_hidden_layers")
    if mtp is None:
        mtp = cfg.integer("num_nextn_predict_layers")  # DeepSeek/GLM name for the same
    return ModelConfig(
        path=path,
        model_type=model_type if isinstance(model_type, str) else None,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim_k=head_dim,
        head_dim_v=head_dim_v,
        full_attention_layers=full,
        linear_attention_layers=linear,
        linear_num_key_heads=cfg.integer("linear_num_key_heads") if linear else None,
        linear_num_value_heads=cfg.integer("linear_num_value_heads") if linear else None,
        dtype=dtype,
        dtype_bits=DTYPE_BITS[dtype] if dtype else DEFAULT_DTYPE_BITS,
        max_position_embeddings=cfg.integer("max_position_embeddings"),
        mtp_layers=mtp,
        mla=cfg.get("kv_lora_rank") is not None,
    )


def _splits(heads: int, tp: int) -> bool:
    return heads % tp == 0


def _splits_or_replicates(heads: int, tp: int) -> bool:
    # Fewer KV heads than ranks: each KV head is copied to tp / heads ranks, which needs
    # tp to be a multiple of the head count (SGLang's QKV layer replicates the same way).
    return heads % tp == 0 or tp % heads == 0


def tp_divides(model: ModelConfig, tp: int) -> bool:
    """Whether TP=`tp` gives every rank a whole share of every kind of attention head.

    Query heads and linear-attention k/v heads must split evenly; KV heads either split
    or replicate evenly. Qwen3.5 (32 q, 2 kv, 16/64 linear k/v heads) -> 1, 2, 4, 8, 16.
    """
    if tp < 1:
        return False
    linear = [h for h in (model.linear_num_key_heads, model.linear_num_value_heads) if h]
    return (
        _splits(model.num_attention_heads, tp)
        and _splits_or_replicates(model.num_key_value_heads, tp)
        and all(_splits(h, tp) for h in linear)
    )


def valid_tp_sizes(model: ModelConfig) -> tuple[int, ...]:
    """Every TP size up to MAX_TP_SIZE the model's heads allow (none exceeds the query
    head count)."""
    top = min(model.num_attention_heads, MAX_TP_SIZE)
    return tuple(t for t in range(1, top + 1) if tp_divides(model, t))


def kv_bytes_per_token(model: ModelConfig, tp: int, kv_bits: int | None = None) -> int:
    """KV cache bytes one token costs on one GPU at TP=`tp` (reference formula).

    max(1, kv_heads // tp) heads per rank (replicated heads still cost a full head),
    times (head_dim_k + head_dim_v), times the KV-holding layers, times the element size
    (`kv_bits`: the KV cache dtype when it differs from the model's).
    """
    heads_per_rank = max(1, model.num_key_value_heads // tp)
    bits = model.dtype_bits if kv_bits is None else kv_bits
    per_element_bits = heads_per_rank * (model.head_dim_k + model.head_dim_v)
    return per_element_bits * model.full_attention_layers * bits // 8


def checkpoint_bytes_from_index(text: str, *, path: str) -> int:
    """metadata.total_size of a model.safetensors.index.json (bytes of all tensors)."""
    try:
        doc = load_json(text)
        total = doc["metadata"]["total_size"]
    except (ValueError, KeyError, TypeError) as err:
        raise PlanError.one(
            "checkpoint-index-invalid",
            path,
            f"no metadata.total_size ({err.__class__.__name__}: {err})",
            "set checkpoint_bytes in the serving spec",
        ) from None
    # json.loads reads NaN, Infinity and 1e400 (as inf) as floats: none is a size.
    number = not isinstance(total, bool) and isinstance(total, int | float)
    if not number or not math.isfinite(total) or not 0 < total <= MAX_JSON_INTEGER:
        raise PlanError.one(
            "checkpoint-index-invalid",
            path,
            f"metadata.total_size is {_shown(total)}, not a number of bytes (1 to 2**53)",
            "set checkpoint_bytes in the serving spec",
        )
    return int(total)


def checkpoint_bytes_from_shards(shards: Iterable[tuple[str, int]]) -> int | None:
    """Sum of the `*.safetensors` file sizes; None when there are none."""
    sizes = [size for name, size in shards if name.endswith(".safetensors")]
    return sum(sizes) if sizes else None


def problem_tp(model: ModelConfig, tp: int, subject: str) -> Diagnostic:
    """The refusal for a TP size the heads do not allow, with the sizes that work."""
    parts = [f"{model.num_attention_heads} attention heads", f"{model.num_key_value_heads} KV"]
    if model.linear_num_key_heads or model.linear_num_value_heads:
        parts.append(
            f"{model.linear_num_key_heads}/{model.linear_num_value_heads} linear k/v heads"
        )
    valid = ", ".join(str(t) for t in valid_tp_sizes(model))
    return Diagnostic.error(
        "tp-does-not-divide-heads",
        subject,
        f"TP={tp} (the pool's GPU count) does not divide the heads in {model.path} "
        f"({', '.join(parts)}); valid TP sizes: {valid}",
        f"give the pool a GPU count in {{{valid}}}",
    )
