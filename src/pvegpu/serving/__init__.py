"""The SGLang server of an LXC pool: command line, environment, pinning and checks, as values.

`SglangServing.from_pool(plan_or_facts, pool)` is the only way to get one, so what the
seed deployment got wrong cannot be written down: the TP size is the pool's GPU count
(a `--tp 8` left over from the 8-GPU layout cannot survive), flags come from the option
table of the SGLang version the spec names (a renamed or removed flag is a render-time
error), P2P is decided from the IOMMU and SEV-SNP facts, the memory fit and the head
divisibility come from the model's own config.json, and the container's NVIDIA userspace
is compared with the host's kernel module.

Pure: every host file it looks at is in the facts. `read_serving_files(root, spec)` is
the thin reader that puts them there (`with_serving_files` for a whole HostFacts).

One module per concern: `model` (the values), `build` (from a pool, and for a plan),
`command`, `environment`, `p2p`, `numa`, `fit`, `container` (the decisions and checks,
each recording into `checks.Checks`), `systemd` (quoting for the unit), `unit` (the unit
text), `unitfile` and `drops` (reading the container's current unit back, and what the
new one would drop of it), `layout` (paths) and `reader` (the only I/O).
"""

from __future__ import annotations

from pvegpu.host.serving_files import read_serving_files, with_serving_files
from pvegpu.serving.build import serving_findings, servings
from pvegpu.serving.container import container_driver_problems, container_driver_state
from pvegpu.serving.decision import (
    ContainerDriver,
    MemoryFit,
    NumaPinning,
    P2PDecision,
    P2PSource,
    ServingFiles,
    SglangServing,
)
from pvegpu.serving.drops import DroppedSetting, UnitComparison, compare_units
from pvegpu.serving.environment import visible_indices
from pvegpu.serving.fit import DEFAULT_MEM_FRACTION
from pvegpu.serving.systemd import environment_assignment, exec_word, unit_text
from pvegpu.serving.unit import unit_content

__all__ = [
    "DEFAULT_MEM_FRACTION",
    "ContainerDriver",
    "DroppedSetting",
    "MemoryFit",
    "NumaPinning",
    "P2PDecision",
    "P2PSource",
    "ServingFiles",
    "SglangServing",
    "UnitComparison",
    "compare_units",
    "container_driver_problems",
    "container_driver_state",
    "environment_assignment",
    "exec_word",
    "read_serving_files",
    "serving_findings",
    "servings",
    "unit_content",
    "unit_text",
    "visible_indices",
    "with_serving_files",
]
