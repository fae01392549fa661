from __future__ import annotations

import difflib
import json

import pytest

from pvegpu.engines.common.releases import version_key
from pvegpu.engines.sglang.option_check import check_command_line, parse_command_line
from pvegpu.engines.sglang.options import OptionSpec, OptionTable, load_table, shipped_versions
from pvegpu.errors import RenderError, SpecError

SHIPPED = shipped_versions()


def codes(table: OptionTable, *args: str, complete: bool = False) -> list[str]:
    return [
        p.code for p in parse_command_line(table, args, subject="t", complete=complete).problems
    ]


def sample_values(spec: OptionSpec) -> list[str]:
    """Values the option's type, choices and nargs accept."""
    if spec.choices:
        one = spec.choices[0]
    else:
        one = {"int": "1", "float": "0.5", "loads": "{}", "json_list_type": "[]"}.get(
            spec.type or "", "x"
        )
    if spec.nargs == 0 or spec.nargs == "*":
        return []
    if isinstance(spec.nargs, int):
        return [one] * spec.nargs
    return [one]


def test_every_0_5_release_ships() -> None:
    """0.5.1 (the first 0.5 PyPI serves) to 0.5.23, post releases too, oldest first."""
    assert SHIPPED[0] == "0.5.1"
    assert SHIPPED[-1] == "0.5.23"
    assert {"0.5.9", "0.5.10.post1", "0.5.13.post1", "0.5.15.post1"} <= set(SHIPPED)
    assert len(SHIPPED) == 42
    assert list(SHIPPED) == sorted(SHIPPED, key=version_key)


@pytest.mark.parametrize("version", SHIPPED)
def test_every_shipped_table_loads_and_accepts_a_canonical_line(version: str) -> None:
    """Each table names its own version and passes the minimal line pvegpu renders."""
    table = load_table(version)
    assert table.version == version
    tp = table.find("--tp-size", "--tensor-parallel-size")
    assert tp is not None
    line = ["--model-path", "/models/m", tp.canonical, "4", "--host", "0.0.0.0", "--port", "1"]
    assert codes(table, *line, complete=True) == []


@pytest.mark.parametrize("version", SHIPPED)
def test_every_canonical_option_is_accepted(version: str) -> None:
    """Every live option of the version, spelled canonically with a valid value, passes."""
    table = load_table(version)
    for spec in table.args:
        if spec.deprecated or spec.action == "_HelpAction":
            continue
        for option in spec.accepted:
            assert codes(table, option, *sample_values(spec)) == [], option


@pytest.mark.parametrize("version", SHIPPED)
def test_every_alias_is_refused(version: str) -> None:
    """A second spelling of an option (not a --no- switch) is an alias: refused."""
    table = load_table(version)
    aliases = [
        (o, spec)
        for spec in table.args
        if not spec.deprecated and spec.action != "_HelpAction"
        for o in spec.options
        if o not in spec.accepted and o.startswith("--")
    ]
    assert aliases, "both tables have aliases (--model for --model-path)"
    for option, spec in aliases:
        assert codes(table, option, *sample_values(spec)) == ["sglang-option-alias"], option


def test_canonical_tp_name_is_the_newest_versions() -> None:
    """0.5.9 lists --tensor-parallel-size first, but --tp-size (0.5.23's name) is written."""
    old, new = load_table("0.5.9"), load_table("0.5.23")
    assert codes(old, "--tp-size", "4") == []
    assert codes(old, "--tensor-parallel-size", "4") == ["sglang-option-alias"]
    assert codes(new, "--tp-size", "4") == []
    assert codes(new, "--tensor-parallel-size", "4") == ["sglang-option-alias"]


@pytest.mark.parametrize("version", SHIPPED)
def test_tp_abbreviation_is_refused(version: str) -> None:
    """`--tp 8` (the seed's flag) works only by argparse prefix matching: refused."""
    table = load_table(version)
    problems = parse_command_line(table, ["--tp", "8"], subject="t", complete=False).problems
    assert [p.code for p in problems] == ["sglang-option-abbreviated"]
    assert "--t" in problems[0].fix


def test_cuda_graph_max_bs_is_ambiguous_from_0_5_20() -> None:
    """--cuda-graph-max-bs is fine on 0.5.9 and an ambiguous prefix on 0.5.23."""
    assert codes(load_table("0.5.9"), "--cuda-graph-max-bs", "8") == []
    problems = parse_command_line(
        load_table("0.5.23"), ["--cuda-graph-max-bs", "8"], subject="t"
    ).problems
    assert [p.code for p in problems if p.code != "sglang-option-required"] == [
        "sglang-option-ambiguous"
    ]
    assert "--cuda-graph-max-bs-decode" in problems[0].message


def test_removed_mamba_flag_is_unknown_with_a_suggestion() -> None:
    """0.5.23 has no --mamba-scheduler-strategy; the fix names the new spelling."""
    args = ["--mamba-scheduler-strategy", "extra_buffer"]
    problems = parse_command_line(load_table("0.5.23"), args, subject="t", complete=False).problems
    assert [p.code for p in problems] == ["sglang-option-unknown"]
    assert "--mamba-radix-cache-strategy" in problems[0].fix
    assert codes(load_table("0.5.9"), "--mamba-radix-cache-strategy", "extra_buffer") == [
        "sglang-option-unknown"
    ]


