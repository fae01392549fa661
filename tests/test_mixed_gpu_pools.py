"""Serving pools of more than one GPU model, memory size or vendor: what each engine does.

One tensor-parallel group runs in lockstep: the smallest GPU bounds the KV cache and the
memory fit, the slowest the pace (`serving-gpus-mixed`); SGLang refuses GPUs whose memory
differs more than 10% unless its release's variable says otherwise
(`sglang-memory-unbalanced`); vLLM sizes every worker's KV cache by the smallest and
starts; two vendors cannot share one collective library (`lxc-pool-mixed-vendors`,
`serving-pool-mixed-vendors`). The host: tests/mixed_gpus_host.py (6000 Ada 48 GB, 4090
and 3090 24 GB each).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from bundled import FIXTURES
from mixed_gpus_host import ADA, RTX3090, RTX4090, mixed_gpus_host, serving_spec
from pvegpu.engines.sglang import versions
from pvegpu.errors import PlanError, PvegpuError
from pvegpu.hardware import GPU_MEMORY, MIB
from pvegpu.host.discover import discover
from pvegpu.model.facts import ConfigFile
from pvegpu.model.plan import Plan
from pvegpu.pipeline import discover_for
from pvegpu.planning.decide import decided_servings
from pvegpu.planning.planner import plan
from pvegpu.spec.load import parse_spec
from pvegpu.testing import write_host
from pvegpu.vendors.amd import AMD
from strategies_serving import (
    MODEL_DIR,
    gpu,
    host,
    index_json,
    lxc_pool,
    plan_of,
    qwen35_config,
    qwen_serving,
)

ADA_MEMORY = 49140 * MIB
SMALL_MEMORY = 24564 * MIB  # the 4090's; the 3090's is 24576 MiB


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("pve-mix")
    write_host(mixed_gpus_host(), where)
    return where


def planned(root: Path, text: str) -> Plan:
    spec = parse_spec(text)
    return plan(discover_for(spec, root), spec)


def refusal(root: Path, text: str) -> PlanError:
    with pytest.raises(PlanError) as info:
        planned(root, text)
    return info.value


def finding(result: Plan, code: str) -> str:
    (message,) = [f.message for f in result.findings if f.code == code]
    return message


def test_the_host_has_three_models_whose_memory_pvegpu_knows(root: Path) -> None:
    facts = discover(root)
    ids = [g.vendor_device for g in facts.gpus]
    assert ids == ["10de:26b1", "10de:2684", "10de:2204"]
    assert [GPU_MEMORY[i][0] for i in ids] == [ADA_MEMORY, SMALL_MEMORY, 24576 * MIB]


# --- two models of the same memory: served, with what the mix means


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_4090_with_a_3090_is_served_with_a_warning(root: Path, engine: str) -> None:
    result = planned(root, serving_spec((RTX4090, RTX3090), engine=engine))
    (serving,) = [p.serving for p in result.pools if p.serving is not None]
    assert serving.tp_size == 2
    message = finding(result, "serving-gpus-mixed")
    assert "1 x GeForce RTX 4090 (10de:2684, 24.0 GiB)" in message
    assert "1 x GeForce RTX 3090 (10de:2204, 24.0 GiB)" in message
    assert "at the pace of its slowest model" in message
    assert "their memory is the same size (within 1 GiB)" in message
    assert "stays unused" not in message
    # The fit is the smallest GPU's, not the first's: the 4090 has 12 MiB less.
    assert serving.fit is not None and serving.fit.gpu_memory_bytes == SMALL_MEMORY
    assert serving.fit.gpu_memory_source == "GeForce RTX 4090 (10de:2684), the pool's smallest GPU"
    assert "sglang-memory-unbalanced" not in [f.code for f in result.findings]


def test_one_model_says_nothing_of_a_mix(root: Path) -> None:
    """kpro6's four RTX PRO 6000: one model, no warning, the fit named as before."""
    spec = parse_spec((Path(__file__).parent.parent / "examples/kpro6.toml").read_text())
    result = plan(discover_for(spec, FIXTURES / "kpro6"), spec)
    assert "serving-gpus-mixed" not in [f.code for f in result.findings]
    (serving,) = [p.serving for p in result.pools if p.serving is not None]
    assert serving.fit is not None
    assert serving.fit.gpu_memory_source == ("RTX PRO 6000 Blackwell Server Edition (10de:2bb5)")


