"""Every shipped vLLM release: the kpro6 unit renders and passes that release's table; the
release installed in the container is the one rendered for."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

import bundled
from pvegpu.engines.common.installed import InstalledRelease
from pvegpu.engines.vllm import versions
from pvegpu.engines.vllm.decision import VllmServing
from pvegpu.engines.vllm.installed import executable
from pvegpu.engines.vllm.option_check import parse_command_line
from pvegpu.engines.vllm.options import load_table, shipped_versions
from pvegpu.errors import PlanError, PvegpuError, SpecError
from pvegpu.model.artifact import Artifact
from pvegpu.model.plan import Plan
from pvegpu.model.schema import ServingSpec, Spec
from pvegpu.pipeline import discover_for
from pvegpu.planning.decide import decided_servings
from pvegpu.planning.planner import plan
from pvegpu.rendering.serving import render_serving
from pvegpu.serving.unitfile import exec_words
from pvegpu.spec.load import load_spec
from strategies_serving import (
    ROOTFS,
    host,
    kpro6_files,
    kpro6_gpus,
    lxc_pool,
    plan_of,
    qwen_serving,
)
from test_vllm_tables import MODERN

SHIPPED = shipped_versions()
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kpro6-vllm.toml"
MTP_FROM = "0.11.2"
"""The oldest shipped release with the `mtp` method (0.9-0.10 name it per model family)."""


def vllm_serving(**overrides: Any) -> ServingSpec:
    values: dict[str, Any] = {
        "engine": "vllm",
        "unit": "vllm-qwen",
        "port": 8000,
        "version": SHIPPED[-1],
    }
    values.update(overrides)
    return qwen_serving(**values)


def kpro6_plan(serving: ServingSpec, **files: Any) -> Plan:
    """LXC 129 keeps the four NUMA 0 GPUs of kpro6 as pool `vllm` (undecided)."""
    gpus = kpro6_gpus()
    file_list, stats = kpro6_files(**files)
    return plan_of(
        host(gpus, files=file_list, stats=stats), lxc_pool(gpus[:4], serving, name="vllm")
    )


def decided(spec: ServingSpec) -> VllmServing:
    (pool,) = decided_servings(kpro6_plan(spec)).pools
    assert isinstance(pool.serving, VllmServing)
    return pool.serving


def unit(version: str, **overrides: Any) -> Artifact:
    spec = vllm_serving(version=version, **overrides)
    (artifact,) = render_serving(decided_servings(kpro6_plan(spec)))
    return artifact


def serve_words(content: str) -> list[str]:
    """The words after `vllm serve` of ExecStart= (continuations joined, systemd unquoted)."""
    joined = content.replace(" \\\n", " ")
    line = next(x for x in joined.splitlines() if x.startswith("ExecStart="))
    words = list(exec_words(line.removeprefix("ExecStart=")))
    assert words[0] == "/root/ml-env/bin/vllm" and words[1] == "serve"
    return words[2:]


@pytest.mark.parametrize("version", SHIPPED)
def test_kpro6_unit_renders_and_passes_the_releases_table(version: str) -> None:
    """TP=4 with P2P off under SEV-SNP; MTP where the release has a method for Qwen3.5."""
    table = load_table(version)
    mtp = versions.RULES.mtp_rule(version, "qwen3_5_moe_text") is not None
    words = serve_words(unit(version, mtp=mtp).content)
    assert words[0] == "/shared/models/Qwen3.5-122B-A10B"
    assert parse_command_line(table, words, subject="t").problems == ()
    for word in words:
        if word.startswith("-"):
            spec = table.option_strings[word]
            assert not spec.deprecated and word in spec.accepted, word
    assert words[words.index("--tensor-parallel-size") + 1] == "4"
    assert "--disable-custom-all-reduce" in words
    assert ("--speculative-config" in words) == mtp


@pytest.mark.parametrize("version", SHIPPED)
def test_mtp_is_asked_through_the_releases_speculative_config_or_refused(version: str) -> None:
    rule = versions.RULES.mtp_rule(version, "qwen3_5_moe_text")
    if rule is not None:
        assert load_table(version).find("--speculative-config") is not None
        words = serve_words(unit(version).content)
        config = words[words.index("--speculative-config") + 1]
        assert config == '{"method":"mtp","num_speculative_tokens":3}'
        return
    with pytest.raises(PlanError) as err:
        unit(version)
    (problem,) = [p for p in err.value.problems if p.code == "vllm-mtp-unsupported"]
    assert problem.subject == "pools[0].lxc.serving.mtp"
    assert version in problem.message and "qwen3_5_moe_text" in problem.message


def test_release_boundaries_of_the_rules() -> None:
    """Spot checks of what the tables say, so a changed RULES row shows here by name."""
    assert load_table("0.7.3").find("--speculative-config") is None
    assert load_table("0.8.5.post1").find("--speculative-config") is not None
    assert versions.RULES.mtp_rule("0.8.5.post1", "deepseek_v3") is None
    assert versions.RULES.mtp_rule("0.9.2", "deepseek_v3").method == "deepseek_mtp"  # type: ignore[union-attr]
    assert versions.RULES.mtp_rule("0.10.2", "qwen3_next").method == "qwen3_next_mtp"  # type: ignore[union-attr]
    assert versions.RULES.mtp_rule("0.10.2", "qwen3_5_moe") is None
    assert versions.RULES.mtp_rule(MTP_FROM, "qwen3_5_moe").method == "mtp"  # type: ignore[union-attr]
    # 0.33 registers --enable-x as the other position of --disable-x.
    switch = load_table("0.33.0").option_strings["--disable-custom-all-reduce"]
    assert "--enable-custom-all-reduce" in switch.accepted
    assert load_table("0.5.2").option_strings["--disable-custom-all-reduce"].action == "store_true"
    # Context parallelism: the flags from the releases that first list them, and the DCP
    # rule that changed when PCP could span DCP (vllm/config/parallel.py of 0.26.0).
    assert load_table("0.9.2").find("--decode-context-parallel-size") is None
    assert load_table("0.10.2").find("--decode-context-parallel-size") is not None
    assert load_table("0.11.2").find("--prefill-context-parallel-size") is None
    assert load_table("0.12.0").find("--prefill-context-parallel-size") is not None
    assert versions.RULES.dcp_rule("0.9.2") is None
    assert not versions.RULES.dcp_rule("0.25.1").spans_pcp  # type: ignore[union-attr]
    assert versions.RULES.dcp_rule("0.26.0").spans_pcp  # type: ignore[union-attr]


def test_golden_kpro6_oldest(golden: Callable[[str], SnapshotAssertion]) -> None:
    """0.5.2, the first release with `vllm serve`: no --speculative-config, so no MTP."""
    assert SHIPPED[0] == "0.5.2"
    assert unit(SHIPPED[0], mtp=False).content == golden("service")


def test_golden_kpro6_middle(golden: Callable[[str], SnapshotAssertion]) -> None:
    """0.11.2: the first shipped release with the one `mtp` method."""
    assert unit(MTP_FROM).content == golden("service")


def test_golden_kpro6_newest(golden: Callable[[str], SnapshotAssertion]) -> None:
    """The newest shipped release (0.33.0), MTP on."""
    assert SHIPPED[-1] == "0.33.0"
    assert unit(SHIPPED[-1]).content == golden("service")


def test_golden_kpro6_context_parallel(golden: Callable[[str], SnapshotAssertion]) -> None:
    """The newest release, the 4 GPUs as 2 prefill context-parallel ranks of TP 2 with
    decode context parallelism over each TP group (no model_config: the 122B model does
    not fit TP 2)."""
    spec = {"prefill_context_parallel_size": 2, "decode_context_parallel_size": 2}
    assert unit(SHIPPED[-1], model_config=None, **spec).content == golden("service")


def test_pipeline_stages_divide_the_gpus_between_tp_and_pp() -> None:
    serving = decided(vllm_serving(pipeline_parallel_size=2))
    assert (serving.tp_size, serving.pp_size) == (2, 2)
    words = [w for o in serving.options for w in o]
    assert words[words.index("--tensor-parallel-size") + 1] == "2"
    assert words[words.index("--pipeline-parallel-size") + 1] == "2"
    assert serving.argv[:3] == ("/root/ml-env/bin/vllm", "serve", serving.model_path)
    no_stages = decided(vllm_serving())
    assert "--pipeline-parallel-size" not in [w for o in no_stages.options for w in o]
    with pytest.raises(PlanError) as err:
        decided(vllm_serving(pipeline_parallel_size=3))
    (problem,) = err.value.problems
    assert problem.code == "vllm-pipeline-does-not-divide"
    assert problem.subject == "pools[0].lxc.serving.pipeline_parallel_size"


# -- the release installed in the container

SITE = "lib/python3.12/site-packages"


def _metadata(version: str) -> str:
    return f"Metadata-Version: 2.4\nName: vllm\nVersion: {version}\n\n# vLLM\n"


@pytest.fixture(scope="module")
def kpro6_installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kpro6 (vLLM 0.33.0 in /root/ml-env) plus an unshipped 9.9.9 in /opt/next-env, as a
    tree of the modern layout, and two releases in /opt/two-env."""
    root = tmp_path_factory.mktemp("kpro6") / "root"
    shutil.copytree(bundled.fixture_root("kpro6"), root, symlinks=True)
    container = root / ROOTFS
    next_site = container / "opt/next-env" / SITE
    (next_site / "vllm-9.9.9.dist-info").mkdir(parents=True)
    (next_site / "vllm-9.9.9.dist-info/METADATA").write_text(_metadata("9.9.9"))
    for path, text in MODERN.items():
        (next_site / path).parent.mkdir(parents=True, exist_ok=True)
        (next_site / path).write_text(text)
    two = container / "opt/two-env" / SITE
    for version in ("0.11.2", "0.33.0"):
        (two / f"vllm-{version}.dist-info").mkdir(parents=True)
        (two / f"vllm-{version}.dist-info/METADATA").write_text(_metadata(version))
    return root


