"""The revert bundle: everything needed to put the host back as it was before the change.

Built from the apply artifacts: each patched file is restored from the base it was made
from, each new file is removed, and a script does the ordered steps around them. A unit
pvegpu could not read (`pulled_units`) is neither: it is restored from the copy the
runbook pulled out of the container.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from pvegpu.formats.templating import render_template
from pvegpu.model.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact, container_target
from pvegpu.model.facts import ConfigFile
from pvegpu.model.paths import (
    NODES_SCRIPT,
    NODES_UNIT_NAME,
    SPLIT_SCRIPT,
    SPLIT_UNIT_NAME,
    USERSPACE_SCRIPT,
    USERSPACE_UNIT_NAME,
)
from pvegpu.model.plan import Plan
from pvegpu.redact import holds_secret, redact_text
from pvegpu.rendering.bundle_layout import bundle_path
from pvegpu.values import value_class

SPLIT_UNIT = SPLIT_UNIT_NAME


KEPT_SUFFIX = ".pvegpu-orig"
"""A container file whose old copy holds secrets is kept beside it under this suffix
(systemd ignores it: not a unit suffix) instead of in the bundle."""


def kept_in_container(artifact: Artifact) -> bool:
    """Whether the old copy of this container file stays in the container, not the bundle.

    The container's current unit may carry tokens (`Environment=HF_TOKEN=...`): a copy in
    revert/ would spread them to wherever the bundle is reviewed or committed. The
    runbook copies it aside inside the container before the new one is pushed; the
    revert moves it back; the bundle holds a redacted copy for the reviewer.
    """
    base = artifact.base
    return artifact.target != HOST and base is not None and holds_secret(base.content)


ABSENT_SUFFIX = ".absent"
"""Beside a pulled copy's place in revert/: the runbook found no such file to pull."""


def pulled_units(plan: Plan) -> frozenset[tuple[str, str]]:
    """(target, path) of the units whose current copy pvegpu could not read.

    Their container's root file system is not a directory on the host (block storage),
    so the unit may exist although discovery saw none. It is never taken as new: the
    runbook copies it out with `pct pull` into revert/ before replacing it (or notes that
    there is none), and the revert restores that copy (or removes the new unit).
    """
    return frozenset(
        (container_target(p.serving.vmid), p.serving.unit_path)
        for p in plan.pools
        if p.serving is not None and p.serving.unit_unread
    )


def pulled_copy(artifact: Artifact) -> str:
    """Where the runbook puts the pulled copy, relative to the rendered directory."""
    return f"{REVERT_BUNDLE}/{bundle_path(artifact)}"


def _restore(artifact: Artifact) -> Artifact:
    # The base of a revert entry is the file as the change left it: revert.sh refuses
    # to overwrite or remove a file that someone changed after the change was applied
    # (pci.cfg is shared by the whole cluster).
    applied = ConfigFile(artifact.path, artifact.content)
    if artifact.base is None:
        return attrs.evolve(
            artifact,
            content="",
            reason=f"remove {artifact.path}: pvegpu created it",
            bundle=REVERT_BUNDLE,
            delete=True,
            base=applied,
        )
    if kept_in_container(artifact):
        return attrs.evolve(
            artifact,
            content=redact_text(artifact.base.content),
            reason=f"restore {artifact.path} from /{artifact.path}{KEPT_SUFFIX}, kept in the "
            "container: the old copy holds secrets, so this one is redacted",
            bundle=REVERT_BUNDLE,
            base=applied,
        )
    return attrs.evolve(
        artifact,
        content=artifact.base.content,
        reason=f"restore {artifact.path} as it was before (sha256 {artifact.base.sha256[:12]})",
        bundle=REVERT_BUNDLE,
        base=applied,
    )


@value_class
@attrs.frozen(eq=False, repr=False)
class _ContainerSteps:
    """What revert.sh does in one container before stopping it, while it still runs."""

    vmid: int
    units: tuple[str, ...]
    restores: tuple[Artifact, ...]
    removals: tuple[Artifact, ...]
    pulled: tuple[Artifact, ...]

    @classmethod
    def of(
        cls,
        vmid: int,
        serving: Sequence[tuple[int, str]],
        ct_entries: Sequence[Artifact],
        ct_pulled: Sequence[Artifact],
    ) -> _ContainerSteps:
        target = container_target(vmid)
        mine = [a for a in ct_entries if a.target == target]
        return cls(
            vmid=vmid,
            units=tuple(unit for v, unit in serving if v == vmid),
            restores=tuple(a for a in mine if not a.delete),
            removals=tuple(a for a in mine if a.delete),
            pulled=tuple(a for a in ct_pulled if a.target == target),
        )


def render_revert(plan: Plan, applied: Sequence[Artifact]) -> tuple[Artifact, ...]:
    """Restore/remove entries for every installed artifact, plus `revert.sh`."""
    installed = [a for a in applied if a.target != REVIEW]
    pulled = pulled_units(plan)
    # A pulled unit has no entry: its copy is written into revert/ by the runbook.
    ct_pulled = [a for a in installed if (a.target, a.path) in pulled]
    restores = tuple(_restore(a) for a in installed if (a.target, a.path) not in pulled)
    serving = [
        (p.lxc.vmid, p.serving.unit)
        for p in plan.lxc_pools
        if p.lxc is not None and p.serving is not None
    ]
    vms = [p.vm.vmid for p in plan.vfio_pools if p.vm is not None and p.vm.config is not None]
    ct_restores = [a for a in restores if a.target != HOST]
    containers = [p.lxc.vmid for p in plan.lxc_pools if p.lxc is not None]
    script = render_template(
        "revert.sh.j2",
        node=plan.facts.node,
        vms=vms,
        mappings=[p.mapping.id for p in plan.vfio_pools if p.mapping is not None],
        serving=serving,
        containers=containers,
        container_steps=[
            _ContainerSteps.of(vmid, serving, ct_restores, ct_pulled) for vmid in containers
        ],
        has_split=any(a.path == SPLIT_SCRIPT for a in installed),
        has_udev_rule=any(a.path in plan.host_changes.udev_rules for a in installed),
        boot_units=[
            unit
            for script, unit in (
                (NODES_SCRIPT, NODES_UNIT_NAME),
                (USERSPACE_SCRIPT, USERSPACE_UNIT_NAME),
            )
            if any(a.path == script and a.target == HOST for a in installed)
        ],
        userspace_script=(
            "/" + USERSPACE_SCRIPT
            if any(a.path == USERSPACE_SCRIPT and a.target == HOST for a in installed)
            else ""
        ),
        split_script="/" + SPLIT_SCRIPT,
        split_unit=SPLIT_UNIT,
        host_restores=[a for a in restores if a.target == HOST and not a.delete],
        host_removals=[a for a in restores if a.target == HOST and a.delete],
        ct_restores=[a for a in ct_restores if not a.delete],
        ct_kept=[a.path for a in installed if kept_in_container(a)],
        kept_suffix=KEPT_SUFFIX,
        ct_pulled=ct_pulled,
        absent_suffix=ABSENT_SUFFIX,
    )
    runner = Artifact(
        path="revert.sh",
        content=script,
        reason=(
            "runs the revert in order: stop guests (their own files back first), unbind vfio, "
            "restore host files, restart; with ROOT set, a dry run on a copy"
        ),
        mode=0o755,
        target=REVIEW,
        bundle=REVERT_BUNDLE,
    )
    return (*restores, runner)
