"""The split drawn three ways: SVG for the review, Mermaid for SUMMARY.md, text for a terminal.

All three draw the same `picture_of(plan)` (review/picture.py): NUMA nodes, GPUs, pools
and what consumes them. Everything is laid out in fixed columns from PCI order, so the
same plan always gives the same bytes. The SVG's look (boxes, colours, curves, legend)
is rendering/drawing.py's, shared with `pvegpu discover --svg`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.model.plan import Plan
from pvegpu.rendering.drawing import (
    COLUMN_GAP,
    EDGE,
    GROUP_GAP,
    HEADER_H,
    MARGIN,
    ROW_GAP,
    Box,
    LegendItem,
    Placed,
    box_height,
    column_heads,
    column_width,
    curve,
    document,
    driver_colours,
    legend,
    line,
    stack,
    svg_box,
    text_width,
)
from pvegpu.rendering.review import host_facts_line, layout
from pvegpu.rendering.review.picture import Picture, all_boxes, picture_of

# ---------------------------------------------------------------------------- Mermaid


def _mermaid_label(lines: Sequence[str]) -> str:
    # Mermaid's entity codes: a raw `"` ends the label, `<`/`>` would be read as HTML.
    safe = (
        line.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
        for line in lines
    )
    return '"' + "<br/>".join(safe) + '"'


def topology_mermaid(plan: Plan) -> str:
    """A `flowchart LR` with one subgraph per NUMA node; GPUs coloured by their end driver."""
    picture = picture_of(plan)
    out = ["flowchart LR"]
    styled: dict[str, list[str]] = {}

    def node(box: Box, indent: str) -> None:
        out.append(f"{indent}{box.id}[{_mermaid_label(box.lines)}]")
        styled.setdefault(box.style, []).append(box.id)

    for group in picture.numa:
        out.append(f"  subgraph {group.box.id}[{_mermaid_label(group.box.lines)}]")
        out.append("    direction TB")
        for gpu in group.gpus:
            node(gpu, "    ")
        out.append("  end")
    for pool in picture.pools:
        node(pool.box, "  ")
        for consumer in pool.consumers:
            node(consumer, "  ")
    for pool in picture.pools:
        out.extend(f"  {gpu} --> {pool.box.id}" for gpu in pool.gpu_ids)
        direct = pool.consumers[:-1] if pool.chained else pool.consumers
        out.extend(f"  {pool.box.id} --> {c.id}" for c in direct)
        if pool.chained:
            out.append(f"  {pool.consumers[-2].id} --> {pool.consumers[-1].id}")
    boxes = {b.style: b for b in all_boxes(picture)}
    for name in sorted(styled):
        fill, stroke = boxes[name].colours
        extra = ",stroke-width:2px,stroke-dasharray:5 3" if boxes[name].dashed else ""
        out.append(f"  classDef {name} fill:{fill},stroke:{stroke},color:#1a1a1a{extra}")
        out.append(f"  class {','.join(styled[name])} {name}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- text


def topology_table(plan: Plan) -> str:
    """The layout as a plain-text table for a terminal (`make demo` prints it)."""
    header = ("GPU", "PCI", "NUMA", "driver", "pool", "purpose")
    cells = [
        (
            str(r.index),
            r.address.short,
            r.numa,
            r.driver,
            r.pool.name if r.pool else "-",
            r.purpose,
        )
        for r in layout(plan)
    ]
    widths = [max(len(row[i]) for row in (header, *cells)) for i in range(len(header))]
    lines = [f"{plan.facts.node}: {host_facts_line(plan.facts)}".replace("·", "|")]
    for row in (header, *cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- SVG

MIN_WIDTH = {"numa": 130, "gpu": 170, "pool": 160, "consumer": 190}


def topology_svg(plan: Plan) -> str:
    """NUMA nodes -> GPUs -> pools -> consumers, in four columns, with a legend."""
    picture = picture_of(plan)
    gpus = [g for group in picture.numa for g in group.gpus]
    consumers = [c for pool in picture.pools for c in pool.consumers]
    numa_w = column_width(MIN_WIDTH["numa"], [g.box for g in picture.numa])
    gpu_w = column_width(MIN_WIDTH["gpu"], gpus)
    pool_w = column_width(MIN_WIDTH["pool"], [p.box for p in picture.pools])
    consumer_w = column_width(MIN_WIDTH["consumer"], consumers)
    numa_x = MARGIN
    gpu_x = numa_x + numa_w + COLUMN_GAP
    pool_x = gpu_x + gpu_w + COLUMN_GAP
    consumer_x = pool_x + pool_w + COLUMN_GAP
    width = max(consumer_x + consumer_w + MARGIN, text_width(picture.subtitle) + 2 * MARGIN)
    top = MARGIN + HEADER_H

    # GPUs in rows, NUMA node by node; each NUMA box spans its GPUs (at least its label).
    placed_gpus: dict[str, Placed] = {}
    placed_numa: list[Placed] = []
    y = top
    for group in picture.numa:
        start = y
        for gpu in group.gpus:
            h = box_height(gpu)
            placed_gpus[gpu.id] = Placed(gpu, gpu_x, y, gpu_w, h, bold_first=False)
            y += h + ROW_GAP
        span = max(y - ROW_GAP - start, box_height(group.box))
        placed_numa.append(Placed(group.box, numa_x, start, numa_w, span))
        y = start + span + GROUP_GAP
    gpu_bottom = y

    wanted_pools = [
        (pool.box, sum(placed_gpus[g].cy for g in pool.gpu_ids) / len(pool.gpu_ids))
        for pool in picture.pools
    ]
    placed_pools, pool_bottom = stack(wanted_pools, pool_x, pool_w, top)
    placed_consumers: list[list[Placed]] = []
    floor = top
    for pool, placed_pool in zip(picture.pools, placed_pools, strict=True):
        heights = [box_height(c) for c in pool.consumers]
        block = sum(heights) + ROW_GAP * 2 * (len(heights) - 1)
        y = max(placed_pool.cy - block // 2, floor)
        column = []
        for consumer, h in zip(pool.consumers, heights, strict=True):
            column.append(Placed(consumer, consumer_x, y, consumer_w, h))
            y += h + ROW_GAP * 2
        placed_consumers.append(column)
        floor = y - ROW_GAP * 2 + GROUP_GAP
    bottom = max(gpu_bottom, pool_bottom, floor) - GROUP_GAP + MARGIN

    body: list[str] = []
    for numa_box, group in zip(placed_numa, picture.numa, strict=True):
        for gpu in group.gpus:
            g = placed_gpus[gpu.id]
            body.append(line(numa_box.right, g.cy, g.x, g.cy))
    for pool, placed_pool, column in zip(
        picture.pools, placed_pools, placed_consumers, strict=True
    ):
        for gpu_id in pool.gpu_ids:
            g = placed_gpus[gpu_id]
            body.append(curve(g.right, g.cy, placed_pool.x - 2, placed_pool.cy, g.box.colours[1]))
        direct = column[:-1] if pool.chained else column
        for c in direct:
            body.append(curve(placed_pool.right, placed_pool.cy, c.x - 2, c.cy, EDGE))
        if pool.chained:
            upper, lower = column[-2], column[-1]
            mid = upper.x + upper.w // 2
            body.append(
                f'<line x1="{mid}" y1="{upper.y + upper.h}" x2="{mid}" y2="{lower.y - 2}" '
                f'stroke="{EDGE}" stroke-width="1.4" marker-end="url(#arrow)"/>'
            )
    body.extend(svg_box(p) for p in placed_numa)
    body.extend(svg_box(p) for p in placed_gpus.values())
    body.extend(svg_box(p) for p in placed_pools)
    body.extend(svg_box(p) for column in placed_consumers for p in column)

    swatches, legend_h = legend(_legend_items(picture), MARGIN, bottom, width - 2 * MARGIN)
    heads = column_heads(
        [
            (numa_x + numa_w // 2, "NUMA node"),
            (gpu_x + gpu_w // 2, "GPU (PCI order)"),
            (pool_x + pool_w // 2, "pool"),
            (consumer_x + consumer_w // 2, "consumer"),
        ],
        top,
    )
    return document(
        width,
        bottom + legend_h + MARGIN,
        title=picture.title,
        subtitle=picture.subtitle,
        description=_description(plan),
        content=[*heads, *body, *swatches],
    )


def _legend_items(picture: Picture) -> list[LegendItem]:
    items: list[LegendItem] = [(driver_colours(d), False, f"ends on {d}") for d in picture.drivers]
    if picture.any_moves:
        items.append((("#ffffff", "#333333"), True, "dashed: driver changes with this plan"))
    return items


def _description(plan: Plan) -> str:
    parts = []
    for pool in plan.pools:
        gpus = ", ".join(g.address.short for g in pool.gpus)
        parts.append(f"pool {pool.name} ({pool.driver}): {gpus}")
    return f"{plan.facts.node}: " + "; ".join(parts)
