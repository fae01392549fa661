"""pvegpu: GPU splits on Proxmox VE hosts, planned and rendered as pure functions.

    facts = pvegpu.discover(Path("/"))
    plan = pvegpu.plan(facts, pvegpu.load_spec(Path("kpro6.toml")))
    artifacts = pvegpu.render(plan)

See docs/api.md (the public API, all of it listed in `__all__`) and docs/architecture.md
(which package does what). Names are imported on first use: `import pvegpu` costs the
error types only, so `pvegpu --help` and `pvegpu discover` never load jinja2, the
planner or the renderers.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.errors import (
    ApplyError,
    BundleError,
    DiscoveryError,
    PlanError,
    PvegpuError,
    RenderError,
    SpecError,
)

__version__ = "0.1.0"
"""The one place the version is written: pyproject.toml reads it from here (dynamic), and
`pvegpu --version` prints it without package metadata, which a checkout run as
`PYTHONPATH=src python3 -m pvegpu` does not have."""

if TYPE_CHECKING:
    from pvegpu.engines.sglang.decision import SglangServing
    from pvegpu.host.discover import discover
    from pvegpu.model.artifact import Artifact, ArtifactRole
    from pvegpu.model.decision import DecidedServer
    from pvegpu.model.facts import GPU, HostFacts, IommuGroup, NumaNode, PciFunction
    from pvegpu.model.plan import (
        LxcContainer,
        PciMap,
        PciMapping,
        Plan,
        Pool,
        VmGuest,
    )
    from pvegpu.model.schema import Spec
    from pvegpu.pci import CpuList, PciAddress
    from pvegpu.pipeline import discover_for, load_spec, parse_spec, plan_and_render
    from pvegpu.planning.planner import plan
    from pvegpu.rendering.bundle import write_bundle
    from pvegpu.rendering.registry import render

_HOMES = {
    "pvegpu.host.discover": ("discover",),
    "pvegpu.model.facts": ("GPU", "HostFacts", "IommuGroup", "NumaNode", "PciFunction"),
    "pvegpu.pci": ("CpuList", "PciAddress"),
    "pvegpu.pipeline": ("discover_for", "load_spec", "parse_spec", "plan_and_render"),
    "pvegpu.model.plan": (
        "LxcContainer",
        "PciMap",
        "PciMapping",
        "Plan",
        "Pool",
        "VmGuest",
    ),
    "pvegpu.planning.planner": ("plan",),
    "pvegpu.model.artifact": ("Artifact", "ArtifactRole"),
    "pvegpu.rendering.bundle": ("write_bundle",),
    "pvegpu.rendering.registry": ("render",),
    "pvegpu.model.decision": ("DecidedServer",),
    "pvegpu.engines.sglang.decision": ("SglangServing",),
    "pvegpu.model.schema": ("Spec",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'pvegpu' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "GPU",
    "ApplyError",
    "Artifact",
    "ArtifactRole",
    "BundleError",
    "CpuList",
    "DecidedServer",
    "Diagnostic",
    "DiscoveryError",
    "HostFacts",
    "IommuGroup",
    "LxcContainer",
    "NumaNode",
    "PciAddress",
    "PciFunction",
    "PciMap",
    "PciMapping",
    "Plan",
    "PlanError",
    "Pool",
    "PvegpuError",
    "RenderError",
    "Severity",
    "SglangServing",
    "Spec",
    "SpecError",
    "VmGuest",
    "discover",
    "discover_for",
    "load_spec",
    "parse_spec",
    "plan",
    "plan_and_render",
    "render",
    "write_bundle",
]
