"""What the reviewer reads, as data: the layout table, the changed files, the runbook.

Pure functions of a Plan and its rendered artifacts. The markdown (render_review) and
the terminal table (topology) only format what is computed here, so every command in
the runbook can be tested without parsing prose.

The runbook is written for the reference situation: the host is live, the container
is running its server on GPUs that are about to move, and nothing may be lost if a
step fails. Every step says what success looks like, so an admin can stop at the
first surprise and use the revert steps instead of improvising.

- gpu_layout: every GPU, its pool and driver before/after; the host facts line.
- changes: the files written, where they lie, and how each one changes.
- commands: single commands (driver and GPU checks, health URL, VM attach lines).
- apply_steps: the runbook, `Step` by `Step`.
- manual_revert: the runbook undone by hand.
"""

from __future__ import annotations

from pvegpu.diagnostic import Severity
from pvegpu.rendering.drawing import UNBOUND
from pvegpu.rendering.host_picture import host_facts_line
from pvegpu.rendering.review.apply_steps import Step, runbook
from pvegpu.rendering.review.changes import (
    BACKUP_DIR,
    PVE_DIR,
    ChangedFile,
    ChangeKind,
    change_kind,
    changed_files,
    container_vmid,
    in_bundle,
    installed,
    is_revert,
    revert_script,
    review_only,
)
from pvegpu.rendering.review.commands import (
    HEALTH_TIMEOUT_S,
    SPLIT_SCRIPT,
    SPLIT_UNIT,
    driver_check,
    hostpci_lines,
    qm_set_command,
)
from pvegpu.rendering.review.gpu_layout import (
    LayoutRow,
    MovingFunction,
    driver_after,
    driver_now,
    gpus_in_pci_order,
    layout,
    moving_functions,
    pools_by_gpu,
    purpose,
)
from pvegpu.rendering.review.manual_revert import revert_steps

SEVERITY_ORDER = (Severity.WARNING, Severity.INFO)
"""Display order of findings: what needs attention first."""

__all__ = [
    "BACKUP_DIR",
    "HEALTH_TIMEOUT_S",
    "PVE_DIR",
    "SEVERITY_ORDER",
    "SPLIT_SCRIPT",
    "SPLIT_UNIT",
    "UNBOUND",
    "ChangeKind",
    "ChangedFile",
    "LayoutRow",
    "MovingFunction",
    "Step",
    "change_kind",
    "changed_files",
    "container_vmid",
    "driver_after",
    "driver_check",
    "driver_now",
    "gpus_in_pci_order",
    "host_facts_line",
    "hostpci_lines",
    "in_bundle",
    "installed",
    "is_revert",
    "layout",
    "moving_functions",
    "pools_by_gpu",
    "purpose",
    "qm_set_command",
    "revert_script",
    "revert_steps",
    "review_only",
    "runbook",
]
