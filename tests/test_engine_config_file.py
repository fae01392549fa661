"""Sizes set in an engine's `--config FILE.yaml` are read, not unknown
(engines/common/config_file.py, planning/unit_gpus.py, host/container_units.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from bundled import copy_tree, example_spec, fixture_root
from pvegpu.engines import installed_files
from pvegpu.engines.common.config_file import UNREAD, parse_config
from pvegpu.errors import PvegpuError
from pvegpu.host.container_units import MAX_UNIT_BYTES, read_container_units
from pvegpu.host.discover import read_host
from pvegpu.host.reader import RootReader
from pvegpu.host.serving_files import read_serving_files
from pvegpu.model.facts import ConfigFile
from pvegpu.model.plan import Plan
from pvegpu.planning.decide import decided_servings
from pvegpu.planning.unit_gpus import unit_demand
from pvegpu.serving.unitfile import parse_unit
from strategies_serving import ROOTFS, kpro6_plan, qwen_serving
from test_leftover_servers import UNIT, codes, enable, host, planned, refused, write
from test_vllm_versions import kpro6_plan as vllm_plan
from test_vllm_versions import vllm_serving

CT = "rpool/data/subvol-129-disk-0"


def test_the_flat_subset_of_yaml_is_read() -> None:
    found = parse_config(
        "---\n# sizes\ntp-size: 8\npp_size: '2'\nenable-dp-attention: true\n"
        'served-model-name: "q" # trailing comment\ndisable-radix-cache: false\n'
        "speculative-config:\n  method: mtp\n  num_speculative_tokens: 3\nmodel: null\n"
    )
    assert found.problem is None
    assert dict(found.values) == {
        "tp-size": "8",
        "pp_size": "2",
        "enable-dp-attention": True,
        "served-model-name": "q",
        "disable-radix-cache": False,
        "speculative-config": UNREAD,
        "model": None,
    }
    # As the engines turn it into words: a true flag bare, false and null left out.
    assert found.words() == (
        "--tp-size", "8", "--pp_size", "2", "--enable-dp-attention", "--served-model-name", "q",
    )  # fmt: skip
    assert found.unread() == ("--speculative-config",)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tp-size 8\n", "line 1 is not `key: value`"),
        ("  tp-size: 8\n", "line 1 is indented with no key before it"),
    ],
)
def test_what_is_not_key_value_is_not_read(text: str, problem: str) -> None:
    assert parse_config(text).problem == problem


def gpus(exec_start: str, files: dict[str, str], extra: str = "") -> int | None:
    unit = parse_unit(f"[Service]\n{extra}ExecStart={exec_start}\n")
    (server,) = unit_demand(unit, config_text=files.get).servers
    return server.gpus


SG = "python -m sglang.launch_server --config /etc/sglang.yaml"
VL = "vllm serve m --config=/etc/vllm.yml"


@pytest.mark.parametrize(
    ("exec_start", "text", "count"),
    [
        (SG, "tp-size: 8\n", 8),
        (SG, "tp-size: 2\ndp-size: 2\n", 4),
        (SG, "tp-size: 4\ndp-size: 4\nenable-dp-attention: true\n", 4),
        (SG + " --tp 2", "tp-size: 8\n", 2),  # the command line overrides the file
        (VL, "tensor_parallel_size: 2\nprefill-context-parallel-size: 2\n", 4),
        (VL, "tensor_parallel_size: 2\npipeline-parallel-size: 2\n", 4),
        (VL + " -pp 1", "tensor-parallel-size: 2\npipeline-parallel-size: 4\n", 2),
        (SG, "tp-size:\n  - 8\n", None),  # a size that is not a plain value: unknown
        (SG, "model-path: /m\n", 1),  # read, and it sets no size
    ],
)  # fmt: skip
def test_sizes_come_from_the_file_then_the_command_line(
    exec_start: str, text: str, count: int | None
) -> None:
    files = {"/etc/sglang.yaml": text, "/etc/vllm.yml": text}
    assert gpus(exec_start, files) == count


def test_a_relative_config_is_the_working_directorys() -> None:
    files = {"/root/s.yaml": "tp-size: 8\n"}
    assert gpus("python -m sglang.launch_server --config s.yaml", files) is None
    assert gpus("sglang serve --config s.yaml", files, "WorkingDirectory=/root\n") == 8


def test_a_config_not_read_is_unknown_and_says_why() -> None:
    unit = parse_unit(f"[Service]\nExecStart={SG} --tp 4\n")
    none: dict[str, str] = {}
    (server,) = unit_demand(unit, config_text=none.get).servers
    assert server.gpus is None
    assert server.config_problem == "(/etc/sglang.yaml in the container) is not read"


# ------------------------------------------------------------------ through discovery


def with_config(tmp_path: Path, yaml: str | None) -> Path:
    root = host(tmp_path, tp="4")
    unit = root / UNIT
    unit.write_text(unit.read_text().replace(" --tp 4 ", " --config conf/sglang.yaml --tp 4 "))
    if yaml is not None:
        # WorkingDirectory=/root: the relative path is /root/conf/sglang.yaml.
        write(root, f"{CT}/root/conf/sglang.yaml", yaml)
    return root


def test_a_container_units_config_is_read_and_its_sizes_count(tmp_path: Path) -> None:
    """`--tp 4` fits the 4 GPUs CT 129 keeps, but the file adds `dp-size: 2`: 8 GPUs."""
    root = with_config(tmp_path, "dp-size: 2\n")
    (problem,) = refused(root)
    assert problem.code == "container-unit-needs-gpus"


def test_a_container_units_config_that_fits_passes(tmp_path: Path) -> None:
    root = with_config(tmp_path, "tp-size: 8\nmem-fraction-static: 0.85\n")
    assert codes(planned(root)) == set()  # --tp 4 on the line overrides the file's 8


def test_a_missing_config_is_unknown_naming_the_file(tmp_path: Path) -> None:
    result = planned(with_config(tmp_path, None))
    assert codes(result) == {"container-unit-gpus-unknown"}
    (finding,) = [f for f in result.findings if f.code == "container-unit-gpus-unknown"]
    assert "(/root/conf/sglang.yaml in the container) is not read" in finding.message


# ------------------------------------------------------------------ in a spec's extra_args


def sglang_with_config(text: str | None, **overrides: Any) -> Plan:
    extra = (ConfigFile(f"{ROOTFS}/etc/sglang.yaml", text),) if text is not None else ()
    spec = qwen_serving(extra_args=("--config", "/etc/sglang.yaml"), **overrides)
    return kpro6_plan(spec, extra=extra)


def test_extra_args_config_sizes_count_for_sglang() -> None:
    with pytest.raises(PvegpuError) as err:
        decided_servings(sglang_with_config("dp-size: 2\n"))
    (problem,) = [p for p in err.value.problems if p.code == "sglang-parallel-size-mismatch"]
    assert "2 x 4 x 1 = 8" in problem.message and "`--config /etc/sglang.yaml`" in problem.message
    assert "from extra_args or `--config /etc/sglang.yaml`" in problem.fix
    # pvegpu's --tp-size overrides the file's: SGLang puts the file's options first.
    (pool,) = decided_servings(sglang_with_config("tp-size: 8\nattn-dp-size: 2\n")).pools
    assert pool.serving is not None and pool.serving.tp_size == 4


def test_an_extra_args_config_not_read_is_a_warning() -> None:
    found = decided_servings(sglang_with_config(None)).findings
    (finding,) = [f for f in found if f.code == "serving-config-unread"]
    assert "`--config /etc/sglang.yaml`" in finding.message
    assert "(/etc/sglang.yaml in CT 129) is not read" in finding.message
    nested = decided_servings(sglang_with_config("dp-size:\n  - 2\n")).findings
    assert [f for f in nested if f.code == "serving-config-unread"]


def vllm_with_config(text: str, **overrides: Any) -> Plan:
    extra = (ConfigFile(f"{ROOTFS}/root/vllm.yaml", text),)
    spec = vllm_serving(
        extra_args=("--config", "vllm.yaml"),
        working_directory="/root",
        model_config=None,
        **overrides,
    )
    return vllm_plan(spec, extra=extra)


@pytest.mark.parametrize(
    ("text", "overrides", "refused"),
    [
        ("pipeline-parallel-size: 2\n", {}, True),  # the line writes no PP: the file's stands
        ("pipeline-parallel-size: 2\n", {"pipeline_parallel_size": 2}, False),  # overridden
        ("prefill_context_parallel_size: 2\n", {}, True),
        ("data-parallel-size: 2\n", {}, True),
        ("tensor-parallel-size: 8\npipeline-parallel-size: 1\n", {}, False),
    ],
)
def test_extra_args_config_sizes_the_vllm_line_does_not_override_are_refused(
    text: str, overrides: dict[str, Any], refused: bool
) -> None:
    plan = vllm_with_config(text, **overrides)
    if not refused:
        decided_servings(plan)
        return
    with pytest.raises(PvegpuError) as err:
        decided_servings(plan)
    assert [p.code for p in err.value.problems] == ["vllm-config-sets-parallel-size"]
    assert "`--config vllm.yaml`" in err.value.problems[0].message


def test_discovery_reads_the_config_extra_args_pass(tmp_path: Path) -> None:
    root = copy_tree(fixture_root("kpro6"), tmp_path / "root")
    write(root, f"{CT}/root/conf/s.yaml", "dp-size: 2\n")
    spec = example_spec("kpro6")
    pool = spec.pools[0]
    assert pool.lxc is not None and pool.lxc.serving is not None
    serving = attrs.evolve(pool.lxc.serving, extra_args=("--config", "conf/s.yaml"))
    changed = attrs.evolve(
        spec,
        pools=(attrs.evolve(pool, lxc=attrs.evolve(pool.lxc, serving=serving)), *spec.pools[1:]),
    )
    files = read_serving_files(root, changed, installed_files)
    assert any(f.path == f"{CT}/root/conf/s.yaml" for f in files.files)


def test_a_config_of_any_command_is_read_within_the_units_limits(tmp_path: Path) -> None:
    """Discovery names no engine: the `--config` of an ExecStart= of any command is read
    (the planner's engines decide whose server it is), only `.yaml`/`.yml`, and no file
    larger than a unit may be."""
    root = host(tmp_path)
    text = "[Service]\nExecStart=/opt/toy/bin/toy serve --config /etc/toy/{}\n"
    for name in ("serve.yaml", "big.yaml", "serve.json"):
        unit = f"toy-{name.replace('.', '-')}.service"
        write(root, f"{CT}/etc/systemd/system/{unit}", text.format(name))
        enable(root, unit)
    write(root, f"{CT}/etc/toy/serve.yaml", "shards: 2\n")
    write(root, f"{CT}/etc/toy/big.yaml", "x" * (MAX_UNIT_BYTES + 1))
    write(root, f"{CT}/etc/toy/serve.json", "{}")
    reader = RootReader(root)
    spec = example_spec("kpro6")
    read = read_container_units(reader, spec, read_host(reader)).files
    assert [f.path for f in read if "/etc/toy/" in f.path] == [f"{CT}/etc/toy/serve.yaml"]
