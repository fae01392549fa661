"""SGLang's data, pipeline and attention-DP sizes in extra_args, counted as SGLang counts
the GPUs it opens (engines/sglang/parallel.py)."""

from __future__ import annotations

import pytest

from pvegpu.errors import PvegpuError
from pvegpu.model.plan import Plan
from pvegpu.planning.decide import decided_servings
from strategies_serving import kpro6_plan, qwen_serving


def refused(plan: Plan) -> PvegpuError:
    with pytest.raises(PvegpuError) as err:
        decided_servings(plan)
    return err.value


def plan(version: str, *extra: str) -> Plan:
    return kpro6_plan(qwen_serving(version=version, extra_args=extra))


@pytest.mark.parametrize(
    ("version", "extra"),
    [
        ("0.5.23", ("--attn-dp-size", "4")),  # attention DP inside the 4 GPUs of TP
        ("0.5.23", ("--attn-dp-size", "2", "--dp-size", "1")),
        ("0.5.21", ("--dp-size", "4", "--enable-dp-attention")),  # the same, before 0.5.22
        ("0.5.21", ("--dp-size", "2", "--enable-dp-attention")),
    ],
)
def test_attention_data_parallelism_runs_inside_the_pool(version: str, extra: tuple[str]) -> None:
    (pool,) = decided_servings(plan(version, *extra)).pools
    assert pool.serving is not None and pool.serving.tp_size == 4


@pytest.mark.parametrize(
    ("version", "extra", "count"),
    [
        ("0.5.23", ("--dp-size", "2"), "2 x 4 x 1 = 8"),
        ("0.5.21", ("--data-parallel-size", "2"), "2 x 4 x 1 = 8"),
        ("0.5.23", ("--pp-size", "2"), "1 x 4 x 2 = 8"),
        # The last occurrence counts, as argparse keeps it.
        ("0.5.23", ("--dp-size", "1", "--dp-size", "3"), "3 x 4 x 1 = 12"),
    ],
)
def test_replicas_beyond_the_pool_are_refused_with_sglangs_count(
    version: str, extra: tuple[str], count: str
) -> None:
    err = refused(plan(version, *extra))
    (problem,) = [p for p in err.problems if p.code == "sglang-parallel-size-mismatch"]
    assert count in problem.message and f"SGLang {version}" in problem.message
    assert problem.subject == "pools[0].lxc.serving.extra_args"
    # The fix names the release's own spelling of attention DP.
    inside = "--attn-dp-size N" if version == "0.5.23" else "--enable-dp-attention"
    assert inside in problem.fix


@pytest.mark.parametrize(
    ("version", "extra"),
    [
        ("0.5.23", ("--attn-dp-size", "3")),
        ("0.5.21", ("--dp-size", "3", "--enable-dp-attention")),
    ],
)
def test_attention_dp_that_does_not_divide_tp_is_refused(version: str, extra: tuple[str]) -> None:
    err = refused(plan(version, *extra))
    assert [p.code for p in err.problems] == ["sglang-attn-dp-does-not-divide"]
    assert "tp_size % attn_dp_size" in err.problems[0].message
