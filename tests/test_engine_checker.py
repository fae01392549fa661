"""The one command-line checker both engines share (`engines.common.option_check`), run
with each engine's own parser rules: what one engine's parser does must not leak into
the other's checks."""

from __future__ import annotations

import pytest

from pvegpu.engines.sglang import option_check as sglang_check
from pvegpu.engines.sglang import options as sglang_options
from pvegpu.engines.vllm import option_check as vllm_check
from pvegpu.engines.vllm import options as vllm_options
from pvegpu.errors import PlanError, RenderError
from pvegpu.planning.decide import decided_servings
from strategies_serving import kpro6_plan, qwen_serving

SGLANG = sglang_options.load_table(sglang_options.shipped_versions()[-1])
VLLM = vllm_options.load_table(vllm_options.shipped_versions()[-1])


def sglang_codes(*args: str, complete: bool = False) -> list[str]:
    line = sglang_check.parse_command_line(SGLANG, args, subject="t", complete=complete)
    return [p.code for p in line.problems]


def vllm_codes(*args: str, complete: bool = False) -> list[str]:
    line = vllm_check.parse_command_line(VLLM, args, subject="t", complete=complete)
    return [p.code for p in line.problems]


def test_only_vllm_reads_underscores_as_dashes() -> None:
    """vLLM's FlexibleArgumentParser takes `--max_model_len`; SGLang's argparse does not,
    so there it is an unknown option, not an alias to rewrite."""
    assert vllm_codes("--max_model_len", "4096") == ["vllm-option-alias"]
    assert sglang_codes("--tp_size", "4") == ["sglang-option-unknown"]


def test_only_vllm_takes_its_model_as_a_positional() -> None:
    line = vllm_check.parse_command_line(VLLM, ["/m", "--port", "1"], subject="t")
    assert (line.positionals, line.problems) == (("/m",), ())
    assert vllm_codes("--port", "1", complete=True) == ["vllm-model-missing"]
    whole = sglang_check.parse_command_line(
        SGLANG, ["/m", "--model-path", "/m"], subject="t", complete=True
    )
    assert whole.positionals == ()
    (problem,) = whole.problems
    assert problem.code == "sglang-argument-unexpected"
    assert f"sglang {SGLANG.version} has no positional arguments" in problem.message


def test_a_fragment_holds_no_positional_for_either_engine() -> None:
    assert vllm_codes("/m", "--port", "1") == ["vllm-argument-unexpected"]
    assert sglang_codes("/m") == ["sglang-argument-unexpected"]


def test_a_collecting_action_may_repeat_only_where_the_engine_has_one() -> None:
    """vLLM's append actions (`--middleware`) collect every occurrence; any other repeat
    is one argparse silently drops, in either engine."""
    assert vllm_codes("--middleware", "a", "--middleware", "b") == []
    assert vllm_codes("--port", "1", "--port", "2") == ["vllm-option-repeated"]
    assert sglang_codes("--port", "1", "--port", "2") == ["sglang-option-repeated"]


def test_each_engine_words_its_own_problems() -> None:
    """Codes, release names and the project in prose are the engine's, never the other's."""
    (sglang,) = sglang_check.parse_command_line(
        SGLANG, ["--help"], subject="t", complete=False
    ).problems
    (vllm,) = vllm_check.parse_command_line(VLLM, ["--help"], subject="t", complete=False).problems
    assert (sglang.code, vllm.code) == ("sglang-option-help", "vllm-option-help")
    assert f"sglang {SGLANG.version}" in sglang.message
    assert f"vllm {VLLM.version}" in vllm.message


def test_each_engine_names_its_own_broken_table() -> None:
    with pytest.raises(RenderError) as sglang:
        sglang_options.OptionTable.from_json("{", source="s.json")
    with pytest.raises(RenderError) as vllm:
        vllm_options.OptionTable.from_doc({}, source="v.json")
    (sglang_problem,), (vllm_problem,) = sglang.value.problems, vllm.value.problems
    assert (sglang_problem.code, vllm_problem.code) == (
        "sglang-table-invalid",
        "vllm-table-invalid",
    )
    assert sglang_problem.message.startswith("not an SGLang option table: ")
    assert vllm_problem.message.startswith("not a vLLM option table: ")
    assert "make sglang-tables" in sglang_problem.fix
    assert "make vllm-tables" in vllm_problem.fix


def test_a_plan_refusal_lists_the_command_lines_problems_too() -> None:
    """A spec that fails on the host and on the release's table is refused once, with
    every problem: fixing one must not reveal the other only on the next run."""
    serving = qwen_serving(served_model_name="a:b", extra_args=("--no-such-flag",))
    with pytest.raises(PlanError) as err:
        decided_servings(kpro6_plan(serving))
    found = [p.code for p in err.value.problems]
    assert "served-model-name-colon" in found
    assert "sglang-option-unknown" in found
