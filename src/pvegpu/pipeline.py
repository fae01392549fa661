"""The whole pipeline in two calls: read the host for a spec, then plan and render."""

from __future__ import annotations

from pathlib import Path

from pvegpu.host.discover import discover
from pvegpu.host.facts import HostFacts
from pvegpu.planning.plan import Plan
from pvegpu.planning.planner import plan
from pvegpu.rendering.artifact import Artifact
from pvegpu.rendering.registry import render
from pvegpu.serving import with_serving_files
from pvegpu.spec.schema import Spec


def discover_for(spec: Spec, root: Path = Path("/")) -> HostFacts:
    """Host facts plus the files this spec's servers need (model config, container rootfs).

    The only I/O of the pipeline: after this, planning and rendering are pure.
    """
    return with_serving_files(discover(root), root, spec)


def plan_and_render(facts: HostFacts, spec: Spec) -> tuple[Plan, tuple[Artifact, ...]]:
    planned = plan(facts, spec)
    return planned, render(planned)
