"""vLLM's server of a pool: the checks it shares with SGLang, its own, its unit, and how
the container's current unit, drop-ins and secrets are carried over."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import bundled
from pvegpu import engines
from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.engines.vllm.decision import VllmServing
from pvegpu.errors import PvegpuError, SpecError
from pvegpu.model.facts import ConfigFile
from pvegpu.model.plan import Plan
from pvegpu.model.schema import P2PSetting, ServingSpec
from pvegpu.pipeline import check_host, parse_spec, running_unit
from pvegpu.planning.decide import decided_servings
from pvegpu.rendering.serving import render_serving
from pvegpu.spec import load
from pvegpu.spec.engine_keys import engine_rule
from strategies_serving import ROOTFS, host, kpro6_files, kpro6_gpus, lxc_pool, plan_of
from test_vllm_versions import decided, kpro6_plan, vllm_serving

UNIT_PATH = f"{ROOTFS}/etc/systemd/system/vllm-qwen.service"
OLD_VLLM_UNIT = """[Unit]
Description=vLLM Qwen3.5

[Service]
Environment=CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 NCCL_DEBUG=INFO
ExecStart=/root/ml-env/bin/vllm serve /shared/models/Qwen3.5-122B-A10B \\
    -tp 8 --max-num-seqs 64 --enable-chunked-prefill
Restart=always

