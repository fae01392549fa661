"""The split as a picture, computed once for every drawing: boxes and what connects them.

NUMA nodes hold GPUs; pools take GPUs; consumers (container, PCI mapping, VM) use pools.
Every box has an id safe for SVG and Mermaid, its lines of text and its colours, all
from PCI order, so the same plan always gives the same picture. topology.py draws it;
the boxes and colours are rendering/drawing.py's, which discover's picture shares.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from pvegpu.model.facts import GPU
from pvegpu.model.plan import Plan, Pool, PoolKind
from pvegpu.rendering.drawing import DRIVER_COLOURS, Box
from pvegpu.rendering.review import LayoutRow, host_facts_line, layout
from pvegpu.values import value_class
from pvegpu.wording import plural


@value_class
@attrs.frozen(eq=False, repr=False)
class NumaGroup:
    box: Box
    gpus: tuple[Box, ...]


@value_class
@attrs.frozen(eq=False, repr=False)
class PoolGroup:
    box: Box
    gpu_ids: tuple[str, ...]
    consumers: tuple[Box, ...]
    chained: bool
    """The last consumer (the VM) uses the one before it (the mapping), not the pool."""


@value_class
@attrs.frozen(eq=False, repr=False)
class Picture:
    title: str
    subtitle: str
    numa: tuple[NumaGroup, ...]
    pools: tuple[PoolGroup, ...]
    drivers: tuple[str, ...]
    """Drivers the GPUs end on, in order of appearance, for the legend."""
    any_moves: bool


def _gpu_box(row: LayoutRow) -> Box:
    gpu = row.gpu
    state = f"{row.driver_before} → {row.driver_after}" if row.driver_changes else row.driver_after
    if row.pool is None:
        state += " · unchanged"
    details = [str(gpu.address), gpu.vendor_device]
    if gpu.model:
        details.append(gpu.model)
    if gpu.iommu_group is not None:
        details.append(f"IOMMU group {gpu.iommu_group}")
    if gpu.node_path is not None:
        details.append(f"{gpu.node_path} now")
    return Box(
        id=f"gpu{row.index}",
        lines=(f"GPU {row.index} · {gpu.address.short}", state),
        driver=row.driver_after,
        dashed=row.driver_changes,
        tooltip=", ".join(details),
    )


def _minors(gpus: Sequence[GPU]) -> str:
    held = [g for g in gpus if g.node_path is not None]
    if len(held) <= 1:
        return "".join(g.node_path or "" for g in held)
    # One node path with the minors in braces, as a shell would expand it back.
    nodes = held[0].vendor.nodes if held[0].vendor else None
    assert nodes is not None  # a GPU with a node path has its vendor's nodes
    return nodes.gpu_path.format(minor="{" + ",".join(str(g.node_minor) for g in held) + "}")


def _consumers(pool: Pool, index: int) -> tuple[tuple[Box, ...], bool]:
    boxes: list[Box] = []
    if pool.lxc is not None:
        lines = [f"LXC {pool.lxc.vmid}"]
        if pool.serving is not None:
            lines.append(f"{pool.serving.engine} {pool.serving.version} · TP={pool.size}")
            lines.append(f"{pool.serving.unit}.service :{pool.serving.port}")
        lines.append(_minors(pool.gpus) or plural(pool.size, "GPU"))
        boxes.append(Box(f"ct{pool.lxc.vmid}", tuple(lines), tooltip=pool.lxc.config_path))
    if pool.mapping is not None:
        lines = [f"mapping {pool.mapping.id}", f"pci.cfg · {plural(pool.size, 'map line')}"]
        if pool.kind is PoolKind.VFIO and pool.vm is None:
            lines.append("no VM yet")
        boxes.append(Box(f"map{index}", tuple(lines), tooltip="etc/pve/mapping/pci.cfg"))
    if pool.vm is not None:
        unit = "vGPU" if pool.vgpu_type is not None else "GPU"
        lines = [f"VM {pool.vm.vmid}", f"{plural(pool.size, unit)} via hostpci"]
        if pool.vm.config is None:
            lines.append("not created yet")
        boxes.append(Box(f"vm{pool.vm.vmid}", tuple(lines), tooltip=pool.vm.config_path))
    chained = pool.vm is not None and pool.mapping is not None
    return tuple(boxes), chained


def picture_of(plan: Plan) -> Picture:
    rows = layout(plan)
    by_node: dict[int | None, list[LayoutRow]] = {}
    for row in sorted(rows, key=lambda r: (r.gpu.numa_node is None, r.gpu.numa_node or 0)):
        by_node.setdefault(row.gpu.numa_node, []).append(row)
    cpus = {n.id: n.cpus for n in plan.facts.numa_nodes}
    numa = []
    for node, members in by_node.items():
        if node is None:
            box = Box("numa_none", ("no NUMA node", "firmware gives none"))
        else:
            extra = (f"CPUs {cpus[node]}",) if cpus.get(node) else ()
            box = Box(f"numa{node}", (f"NUMA {node}", *extra))
        numa.append(NumaGroup(box, tuple(_gpu_box(r) for r in members)))
    ids = {r.address: f"gpu{r.index}" for r in rows}
    pools = []
    for index, pool in enumerate(plan.pools):
        moving = len(pool.functions)
        driver = pool.driver
        count = plural(pool.size, "GPU")
        if pool.vgpu_type is not None:
            count = f"{plural(pool.size, 'vGPU VF')} · {pool.vgpu_type}"
        elif pool.kind is PoolKind.VFIO and moving != pool.size:
            count += f", {plural(moving, 'function')}"
        known = [str(n) for n in pool.numa_nodes if n is not None]
        nodes = f"NUMA {', '.join(known)}" if known else "no NUMA node"
        if known and None in pool.numa_nodes:
            nodes += " and none"
        box = Box(
            f"pool{index}",
            (f"pool {pool.name}", f"{driver} · {count}", nodes),
            driver=driver if driver in DRIVER_COLOURS else "",
        )
        consumers, chained = _consumers(pool, index)
        pools.append(PoolGroup(box, tuple(ids[g.address] for g in pool.gpus), consumers, chained))
    drivers = tuple(dict.fromkeys(r.driver_after for r in rows))
    return Picture(
        title=f"GPU split on {plan.facts.node}",
        subtitle=host_facts_line(plan.facts),
        numa=tuple(numa),
        pools=tuple(pools),
        drivers=drivers,
        any_moves=any(r.driver_changes for r in rows),
    )


def all_boxes(picture: Picture) -> Iterator[Box]:
    for group in picture.numa:
        yield group.box
        yield from group.gpus
    for pool in picture.pools:
        yield pool.box
        yield from pool.consumers
