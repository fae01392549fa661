from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bundled import spec_path
from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.engines import installed_files
from pvegpu.engines.common.drops import DroppedSetting
from pvegpu.engines.common.releases import Versions
from pvegpu.engines.sglang import versions
from pvegpu.engines.sglang.decision import SglangServing
from pvegpu.engines.sglang.drops import compare_units, launch_options
from pvegpu.engines.sglang.options import load_table
from pvegpu.engines.sglang.unit import unit_content
from pvegpu.engines.sglang.versions import EnvironmentRule, When
from pvegpu.errors import PlanError, PvegpuError, SpecError
from pvegpu.hardware import GPU_MEMORY
from pvegpu.host.serving_files import read_serving_files, with_serving_files
from pvegpu.model.decision import P2PSource
from pvegpu.model.facts import ConfigFile, FileStat, IommuGroupType
from pvegpu.model.model_config import (
    ModelConfig,
    checkpoint_bytes_from_index,
    checkpoint_bytes_from_shards,
    kv_bytes_per_token,
    parse_model_config,
    tp_divides,
    valid_tp_sizes,
)
from pvegpu.model.plan import Plan, Pool
from pvegpu.model.schema import LxcSpec, P2PSetting, PoolSpec, Spec
from pvegpu.planning.decide import decided_servings
from pvegpu.serving.container import container_driver_problems, container_driver_state
from pvegpu.serving.unitfile import (
    environment_pairs,
    exec_words,
    parse_unit,
    unit_words,
)
from pvegpu.serving.visible import visible_indices
from pvegpu.spec.load import parse_spec
from strategies_serving import (
    HOST_DRIVER,
    MODEL_DIR,
    QWEN_CHECKPOINT,
    ROOTFS,
    gpu,
    host,
    index_json,
    kpro6_files,
    kpro6_gpus,
    kpro6_plan,
    llama_config,
    lxc_pool,
    model_geometries,
    plan_of,
    pools_on_hosts,
    qwen35_config,
    qwen_serving,
)

QWEN_PATH = f"{MODEL_DIR}/config.json"
REPO = Path(__file__).resolve().parent.parent
# The unit LXC 129 runs on the kpro6 fixture host: hand-tuned, TP=8, before the split.
KPRO6_UNIT = (
    REPO / "fixtures/sysfs/kpro6" / ROOTFS / "etc/systemd/system/sglang-qwen.service"
).read_text(encoding="utf-8")


def qwen() -> ModelConfig:
    return parse_model_config(qwen35_config(), path=QWEN_PATH)


def llama() -> ModelConfig:
    return parse_model_config(llama_config(), path="models/llama/config.json")


def only(plan: Plan) -> SglangServing:
    """The one server plan() decides for `plan` (undecided, as the test helpers make it)."""
    (serving,) = (p.serving for p in decided_servings(plan).pools if p.serving is not None)
    assert isinstance(serving, SglangServing)
    return serving


def refused(plan: Plan) -> PvegpuError:
    with pytest.raises(PvegpuError) as err:
        decided_servings(plan)
    return err.value


def codes_of(err: PvegpuError) -> list[str]:
    return [p.code for p in err.problems]


def findings_of(plan: Plan) -> tuple[Diagnostic, ...]:
    """What deciding the servers adds to the plan's findings."""
    return decided_servings(plan).findings[len(plan.findings) :]


def finding_codes(plan: Plan) -> list[str]:
    return [f.code for f in findings_of(plan)]


def option(serving: SglangServing, name: str) -> tuple[str, ...] | None:
    return next((o[1:] for o in serving.options if o[0] == name), None)


def env(serving: SglangServing) -> dict[str, str]:
    return dict(serving.environment)


# ------------------------------------------------------------------ model configs


def test_qwen35_geometry_from_nested_text_config() -> None:
    """Qwen3.5's numbers come from text_config; 12 of 48 layers hold KV, 36 are linear."""
    model = qwen()
    assert (model.num_attention_heads, model.num_key_value_heads) == (32, 2)
    assert (model.head_dim_k, model.head_dim_v) == (256, 256)
    assert (model.full_attention_layers, model.linear_attention_layers) == (12, 36)
    assert (model.linear_num_key_heads, model.linear_num_value_heads) == (16, 64)
    assert model.is_hybrid
    assert model.mtp_layers == 1
    assert (model.dtype, model.dtype_bits) == ("bfloat16", 16)
    assert model.max_position_embeddings == 262144


def test_layer_counts_from_interval_alone() -> None:
    """Without layer_types, full_attention_interval 4 of 48 layers gives 12 full layers."""
    doc = json.loads(qwen35_config())
    del doc["text_config"]["layer_types"]
    model = parse_model_config(json.dumps(doc), path="c.json")
    assert (model.full_attention_layers, model.linear_attention_layers) == (12, 36)


def test_layer_types_win_over_interval() -> None:
    """layer_types is what the model runs; a stale interval does not override it."""
    doc = json.loads(qwen35_config())
    doc["text_config"]["full_attention_interval"] = 2
    model = parse_model_config(json.dumps(doc), path="c.json")
    assert model.full_attention_layers == 12


def test_dense_model_all_layers_full_and_head_dim_from_hidden() -> None:
    """A Llama-style config: every layer holds KV, head_dim = hidden_size / heads."""
    model = llama()
    assert (model.full_attention_layers, model.linear_attention_layers) == (32, 0)
    assert not model.is_hybrid
    assert model.head_dim_k == 4096 // 32
    assert model.mtp_layers is None


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"num_attention_heads": None}, "num_attention_heads"),
        ({"layer_types": ["full_attention"]}, "layer_types lists 1 layers"),
        ({"num_key_value_heads": -2}, "num_key_value_heads"),
        ({"torch_dtype": "int3"}, "int3"),
    ],
)
def test_invalid_model_config_names_path_and_key(change: dict[str, Any], needle: str) -> None:
    """A config.json missing or garbling a key pvegpu needs is refused, naming both."""
    doc = json.loads(qwen35_config())
    for key, value in change.items():
        if value is None:
            del doc["text_config"][key]
        elif key == "torch_dtype":
            doc[key] = value
        else:
            doc["text_config"][key] = value
    with pytest.raises(PlanError) as err:
        parse_model_config(json.dumps(doc), path=QWEN_PATH)
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("model-config-invalid", QWEN_PATH)
    assert needle in problem.message


def test_qwen35_valid_tp_sizes_match_the_reference() -> None:
    """32 q / 2 kv / 16-64 linear heads: TP 1, 2, 4, 8, 16 (reference), not 32."""
    assert valid_tp_sizes(qwen()) == (1, 2, 4, 8, 16)


