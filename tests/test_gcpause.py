"""pvegpu.gcpause: planning runs with cyclic collection paused, and leaves it as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pvegpu.gcpause import gc_paused

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


@gc_paused
def _enabled_inside(fail: bool = False) -> bool:
    if fail:
        raise ValueError("stage failed")
    return gc.isenabled()


def test_paused_inside_and_enabled_after() -> None:
    gc.enable()
    assert _enabled_inside() is False
    assert gc.isenabled()


def test_enabled_again_after_an_error() -> None:
    gc.enable()
    with pytest.raises(ValueError, match="stage failed"):
        _enabled_inside(fail=True)
    assert gc.isenabled()


def test_left_off_when_the_caller_turned_it_off() -> None:
    gc.disable()
    assert _enabled_inside() is False
    assert not gc.isenabled()


def test_plan_runs_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner itself runs with collection off (a large host's facts heap is walked
    by every full collection, docs/performance.md), and turns it back on."""
    import pvegpu
    from pvegpu.planning import planner

    spec = pvegpu.load_spec(REPO / "examples/kpro6.toml")
    facts = pvegpu.discover_for(spec, REPO / "fixtures/sysfs/kpro6")
    seen: list[bool] = []
    select = planner._select

    def spy(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return select(*args)

    monkeypatch.setattr(planner, "_select", spy)
    gc.enable()
    planner.plan(facts, spec)
    assert seen == [False]
    assert gc.isenabled()