# --- 48 GB beside 24 GB: SGLang's refusal, its variable, vLLM's minimum


def test_sglang_refuses_a_6000_ada_with_a_4090(root: Path) -> None:
    error = refusal(root, serving_spec((ADA, RTX4090)))
    (problem,) = [p for p in error.problems if p.code == "sglang-memory-unbalanced"]
    assert problem.subject == "pools[0].lxc.serving"
    assert "RTX 6000 Ada Generation (48.0 GiB) and GeForce RTX 4090 (24.0 GiB)" in problem.message
    assert "SGLang 0.5.23 stops at start" in problem.message
    assert "less than 90% of another's" in problem.message
    assert 'environment = { SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK = "0" }' in problem.fix


def test_the_release_variable_lets_sglang_start_with_a_warning(root: Path) -> None:
    extra = '[pools.lxc.serving.environment]\nSGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK = "false"\n'
    result = planned(root, serving_spec((ADA, RTX4090), extra=extra))
    (serving,) = [p.serving for p in result.pools if p.serving is not None]
    assert ("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "false") in serving.environment
    allowed = finding(result, "sglang-memory-unbalanced-allowed")
    assert "GeForce RTX 4090 bounds the server" in allowed
    assert "24.0 GiB of each RTX 6000 Ada Generation stays unused" in allowed
    assert serving.fit is not None and serving.fit.gpu_memory_bytes == SMALL_MEMORY
    mixed = finding(result, "serving-gpus-mixed")
    assert "SGLang sizes every GPU's KV cache by the one with the least memory" in mixed


@pytest.mark.parametrize(
    ("version", "variable", "value", "starts"),
    [
        # Before 0.5.7 the disable-style variable, read as true/1.
        ("0.5.6.post2", "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK", "1", True),
        ("0.5.6.post2", "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK", "yes", False),
        ("0.5.6.post2", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "0", False),
        # From 0.5.7 the enable-style one; the old name no longer lets it start.
        ("0.5.7", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "0", True),
        ("0.5.23", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "n", True),
        ("0.5.23", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "1", False),
        ("0.5.7", "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK", "1", False),
    ],
)
def test_each_release_reads_its_own_variable(
    root: Path, version: str, variable: str, value: str, starts: bool
) -> None:
    extra = f'[pools.lxc.serving.environment]\n{variable} = "{value}"\n'
    text = serving_spec((ADA, RTX4090), extra=extra).replace("0.5.23", version)
    if starts:
        assert "sglang-memory-unbalanced-allowed" in [f.code for f in planned(root, text).findings]
        return
    (problem,) = [p for p in refusal(root, text).problems if p.code == "sglang-memory-unbalanced"]
    rule = versions.RULES.balance_for(version)
    assert rule is not None and f'{rule.variable} = "{rule.value}"' in problem.fix
    if variable == rule.variable:
        assert f"the spec's {variable}={value} keeps it on" in problem.message
    else:
        assert f"the spec sets {variable}, which SGLang" in problem.message


def test_the_table_covers_every_shipped_release() -> None:
    from pvegpu.engines.sglang.options import shipped_versions

    for version in shipped_versions():
        rule = versions.RULES.balance_for(version)
        assert rule is not None and rule.ratio == 0.9, version


def test_vllm_serves_a_6000_ada_with_a_4090_sized_by_the_smaller(root: Path) -> None:
    result = planned(root, serving_spec((ADA, RTX4090), engine="vllm"))
    (serving,) = [p.serving for p in result.pools if p.serving is not None]
    assert serving.fit is not None and serving.fit.gpu_memory_bytes == SMALL_MEMORY
    mixed = finding(result, "serving-gpus-mixed")
    assert "vLLM sizes every GPU's KV cache by the one with the least memory" in mixed
    assert "GeForce RTX 4090, so 24.0 GiB of each RTX 6000 Ada Generation stays unused" in mixed
    codes = [f.code for f in result.findings]
    assert "sglang-memory-unbalanced-allowed" not in codes


def test_the_fit_refusal_names_the_smallest_gpu() -> None:
    """The weights fit a 48 GB card but not the 24 GB one beside it: refused, sized by it."""
    gpus = (gpu(1, 0, minor=0, device=0x26B1, group=1), gpu(2, 0, minor=1, device=0x2684, group=2))
    files = (
        ConfigFile(f"{MODEL_DIR}/config.json", qwen35_config()),
        ConfigFile(f"{MODEL_DIR}/model.safetensors.index.json", index_json(60 * 10**9)),
    )
    spec = qwen_serving(
        container_rootfs=None, mtp=False, context_length=None,
        environment=(("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "0"),),
    )  # fmt: skip
    with pytest.raises(PvegpuError) as info:
        decided_servings(plan_of(host(gpus, files=files), lxc_pool(gpus, spec)))
    (problem,) = [p for p in info.value.problems if p.code == "model-does-not-fit"]
    assert "more than the 24.0 GiB of each GPU (GeForce RTX 4090 (10de:2684)" in problem.message


def test_a_model_of_unknown_memory_is_named_and_the_fit_asks_for_the_size() -> None:
    """A 4090 beside a card pvegpu has no size for (GTX 1080 Ti): the fit refuses to guess;
    with gpu_memory_bytes it is planned, and the warning says the fit uses that size."""
    old = attrs.evolve(gpu(2, 0, minor=1, device=0x1B06, group=2), model="GeForce GTX 1080 Ti")
    gpus = (gpu(1, 0, minor=0, device=0x2684, group=1), old)
    files = (
        ConfigFile(f"{MODEL_DIR}/config.json", qwen35_config()),
        ConfigFile(f"{MODEL_DIR}/model.safetensors.index.json", index_json(20 * 10**9)),
    )
    facts = host(gpus, files=files)
    spec = qwen_serving(container_rootfs=None, mtp=False, context_length=None)
    with pytest.raises(PvegpuError) as info:
        decided_servings(plan_of(facts, lxc_pool(gpus, spec)))
    assert [p.code for p in info.value.problems] == ["gpu-memory-unknown"]
    assert "10de:1b06" in info.value.problems[0].message
    sized = attrs.evolve(spec, gpu_memory_bytes=11 * 1024**3)
    result = decided_servings(plan_of(facts, lxc_pool(gpus, sized)))
    (message,) = [f.message for f in result.findings if f.code == "serving-gpus-mixed"]
    assert "pvegpu does not know the memory of GeForce GTX 1080 Ti (10de:1b06)" in message
    assert "the memory fit uses the spec's gpu_memory_bytes (11.0 GiB)" in message


# --- two vendors


def test_a_serving_pool_of_two_vendors_says_why_it_cannot_serve() -> None:
    """pve-mixed's RTX PRO 6000 and Radeon in one serving pool: the planner's refusal
    names the collective library too; without a server it does not."""
    pool = 'node = "pve-mixed"\n[[pools]]\nname = "both"\ngpus = ["01:00.0", "04:00.0"]\n'
    pool += "[pools.lxc]\nvmid = 129\n"
    server = '[pools.lxc.serving]\nversion = "0.5.23"\nmodel_path = "/m"\n'
    facts = discover(FIXTURES / "mixed")
    config = ConfigFile("etc/pve/lxc/129.conf", "arch: amd64\nrootfs: local-zfs:subvol-129-disk-0")
    facts = attrs.evolve(facts, files=(*facts.files, config))
    for text, serves in ((pool + server, True), (pool, False)):
        with pytest.raises(PlanError) as info:
            plan(facts, parse_spec(text))
        (problem,) = [p for p in info.value.problems if p.code == "lxc-pool-mixed-vendors"]
        assert ("NCCL on CUDA, RCCL on ROCm" in problem.message) is serves
        assert problem.fix.endswith("container and server)" if serves else "container)")


def test_the_server_refuses_two_vendors_itself() -> None:
    """A plan built in code, past the planner's check: the serving step names the reason."""
    nvidia = gpu(1, 0, minor=0, group=1)
    radeon = gpu(4, 0, minor=1, group=2)
    radeon = attrs.evolve(radeon, function=attrs.evolve(radeon.function, vendor=AMD.pci_vendor))
    plan_ = plan_of(host((nvidia, radeon)), lxc_pool((nvidia, radeon), qwen_serving()))
    with pytest.raises(PlanError) as info:
        decided_servings(plan_)
    (problem,) = info.value.problems
    assert problem.code == "serving-pool-mixed-vendors"
    assert "AMD and NVIDIA GPUs" in problem.message
    assert "NCCL on CUDA and RCCL on ROCm" in problem.message