[Install]
WantedBy=multi-user.target
"""


def refused(plan: Plan) -> PvegpuError:
    with pytest.raises(PvegpuError) as err:
        decided_servings(plan)
    return err.value


def codes(err: PvegpuError) -> list[str]:
    return [p.code for p in err.problems]


def findings(spec: ServingSpec, **files: Any) -> tuple[Diagnostic, ...]:
    return decided_servings(kpro6_plan(spec, **files)).findings


def words(serving: VllmServing) -> list[str]:
    return [w for o in serving.options for w in o]


def test_p2p_off_under_translation_sets_both_switches() -> None:
    serving = decided(vllm_serving())
    assert ("NCCL_P2P_DISABLE", "1") in serving.environment
    assert "--disable-custom-all-reduce" in words(serving)
    (p2p,) = [f for f in findings(vllm_serving()) if f.code == "serving-p2p"]
    assert p2p.message.endswith(": NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce")


def test_p2p_on_by_the_spec_sets_neither() -> None:
    spec = vllm_serving(p2p=P2PSetting.ON, p2p_reason="nccl-tests clean")
    serving = decided(spec)
    assert "NCCL_P2P_DISABLE" not in dict(serving.environment)
    assert "--disable-custom-all-reduce" not in words(serving)


def test_visible_devices_in_pci_order_and_numa_pinning() -> None:
    serving = decided(vllm_serving())
    env = dict(serving.environment)
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert serving.numa is not None and serving.numa.node == 0
    content = engines.engine_for("vllm").unit_content(serving)  # type: ignore[union-attr]
    assert "NUMAPolicy=bind\nNUMAMask=0\n" in content


def test_tp_that_does_not_divide_the_heads_is_refused() -> None:
    gpus = kpro6_gpus()
    files, stats = kpro6_files()
    facts = host(gpus, files=files, stats=stats)
    plan = plan_of(facts, lxc_pool(gpus[:3], vllm_serving(), name="vllm"))
    assert codes(refused(plan)) == ["tp-does-not-divide-heads"]


def test_pipeline_stages_make_tp_the_gpus_over_the_stages_for_the_head_check() -> None:
    """6 GPUs: TP=6 does not divide 32 heads; 3 stages of TP=2 do."""
    gpus = kpro6_gpus()
    files, stats = kpro6_files()
    facts = host(gpus, files=files, stats=stats)
    spec = vllm_serving(allow_multi_numa=True)
    assert "tp-does-not-divide-heads" in codes(
        refused(plan_of(facts, lxc_pool(gpus[:6], spec, name="vllm")))
    )
    staged = vllm_serving(allow_multi_numa=True, pipeline_parallel_size=3)
    (pool,) = decided_servings(plan_of(facts, lxc_pool(gpus[:6], staged, name="vllm"))).pools
    assert isinstance(pool.serving, VllmServing)
    assert (pool.serving.tp_size, pool.serving.pp_size) == (2, 3)


def test_weights_that_do_not_fit_are_refused() -> None:
    err = refused(kpro6_plan(vllm_serving(gpu_memory_bytes=40 * 1024**3)))
    assert codes(err) == ["model-does-not-fit"]


def test_the_fit_uses_vllms_own_default_fraction() -> None:
    serving = decided(vllm_serving(mem_fraction_static=None))
    assert serving.fit is not None
    assert serving.fit.mem_fraction_static == 0.9
    assert serving.fit.mem_fraction_source == "vLLM's default"
    assert "--gpu-memory-utilization" not in words(serving)
    (memory,) = [f for f in findings(vllm_serving()) if f.code == "serving-memory"]
    assert "vLLM also reserves" in memory.message


def test_a_container_userspace_other_than_the_host_driver_is_refused() -> None:
    err = refused(kpro6_plan(vllm_serving(), container_version="565.57.01"))
    assert "container-driver-mismatch" in codes(err)


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        (("-tp", "8"), "serving-extra-arg-owned"),
        (("--data-parallel-size", "2"), "serving-extra-arg-owned"),
        (("--speculative-config", "{}"), "serving-extra-arg-owned"),
        (("--numa-bind",), "serving-extra-arg-owned"),
        (("--max_num_seqs", "8"), "vllm-option-alias"),
        (("--dtype", "float17"), "vllm-value-choice"),
        (("--max-num-seqs", "many"), "vllm-value-type"),
        (("--no-such-option",), "vllm-option-unknown"),
        (("--enable-chunked-pre",), "vllm-option-abbreviated"),
        # 0.33's --disable-chunked-mm-input also registers --enable-chunked-mm-input.
        (("--enable-chunked",), "vllm-option-ambiguous"),
        (("--max-num-seqs", "8", "--max-num-seqs", "9"), "vllm-option-repeated"),
        (("stray",), "vllm-argument-unexpected"),
    ],
)
def test_extra_args_are_checked_against_the_releases_table(
    extra: tuple[str, ...], code: str
) -> None:
    err = refused(kpro6_plan(vllm_serving(extra_args=extra)))
    assert code in codes(err)
    assert all(p.subject.startswith("pools[0].lxc.serving") for p in err.problems)


def test_a_spec_line_the_release_takes_renders_with_extra_args_last() -> None:
    serving = decided(vllm_serving(extra_args=("--max-num-seqs", "64", "--enable-prefix-caching")))
    assert serving.options[-2:] == (("--max-num-seqs", "64"), ("--enable-prefix-caching",))


def test_the_old_unit_is_carried_over_and_what_it_loses_is_named() -> None:
    old = ConfigFile(UNIT_PATH, OLD_VLLM_UNIT)
    found = findings(vllm_serving(), extra=(old,))
    (drops,) = [f for f in found if f.code == "serving-drops-settings"]
    assert "`--max-num-seqs 64`, `--enable-chunked-prefill` (serving.extra_args)" in drops.message
    assert "`NCCL_DEBUG=INFO` (serving.environment)" in drops.message
    assert "Restart=always" not in drops.message  # the new unit restarts on failure too
    assert "-tp 8" not in drops.message  # TP is decided from the pool, not dropped
    serving = decided(vllm_serving())
    assert serving.base is None
    carried = vllm_serving(
        extra_args=("--max-num-seqs", "64", "--enable-chunked-prefill"),
        environment=(("NCCL_DEBUG", "INFO"),),
    )
    assert not [f for f in findings(carried, extra=(old,)) if f.code == "serving-drops-settings"]


def test_secrets_of_the_old_unit_move_to_the_environment_file_by_name_only() -> None:
    text = OLD_VLLM_UNIT.replace(
        "NCCL_DEBUG=INFO", "NCCL_DEBUG=INFO HF_TOKEN=hf_secret_value"
    ).replace("--enable-chunked-prefill", "--enable-chunked-prefill --api-key sk-secret-key")
    old = ConfigFile(UNIT_PATH, text)
    plan = decided_servings(kpro6_plan(vllm_serving(), extra=(old,)))
    (moved,) = [f for f in plan.findings if f.code == "serving-secrets-moved"]
    assert "HF_TOKEN" in moved.message and "--api-key" in moved.message
    serving = plan.pools[0].serving
    assert serving is not None and serving.environment_file == "/etc/default/vllm-qwen"
    (artifact,) = render_serving(plan)
    assert "EnvironmentFile=/etc/default/vllm-qwen\n" in artifact.content
    everything = artifact.content + "".join(f.message for f in plan.findings)
    assert "hf_secret_value" not in everything and "sk-secret-key" not in everything


def test_a_dropin_that_overrides_the_gpus_is_switched_off() -> None:
    dropin = ConfigFile(
        f"{ROOTFS}/etc/systemd/system/vllm-qwen.service.d/gpus.conf",
        "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 NCCL_DEBUG=INFO\n",
    )
    plan = decided_servings(
        kpro6_plan(vllm_serving(), extra=(ConfigFile(UNIT_PATH, OLD_VLLM_UNIT), dropin))
    )
    serving = plan.pools[0].serving
    assert serving is not None
    (change,) = serving.dropins
    assert "#pvegpu# Environment=CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in change.content
    assert 'Environment="NCCL_DEBUG=INFO"' in change.content
    assert "serving-dropin-neutralized" in [f.code for f in plan.findings]


def test_the_health_check_is_vllms_health_endpoint() -> None:
    serving = decided(vllm_serving())
    assert engines.health_url(serving) == "http://127.0.0.1:8000/health"
    assert serving.engine == "vllm"


# -- the spec


SPEC = """
node = "kpro6"
[[pools]]
name = "vllm"
numa_node = 0
[pools.lxc]
vmid = 129
[pools.lxc.serving]
engine = "{engine}"
model_path = "/m"
{extra}
"""


def test_the_spec_takes_engine_vllm_and_its_pipeline_stages() -> None:
    spec = parse_spec(SPEC.format(engine="vllm", extra="pipeline_parallel_size = 2"))
    serving = spec.pools[0].lxc.serving  # type: ignore[union-attr]
    assert serving is not None
    assert (serving.engine, serving.engine_key("pipeline_parallel_size")) == ("vllm", 2)


def test_a_vllm_only_key_is_refused_for_sglang_by_name() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(SPEC.format(engine="sglang", extra="pipeline_parallel_size = 2"))
    (problem,) = err.value.problems
    assert problem.code == "spec-engine-key"
    assert problem.subject.startswith("pools[0].lxc.serving.pipeline_parallel_size")
    assert 'engine = "vllm"' in problem.fix


def test_a_vllm_only_key_in_a_spec_built_in_code_is_refused_by_sglang() -> None:
    from strategies_serving import kpro6_plan as sglang_plan
    from strategies_serving import qwen_serving

    err = refused(sglang_plan(qwen_serving(pipeline_parallel_size=2)))
    (problem,) = [p for p in err.problems if "engine" in p.message]
    # The loader's code for it, whichever engine was asked (planning/decide.py).
    assert (problem.code, problem.subject) == (
        "spec-engine-key",
        "pools[0].lxc.serving.pipeline_parallel_size",
    )
    assert problem.message.startswith("pipeline_parallel_size: pipeline_parallel_size is a key")


def test_the_spec_rule_takes_every_engine_of_the_registry() -> None:
    rule = engine_rule(engines.spec_engines())
    assert [n for n in engines.ENGINE_NAMES if rule.check(n) is not None] == []
    assert rule.check("tgi") is not None


def test_engine_keys_is_no_key_of_the_table() -> None:
    """`ServingSpec.engine_keys` is filled from the engines' keys, never set in the TOML:
    a table naming it is refused as any unknown key, listing the engines' keys."""
    with pytest.raises(SpecError) as err:
        parse_spec(SPEC.format(engine="vllm", extra="engine_keys = [1]"))
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == (
        "spec-unknown-key",
        "pools[0].lxc.serving.engine_keys",
    )
    assert problem.fix.endswith(
        ", pipeline_parallel_size, prefill_context_parallel_size, decode_context_parallel_size"
    )


