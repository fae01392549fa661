"""etc/pve/mapping/pci.cfg with the mappings plan() built, in Proxmox's canonical form.

pci.cfg is cluster-wide: sections of other mappings (byte for byte) and map lines of
other nodes stay. Nothing here refuses: plan() checked the existing file and every value;
that the write drops the `#` lines inside the pools' mappings is a finding of the plan.
"""

from __future__ import annotations

from pvegpu.model.artifact import Artifact
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.paths import PVE_MODE
from pvegpu.model.plan import Plan
from pvegpu.pvefiles import pcicfg
from pvegpu.wording import plural


def render_pci_cfg(plan: Plan) -> tuple[Artifact, ...]:
    """etc/pve/mapping/pci.cfg with every pool's mapping, and without other mappings' lines
    for devices that moved into one; nothing when no pool has a mapping."""
    facts = plan.facts
    mappings = [pool.mapping for pool in plan.pools if pool.mapping is not None]
    # Lines move out of other mappings only into a pool's mapping, so there is one here.
    drop = {m.mapping_id: m.values for m in plan.moved_map_lines}
    where = facts.node
    shared = plan.shared_pci_cfg
    if shared is not None:
        # A cluster: one file for all nodes, in the writer's bundle only.
        if facts.node != shared.writer:
            return ()
        mappings, drop = list(shared.mappings), dict(shared.drop)
        where = ", ".join(shared.nodes)
    if not mappings:
        return ()
    base = pci_cfg(facts).file
    content = (
        pcicfg.format(mappings) if base is None else pcicfg.patch(base.content, mappings, drop=drop)
    )
    summary = ", ".join(f"{m.id} ({plural(len(m.maps), 'device')})" for m in mappings)
    if base is not None and content == base.content:
        reason = f"PCI mappings {summary} on {where} are already as planned"
    else:
        reason = f"PCI mappings {summary} on {where}, from discovered sysfs values"
    for moved in () if shared is not None else plan.moved_map_lines:
        lost = "removed" if moved.removed else f"loses {', '.join(moved.paths)}"
        reason += f"; {moved.mapping_id} {lost} (moved to {', '.join(moved.targets)})"
    if shared is not None and shared.drop:
        reason += "; devices moved out of " + ", ".join(i for i, _ in shared.drop)
    return (Artifact(pcicfg.PATH, content, reason, PVE_MODE, base=base),)
