"""The mappings of pci.cfg outside the pools, on this node, after the plan.

A device that goes into a pool's mapping leaves every other mapping: the old mapping
loses its map line in the rendered pci.cfg (and goes when none is left), so no device is
in two mappings. A `;` line that hands over a moving device together with one that stays
cannot be split by pvegpu and is refused. Lines of other nodes are never touched. What
each mapping hands over on this node afterwards is what host_guests.py judges VMs by; the
lines of this node that stay are judged against sysfs (stale_mappings.py).

The pool's own VM may still name its GPUs by the mapping they leave (the spec renamed
the mapping): guests.py converts those lines to the pool's mapping in place, and a line
on such a mapping that keeps other devices on this node is refused here, since which of
them the VM should keep is the admin's call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.plan import Pool, VmGuest
from pvegpu.model.released import MapLinesMoved
from pvegpu.planning.claims import Claims
from pvegpu.planning.stale_mappings import stale_map_findings
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.guestconf import is_pending
from pvegpu.pvefiles.hostpci import HostId, HostpciUse, host_ids, hostpci_use
from pvegpu.pvefiles.pcicfg import MapLine, PciCfgSection
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class MappingOutcome:
    """pci.cfg's mappings on this node once the plan is applied."""

    moved: tuple[MapLinesMoved, ...] = ()
    devices: Mapping[str, tuple[HostId, ...]] = attrs.field(factory=dict)
    """Each mapping's devices on this node after the plan, by mapping id."""
    counts: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    """Map lines on this node before and after the plan, by mapping id."""
    problems: tuple[Diagnostic, ...] = ()
    findings: tuple[Diagnostic, ...] = ()

    def shrinks(self, mapping_id: str) -> tuple[int, int] | None:
        """(before, after) when the mapping hands over fewer devices on this node."""
        before, after = self.counts.get(mapping_id, (0, 0))
        return (before, after) if after < before else None

    def removed(self, mapping_id: str) -> tuple[str, ...]:
        """The mappings a removed mapping's devices went to; empty when it stays."""
        gone = [m for m in self.moved if m.mapping_id == mapping_id and m.removed]
        return gone[0].targets if gone else ()


def mapping_outcome(facts: HostFacts, pools: Sequence[Pool], claims: Claims) -> MappingOutcome:
    """Decide which map lines of other mappings move, refuse what cannot be split."""
    owners = {p.mapping.id: p for p in pools if p.mapping is not None}
    devices = {i: host_ids(m.path for m in p.maps) for i, p in _mappings(pools).items()}
    paths = {i: tuple(m.path for m in p.maps) for i, p in _mappings(pools).items()}
    counts = {i: (0, len(p.maps)) for i, p in _mappings(pools).items()}
    existing = pci_cfg(facts)
    if existing.file is None:
        return MappingOutcome(devices=devices, counts=counts)
    if existing.error is not None:
        # With a pool mapping, pci_cfg_problems refuses the file already. Without one the
        # file is read only to judge VMs by mapping: refused when there is one to judge.
        vms = (f.content for _, f in guests(facts).vms)
        error = existing.error
        refusals = error.problems if not owners and any(map(_uses_mapping, vms)) else ()
        return MappingOutcome(devices=devices, counts=counts, problems=refusals)
    sections = existing.sections
    moved: list[MapLinesMoved] = []
    problems: list[Diagnostic] = []
    for section in sections:
        here = [m for m in section.maps if m.node == facts.node]
        if section.id in owners:
            counts[section.id] = (len(here), counts[section.id][1])
            continue
        keep: list[MapLine] = []
        gone: list[tuple[MapLine, set[str]]] = []
        for line in here:
            targets, problem = _moving(line, section, claims)
            if problem is not None:
                problems.append(problem)
            if targets and problem is None:
                gone.append((line, targets))
            else:
                keep.append(line)
        devices[section.id] = host_ids(m.get("path") or "" for m in keep)
        paths[section.id] = tuple(m.get("path") or "" for m in keep)
        counts[section.id] = (len(here), len(keep))
        if gone:
            moved.append(
                MapLinesMoved(
                    section.id,
                    tuple(m.value for m, _ in gone),
                    tuple(m.get("path") or "" for m, _ in gone),
                    tuple(sorted({t for _, ts in gone for t in ts})),
                    removed=len(gone) == len(section.maps),
                )
            )
    for pool in pools:
        if pool.vm is not None and pool.vm.old_mappings:
            problems.extend(_old_mapping_problems(facts, pool.vm, paths))
    # The lines that stay, against sysfs: Proxmox refuses their VMs' start if stale.
    leaving = {m.mapping_id: m.values for m in moved}
    stale = stale_map_findings(facts, sections, owned=owners.keys(), moved=leaving)
    findings = (*(_moved_finding(facts.node, m) for m in moved), *stale)
    return MappingOutcome(tuple(moved), devices, counts, tuple(problems), findings)


def old_mappings(facts: HostFacts, mapping_id: str, mapped: Sequence[str]) -> tuple[str, ...]:
    """The sections of the existing pci.cfg, other than `mapping_id`, whose map lines of
    this node hand over a device of `mapped` (the pool's mapping on this node): where the
    pool's GPUs are now, so the ids its VM may still name them by (a renamed mapping)."""
    owned = host_ids(mapped)
    if not owned:
        return ()
    # A broken pci.cfg has no sections: refused on its own (pci_cfg_problems).
    return tuple(
        section.id
        for section in pci_cfg(facts).sections
        if section.id != mapping_id
        and any(
            line.node == facts.node and any(h.overlaps(o) for h in _hosts(line) for o in owned)
            for line in section.maps
        )
    )


