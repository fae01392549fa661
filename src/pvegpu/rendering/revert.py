"""The revert bundle: everything needed to put the host back as it was before the change.

Built from the apply artifacts alone: each patched file is restored from the base it was
made from, each new file is removed, and a script does the ordered steps around them.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from pvegpu.host.facts import ConfigFile
from pvegpu.host.paths import SPLIT_SCRIPT, SPLIT_UNIT_NAME
from pvegpu.planning.plan import Plan
from pvegpu.rendering.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.rendering.templating import render_template

SPLIT_UNIT = SPLIT_UNIT_NAME


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
    return attrs.evolve(
        artifact,
        content=artifact.base.content,
        reason=f"restore {artifact.path} as it was before (sha256 {artifact.base.sha256[:12]})",
        bundle=REVERT_BUNDLE,
        base=applied,
    )


def render_revert(plan: Plan, applied: Sequence[Artifact]) -> tuple[Artifact, ...]:
    """Restore/remove entries for every installed artifact, plus `revert.sh`."""
    installed = [a for a in applied if a.target != REVIEW]
    restores = tuple(_restore(a) for a in installed)
    serving = [
        (p.lxc.vmid, p.serving.unit)
        for p in plan.lxc_pools
        if p.lxc is not None and p.serving is not None
    ]
    vms = [p.vm.vmid for p in plan.vfio_pools if p.vm is not None and p.vm.config is not None]
    script = render_template(
        "revert.sh.j2",
        node=plan.facts.node,
        vms=vms,
        mappings=[p.mapping.id for p in plan.vfio_pools if p.mapping is not None],
        serving=serving,
        containers=[p.lxc.vmid for p in plan.lxc_pools if p.lxc is not None],
        has_split=any(a.path == SPLIT_SCRIPT for a in installed),
        split_script="/" + SPLIT_SCRIPT,
        split_unit=SPLIT_UNIT,
        host_restores=[a for a in restores if a.target == HOST and not a.delete],
        host_removals=[a for a in restores if a.target == HOST and a.delete],
        ct_restores=[a for a in restores if a.target != HOST and not a.delete],
        ct_removals=[a for a in restores if a.target != HOST and a.delete],
    )
    runner = Artifact(
        path="revert.sh",
        content=script,
        reason="runs the revert in order: stop guests, unbind vfio, restore files, restart",
        mode=0o755,
        target=REVIEW,
        bundle=REVERT_BUNDLE,
    )
    return (*restores, runner)