def test_the_spec_layer_alone_knows_no_engine() -> None:
    """Without the registry's declarations (spec.load alone, below the engines) an
    engine's key is unknown and the engine is not judged: the planner refuses that."""
    text = SPEC.format(engine="tgi", extra="pipeline_parallel_size = 2")
    with pytest.raises(SpecError) as err:
        load.parse_spec(text)
    assert [(p.code, p.subject) for p in err.value.problems] == [
        ("spec-unknown-key", "pools[0].lxc.serving.pipeline_parallel_size"),
    ]
    assert "pipeline_parallel_size" not in err.value.problems[0].fix
    assert load.parse_spec(SPEC.format(engine="tgi", extra="")).pools[0].lxc is not None


def test_an_engine_pvegpu_has_none_of_is_refused_by_the_loader() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(SPEC.format(engine="tgi", extra=""))
    assert '"sglang" or "vllm"' in err.value.problems[0].message


# -- `pvegpu check` reads a running vLLM unit


@pytest.fixture
def kpro6_running(tmp_path: Path) -> Path:
    """kpro6 with the rendered vLLM unit installed in CT 129."""
    root = tmp_path / "root"
    shutil.copytree(bundled.fixture_root("kpro6"), root, symlinks=True)
    (artifact,) = render_serving(decided_servings(kpro6_plan(vllm_serving())))
    (root / UNIT_PATH).write_text(artifact.content)
    return root


