"""Sizes set in an engine's `--config FILE.yaml` are read, not unknown
(engines/common/config_file.py, planning/unit_gpus.py, host/container_units.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pvegpu.engines.common.config_file import UNREAD, parse_config
from pvegpu.planning.unit_gpus import unit_demand
from pvegpu.serving.unitfile import parse_unit
from test_leftover_servers import UNIT, codes, host, planned, refused, write

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