def test_deprecated_option_is_refused_with_its_replacement() -> None:
    """--disable-cuda-graph is deprecated in 0.5.23; the fix says what replaces it."""
    args = ["--disable-cuda-graph"]
    problems = parse_command_line(load_table("0.5.23"), args, subject="t", complete=False).problems
    assert [p.code for p in problems] == ["sglang-option-deprecated"]
    assert "cuda-graph-backend" in problems[0].fix


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--context-length", "256K"], "sglang-value-type"),
        (["--context-length", "262144"], None),
        (["--kv-cache-dtype", "fp8"], "sglang-value-choice"),
        (["--kv-cache-dtype", "fp8_e4m3"], None),
        (["--speculative-algorithm", "NEXTN"], None),
        (["--speculative-algorithm", "MEDUSA"], "sglang-value-choice"),
        (["--numa-node"], "sglang-value-count"),
        (["--numa-node", "0", "0", "0", "0"], None),
        (["--disable-custom-all-reduce=1"], "sglang-value-count"),
        (["--port=30000"], None),
        (["--port"], "sglang-value-count"),
        (["--port", "1", "2"], "sglang-argument-unexpected"),
        (["--mem-fraction-static", "0.85"], None),
        (["--mem-fraction-static", "most"], "sglang-value-type"),
        (["--help"], "sglang-option-help"),
        (["--port", "1", "--port", "2"], "sglang-option-repeated"),
    ],
)
def test_values_are_checked_like_argparse(args: list[str], code: str | None) -> None:
    """Types, choices and nargs of 0.5.9 are applied as its parser would, and then some."""
    assert codes(load_table("0.5.9"), *args) == ([code] if code else [])


def test_speculative_algorithm_has_no_choices_in_0_5_23() -> None:
    """0.5.23's table lists no choices, so any algorithm name passes the table check."""
    assert codes(load_table("0.5.23"), "--speculative-algorithm", "MEDUSA") == []


def test_boolean_optional_no_form_is_canonical() -> None:
    """`--no-x` of a BooleanOptionalAction is the switch's other position, not an alias."""
    assert codes(load_table("0.5.23"), "--no-enable-tf32-matmul") == []


def test_complete_line_needs_model_path() -> None:
    """A whole command line without --model-path cannot start."""
    assert "sglang-option-required" in codes(load_table("0.5.23"), "--port", "1", complete=True)


def test_negative_numbers_are_values() -> None:
    """`-1` after an int option is its value, as argparse takes it."""
    table = load_table("0.5.23")
    spec = table.find("--mamba-max-states-per-path")
    assert spec is not None and spec.type == "int"
    assert codes(table, "--mamba-max-states-per-path", "-1") == []


def test_unknown_version_names_the_shipped_ones() -> None:
    """A release without a table is refused, naming the shipped range and the tool."""
    with pytest.raises(RenderError) as err:
        load_table("0.5.24")
    (problem,) = err.value.problems
    assert problem.code == "sglang-version-unknown"
    assert "0.5.1 to 0.5.23" in problem.message
    assert "make sglang-tables VERSIONS=0.5.24" in problem.fix


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"sglang_version": "1", "allow_abbrev": True}),
        json.dumps({"sglang_version": "1", "allow_abbrev": True, "args": [{"options": []}]}),
        json.dumps(
            {
                "sglang_version": "1",
                "allow_abbrev": True,
                "args": [
                    {
                        "options": ["--x"],
                        "dest": "x",
                        "action": "_StoreAction",
                        "type": None,
                        "nargs": "many",
                        "choices": None,
                        "required": False,
                        "deprecated_alias_of": None,
                    }
                ],
            }
        ),
    ],
)
def test_malformed_table_is_refused(text: str) -> None:
    """A broken table dropped into the package fails loudly, naming the file."""
    with pytest.raises(RenderError) as err:
        OptionTable.from_json(text, source="pvegpu.engines.sglang.data/sglang-1.json")
    assert err.value.problems[0].code == "sglang-table-invalid"
    assert err.value.problems[0].subject == "pvegpu.engines.sglang.data/sglang-1.json"


def test_version_key_orders_numerically() -> None:
    """0.5.9 < 0.5.10 < 0.5.23, and a post release compares by its release numbers."""
    assert version_key("0.5.9") < version_key("0.5.10") < version_key("0.5.23")
    assert version_key("0.5.10.post1") == (0, 5, 10)
    with pytest.raises(ValueError, match="not a version"):
        version_key("latest")


def test_check_raises_every_problem_of_the_line() -> None:
    """check_command_line raises one SpecError naming each problem; a clean line passes."""
    table = load_table("0.5.23")
    check_command_line(table, ["--model-path", "/m", "--tp-size", "4"], subject="t")
    with pytest.raises(SpecError) as err:
        check_command_line(table, ["--tp", "4", "--no-such-flag"], subject="t", complete=False)
    assert [p.code for p in err.value.problems] == [
        "sglang-option-abbreviated",
        "sglang-option-unknown",
    ]


def test_suggestions_are_worked_out_only_when_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a line for its options (an old unit) runs no fuzzy search over the table."""
    calls: list[str] = []

    def counting(word: str, names: list[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
        calls.append(word)
        return []

    monkeypatch.setattr(difflib, "get_close_matches", counting)
    parsed = parse_command_line(load_table("0.5.23"), ["--reasoning-parsr", "x"], subject="t")
    assert [o.written for o in parsed.options] == ["--reasoning-parsr"]
    assert calls == []
    assert "sglang-option-unknown" in [p.code for p in parsed.problems]
    assert calls and set(calls) == {"--reasoning-parsr"}


def test_json_option_nested_past_the_reader_is_a_typed_problem() -> None:
    """A JSON value nested deeper than Python's reader goes (RecursionError inside
    json.loads) is refused like any value the option does not take, never a traceback."""
    table = load_table("0.5.23")
    deep = "[" * 100_000 + "]" * 100_000
    assert codes(table, "--preferred-sampling-params", deep) == codes(
        table, "--preferred-sampling-params", "{"
    )
    assert codes(table, "--preferred-sampling-params", "{}") == []
