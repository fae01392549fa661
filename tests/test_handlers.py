"""Apply dispatches every action through one table (apply/handlers.py): an action class
without a row there, or without its `kind` in MANIFEST.json's table, fails here rather
than being skipped silently by apply or revert."""

from __future__ import annotations

import inspect
from typing import get_args

import attrs

from pvegpu.apply.handlers import HANDLERS
from pvegpu.rendering.review import actions
from pvegpu.rendering.review.actions import ACTIONS, Action


def _action_classes() -> set[type]:
    """Every class actions.py defines with a `kind`: what the runbook can hold."""
    return {
        cls
        for _, cls in inspect.getmembers(actions, inspect.isclass)
        if cls.__module__ == actions.__name__ and attrs.has(cls) and hasattr(cls, "kind")
    }


def test_every_action_is_in_the_union_and_has_a_unique_kind() -> None:
    assert _action_classes() == set(get_args(Action))
    assert sorted(ACTIONS) == sorted(cls.kind for cls in get_args(Action))
    assert all(ACTIONS[cls.kind] is cls for cls in get_args(Action))


def test_every_action_has_a_row_in_the_dispatch_table() -> None:
    assert set(HANDLERS) == _action_classes()


def test_a_check_that_a_tree_answers_is_a_check() -> None:
    for cls, handlers in HANDLERS.items():
        assert handlers.already is not None or not handlers.already_in_tree, cls