def test_llama_valid_tp_sizes() -> None:
    """32 q / 8 kv heads: every power of two up to 32 (KV heads replicate past 8)."""
    assert valid_tp_sizes(llama()) == (1, 2, 4, 8, 16, 32)


def geometry_config(geometry: dict[str, int]) -> ModelConfig:
    linear = "linear_num_key_heads" in geometry
    return ModelConfig(
        path="c.json",
        model_type=None,
        num_hidden_layers=8,
        num_attention_heads=geometry["num_attention_heads"],
        num_key_value_heads=geometry["num_key_value_heads"],
        head_dim_k=128,
        head_dim_v=128,
        full_attention_layers=2 if linear else 8,
        linear_attention_layers=6 if linear else 0,
        linear_num_key_heads=geometry.get("linear_num_key_heads"),
        linear_num_value_heads=geometry.get("linear_num_value_heads"),
        dtype="bfloat16",
        dtype_bits=16,
        max_position_embeddings=None,
        mtp_layers=None,
    )


def kv_layout_is_even(heads: int, kv: int, tp: int) -> bool:
    """Shard query heads over ranks and see which KV heads each rank needs (GQA groups).

    Even: the ranks' KV sets are disjoint and equal in size (split), or every rank needs
    exactly one KV head and every KV head is needed by the same number of ranks (replica).
    """
    per_rank = heads // tp
    need = [{q * kv // heads for q in range(r * per_rank, (r + 1) * per_rank)} for r in range(tp)]
    disjoint = all(a.isdisjoint(b) for i, a in enumerate(need) for b in need[i + 1 :])
    if disjoint and len({len(s) for s in need}) == 1:
        return True
    users = [sum(1 for s in need if k in s) for k in range(kv)]
    return all(len(s) == 1 for s in need) and len(set(users)) == 1


@given(model_geometries(), st.integers(1, 256))
def test_tp_rule_equals_even_sharding_simulation(geometry: dict[str, int], tp: int) -> None:
    """TP is valid iff query and linear heads split evenly and the KV layout is even."""
    model = geometry_config(geometry)
    heads, kv = model.num_attention_heads, model.num_key_value_heads
    linear = [h for h in (model.linear_num_key_heads, model.linear_num_value_heads) if h]
    expected = (
        heads % tp == 0 and all(h % tp == 0 for h in linear) and kv_layout_is_even(heads, kv, tp)
    )
    assert tp_divides(model, tp) is expected


@given(model_geometries())
def test_tp_one_and_one_head_per_rank_always_work(geometry: dict[str, int]) -> None:
    """TP=1 always works; without linear heads so does one query head per rank.

    (Valid sizes are not closed under divisors: 6 q / 2 kv heads allow TP=6, not TP=3.)
    """
    model = geometry_config(geometry)
    sizes = valid_tp_sizes(model)
    assert sizes[0] == 1
    assert max(sizes) <= model.num_attention_heads
    if not model.is_hybrid:
        assert sizes[-1] == model.num_attention_heads


def test_six_heads_two_kv_allow_tp6_not_tp3() -> None:
    """TP=3 would give one rank query heads of both KV groups; TP=6 replicates evenly."""
    model = geometry_config({"num_attention_heads": 6, "num_key_value_heads": 2})
    assert valid_tp_sizes(model) == (1, 2, 6)


def test_kv_bytes_per_token_reference_formula() -> None:
    """max(1, kv // tp) x (dk + dv) x KV layers x bytes: Qwen3.5 TP=4 12 KiB, Llama 32 KiB."""
    assert kv_bytes_per_token(qwen(), 4) == 1 * (256 + 256) * 12 * 2
    assert kv_bytes_per_token(llama(), 4) == 2 * (128 + 128) * 32 * 2
    assert kv_bytes_per_token(llama(), 16) == 1 * (128 + 128) * 32 * 2
    assert kv_bytes_per_token(llama(), 4, kv_bits=8) == 2 * (128 + 128) * 32


def test_checkpoint_size_from_index_and_from_shards() -> None:
    """metadata.total_size wins; without an index the *.safetensors sizes are summed."""
    assert checkpoint_bytes_from_index(index_json(QWEN_CHECKPOINT), path="i") == QWEN_CHECKPOINT
    shards = [("model-00001.safetensors", 5), ("model-00002.safetensors", 7), ("README.md", 9)]
    assert checkpoint_bytes_from_shards(shards) == 12
    assert checkpoint_bytes_from_shards([("config.json", 1)]) is None
    with pytest.raises(PlanError) as err:
        checkpoint_bytes_from_index('{"weight_map": {}}', path="i")
    assert err.value.problems[0].code == "checkpoint-index-invalid"


# ------------------------------------------------------------------ kpro6 serving


def test_kpro6_pool_serving_decisions() -> None:
    """LXC 129 on kpro6: TP=4, CUDA 0-3, P2P off (SEV-SNP), pinned to node 0, old unit base."""
    serving = only(kpro6_plan())
    assert serving.tp_size == 4
    assert serving.visible_devices == (0, 1, 2, 3)
    assert not serving.p2p.enabled
    assert serving.p2p.source is P2PSource.FACTS
    assert "SEV-SNP" in serving.p2p.reason and "DMA-FQ" in serving.p2p.reason
    assert serving.numa is not None and serving.numa.node == 0
    assert str(serving.numa.cpus) == "0-31,64-95"
    assert serving.base is not None
    assert serving.base.path == f"{ROOTFS}/etc/systemd/system/sglang-qwen.service"
    assert "--tp 8" in serving.base.content
    assert env(serving)["NCCL_P2P_DISABLE"] == "1"
    assert option(serving, "--disable-custom-all-reduce") == ()
    assert "NCCL_SHM_DISABLE" not in env(serving)
    assert option(serving, "--tp-size") == ("4",)


def test_kpro6_memory_fit_follows_the_reference_formula() -> None:
    """57 GiB of weights per GPU at TP=4; KV tokens = (mem x fraction - weights) / 12288."""
    fit = only(kpro6_plan()).fit
    assert fit is not None
    memory = GPU_MEMORY["10de:2bb5"][0]
    assert fit.gpu_memory_bytes == memory == 97887 * 1024**2
    assert fit.weights_per_gpu == QWEN_CHECKPOINT // 4
    assert round(fit.weights_per_gpu / 1024**3) == 57
    assert fit.budget_bytes == int(memory * 0.85) - QWEN_CHECKPOINT // 4
    assert fit.kv_bytes_per_token == 12288
    assert fit.kv_tokens == fit.budget_bytes // 12288
    assert fit.kv_tokens > 471_474  # upper bound above what the seed's SGLang reported


def test_default_mem_fraction_is_used_for_the_estimate_only() -> None:
    """No mem_fraction_static: estimate with 0.88, render no --mem-fraction-static."""
    serving = only(kpro6_plan(qwen_serving(mem_fraction_static=None)))
    assert serving.fit is not None and serving.fit.mem_fraction_static == 0.88
    assert option(serving, "--mem-fraction-static") is None


@given(pools_on_hosts())
def test_tp_is_the_pool_gpu_count_by_construction(case: tuple[Plan, Pool]) -> None:
    """For any pool, tp_size == len(pool.gpus) and the rendered TP flag says the same."""
    plan, pool = case
    serving = only(plan)
    assert serving.tp_size == len(pool.gpus)
    tp = [o for o in serving.options if o[0] in ("--tp-size", "--tensor-parallel-size")]
    assert tp == [(tp[0][0], str(len(pool.gpus)))]


@given(pools_on_hosts())
def test_cuda_indices_are_pci_positions_in_the_container(case: tuple[Plan, Pool]) -> None:
    """CUDA_VISIBLE_DEVICES points at exactly the pool's GPUs among the container's GPUs."""
    plan, pool = case
    serving = only(plan)
    container = sorted(g.address for p in plan.pools for g in p.gpus)
    picked = [container[i] for i in serving.visible_devices]
    assert picked == [g.address for g in pool.gpus]
    assert env(serving)["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, serving.visible_devices))


def test_second_pool_in_same_container_shifts_indices() -> None:
    """Two pools feeding LXC 129: the serving pool's GPUs are 1 and 3 in PCI order."""
    gpus = kpro6_gpus()
    facts = host(gpus, sev_snp=False, nvidia=None)
    spec = qwen_serving(model_config=None, mtp=False, container_rootfs=None)
    serving_pool = lxc_pool((gpus[1], gpus[3]), spec)
    other = lxc_pool((gpus[0], gpus[2]), None, name="other")
    serving = only(plan_of(facts, serving_pool, other))
    assert serving.visible_devices == (1, 3)
    assert visible_indices(gpus[:4], (gpus[3], gpus[1])) == (1, 3)


def test_direct_construction_is_refused() -> None:
    """SglangServing cannot be built around plan() (so TP cannot be set by hand)."""
    serving = only(kpro6_plan())
    with pytest.raises(TypeError, match="decide_serving"):
        attrs.evolve(serving, _key=object())
    with pytest.raises(ValueError, match="tp_size 8"):
        attrs.evolve(serving, tp_size=8)


def test_tp3_on_a_32_head_model_is_refused() -> None:
    """Three GPUs cannot split 32 heads: refused, naming config.json and the valid sizes."""
    gpus = kpro6_gpus()[:3]
    files = (ConfigFile("models/llama/config.json", llama_config()),)
    facts = host(gpus, files=files, stats=())
    spec = qwen_serving(
        model_config="models/llama/config.json",
        container_rootfs=None,
        mtp=False,
        checkpoint_bytes=16 * 10**9,
    )
    err = refused(plan_of(facts, lxc_pool(gpus, spec)))
    assert isinstance(err, PlanError)
    (problem,) = err.problems
    assert problem.code == "tp-does-not-divide-heads"
    assert "models/llama/config.json" in problem.message
    assert "1, 2, 4, 8, 16, 32" in problem.message
    assert "TP=3" in problem.message


def test_model_too_big_for_two_gpus() -> None:
    """Qwen3.5-122B BF16 at TP=2 needs 114 GiB per 96 GB card: refused, fix says 4 GPUs."""
    gpus = kpro6_gpus()[:2]
    files, stats = kpro6_files()
    err = refused(plan_of(host(gpus, files=files, stats=stats), lxc_pool(gpus, qwen_serving())))
    assert codes_of(err) == ["model-does-not-fit"]
    assert "at least 4 GPUs" in err.problems[0].fix


def test_unknown_gpu_memory_asks_for_it() -> None:
    """A card pvegpu has no size for: refuse to guess, ask for gpu_memory_bytes."""
    gpus = tuple(gpu(b, 0, minor=i, device=0x1B06, group=i) for i, b in enumerate((1, 2, 3, 4)))
    files, stats = kpro6_files()
    plan = plan_of(host(gpus, files=files, stats=stats), lxc_pool(gpus, qwen_serving()))
    err = refused(plan)
    assert codes_of(err) == ["gpu-memory-unknown"]
    assert "gpu_memory_bytes" in err.problems[0].fix
    spec = qwen_serving(gpu_memory_bytes=80 * 1024**3)
    plan = plan_of(host(gpus, files=files, stats=stats), lxc_pool(gpus, spec))
    assert only(plan).fit is not None


def test_kv_cache_below_context_is_a_warning() -> None:
    """A budget for fewer tokens than one context: the plan holds, with a warning."""
    plan = kpro6_plan(qwen_serving(gpu_memory_bytes=62 * 10**9, mem_fraction_static=0.99))
    assert "serving-kv-below-context" in finding_codes(plan)


def test_no_kv_budget_is_a_warning() -> None:
    """Weights fit but mem_fraction_static leaves nothing for KV: a warning, not an error."""
    plan = kpro6_plan(qwen_serving(mem_fraction_static=0.5))
    serving = only(plan)
    assert "serving-no-kv-budget" in finding_codes(plan)
    assert serving.fit is not None and serving.fit.kv_tokens == 0


# ------------------------------------------------------------------ version matrix


def test_0_5_23_hybrid_mtp_flags_and_env() -> None:
    """0.5.23: --mamba-radix-cache-strategy, no SPEC_V2, SGLANG_AUTO_NUMA_BIND=0."""
    serving = only(kpro6_plan())
    assert option(serving, "--mamba-radix-cache-strategy") == ("extra_buffer",)
    assert option(serving, "--mamba-scheduler-strategy") is None
    assert option(serving, "--speculative-algorithm") == ("NEXTN",)
    assert option(serving, "--speculative-num-steps") == ("3",)
    assert "SGLANG_ENABLE_SPEC_V2" not in env(serving)
    assert env(serving)["SGLANG_AUTO_NUMA_BIND"] == "0"


def test_0_5_9_hybrid_mtp_flags_and_env() -> None:
    """0.5.9: --mamba-scheduler-strategy extra_buffer and SGLANG_ENABLE_SPEC_V2=1."""
    serving = only(kpro6_plan(qwen_serving(version="0.5.9")))
    assert option(serving, "--mamba-scheduler-strategy") == ("extra_buffer",)
    assert option(serving, "--tp-size") == ("4",)
    assert env(serving)["SGLANG_ENABLE_SPEC_V2"] == "1"
    assert "SGLANG_AUTO_NUMA_BIND" not in env(serving)


def test_the_version_table_drives_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row changed in the version rules table changes the unit; nothing else decides it."""
    rules = versions.RULES
    renamed_early = tuple(
        attrs.evolve(r, versions=Versions(since="0.5.9"))
        if r.option == "--mamba-radix-cache-strategy"
        else attrs.evolve(r, versions=Versions(before="0.5.9"))
        if r.option == "--mamba-scheduler-strategy"
        else attrs.evolve(r, value="7")
        if r.option == "--speculative-num-steps"
        else r
        for r in rules.options
    )
    extra_env = EnvironmentRule(When.NUMA_PINNED, "SGLANG_TEST_RULE", "on", Versions("0.5.23"), "")
    fake = attrs.evolve(rules, options=renamed_early, environment=(*rules.environment, extra_env))
    monkeypatch.setattr(versions, "RULES", fake)
    serving = only(kpro6_plan())
    assert option(serving, "--speculative-num-steps") == ("7",)
    assert env(serving)["SGLANG_TEST_RULE"] == "on"
    # 0.5.9 now gets the new spelling, which its option table does not have.
    err = refused(kpro6_plan(qwen_serving(version="0.5.9")))
    assert "sglang-option-unknown" in codes_of(err)
    assert any("--mamba-radix-cache-strategy" in p.message for p in err.problems)


def test_version_ranges_compare_releases_numerically() -> None:
    """0.5.10 is after 0.5.9; `post` releases count as their release; junk is in no range."""
    since = Versions(since="0.5.10")
    assert "0.5.9" not in since and "0.5.10.post1" in since and "0.5.23" in since
    assert "0.5.9" in Versions(before="0.5.14") and "0.5.14" not in Versions(before="0.5.14")
    assert "latest" not in since and "latest" in versions.ALL


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_mtp_on_dense_model_needs_no_mamba_flags(version: str) -> None:
    """MTP on a model without linear attention: NEXTN flags only, no mamba, no SPEC_V2."""
    config = llama_config(num_nextn_predict_layers=1)
    files = (ConfigFile("models/llama/config.json", config),)
    gpus = kpro6_gpus()[:4]
    spec = qwen_serving(
        version=version,
        model_config="models/llama/config.json",
        container_rootfs=None,
        checkpoint_bytes=16 * 10**9,
        context_length=None,
    )
    serving = only(plan_of(host(gpus, files=files), lxc_pool(gpus, spec)))
    assert option(serving, "--speculative-algorithm") == ("NEXTN",)
    names = [o[0] for o in serving.options]
    assert not any(n.startswith("--mamba") for n in names)
    assert "SGLANG_ENABLE_SPEC_V2" not in env(serving)


def test_mtp_needs_model_config() -> None:
    """mtp without model_config: pvegpu cannot tell whether mamba flags are needed."""
    err = refused(kpro6_plan(qwen_serving(model_config=None)))
    assert "mtp-needs-model-config" in codes_of(err)


def test_mtp_on_model_without_mtp_layers_is_refused() -> None:
    """mtp_num_hidden_layers 0: there is no NEXTN head to draft with."""
    err = refused(kpro6_plan(config=qwen35_config(mtp_num_hidden_layers=0)))
    assert codes_of(err) == ["model-has-no-mtp-layers"]


def test_mtp_tuning_is_overridable_by_extra_args() -> None:
    """extra_args --speculative-num-steps 5 replaces pvegpu's 3; the line has it once."""
    serving = only(kpro6_plan(qwen_serving(extra_args=("--speculative-num-steps", "5"))))
    steps = [o for o in serving.options if o[0] == "--speculative-num-steps"]
    assert steps == [("--speculative-num-steps", "5")]


@pytest.mark.parametrize(
    ("version", "args", "code"),
    [
        ("0.5.23", ("--mamba-scheduler-strategy", "extra_buffer"), "sglang-option-unknown"),
        ("0.5.23", ("--cuda-graph-max-bs", "8"), "sglang-option-ambiguous"),
        ("0.5.9", ("--mamba-radix-cache-strategy", "extra_buffer"), "sglang-option-unknown"),
        ("0.5.23", ("--kv-cache-dtype", "fp8"), "sglang-value-choice"),
    ],
)
def test_flag_missing_in_the_version_is_a_spec_error(
    version: str, args: tuple[str, ...], code: str
) -> None:
    """extra_args are checked against the version's table: what it lacks is refused as a
    spec error (exit 4), like any other value the spec gets wrong."""
    err = refused(kpro6_plan(qwen_serving(version=version, mtp=False, extra_args=args)))
    assert isinstance(err, SpecError) and err.exit_code == 4
    assert codes_of(err) == [code]
    assert err.problems[0].subject.endswith("extra_args")


def test_cuda_graph_max_bs_passes_on_0_5_9() -> None:
    """The same extra_args that are ambiguous on 0.5.23 are fine on 0.5.9."""
    plan = kpro6_plan(qwen_serving(version="0.5.9", extra_args=("--cuda-graph-max-bs", "8")))
    assert option(only(plan), "--cuda-graph-max-bs") == ("8",)


def test_unknown_version_is_refused_naming_the_shipped_ones() -> None:
    """A release with no table: SpecError naming the shipped range."""
    err = refused(kpro6_plan(qwen_serving(version="0.5.24")))
    assert isinstance(err, SpecError)
    assert codes_of(err) == ["sglang-version-unknown"]
    assert "0.5.1 to 0.5.23" in err.problems[0].message


@pytest.mark.parametrize("args", [("--tp-size", "8"), ("--tp", "8")])
def test_extra_args_cannot_set_tp(args: tuple[str, ...]) -> None:
    """The seed's leftover `--tp 8` cannot come back through extra_args."""
    err = refused(kpro6_plan(qwen_serving(extra_args=args)))
    assert isinstance(err, PlanError)
    assert "serving-extra-arg-owned" in codes_of(err)


def test_kv_cache_dtype_changes_the_estimate() -> None:
    """--kv-cache-dtype fp8_e4m3 halves the bytes per token of the BF16 model."""
    serving = only(kpro6_plan(qwen_serving(extra_args=("--kv-cache-dtype", "fp8_e4m3"))))
    assert serving.fit is not None and serving.fit.kv_bytes_per_token == 12288 // 2


def test_spec_v2_set_by_hand_on_0_5_23_is_flagged() -> None:
    """SGLANG_ENABLE_SPEC_V2 is gone in 0.5.14+: a warning says it does nothing."""
    plan = kpro6_plan(qwen_serving(environment=(("SGLANG_ENABLE_SPEC_V2", "1"),)))
    assert "serving-spec-v2-removed" in finding_codes(plan)


# ------------------------------------------------------------------ P2P, NUMA, env


def test_passthrough_host_keeps_p2p() -> None:
    """Identity IOMMU groups and no SEV-SNP: P2P on, no NCCL override, custom all-reduce on."""
    gpus = kpro6_gpus()[:4]
    facts = host(gpus, iommu_type=IommuGroupType.IDENTITY, sev_snp=False, nvidia=None)
    spec = qwen_serving(model_config=None, mtp=False, container_rootfs=None)
    serving = only(plan_of(facts, lxc_pool(gpus, spec)))
    assert serving.p2p.enabled
    assert "NCCL_P2P_DISABLE" not in env(serving)
    assert option(serving, "--disable-custom-all-reduce") is None


def test_unknown_iommu_type_is_not_trusted() -> None:
    """IOMMU on but no group type known: P2P off."""
    gpus = kpro6_gpus()[:2]
    facts = host(gpus, iommu_type=None, sev_snp=False, nvidia=None)
    spec = qwen_serving(model_config=None, mtp=False, container_rootfs=None)
    serving = only(plan_of(facts, lxc_pool(gpus, spec)))
    assert not serving.p2p.enabled and "unknown" in serving.p2p.reason


def test_p2p_override_without_reason_is_refused() -> None:
    """p2p = on against translated IOMMU groups needs p2p_reason."""
    err = refused(kpro6_plan(qwen_serving(p2p=P2PSetting.ON)))
    assert codes_of(err) == ["p2p-override-without-reason"]


def test_p2p_override_with_reason_is_exposed() -> None:
    """With a reason the override wins, is shown on the decision and warned about."""
    reason = "nccl-tests all_reduce_perf -c 1 clean on 2026-11-01 after BIOS ACS change"
    plan = kpro6_plan(qwen_serving(p2p=P2PSetting.ON, p2p_reason=reason))
    serving = only(plan)
    assert serving.p2p.enabled and serving.p2p.source is P2PSource.SPEC
    assert serving.p2p.reason == reason and not serving.p2p.facts_enabled
    assert "NCCL_P2P_DISABLE" not in env(serving)
    assert "serving-p2p-forced-on" in finding_codes(plan)


def test_p2p_setting_agreeing_with_facts_needs_no_reason() -> None:
    """p2p = off on a translating host is not an override."""
    serving = only(kpro6_plan(qwen_serving(p2p=P2PSetting.OFF)))
    assert not serving.p2p.enabled and serving.p2p.source is P2PSource.FACTS


def test_multi_numa_pool_is_refused_unless_allowed() -> None:
    """GPUs on nodes 0 and 1: refused; allow_multi_numa serves unpinned with a warning."""
    gpus = kpro6_gpus()
    pair = (gpus[0], gpus[4])
    facts = host(gpus, nvidia=None)
    spec = qwen_serving(model_config=None, mtp=False, container_rootfs=None)
    err = refused(plan_of(facts, lxc_pool(pair, spec)))
    assert codes_of(err) == ["serving-pool-spans-numa-nodes"]
    allowed = attrs.evolve(spec, allow_multi_numa=True)
    plan = plan_of(facts, lxc_pool(pair, allowed))
    serving = only(plan)
    assert serving.numa is None
    assert "serving-unpinned" in finding_codes(plan)
    assert "SGLANG_AUTO_NUMA_BIND" not in env(serving)


@pytest.mark.parametrize(
    ("environment", "code"),
    [
        ((("NCCL_SHM_DISABLE", "1"),), "serving-env-forbidden"),
        ((("NCCL_P2P_DISABLE", "0"),), "serving-env-conflict"),
        ((("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"),), "serving-env-conflict"),
        ((("BAD-NAME", "1"),), "serving-env-invalid-name"),
        ((("HF_HOME\n", "1"),), "serving-env-invalid-name"),
        ((("HF_HOME", "a\nb"),), "serving-unprintable"),
    ],
)
def test_environment_mistakes_are_refused(
    environment: tuple[tuple[str, str], ...], code: str
) -> None:
    """NCCL_SHM_DISABLE, contradicting derived values, bad names and newlines: refused."""
    assert codes_of(refused(kpro6_plan(qwen_serving(environment=environment)))) == [code]


def test_user_environment_is_appended() -> None:
    """Extra variables follow the derived ones, values untouched."""
    serving = only(kpro6_plan(qwen_serving(environment=(("HF_HOME", "/shared/$hf 100%"),))))
    assert serving.environment[-1] == ("HF_HOME", "/shared/$hf 100%")


def test_served_model_name_with_colon_is_refused() -> None:
    """`qwen3.5:122b` would be read as model:adapter."""
    err = refused(kpro6_plan(qwen_serving(served_model_name="qwen3.5:122b")))
    assert codes_of(err) == ["served-model-name-colon"]


def test_all_problems_of_all_pools_at_once() -> None:
    """Two broken pools: one PlanError listing both pools' problems."""
    gpus = kpro6_gpus()
    facts = host(gpus, nvidia=None)
    a = lxc_pool(gpus[:4], qwen_serving(model_config=None, served_model_name="a:b"), name="a")
    b = lxc_pool(
        gpus[4:], qwen_serving(model_config=None, mtp=False, port=0, unit="x"), name="b", vmid=130
    )
    err = refused(plan_of(facts, a, b))
    subjects = {p.subject for p in err.problems}
    assert {"pools[0].lxc.serving", "pools[1].lxc.serving.port"} <= subjects


# ------------------------------------------------------------------ container


def test_container_driver_state_reads_only_driver_packages() -> None:
    """Installed driver packages and libraries count; toolkit, deinstalled and libc do not."""
    _, stats = kpro6_files(container_version="565.57.01")
    files, _ = kpro6_files(container_version="565.57.01")
    status = next(f for f in files if f.path.endswith("dpkg/status")).content
    names = [Path(s.path).name for s in stats] + ["libcuda.so.1", "libc.so.6"]
    state = container_driver_state(names, status)
    assert state.libraries == (
        ("libcuda.so.565.57.01", "565.57.01"),
        ("libnvidia-ml.so.565.57.01", "565.57.01"),
    )
    assert state.packages == (
        ("libnvidia-compute-565", "565.57.01"),
        ("nvidia-utils-565", "565.57.01"),
    )


def test_container_driver_mismatch_gives_the_apt_fix() -> None:
    """565.57.01 userspace under a 590.48.01 module: refused with the exact apt line."""
    err = refused(kpro6_plan(container_version="565.57.01"))
    (problem,) = err.problems
    assert problem.code == "container-driver-mismatch"
    assert "565.57.01" in problem.message and HOST_DRIVER in problem.message
    assert "libnvidia-compute-590=590.48.01-*" in problem.fix
    assert "nvidia-utils-590=590.48.01-*" in problem.fix
    assert "apt remove libnvidia-compute-565 nvidia-utils-565" in problem.fix
    assert problem.fix.startswith("pct exec 129 -- ")


def test_container_without_nvidia_userspace_is_refused() -> None:
    """dpkg present but no libcuda.so.<v>: CUDA cannot start in the container."""
    problems = container_driver_problems(
        container_driver_state([], "Package: libc6\nStatus: install ok installed\nVersion: 2\n"),
        HOST_DRIVER,
        rootfs=ROOTFS,
        vmid=129,
    )
    assert [p.code for p in problems] == ["container-driver-missing"]


def test_rootfs_that_was_not_read_is_refused() -> None:
    """A container_rootfs with nothing in the facts is a wrong path or an unmounted subvol."""
    err = refused(kpro6_plan(qwen_serving(container_rootfs="rpool/data/subvol-999-disk-0")))
    assert codes_of(err) == ["container-rootfs-unread"]


def test_other_unit_copies_and_dropins_are_flagged() -> None:
    """A copy in /root and a drop-in: warnings naming them and the authoritative path."""
    extra = (
        ConfigFile(f"{ROOTFS}/root/sglang-qwen.service", "stale copy\n"),
        ConfigFile(f"{ROOTFS}/etc/systemd/system/sglang-qwen.service.d/tp.conf", "[Service]\n"),
    )
    by_code = {f.code: f for f in findings_of(kpro6_plan(extra=extra))}
    copies = by_code["serving-unit-copies"]
    assert copies.severity is Severity.WARNING
    assert "/root/sglang-qwen.service" in copies.message
    assert "/etc/systemd/system/sglang-qwen.service is the one systemd runs" in copies.message
    assert "tp.conf" in by_code["serving-unit-dropins"].message


def test_serving_findings_for_the_planner() -> None:
    """The planner gets the P2P decision first, then the server's own findings."""
    findings = findings_of(kpro6_plan())
    assert findings[0].code == "serving-p2p"
    assert "NCCL_P2P_DISABLE=1" in findings[0].message
    assert "serving-memory" in [f.code for f in findings]


# ------------------------------------------------------------------ reader


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_reader_collects_what_the_checks_need(tmp_path: Path) -> None:
    """Model config/index, dpkg status, libraries, the unit and its copies, from a root."""
    rootfs = tmp_path / ROOTFS
    write(tmp_path / MODEL_DIR / "config.json", qwen35_config())
    write(tmp_path / MODEL_DIR / "model.safetensors.index.json", index_json(QWEN_CHECKPOINT))
    files, stats = kpro6_files()
    for file in files:
        if file.path.startswith(ROOTFS):
            write(tmp_path / file.path, file.content)
    for stat in stats:
        write(tmp_path / stat.path, "x" * 10)
    write(rootfs / "usr/lib/x86_64-linux-gnu/libcuda.so.1", "link target stand-in")
    write(rootfs / "root/deploy/sglang-qwen.service", "copy\n")
    write(rootfs / "root/a/b/c/d/sglang-qwen.service", "too deep\n")
    (rootfs / "lib").symlink_to("usr/lib")
    write(rootfs / "usr/lib/systemd/system/sglang-qwen.service", "packaged\n")
    spec = Spec(
        node="kpro6",
        pools=(PoolSpec(name="sglang", numa_node=0, lxc=LxcSpec(129, serving=qwen_serving())),),
    )
    found = read_serving_files(tmp_path, spec, installed_files)
    paths = {f.path for f in found.files}
    assert f"{MODEL_DIR}/config.json" in paths
    assert f"{ROOTFS}/var/lib/dpkg/status" in paths
    assert f"{ROOTFS}/root/deploy/sglang-qwen.service" in paths
    assert f"{ROOTFS}/usr/lib/systemd/system/sglang-qwen.service" in paths
    assert f"{ROOTFS}/lib/systemd/system/sglang-qwen.service" not in paths  # symlinked alias
    assert f"{ROOTFS}/root/a/b/c/d/sglang-qwen.service" not in paths  # beyond the depth
    assert {s.path for s in found.stats} == {s.path for s in stats}
    gpus = kpro6_gpus()
    facts = with_serving_files(host(gpus), tmp_path, spec, installed_files)
    plan = plan_of(facts, lxc_pool(gpus[:4], qwen_serving()))
    serving = only(plan)
    assert serving.fit is not None and serving.fit.checkpoint_bytes == QWEN_CHECKPOINT
    assert "serving-unit-copies" in finding_codes(plan)


def test_reader_sums_shards_without_an_index(tmp_path: Path) -> None:
    """No index.json: the checkpoint size is the sum of the *.safetensors files."""
    write(tmp_path / "m/config.json", llama_config())
    write(tmp_path / "m/model-00001-of-00002.safetensors", "a" * 300)
    write(tmp_path / "m/model-00002-of-00002.safetensors", "b" * 200)
    serving_spec = qwen_serving(
        model_config="m/config.json",
        container_rootfs=None,
        mtp=False,
        gpu_memory_bytes=10_000,
        context_length=None,
    )
    spec = Spec(node="kpro6", pools=(PoolSpec(name="p", lxc=LxcSpec(1, serving=serving_spec)),))
    facts = with_serving_files(host(kpro6_gpus()[:4]), tmp_path, spec, installed_files)
    assert {s.size for s in facts.stats} == {300, 200}
    assert isinstance(facts.stats[0], FileStat)
    serving = only(plan_of(facts, lxc_pool(kpro6_gpus()[:4], serving_spec)))
    assert serving.fit is not None and serving.fit.checkpoint_bytes == 500


def test_two_servers_cannot_share_a_unit() -> None:
    """Two pools serving into LXC 129 under one unit name would overwrite each other."""
    gpus = kpro6_gpus()
    facts = host(gpus, sev_snp=False, nvidia=None)
    spec = qwen_serving(model_config=None, mtp=False, container_rootfs=None)
    a = lxc_pool(gpus[:2], spec, name="a")
    b = lxc_pool(gpus[2:4], attrs.evolve(spec, port=30001), name="b")
    err = refused(plan_of(facts, a, b))
    assert codes_of(err) == ["serving-unit-clash"]
    assert err.problems[0].subject == "ct:129/etc/systemd/system/sglang-qwen.service"


# ------------------------------------------------------------------ old unit


def test_unit_file_parser_joins_continuations_and_skips_comments() -> None:
    """Backslash continuations join (comment lines inside them skipped); sections kept."""
    unit = parse_unit(
        "[Unit]\nDescription=x\n# comment\n[Service]\nExecStart=/py -m sglang.launch_server \\\n"
        "    # a comment inside the continuation\n    --tp 8 \\\n    --trust-remote-code\n"
        "; another comment\nNice=5\n"
    )
    assert unit.values("Unit", "Description") == ("x",)
    (line,) = unit.values("Service", "ExecStart")
    assert launch_options(exec_words(line)) == ("--tp", "8", "--trust-remote-code")
    assert unit.values("Service", "Nice") == ("5",)


def test_unit_file_parser_empty_assignment_resets_the_list() -> None:
    """`Environment=` forgets earlier assignments, as systemd does; later names win."""
    unit = parse_unit(
        '[Service]\nEnvironment=A=1\nEnvironment=\nEnvironment="B=x y" C=2\nEnvironment=C=3\n'
    )
    assert environment_pairs(unit.values("Service", "Environment")) == (("B", "x y"), ("C", "3"))


def test_exec_words_undo_the_renderers_escaping() -> None:
    """Prefixes dropped, quotes removed, `%%`/`$$` back to `%`/`$`: the argv systemd runs."""
    words = exec_words('-/usr/bin/python3 -m sglang.launch_server --x "a b%%" $$HOME')
    assert words == ("/usr/bin/python3", "-m", "sglang.launch_server", "--x", "a b%", "$HOME")


@given(st.text(alphabet=" \t\r\n\x0b\xa0ab=-/.#%$\"'\\", max_size=16))
def test_unit_words_split_as_shlex_does(value: str) -> None:
    """The unquoted fast path and shlex agree on every value: whitespace that is not
    shlex's own (vertical tab, no-break space) stays inside a word, `#` starts none."""
    try:
        expected = tuple(shlex.split(value, posix=True))
    except ValueError:
        expected = tuple(value.split())
    assert unit_words(value) == expected


def test_kpro6_old_unit_against_the_default_spec() -> None:
    """Without carrying anything over, every hand-tuned setting of the kpro6 unit is named."""
    new = unit_content(only(kpro6_plan()))
    comparison = compare_units(KPRO6_UNIT, new, load_table("0.5.23"))
    path = "/root/ml-env/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert comparison.dropped == (
        DroppedSetting("--reasoning-parser qwen3", "serving.extra_args"),
        DroppedSetting("--trust-remote-code", "serving.extra_args"),
        DroppedSetting("CUDA_HOME=/usr/local/cuda-13.0", "serving.environment"),
        DroppedSetting(f"PATH=/usr/local/cuda-13.0/bin:{path}", "serving.environment"),
        DroppedSetting("NCCL_DEBUG=WARN", "serving.environment"),
        DroppedSetting("User=root", "serving.user"),
        DroppedSetting("WorkingDirectory=/root", "serving.working_directory"),
        DroppedSetting("LimitNOFILE=1048576", "serving.limit_nofile"),
    )
    # Intended changes, never reported as dropped: TP and the mamba option's new name.
    assert comparison.replaced == (
        ("--tp", "--tp-size"),
        ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"),
    )
    assert [item for item, _ in comparison.retired] == ["SGLANG_ENABLE_SPEC_V2=1"]


def test_carrying_everything_over_leaves_nothing_dropped() -> None:
    """extra_args, environment, user, working_directory and limit_nofile bring it all back."""
    spec = qwen_serving(
        extra_args=("--reasoning-parser", "qwen3", "--trust-remote-code"),
        environment=tuple(
            (n, v)
            for n, v in environment_pairs(parse_unit(KPRO6_UNIT).values("Service", "Environment"))
            if n != "SGLANG_ENABLE_SPEC_V2"
        ),
        user="root",
        working_directory="/root",
        limit_nofile=1048576,
    )
    new = unit_content(only(kpro6_plan(spec)))
    assert compare_units(KPRO6_UNIT, new, load_table("0.5.23")).dropped == ()


def old_unit_plan(old: str, **overrides: Any) -> Plan:
    """kpro6 serving with `old` as the container's current unit (named `old`)."""
    extra = (ConfigFile(f"{ROOTFS}/etc/systemd/system/old.service", old),)
    return kpro6_plan(qwen_serving(unit="old", **overrides), extra=extra)


def test_dropped_settings_are_one_warning_naming_each_and_the_fix() -> None:
    """One serving-drops-settings warning lists the items and where the spec carries them."""
    findings = findings_of(old_unit_plan(KPRO6_UNIT))
    (finding,) = [f for f in findings if f.code == "serving-drops-settings"]
    assert finding.severity is Severity.WARNING
    assert finding.subject == "pool sglang"
    for item in ("--reasoning-parser qwen3", "--trust-remote-code", "NCCL_DEBUG=WARN"):
        assert f"`{item}`" in finding.message
    assert "`User=root` (serving.user)" in finding.message
    assert "/etc/systemd/system/old.service" in finding.message
    assert "add them to serving.extra_args / serving.environment" in finding.message
    assert "drop them knowingly" in finding.message
    assert "--tp" not in finding.message and "SGLANG_ENABLE_SPEC_V2" not in finding.message


def test_the_seed_unit_of_the_fixtures_drops_nothing() -> None:
    """The test helpers' old unit (`--model`, `--tp 8`) only has settings pvegpu rewrites."""
    assert "serving-drops-settings" not in finding_codes(kpro6_plan())


def test_a_new_unit_is_compared_with_nothing() -> None:
    """No unit in the container: nothing to drop, no warning."""
    plan = kpro6_plan(qwen_serving(unit="sglang-new"))
    assert only(plan).base is None
    assert "serving-drops-settings" not in finding_codes(plan)


OLD_OPTIONS = """[Service]
ExecStart=/py -m sglang.launch_server --model-path /m --tp 8 \\
    --context-length 131072 --numa-node 0 0 0 0 \\
    --mamba-scheduler-strategy extra_buffer --enable-magic --kv-cache-dtype=fp8_e4m3
"""


def test_old_options_are_classified() -> None:
    """Spec-owned, derived, renamed and unknown options each get their own verdict."""
    spec = qwen_serving(context_length=None, mtp=False)
    new = unit_content(only(kpro6_plan(spec)))
    comparison = compare_units(OLD_OPTIONS, new, load_table("0.5.23"))
    assert comparison.dropped == (
        DroppedSetting("--context-length 131072", "serving.context_length"),
        DroppedSetting(
            "--mamba-scheduler-strategy extra_buffer",
            "serving.extra_args as `--mamba-radix-cache-strategy`",
        ),
        DroppedSetting("--enable-magic", "not an option of sglang 0.5.23"),
        DroppedSetting("--kv-cache-dtype=fp8_e4m3", "serving.extra_args"),
    )
    assert comparison.retired == (
        ("--numa-node 0 0 0 0", "systemd pins the service to the pool's NUMA node"),
    )
    assert comparison.replaced == (("--tp", "--tp-size"),)


def test_deprecated_old_options_name_the_replacement() -> None:
    """A deprecated option points to what its deprecation says, resolvable or not."""
    old = (
        "[Service]\nExecStart=/py -m sglang.launch_server --model-path /m "
        "--enable-dp-attention --disable-cuda-graph\n"
    )
    new = unit_content(only(kpro6_plan()))
    assert compare_units(old, new, load_table("0.5.23")).dropped == (
        DroppedSetting("--enable-dp-attention", "serving.extra_args as `--attn-dp-size <dp-size>`"),
        DroppedSetting(
            "--disable-cuda-graph",
            "deprecated in sglang 0.5.23: --cuda-graph-backend-{decode,prefill}=disabled",
        ),
    )


def test_old_environment_and_settings_are_classified() -> None:
    """Retired variables are not drops; list settings compare by name; other keys by presence."""
    old = (
        "[Unit]\nAfter=network-online.target nfs-client.target\nDescription=old\n"
        "[Service]\nType=simple\nNice=5\nEnvironmentFile=/etc/default/sglang\n"
        "Environment=NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 HF_HOME=/hf\n"
        "ExecStart=/py -m sglang.launch_server --model-path /m\n"
    )
    new = unit_content(only(kpro6_plan()))
    comparison = compare_units(old, new, load_table("0.5.23"))
    assert comparison.dropped == (
        DroppedSetting("HF_HOME=/hf", "serving.environment"),
        DroppedSetting("After=nfs-client.target", "pvegpu does not render it"),
        DroppedSetting("Nice=5", "pvegpu does not render it"),
        DroppedSetting("EnvironmentFile=/etc/default/sglang", "serving.environment_file"),
    )
    # NCCL_P2P_DISABLE=1 is kept (P2P is off on kpro6); NCCL_SHM_DISABLE is refused.
    assert [item for item, _ in comparison.retired] == ["NCCL_SHM_DISABLE=1"]


def test_old_unit_that_is_not_launch_server_is_named() -> None:
    """A wrapper script is not compared option by option; the warning says so."""
    old = "[Service]\nExecStart=/root/start-sglang.sh --big\n"
    new = unit_content(only(kpro6_plan()))
    (item,) = compare_units(old, new, load_table("0.5.23")).dropped
    assert item.text == "ExecStart=/root/start-sglang.sh --big"
    assert "not compared" in item.carry


@pytest.mark.parametrize(
    ("field", "value"),
    [("user", "bad user"), ("working_directory", "relative/dir"), ("limit_nofile", 0)],
)
def test_unit_settings_are_checked(field: str, value: object) -> None:
    """A user name with a space, a relative working directory or no files: refused."""
    err = refused(kpro6_plan(qwen_serving(**{field: value})))
    assert codes_of(err) == ["serving-invalid-value"]
    assert field in err.problems[0].message


def test_shell_variable_in_environment_is_a_warning() -> None:
    """`$PATH` in Environment= stays literal text; the spec should spell the value out."""
    shell = kpro6_plan(qwen_serving(environment=(("PATH", "/opt/cuda/bin:$PATH"),)))
    assert "serving-env-unexpanded" in finding_codes(shell)
    literal = kpro6_plan(qwen_serving(environment=(("PATH", "/opt/cuda/bin:/usr/bin"),)))
    assert "serving-env-unexpanded" not in finding_codes(literal)


def test_p2p_reason_counts_translating_groups() -> None:
    """One translating group `translates`, four `translate`: the reason's grammar follows."""
    four = only(kpro6_plan(qwen_serving(model_config=None, mtp=False)))
    assert "IOMMU groups " in four.p2p.reason and " translate GPU DMA" in four.p2p.reason
    gpus = kpro6_gpus()
    facts = host(gpus, sev_snp=False, nvidia=None)
    spec = qwen_serving(model_config=None, mtp=False, container_rootfs=None)
    single = only(plan_of(facts, lxc_pool(gpus[:1], spec)))
    assert "IOMMU group " in single.p2p.reason and " translates GPU DMA" in single.p2p.reason


_VALUE = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")),
    min_size=1,
    max_size=30,
).filter(lambda v: not v.startswith("-") and v.strip() not in ("", ";"))


@given(_VALUE, _VALUE)
def test_rendered_unit_reads_back_to_what_was_rendered(path: str, value: str) -> None:
    """Quotes, backslashes, % and $ survive render then read: the comparison sees the values."""
    # model_path is absolute (a rule of the spec); the rest of it is any text.
    model_path = f"/{path}"
    serving = only(kpro6_plan(qwen_serving(model_path=model_path, environment=(("X", value),))))
    unit = parse_unit(unit_content(serving))
    (line,) = unit.values("Service", "ExecStart")
    assert exec_words(line) == serving.argv
    assert environment_pairs(unit.values("Service", "Environment")) == serving.environment


def test_a_serving_spec_built_in_code_meets_the_loaders_rules() -> None:
    """The spec rules apply to a ServingSpec the loader never saw: one table, one verdict."""
    err = refused(kpro6_plan(qwen_serving(unit="sglang.service", python="/usr/bin/py thon")))
    assert sorted((p.code, p.subject) for p in err.problems) == [
        ("serving-invalid-python", "pools[0].lxc.serving.python"),
        ("serving-invalid-unit", "pools[0].lxc.serving.unit"),
    ]
    with pytest.raises(SpecError) as loaded:
        parse_spec(spec_path("kpro6").read_text().replace('"sglang-qwen"', '"sglang-qwen.service"'))
    assert [p.subject for p in loaded.value.problems] == ["pools[0].lxc.serving.unit"]