def test_check_reads_the_running_vllm_units_tp_gpus_and_p2p(kpro6_running: Path) -> None:
    running = running_unit(check_host(kpro6_running, {129: ["vllm-qwen"]})[1], 129, "vllm-qwen")
    assert running is not None
    visible = running.variable("CUDA_VISIBLE_DEVICES")
    assert (running.tp, visible, running.p2p_disabled) == (4, "0,1,2,3", True)


def test_check_flags_a_vllm_unit_with_p2p_on_under_translation(kpro6_running: Path) -> None:
    unit = kpro6_running / UNIT_PATH
    unit.write_text(unit.read_text().replace('Environment="NCCL_P2P_DISABLE=1"\n', ""))
    found = [
        f
        for f in check_host(kpro6_running)[2]
        if f.code == "p2p-under-translation" and "vllm-qwen" in f.subject
    ]
    assert [f.severity for f in found] == [Severity.ERROR]
    assert "TP 4" in found[0].message


# ------------------------------------------------ context parallelism (PCP, DCP)


def test_prefill_context_parallel_ranks_are_gpus_of_their_own() -> None:
    """vLLM's world size is PP x TP x PCP: 4 GPUs with PCP 2 are TP 2."""
    serving = decided(vllm_serving(prefill_context_parallel_size=2, model_config=None))
    assert (serving.tp_size, serving.pp_size, serving.pcp_size) == (2, 1, 2)
    line = words(serving)
    assert line[line.index("--tensor-parallel-size") + 1] == "2"
    assert line[line.index("--prefill-context-parallel-size") + 1] == "2"
    content = engines.engine_for("vllm").unit_content(serving)  # type: ignore[union-attr]
    assert "TP=2 x PCP=2" in content


