"""pvegpu.gcpause: planning, and a short CLI command as a whole, run with cyclic collection
paused, and leave it as it was."""

from __future__ import annotations

import argparse
import gc
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pvegpu.gcpause import command_paused

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_plan_leaves_the_collector_as_the_caller_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """plan() is a pure stage: it neither pauses nor restarts the collector (that is the
    CLI process's choice, command_paused), whatever state its caller left it in."""
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
    for enabled in (True, False):
        gc.enable() if enabled else gc.disable()
        planner.plan(facts, spec)
        assert seen[-1] is enabled and gc.isenabled() is enabled


def test_command_paused_inside_and_enabled_after() -> None:
    gc.enable()
    with command_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_command_paused_enabled_again_after_an_error() -> None:
    gc.enable()
    with pytest.raises(ValueError, match="command failed"), command_paused():
        raise ValueError("command failed")
    assert gc.isenabled()


def test_command_paused_left_off_when_the_caller_turned_it_off() -> None:
    gc.disable()
    with command_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


class _Node:
    """An object that can sit in a reference cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.me = self


def test_what_a_command_made_is_old_after_it() -> None:
    """The objects a command made are not counted as new when collection resumes (no
    collection walks them all at the next allocation), yet a full collection still
    frees a cycle among them."""
    gc.enable()
    gc.collect()
    with command_paused():
        kept: list[list[int]] = [[] for _ in range(5 * gc.get_threshold()[0])]
        cycle = weakref.ref(_Node())
    assert gc.get_count()[0] < gc.get_threshold()[0]
    assert any(o is kept for o in gc.get_objects(generation=2))
    assert cycle() is not None
    gc.collect()
    assert cycle() is None


def test_frozen_objects_stay_frozen() -> None:
    """Objects something else froze (a pre-forking host) are not thawed by a command."""
    gc.enable()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with command_paused():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_cli_pauses_all_but_the_waiting_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """`main` runs a short command (its imports too) paused; apply and revert, which wait
    on the host for minutes, with collection on."""
    from pvegpu import cli

    seen: dict[str, bool] = {}

    def run(args: argparse.Namespace) -> int:
        seen[args.command] = gc.isenabled()
        return 0

    monkeypatch.setattr(cli, "_run_function", lambda args: run)
    gc.enable()
    for argv in (["discover"], ["render", "--spec", "s.toml", "--out", "o"], ["revert"]):
        assert cli.main(argv) == 0
        assert gc.isenabled()
    assert seen == {"discover": False, "render": False, "revert": True}


def test_cli_as_the_program_leaves_its_heap_frozen_for_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """main() with no argv is the program (the console script): the objects it leaves are
    frozen, so the interpreter's exit does not walk them. With argv (a caller in the same
    process, as here), nothing stays frozen."""
    from pvegpu import cli

    monkeypatch.setattr(cli, "_run_function", lambda args: lambda a: 0)
    gc.enable()
    assert cli.main(["discover"]) == 0
    assert gc.get_freeze_count() == 0
    monkeypatch.setattr(sys, "argv", ["pvegpu", "discover"])
    try:
        assert cli.main() == 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert gc.isenabled()