def _example(**serving: Any) -> Spec:
    spec = load_spec(EXAMPLE)
    pool = spec.pools[0]
    assert pool.lxc is not None and pool.lxc.serving is not None
    lxc = attrs.evolve(pool.lxc, serving=attrs.evolve(pool.lxc.serving, **serving))
    return attrs.evolve(spec, pools=(attrs.evolve(pool, lxc=lxc), *spec.pools[1:]))


def _render(root: Path, spec: Spec) -> VllmServing:
    planned = plan(discover_for(spec, root), spec)
    serving = planned.pools[0].serving
    assert isinstance(serving, VllmServing)
    return serving


def test_the_example_renders_for_the_release_installed_in_the_fixture() -> None:
    root = bundled.fixture_root("kpro6")
    serving = _render(root, load_spec(EXAMPLE))
    assert serving.version == "0.33.0"
    assert serving.executable == "/root/ml-env/bin/vllm"
    assert serving.environment_file == "/etc/default/vllm-qwen"


def test_a_spec_version_other_than_the_installed_one_is_refused() -> None:
    with pytest.raises(PvegpuError) as err:
        _render(bundled.fixture_root("kpro6"), _example(version="0.11.2"))
    codes = [p.code for p in err.value.problems]
    assert codes == ["vllm-version-mismatch"]
    assert "0.33.0" in err.value.problems[0].message


