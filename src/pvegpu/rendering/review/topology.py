"""The split drawn three ways: SVG for the review, Mermaid for SUMMARY.md, text for a terminal.

All three draw the same `picture_of(plan)` (review/picture.py): NUMA nodes, GPUs, pools
and what consumes them. Everything is laid out in fixed columns from PCI order, so the
same plan always gives the same bytes; there is no layout engine and no dependency
beyond the standard library. The two XML escapes are local: xml.sax.saxutils would pull
in urllib and http.client, a tenth of a `pvegpu render`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from pvegpu.model.plan import Plan
from pvegpu.rendering.review import host_facts_line, layout
from pvegpu.rendering.review.picture import Box, Picture, all_boxes, driver_colours, picture_of
from pvegpu.values import value_class

_XML_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_XML_ATTR = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&quot;",
        "\n": "&#10;",
        "\r": "&#13;",
        "\t": "&#9;",
    }
)


def escape(text: str) -> str:
    """Text safe as XML character data."""
    return text.translate(_XML_TEXT)


def quoteattr(value: str) -> str:
    """A double-quoted XML attribute value."""
    return '"' + value.translate(_XML_ATTR) + '"'


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

FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
FONT_SIZE = 12
CHAR_W = 7.4
"""Width of an average character at FONT_SIZE in the widest listed font (Verdana)."""
LINE_H = 15
PAD = 10
MARGIN = 24
COLUMN_GAP = 64
ROW_GAP = 8
GROUP_GAP = 20
MIN_WIDTH = {"numa": 130, "gpu": 170, "pool": 160, "consumer": 190}


def _text_width(text: str) -> int:
    return math.ceil(len(text) * CHAR_W)


def _box_height(box: Box) -> int:
    return len(box.lines) * LINE_H + 2 * PAD - 4


@value_class
@attrs.frozen(eq=False, repr=False)
class _Placed:
    box: Box
    x: int
    y: int
    w: int
    h: int
    bold_first: bool = True

    @property
    def cy(self) -> int:
        return self.y + self.h // 2


def _column_width(kind: str, boxes: Sequence[Box]) -> int:
    widest = max((_text_width(line) for b in boxes for line in b.lines), default=0)
    return max(MIN_WIDTH[kind], widest + 2 * PAD)


def _stack(
    wanted: Sequence[tuple[Box, float]], x: int, w: int, top: int
) -> tuple[list[_Placed], int]:
    """Place boxes centred on their wanted y, in order, pushed down to never overlap."""
    placed: list[_Placed] = []
    floor = top
    for box, centre in wanted:
        h = _box_height(box)
        y = max(round(centre - h / 2), floor)
        placed.append(_Placed(box, x, y, w, h))
        floor = y + h + GROUP_GAP
    return placed, floor


def _svg_box(p: _Placed) -> str:
    fill, stroke = p.box.colours
    dash = ' stroke-dasharray="6 3"' if p.box.dashed else ""
    width = 2 if p.box.dashed else 1.2
    tip = f"<title>{escape(p.box.tooltip or ' '.join(p.box.lines))}</title>"
    parts = [
        f"<g id={quoteattr(p.box.id)}>{tip}",
        f'<rect x="{p.x}" y="{p.y}" width="{p.w}" height="{p.h}" rx="6" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="{width}"{dash}/>',
    ]
    first_baseline = p.y + PAD + FONT_SIZE - 1
    for i, line in enumerate(p.box.lines):
        weight = ' font-weight="bold"' if i == 0 and p.bold_first else ""
        parts.append(
            f'<text x="{p.x + p.w // 2}" y="{first_baseline + i * LINE_H}" '
            f'text-anchor="middle"{weight}>{escape(line)}</text>'
        )
    parts.append("</g>")
    return "".join(parts)


def _curve(x1: int, y1: int, x2: int, y2: int, stroke: str, width: float = 1.4) -> str:
    bend = (x2 - x1) // 2
    return (
        f'<path d="M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}" fill="none" '
        f'stroke="{stroke}" stroke-width="{width}" marker-end="url(#arrow)"/>'
    )


def topology_svg(plan: Plan) -> str:
    """NUMA nodes -> GPUs -> pools -> consumers, in four columns, with a legend."""
    picture = picture_of(plan)
    gpus = [g for group in picture.numa for g in group.gpus]
    consumers = [c for pool in picture.pools for c in pool.consumers]
    numa_w = _column_width("numa", [g.box for g in picture.numa])
    gpu_w = _column_width("gpu", gpus)
    pool_w = _column_width("pool", [p.box for p in picture.pools])
    consumer_w = _column_width("consumer", consumers)
    numa_x = MARGIN
    gpu_x = numa_x + numa_w + COLUMN_GAP
    pool_x = gpu_x + gpu_w + COLUMN_GAP
    consumer_x = pool_x + pool_w + COLUMN_GAP
    width = max(consumer_x + consumer_w + MARGIN, _text_width(picture.subtitle) + 2 * MARGIN)
    top = MARGIN + 76

    # GPUs in rows, NUMA node by node; each NUMA box spans its GPUs (at least its label).
    placed_gpus: dict[str, _Placed] = {}
    placed_numa: list[_Placed] = []
    y = top
    for group in picture.numa:
        start = y
        for gpu in group.gpus:
            h = _box_height(gpu)
            placed_gpus[gpu.id] = _Placed(gpu, gpu_x, y, gpu_w, h, bold_first=False)
            y += h + ROW_GAP
        span = max(y - ROW_GAP - start, _box_height(group.box))
        placed_numa.append(_Placed(group.box, numa_x, start, numa_w, span))
        y = start + span + GROUP_GAP
    gpu_bottom = y

    wanted_pools = [
        (pool.box, sum(placed_gpus[g].cy for g in pool.gpu_ids) / len(pool.gpu_ids))
        for pool in picture.pools
    ]
    placed_pools, pool_bottom = _stack(wanted_pools, pool_x, pool_w, top)
    placed_consumers: list[list[_Placed]] = []
    floor = top
    for pool, placed_pool in zip(picture.pools, placed_pools, strict=True):
        heights = [_box_height(c) for c in pool.consumers]
        block = sum(heights) + ROW_GAP * 2 * (len(heights) - 1)
        y = max(placed_pool.cy - block // 2, floor)
        column = []
        for consumer, h in zip(pool.consumers, heights, strict=True):
            column.append(_Placed(consumer, consumer_x, y, consumer_w, h))
            y += h + ROW_GAP * 2
        placed_consumers.append(column)
        floor = y - ROW_GAP * 2 + GROUP_GAP
    bottom = max(gpu_bottom, pool_bottom, floor) - GROUP_GAP + MARGIN

    body: list[str] = []
    for numa_box, group in zip(placed_numa, picture.numa, strict=True):
        for gpu in group.gpus:
            g = placed_gpus[gpu.id]
            body.append(
                f'<line x1="{numa_box.x + numa_box.w}" y1="{g.cy}" x2="{g.x}" y2="{g.cy}" '
                'stroke="#999999" stroke-width="1"/>'
            )
    for pool, placed_pool, column in zip(
        picture.pools, placed_pools, placed_consumers, strict=True
    ):
        for gpu_id in pool.gpu_ids:
            g = placed_gpus[gpu_id]
            body.append(
                _curve(g.x + g.w, g.cy, placed_pool.x - 2, placed_pool.cy, g.box.colours[1])
            )
        direct = column[:-1] if pool.chained else column
        for c in direct:
            body.append(
                _curve(placed_pool.x + placed_pool.w, placed_pool.cy, c.x - 2, c.cy, "#555555")
            )
        if pool.chained:
            upper, lower = column[-2], column[-1]
            mid = upper.x + upper.w // 2
            body.append(
                f'<line x1="{mid}" y1="{upper.y + upper.h}" x2="{mid}" y2="{lower.y - 2}" '
                'stroke="#555555" stroke-width="1.4" marker-end="url(#arrow)"/>'
            )
    body.extend(_svg_box(p) for p in placed_numa)
    body.extend(_svg_box(p) for p in placed_gpus.values())
    body.extend(_svg_box(p) for p in placed_pools)
    body.extend(_svg_box(p) for column in placed_consumers for p in column)

    legend, legend_h = _legend(picture, MARGIN, bottom, width - 2 * MARGIN)
    height = bottom + legend_h + MARGIN
    headings = [
        f'<text x="{MARGIN}" y="{MARGIN + 16}" font-size="18" font-weight="bold">'
        f"{escape(picture.title)}</text>",
        f'<text x="{MARGIN}" y="{MARGIN + 38}" fill="#333333">{escape(picture.subtitle)}</text>',
    ]
    column_heads = [
        (numa_x + numa_w // 2, "NUMA node"),
        (gpu_x + gpu_w // 2, "GPU (PCI order)"),
        (pool_x + pool_w // 2, "pool"),
        (consumer_x + consumer_w // 2, "consumer"),
    ]
    headings += [
        f'<text x="{x}" y="{top - 8}" text-anchor="middle" fill="#666666" font-size="11">'
        f"{escape(label)}</text>"
        for x, label in column_heads
    ]
    return "\n".join(
        [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="{FONT}" font-size="{FONT_SIZE}" '
            'role="img" aria-labelledby="title desc">',
            f'<title id="title">{escape(picture.title)}</title>',
            f'<desc id="desc">{escape(_description(plan))}</desc>',
            "<defs>"
            '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            'markerHeight="7" orient="auto-start-reverse">'
            '<path d="M0,0 L10,5 L0,10 z" fill="#555555"/></marker>'
            "</defs>",
            # An opaque background: the drawing stays readable in dark-mode viewers.
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
            *headings,
            *body,
            *legend,
            "</svg>",
            "",
        ]
    )


def _legend(picture: Picture, x: int, y: int, width: int) -> tuple[list[str], int]:
    """Swatches in rows that wrap at `width`; returns the elements and the height used."""
    items: list[tuple[tuple[str, str], bool, str]] = [
        (driver_colours(d), False, f"ends on {d}") for d in picture.drivers
    ]
    if picture.any_moves:
        items.append((("#ffffff", "#333333"), True, "dashed: driver changes with this plan"))
    out = [
        f'<line x1="{x}" y1="{y}" x2="{x + width}" y2="{y}" stroke="#dddddd"/>',
        f'<text x="{x}" y="{y + 22}" font-weight="bold">Legend</text>',
    ]
    start = x + 70
    cx, row = start, 0
    for (fill, stroke), dashed, label in items:
        needed = 30 + _text_width(label)
        if cx > start and cx + needed > x + width:
            cx, row = start, row + 1
        top = y + 10 + row * 24
        dash = ' stroke-dasharray="6 3" stroke-width="2"' if dashed else ""
        out.append(
            f'<rect x="{cx}" y="{top}" width="22" height="16" rx="3" fill="{fill}" '
            f'stroke="{stroke}"{dash}/>'
        )
        out.append(f'<text x="{cx + 30}" y="{top + 12}">{escape(label)}</text>')
        cx += needed + 24
    return out, 36 + row * 24


def _description(plan: Plan) -> str:
    parts = []
    for pool in plan.pools:
        gpus = ", ".join(g.address.short for g in pool.gpus)
        parts.append(f"pool {pool.name} ({pool.driver}): {gpus}")
    return f"{plan.facts.node}: " + "; ".join(parts)
