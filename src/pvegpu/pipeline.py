"""The whole pure pipeline in one call: facts + spec -> plan -> artifacts."""

from __future__ import annotations

from pvegpu.artifact import Artifact
from pvegpu.facts import HostFacts
from pvegpu.model import Plan
from pvegpu.plan import plan
from pvegpu.render import render
from pvegpu.spec import Spec


def plan_and_render(facts: HostFacts, spec: Spec) -> tuple[Plan, tuple[Artifact, ...]]:
    planned = plan(facts, spec)
    return planned, render(planned)