def test_two_installed_releases_are_refused(kpro6_installed: Path) -> None:
    with pytest.raises(PvegpuError) as err:
        _render(kpro6_installed, _example(python="/opt/two-env/bin/python3"))
    assert [p.code for p in err.value.problems] == ["vllm-installs-conflict"]


def test_an_unshipped_installed_release_gets_its_table_from_its_sources(
    kpro6_installed: Path,
) -> None:
    spec = _example(python="/opt/next-env/bin/python3", mtp=False, extra_args=())
    serving = _render(kpro6_installed, spec)
    assert serving.version == "9.9.9"
    assert serving.executable == "/opt/next-env/bin/vllm"
    # The tree's own spellings: its --speculative-config is there, its flags are canonical.
    assert ("--tensor-parallel-size", "4") in serving.options
    # An option that tree lacks is refused by its own table.
    lacking = _example(
        python="/opt/next-env/bin/python3", mtp=False, extra_args=("--reasoning-parser", "x")
    )
    with pytest.raises(SpecError) as err:
        _render(kpro6_installed, lacking)
    assert [p.code for p in err.value.problems] == ["vllm-option-unknown"]
    assert "vllm 9.9.9 has no option `--reasoning-parser`" in err.value.problems[0].message


def test_no_release_to_render_for_is_refused() -> None:
    with pytest.raises(PlanError) as err:
        decided(vllm_serving(version=None))
    (problem,) = err.value.problems
    assert problem.code == "vllm-version-missing"
    assert problem.subject == "pools[0].lxc.serving.version"


