"""The mappings of pci.cfg outside the pools, on this node, after the plan.

A device that goes into a pool's mapping leaves every other mapping: the old mapping
loses its map line in the rendered pci.cfg (and goes when none is left), so no device is
in two mappings. A `;` line that hands over a moving device together with one that stays
cannot be split by pvegpu and is refused. Lines of other nodes are never touched. What
each mapping hands over on this node afterwards is what host_guests.py judges VMs by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from pvegpu.errors import Problem, RenderError
from pvegpu.host.facts import HostFacts
from pvegpu.planning.claims import Claims
from pvegpu.planning.plan import Finding, Pool, Severity
from pvegpu.planning.released import MapLinesMoved
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.pcicfg import MapLine, PciCfgSection
from pvegpu.pvefiles.qemuconf import HostId, host_ids

VM_DIR = "etc/pve/qemu-server/"


@attrs.frozen
class MappingOutcome:
    """pci.cfg's mappings on this node once the plan is applied."""

    moved: tuple[MapLinesMoved, ...] = ()
    devices: Mapping[str, tuple[HostId, ...]] = attrs.field(factory=dict)
    """Each mapping's devices on this node after the plan, by mapping id."""
    counts: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    """Map lines on this node before and after the plan, by mapping id."""
    problems: tuple[Problem, ...] = ()
    findings: tuple[Finding, ...] = ()

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
    counts = {i: (0, len(p.maps)) for i, p in _mappings(pools).items()}
    existing = facts.file(pcicfg.PATH)
    if existing is None:
        return MappingOutcome(devices=devices, counts=counts)
    try:
        sections = pcicfg.parse(existing.content)
    except RenderError as error:
        # With a pool mapping, pci_cfg_problems refuses the file already. Without one the
        # file is read only to judge VMs by mapping: refused when there is one to judge.
        vms = (f.content for f in facts.files if f.path.startswith(VM_DIR))
        refusals = error.problems if not owners and any(map(_uses_mapping, vms)) else ()
        return MappingOutcome(devices=devices, counts=counts, problems=refusals)
    moved: list[MapLinesMoved] = []
    problems: list[Problem] = []
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
    findings = tuple(_moved_finding(facts.node, m) for m in moved)
    return MappingOutcome(tuple(moved), devices, counts, tuple(problems), findings)


def _mappings(pools: Sequence[Pool]) -> dict[str, pcicfg.PciMapping]:
    return {p.mapping.id: p.mapping for p in pools if p.mapping is not None}


def _uses_mapping(text: str) -> bool:
    return any(line.startswith("hostpci") and "mapping=" in line for line in text.splitlines())


def _moving(
    line: MapLine, section: PciCfgSection, claims: Claims
) -> tuple[set[str], Problem | None]:
    """The pool mappings this line's devices move to; a Problem when only some move."""
    hosts = host_ids([line.get("path") or ""])
    claimed = [c for c in claims.of_hosts(hosts) if c.pool.mapping is not None]
    targets = {c.pool.mapping.id for c in claimed if c.pool.mapping is not None}
    staying = [h for h in hosts if not any(h.overlaps(c.host) for c in claimed)]
    if not claimed or not staying:
        return targets, None
    moving = ", ".join(str(c.function.address) for c in claimed)
    return targets, Problem(
        "mapping-line-mixed",
        f"{pcicfg.PATH} line {line.line}",
        f"mapping {section.id!r} hands over {line.get('path')} as one device: {moving} "
        f"{'goes' if len(claimed) == 1 else 'go'} to mapping {', '.join(sorted(targets))}, "
        "the rest stays; keeping the line "
        "leaves the moving device in two mappings, removing it drops the others",
        f"split the line (Datacenter > Resource Mappings > {section.id}) so that each "
        "device has its own map line, then run pvegpu again",
    )


def _moved_finding(node: str, moved: MapLinesMoved) -> Finding:
    n = len(moved.paths)
    message = (
        f"loses its {'map line' if n == 1 else f'{n} map lines'} for "
        f"{', '.join(moved.paths)} on {node}: "
        f"{'they move' if n > 1 else 'it moves'} to mapping {', '.join(moved.targets)}, "
        "and a device is in one mapping only"
    )
    if moved.removed:
        message += "; no map line is left, so the mapping is removed"
    return Finding(
        Severity.INFO,
        "mapping-devices-moved",
        f"{pcicfg.PATH} mapping {moved.mapping_id!r}",
        message,
    )