def test_prefill_context_parallel_ranks_make_tp_smaller_for_the_head_check() -> None:
    """6 GPUs: TP=6 does not divide 32 heads; 3 PCP ranks of TP=2 do."""
    gpus = kpro6_gpus()
    files, stats = kpro6_files()
    facts = host(gpus, files=files, stats=stats)
    spec = vllm_serving(allow_multi_numa=True, prefill_context_parallel_size=3)
    # TP 2 holds half the weights per GPU: more than one GPU has, which is the refusal.
    assert codes(refused(plan_of(facts, lxc_pool(gpus[:6], spec, name="vllm")))) == [
        "model-does-not-fit"
    ]


def test_each_prefill_context_parallel_rank_holds_the_whole_weights_share() -> None:
    """Qwen3.5-122B fits 4 GPUs at TP 4; as 2 PCP ranks of TP 2 each GPU holds half."""
    err = refused(kpro6_plan(vllm_serving(prefill_context_parallel_size=2)))
    assert codes(err) == ["model-does-not-fit"]
    assert "at TP=2" in err.problems[0].message


def test_prefill_context_parallel_that_does_not_divide_the_gpus_is_refused() -> None:
    err = refused(kpro6_plan(vllm_serving(prefill_context_parallel_size=3)))
    assert codes(err) == ["vllm-context-parallel-does-not-divide"]
    (problem,) = err.problems
    assert problem.subject == "pools[0].lxc.serving.prefill_context_parallel_size"
    assert "TP x PP x PCP" in problem.message


def test_decode_context_parallel_reuses_the_tp_ranks() -> None:
    serving = decided(vllm_serving(decode_context_parallel_size=2, model_config=None))
    assert (serving.tp_size, serving.dcp_size) == (4, 2)
    line = words(serving)
    assert line[line.index("--decode-context-parallel-size") + 1] == "2"


@pytest.mark.parametrize(
    ("version", "pcp", "dcp", "refusal"),
    [
        ("0.33.0", 1, 3, "it divides TP (4)"),  # DCP divides TP without PCP, every release
        ("0.25.1", 2, 4, "it divides TP (2)"),  # before 0.26: divides TP whatever PCP
        ("0.26.0", 2, 4, None),  # from 0.26: DCP spans TP x PCP
        ("0.33.0", 2, 4, None),
        ("0.33.0", 2, 2, None),  # ... or the PCP axis
        ("0.33.0", 4, 1, None),
    ],
)
def test_decode_context_parallel_sizes_are_the_releases_own_rule(
    version: str, pcp: int, dcp: int, refusal: str | None
) -> None:
    spec = vllm_serving(
        version=version,
        prefill_context_parallel_size=pcp,
        decode_context_parallel_size=dcp,
        model_config=None,
    )
    if refusal is None:
        assert decided(spec).dcp_size == dcp
        return
    err = refused(kpro6_plan(spec))
    assert codes(err) == ["vllm-decode-context-parallel-invalid"]
    (problem,) = err.problems
    assert refusal in problem.message and f"vLLM {version}" in problem.message
    assert problem.subject == "pools[0].lxc.serving.decode_context_parallel_size"


def test_a_release_without_prefill_context_parallelism_is_refused_by_its_table() -> None:
    spec = vllm_serving(version="0.11.2", prefill_context_parallel_size=2, model_config=None)
    err = refused(kpro6_plan(spec))
    assert any("--prefill-context-parallel-size" in p.message for p in err.problems)


@pytest.mark.parametrize("flag", ["-pcp", "--decode-context-parallel-size"])
def test_context_parallel_sizes_are_not_extra_args(flag: str) -> None:
    err = refused(kpro6_plan(vllm_serving(extra_args=(flag, "2"))))
    assert "serving-extra-arg-owned" in codes(err)


def test_context_parallel_keys_are_vllms_only() -> None:
    for key in ("prefill_context_parallel_size", "decode_context_parallel_size"):
        with pytest.raises(SpecError) as err:
            parse_spec(SPEC.format(engine="sglang", extra=f"{key} = 2"))
        assert [p.code for p in err.value.problems] == ["spec-engine-key"]