def test_a_release_pvegpu_has_no_table_for_is_refused_by_name() -> None:
    with pytest.raises(SpecError) as err:
        decided(vllm_serving(version="0.4.3"))
    (problem,) = err.value.problems
    assert problem.code == "vllm-version-unknown"
    assert "0.5.2 to 0.33.0" in problem.message


def test_the_unit_runs_the_vllm_script_of_the_prefix_that_holds_the_release() -> None:
    rootfs = "rpool/data/subvol-129-disk-0"

    def found(site: str) -> InstalledRelease:
        return InstalledRelease("0.33.0", f"{rootfs}/{site}", f"{rootfs}/{site}/x/METADATA")

    venv = found("root/ml-env/lib/python3.12/site-packages")
    assert executable("/root/ml-env/bin/python3", rootfs, venv) == "/root/ml-env/bin/vllm"
    # Debian's python3 with a root `pip install`: the script lands in /usr/local/bin.
    local = found("usr/local/lib/python3.13/dist-packages")
    assert executable("/usr/bin/python3", rootfs, local) == "/usr/local/bin/vllm"
    assert executable("/opt/env/bin/python", None, None) == "/opt/env/bin/vllm"


@pytest.mark.parametrize(
    "key",
    ["pipeline_parallel_size", "prefill_context_parallel_size", "decode_context_parallel_size"],
)
@pytest.mark.parametrize("value", [-2, 0])
def test_a_code_built_size_out_of_range_is_refused_not_built(key: str, value: int) -> None:
    """A spec built in code never met the loader: its engine keys' rules are the
    planner's, and vLLM decides without a refused key (a negative size would reach the
    decided server's own check and end in a traceback)."""
    with pytest.raises(PlanError) as caught:
        decided_servings(kpro6_plan(vllm_serving(**{key: value})))
    assert [(p.code, p.subject) for p in caught.value.problems] == [
        ("serving-invalid-value", f"pools[0].lxc.serving.{key}")
    ]
    assert caught.value.problems[0].message == f"{key}: {value} is not between 1 and 64"


def test_a_code_built_key_refusal_comes_after_the_rules_of_the_table() -> None:
    with pytest.raises(PlanError) as caught:
        decided_servings(kpro6_plan(vllm_serving(pipeline_parallel_size=0, port=0)))
    assert [p.subject.rpartition(".")[2] for p in caught.value.problems] == [
        "port",
        "pipeline_parallel_size",
    ]


def test_an_engine_key_left_unset_in_a_mapping_is_no_key() -> None:
    """A mapping built in code (Ansible's inline spec) may write a key it leaves out as
    None: an engine key so written is unset (as it was when the key was an optional
    field of the schema), not a value of the wrong type."""
    from pvegpu.pipeline import spec_from_data

    serving = {
        "engine": "vllm",
        "unit": "vllm-qwen",
        "python": "/usr/bin/python3",
        "model_path": "/models/qwen",
        "pipeline_parallel_size": None,
    }
    pool = {"name": "a", "numa_node": 0, "lxc": {"vmid": 129, "serving": serving}}
    data = {"node": "kpro6", "pools": [pool]}
    loaded = spec_from_data(data, "inline")
    lxc = loaded.pools[0].lxc
    assert lxc is not None and lxc.serving is not None
    assert lxc.serving.engine_keys == ()
    assert lxc.serving.engine_key("pipeline_parallel_size") is None