def _hosts(line: MapLine) -> tuple[HostId, ...]:
    return host_ids([line.get("path") or ""])


def _old_mapping_problems(
    facts: HostFacts, vm: VmGuest, paths: Mapping[str, tuple[str, ...]]
) -> list[Diagnostic]:
    """The pool's VM's lines on a mapping its GPUs leave that guests.py cannot convert:
    in the main section, one whose mapping keeps other devices on this node; pending, any
    whose mapping keeps none (it would name a mapping without a device at the next start).
    """
    if vm.config is None:
        return []
    problems: list[Diagnostic] = []
    number = 0
    for section, lines in guests(facts).config(vm.config).sections:
        for line in lines:
            number += 1
            use = hostpci_use(line)
            if use is None or use.mapping not in vm.old_mappings:
                continue
            where, left = f"{vm.config_path} line {number}", paths.get(use.mapping, ())
            if section.name is None and left:
                problems.append(_old_mapping_shared(where, facts.node, vm, line.raw, use, left))
            elif section.name is not None and is_pending(section) and not left:
                problems.append(_pending_old_mapping(where, facts.node, vm, line.raw, use))
    return problems


def _old_mapping_shared(
    where: str, node: str, vm: VmGuest, raw: str, use: HostpciUse, left: tuple[str, ...]
) -> Diagnostic:
    devices = ", ".join(left)
    them = "it" if len(left) == 1 else "them"
    return Diagnostic.error(
        "vm-old-mapping-shared",
        where,
        f"`{raw.strip()}` names mapping {use.mapping}, which the pool's GPUs leave for "
        f"{vm.mapping_id}, but which still hands over {devices} on {node}, not the "
        f"pool's: converting the line would take {them} from VM {vm.vmid}, keeping it "
        f"would pass {them} to the VM next to the pool's GPUs",
        f"either remove the line (qm set {vm.vmid} --delete {use.key}), or, if VM "
        f"{vm.vmid} keeps {devices}, move {them} out of mapping {use.mapping} into a "
        f"mapping of {'its' if len(left) == 1 else 'their'} own (Datacenter > Resource "
        "Mappings) and give the VM a hostpci line on that; then run pvegpu again",
    )


def _pending_old_mapping(
    where: str, node: str, vm: VmGuest, raw: str, use: HostpciUse
) -> Diagnostic:
    return Diagnostic.error(
        "vm-pending-old-mapping",
        where,
        f"the pending change `{raw.strip()}` names mapping {use.mapping}, which has no "
        f"device on {node} after the plan (the pool's GPUs leave it for {vm.mapping_id}): "
        f"VM {vm.vmid} would not start once the change applies",
        f"revert it (qm set {vm.vmid} --revert {use.key}), then run pvegpu again",
    )


def _mappings(pools: Sequence[Pool]) -> dict[str, pcicfg.PciMapping]:
    return {p.mapping.id: p.mapping for p in pools if p.mapping is not None}


def _uses_mapping(text: str) -> bool:
    return any(line.startswith("hostpci") and "mapping=" in line for line in text.splitlines())


def _moving(
    line: MapLine, section: PciCfgSection, claims: Claims
) -> tuple[set[str], Diagnostic | None]:
    """The pool mappings this line's devices move to; a Diagnostic when only some move."""
    hosts = host_ids([line.get("path") or ""])
    claimed = [c for c in claims.of_hosts(hosts) if c.pool.mapping is not None]
    targets = {c.pool.mapping.id for c in claimed if c.pool.mapping is not None}
    staying = [h for h in hosts if not any(h.overlaps(c.host) for c in claimed)]
    if not claimed or not staying:
        return targets, None
    moving = ", ".join(str(c.function.address) for c in claimed)
    return targets, Diagnostic.error(
        "mapping-line-mixed",
        f"{pcicfg.PATH} line {line.line}",
        f"mapping {section.id!r} hands over {line.get('path')} as one device: {moving} "
        f"{'goes' if len(claimed) == 1 else 'go'} to mapping {', '.join(sorted(targets))}, "
        "the rest stays; keeping the line "
        "leaves the moving device in two mappings, removing it drops the others",
        f"split the line (Datacenter > Resource Mappings > {section.id}) so that each "
        "device has its own map line, then run pvegpu again",
    )


def _moved_finding(node: str, moved: MapLinesMoved) -> Diagnostic:
    n = len(moved.paths)
    message = (
        f"loses its {'map line' if n == 1 else f'{n} map lines'} for "
        f"{', '.join(moved.paths)} on {node}: "
        f"{'they move' if n > 1 else 'it moves'} to mapping {', '.join(moved.targets)}, "
        "and a device is in one mapping only"
    )
    if moved.removed:
        message += "; no map line is left, so the mapping is removed"
    return Diagnostic(
        Severity.INFO,
        "mapping-devices-moved",
        f"{pcicfg.PATH} mapping {moved.mapping_id!r}",
        message,
    )
