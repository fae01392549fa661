"""pvegpu: GPU splits on Proxmox VE hosts, planned and rendered as pure functions."""

from pvegpu.errors import (
    DiscoveryError,
    PlanError,
    Problem,
    PvegpuError,
    RenderError,
    SpecError,
)
from pvegpu.facts import GPU, HostFacts, IommuGroup, NumaNode, PciFunction
from pvegpu.pci import CpuList, PciAddress

__all__ = [
    "GPU",
    "CpuList",
    "DiscoveryError",
    "HostFacts",
    "IommuGroup",
    "NumaNode",
    "PciAddress",
    "PciFunction",
    "PlanError",
    "Problem",
    "PvegpuError",
    "RenderError",
    "SpecError",
]
