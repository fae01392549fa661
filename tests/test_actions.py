"""One list drives SUMMARY.md's runbook and `pvegpu apply`: each step's commands are its
actions' lines, and the actions survive MANIFEST.json unchanged."""

from __future__ import annotations

import json

import pytest

import bundled
from pvegpu.rendering.registry import render
from pvegpu.rendering.review.actions import Manual
from pvegpu.rendering.review.apply_doc import apply_document
from pvegpu.rendering.review.apply_steps import runbook
from pvegpu.rendering.review.contract import action_from_json, action_to_json


@pytest.mark.parametrize("name", ["kpro6", "kpro6-raw", "workstation", "mixed"])
def test_runbook_commands_are_the_actions_lines(name: str) -> None:
    plan = bundled.example_plan(name)
    steps = runbook(plan, render(plan))
    assert steps
    for step in steps:
        assert step.actions, step.title
        assert step.commands == tuple(line for a in step.actions for line in a.lines())


@pytest.mark.parametrize("name", ["kpro6", "workstation"])
def test_actions_round_trip_through_the_manifest(name: str) -> None:
    plan = bundled.example_plan(name)
    artifacts = render(plan)
    doc = json.loads(json.dumps(apply_document(plan, artifacts)))
    steps = runbook(plan, artifacts)
    loaded = [tuple(action_from_json(a) for a in s["actions"]) for s in doc["steps"]]
    assert loaded == [s.actions for s in steps]


def test_unknown_or_malformed_actions_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown action kind"):
        action_from_json({"kind": "rm-rf"})
    with pytest.raises(ValueError, match="expected a string"):
        action_from_json({"kind": "manual", "line": 3})
    with pytest.raises(ValueError, match="unknown keys"):
        action_from_json({**action_to_json(Manual("qm start 200")), "shell": "x"})
