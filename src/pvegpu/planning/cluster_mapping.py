"""The cluster's one pci.cfg: each mapping with the map lines of every node that has it.

Every node's plan built its pools' mappings from its own sysfs values (mapping.py); here
they are merged by mapping id, in the spec's node order. Map lines of nodes that add
nothing to a mapping (nodes outside this plan included) stay byte for byte: pcicfg.patch
replaces a node's lines only where the merged mapping has lines of that node.

Proxmox hands a VM any free device of its mapping on the node it starts on, so a mapping
whose nodes hold different vendor:device ids is refused: the same VM would get another
GPU model depending on where it runs. Devices that agree on the id but not on the
subsystem id (another board) or memory are allowed and reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import GPU_MEMORY
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.plan import Plan, SharedPciCfg
from pvegpu.model.schema import PoolSpec
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.pcicfg import PciCfgSection, PciMap, PciMapping

GIB = 1024**3


def _merged(parts: Sequence[PciMapping]) -> PciMapping:
    description = next((p.description for p in parts if p.description is not None), None)
    # Proxmox refuses an mdev-capable device in a mapping without `mdev 1` on any node.
    mdev = True if any(p.mdev for p in parts) else None
    maps = tuple(m for p in parts for m in p.maps)
    return PciMapping(id=parts[0].id, maps=maps, description=description, mdev=mdev)


def _kept_lines(
    base: tuple[PciCfgSection, ...], mappings: Iterable[PciMapping]
) -> dict[str, list[PciMap]]:
    """By mapping id, the existing lines the new file keeps: those of nodes that add no
    line to it here (plan() refused a base file that does not parse: it has no sections)."""
    wanted = {m.id: {e.node for e in m.maps} for m in mappings}
    return {
        s.id: [line.to_map() for line in s.maps if line.node not in wanted[s.id]]
        for s in base
        if s.id in wanted
    }


def _by_node(maps: Iterable[PciMap], value: Callable[[PciMap], str | None]) -> dict[str, set[str]]:
    """Each node's values of one key of its map lines (`?` where a line has none)."""
    found: dict[str, set[str]] = {}
    for entry in maps:
        found.setdefault(entry.node, set()).add(value(entry) or "?")
    return found


def _said(by_node: dict[str, set[str]]) -> str:
    return ", ".join(f"{', '.join(sorted(v))} on {n}" for n, v in by_node.items())


def _memory_by_node(plans: Sequence[Plan], mapping_id: str) -> dict[str, set[str]]:
    """Per-GPU memory of the mapping's pool on each node: the spec's gpu_memory_bytes
    where it says, else what hardware.py knows of the model."""
    found: dict[str, set[str]] = {}
    for node_plan in plans:
        for pool, spec in zip(node_plan.pools, _pool_specs(node_plan), strict=True):
            if pool.mapping is None or pool.mapping.id != mapping_id:
                continue
            serving = spec.lxc.serving if spec is not None and spec.lxc is not None else None
            for gpu in pool.gpus:
                size = serving.gpu_memory_bytes if serving is not None else None
                known = GPU_MEMORY.get(gpu.vendor_device)
                size = size if size is not None else (known[0] if known else None)
                if size is not None:
                    found.setdefault(node_plan.facts.node, set()).add(f"{size / GIB:.1f} GiB")
    return found


def _pool_specs(node_plan: Plan) -> list[PoolSpec | None]:
    by_name = {p.name: p for p in node_plan.spec.pools}
    return [by_name.get(pool.name) for pool in node_plan.pools]


def shared_pci_cfg(
    plans: Sequence[Plan],
) -> tuple[SharedPciCfg | None, list[Diagnostic], list[Diagnostic]]:
    """The merged file's mappings, the mappings refused, what the reviewer should know."""
    parts: dict[str, list[PciMapping]] = {}
    drop: dict[str, list[str]] = {}
    for node_plan in plans:
        for pool in node_plan.pools:
            if pool.mapping is not None:
                parts.setdefault(pool.mapping.id, []).append(pool.mapping)
        for moved in node_plan.moved_map_lines:
            drop.setdefault(moved.mapping_id, []).extend(moved.values)
    writer = next((p.facts.node for p in plans if any(x.mapping for x in p.pools)), None)
    if writer is None:
        return None, [], []
    mappings = tuple(_merged(p) for p in parts.values())
    kept = _kept_lines(pci_cfg(plans[0].facts).sections, mappings)
    problems: list[Diagnostic] = []
    findings: list[Diagnostic] = []
    for mapping in mappings:
        lines = [*mapping.maps, *kept.get(mapping.id, [])]
        subject = f"{pcicfg.PATH} mapping {mapping.id!r}"
        ids = _by_node(lines, lambda e: e.id)
        if len(ids) > 1 and len(set().union(*ids.values())) > 1:
            problems.append(
                Diagnostic.error(
                    "mapping-devices-differ",
                    subject,
                    f"holds {_said(ids)}; Proxmox gives a VM any free device of the mapping "
                    "on the node it starts on, so the VM would get another GPU model "
                    "depending on where it runs",
                    "give each GPU model its own mapping id",
                )
            )
            continue
        subsystems = _by_node(lines, lambda e: e.subsystem_id)
        if len(subsystems) > 1 and len(set().union(*subsystems.values())) > 1:
            findings.append(
                Diagnostic(
                    Severity.INFO,
                    "mapping-subsystem-differs",
                    subject,
                    f"its devices are alike ({lines[0].id}) but their subsystem ids differ: "
                    f"{_said(subsystems)}; the same GPU on other boards (firmware, power "
                    "limit, cooling can differ), so a VM may behave differently on another "
                    "node",
                )
            )
        memory = _memory_by_node(plans, mapping.id)
        if len(memory) > 1 and len(set().union(*memory.values())) > 1:
            findings.append(
                Diagnostic(
                    Severity.WARNING,
                    "mapping-memory-differs",
                    subject,
                    f"its GPUs have different memory: {_said(memory)}; a VM sized for "
                    "the larger GPUs does not fit when it starts on another node",
                )
            )
    shared = SharedPciCfg(
        writer=writer,
        nodes=tuple(p.facts.node for p in plans),
        mappings=mappings,
        drop=tuple((i, tuple(v)) for i, v in drop.items()),
    )
    return shared, problems, findings
