"""A flag the engine's release deprecates is named with its replacement and when it goes
(`engine-flag-deprecated`; the facts in engines/sglang/versions.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pvegpu.engines.sglang import versions
from pvegpu.errors import PvegpuError
from pvegpu.model.facts import ConfigFile
from pvegpu.planning.decide import decided_servings
from pvegpu.planning.unit_gpus import unit_demand
from pvegpu.serving.unitfile import parse_unit
from strategies_serving import ROOTFS, kpro6_plan, qwen_serving
from test_leftover_servers import UNIT, host, planned

OLD_DP_UNIT = """[Service]
ExecStart=/root/ml-env/bin/python3 -m sglang.launch_server \\
    --model /shared/models/Qwen3.5-122B-A10B --tp 4 --dp-size 4 --enable-dp-attention
Restart=always
"""


def test_the_release_table_holds_sglangs_own_date() -> None:
    gone = versions.RULES.deprecation("--enable-dp-attention")
    assert gone is not None
    assert (gone.replacement, gone.since, gone.removal) == (
        "--attn-dp-size <dp-size>",
        "0.5.22",
        "after 2026-12-31",
    )
    assert versions.RULES.deprecation("--attn-dp-size") is None


def test_a_deprecated_flag_in_extra_args_is_refused_with_its_replacement_and_date() -> None:
    spec = qwen_serving(extra_args=("--enable-dp-attention",))
    with pytest.raises(PvegpuError) as err:
        decided_servings(kpro6_plan(spec))
    (problem,) = [p for p in err.value.problems if p.code == "sglang-option-deprecated"]
    assert problem.fix == (
        "use --attn-dp-size <dp-size> (SGLang removes `--enable-dp-attention` after 2026-12-31)"
    )


def test_the_serving_pools_old_unit_names_the_deprecated_flag() -> None:
    old = ConfigFile(f"{ROOTFS}/etc/systemd/system/sglang-dp.service", OLD_DP_UNIT)
    plan = kpro6_plan(qwen_serving(unit="sglang-dp"), extra=(old,))
    found = [f for f in decided_servings(plan).findings if f.code == "engine-flag-deprecated"]
    (finding,) = found
    assert finding.subject == "pool sglang"
    assert "`--enable-dp-attention`" in finding.message
    assert "`--attn-dp-size <dp-size>`" in finding.message
    assert "after 2026-12-31" in finding.message and "0.5.22" in finding.message


def test_an_old_unit_read_for_its_gpus_keeps_its_deprecated_flags() -> None:
    unit = parse_unit(OLD_DP_UNIT)
    (server,) = unit_demand(unit).servers
    assert [d.flag for d in server.deprecated] == ["--enable-dp-attention"]
    assert server.gpus == 4  # SGLang reads it as --attn-dp-size 4 inside TP 4
    (plain,) = unit_demand(parse_unit(OLD_DP_UNIT.replace(" --enable-dp-attention", ""))).servers
    assert plain.deprecated == ()


def test_a_container_unit_pvegpu_does_not_render_is_warned_about(tmp_path: Path) -> None:
    root = host(tmp_path, tp="4")
    unit = root / UNIT
    unit.write_text(unit.read_text().replace(" --tp 4 ", " --tp 4 --enable-dp-attention ", 1))
    (finding,) = [f for f in planned(root).findings if f.code == "engine-flag-deprecated"]
    assert finding.subject == UNIT
    assert "sglang-qwen.service (enabled in CT 129)" in finding.message
    assert "after 2026-12-31" in finding.message
    assert "edit /etc/systemd/system/sglang-qwen.service in CT 129" in finding.message
