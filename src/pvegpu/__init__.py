"""pvegpu: GPU splits on Proxmox VE hosts, planned and rendered as pure functions.

    facts = pvegpu.discover(Path("/"))
    plan = pvegpu.plan(facts, pvegpu.load_spec(Path("kpro6.toml")))
    artifacts = pvegpu.render(plan)

See docs/api.md. Note that `pvegpu.discover`, `pvegpu.plan` and `pvegpu.render` are the
functions; their modules are imported with `from pvegpu.plan import ...`.
"""

from pvegpu.artifact import Artifact
from pvegpu.bundle import write_bundle
from pvegpu.discover import discover
from pvegpu.errors import (
    ApplyError,
    DiscoveryError,
    PlanError,
    Problem,
    PvegpuError,
    RenderError,
    SpecError,
)
from pvegpu.facts import GPU, HostFacts, IommuGroup, NumaNode, PciFunction
from pvegpu.model import Finding, LxcContainer, PciMap, PciMapping, Plan, Pool, VmGuest
from pvegpu.pci import CpuList, PciAddress
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.plan import plan
from pvegpu.render import render
from pvegpu.serving import SglangServing
from pvegpu.spec import Spec
from pvegpu.specfile import load_spec, parse_spec

__all__ = [
    "GPU",
    "ApplyError",
    "Artifact",
    "CpuList",
    "DiscoveryError",
    "Finding",
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
    "Problem",
    "PvegpuError",
    "RenderError",
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
