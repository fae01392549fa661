"""The look every pvegpu SVG shares: boxes, driver colours, curves, legend, the page.

Two drawings use it: the bundle's topology.svg (the split, review/topology.py) and
`pvegpu discover --svg` (the host as it is, host_svg.py). Both lay out labelled boxes
in fixed columns, so the same input always gives the same bytes; there is no layout
engine and no dependency beyond the standard library. The two XML escapes are local:
xml.sax.saxutils would pull in urllib and http.client, a tenth of a `pvegpu render`.
Every id and attribute value is written by pvegpu; only text (escaped) comes from the
host, so a guest name cannot break the XML.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

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


UNBOUND = "unbound"
"""How a drawing names the driver of a function no driver holds."""

# (fill, stroke) per driver: pale fills keep black text readable, the stroke carries
# the colour into edges and the legend. NVIDIA green for nvidia, blue for vfio-pci.
DRIVER_COLOURS: dict[str, tuple[str, str]] = {
    "nvidia": ("#e3f1cc", "#4e7d00"),
    "vfio-pci": ("#dbe6fb", "#2957a4"),
    "amdgpu": ("#fbdcd9", "#a3342b"),
    "i915": ("#e6e0fa", "#5a44a8"),
    "xe": ("#e6e0fa", "#5a44a8"),
    "nouveau": ("#f3e3c3", "#8a5a00"),
    UNBOUND: ("#eeeeee", "#777777"),
}
OTHER_DRIVER = ("#fff3cd", "#8a6d00")
NEUTRAL = ("#f6f6f6", "#555555")
"""Boxes that have no single driver colour (pools, consumers, guests, NUMA nodes)."""


def driver_colours(driver: str) -> tuple[str, str]:
    return DRIVER_COLOURS.get(driver, OTHER_DRIVER)


@value_class
@attrs.frozen(eq=False, repr=False)
class Box:
    """A labelled node of a picture: an id safe for SVG and Mermaid, and its lines."""

    id: str
    lines: tuple[str, ...]
    driver: str = ""
    """Colours the box by this driver; empty for boxes that are not on one driver."""
    dashed: bool = False
    tooltip: str = ""

    @property
    def colours(self) -> tuple[str, str]:
        return driver_colours(self.driver) if self.driver else NEUTRAL

    @property
    def style(self) -> str:
        """Mermaid class name: the driver (`vfio_pci`), `_moved` when it changes."""
        name = "".join(c if c.isalnum() else "_" for c in self.driver) or "neutral"
        return f"{name}_moved" if self.dashed else name


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
HEADER_H = 76
"""From the top margin to the first row of boxes: title, subtitle, column heads."""
EDGE = "#555555"
"""Edges that carry no driver's colour."""


def text_width(text: str) -> int:
    return math.ceil(len(text) * CHAR_W)


def box_height(box: Box) -> int:
    return len(box.lines) * LINE_H + 2 * PAD - 4


@value_class
@attrs.frozen(eq=False, repr=False)
class Placed:
    box: Box
    x: int
    y: int
    w: int
    h: int
    bold_first: bool = True

    @property
    def cy(self) -> int:
        return self.y + self.h // 2

    @property
    def right(self) -> int:
        return self.x + self.w


def column_width(minimum: int, boxes: Sequence[Box]) -> int:
    """Wide enough for the longest line of any box in the column, at least `minimum`."""
    widest = max((text_width(line) for b in boxes for line in b.lines), default=0)
    return max(minimum, widest + 2 * PAD)


def stack(
    wanted: Sequence[tuple[Box, float]], x: int, w: int, top: int
) -> tuple[list[Placed], int]:
    """Place boxes centred on their wanted y, in order, pushed down to never overlap."""
    placed: list[Placed] = []
    floor = top
    for box, centre in wanted:
        h = box_height(box)
        y = max(round(centre - h / 2), floor)
        placed.append(Placed(box, x, y, w, h))
        floor = y + h + GROUP_GAP
    return placed, floor


def svg_box(p: Placed) -> str:
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


def line(x1: int, y1: int, x2: int, y2: int) -> str:
    """A thin grey rule: a NUMA node to what hangs off it."""
    return f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#999999" stroke-width="1"/>'


def curve(
    x1: int, y1: int, x2: int, y2: int, stroke: str, width: float = 1.4, *, dashed: bool = False
) -> str:
    bend = (x2 - x1) // 2
    dash = ' stroke-dasharray="5 3"' if dashed else ""
    return (
        f'<path d="M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}" fill="none" '
        f'stroke="{stroke}" stroke-width="{width}"{dash} marker-end="url(#arrow)"/>'
    )


def column_heads(heads: Sequence[tuple[int, str]], top: int) -> list[str]:
    """The small grey label above each column, centred on `x`."""
    return [
        f'<text x="{x}" y="{top - 8}" text-anchor="middle" fill="#666666" font-size="11">'
        f"{escape(label)}</text>"
        for x, label in heads
    ]


LegendItem = tuple[tuple[str, str], bool, str]
"""A swatch: its (fill, stroke), whether it is dashed, and what it means."""


def legend(items: Sequence[LegendItem], x: int, y: int, width: int) -> tuple[list[str], int]:
    """Swatches in rows that wrap at `width`; returns the elements and the height used."""
    out = [
        f'<line x1="{x}" y1="{y}" x2="{x + width}" y2="{y}" stroke="#dddddd"/>',
        f'<text x="{x}" y="{y + 22}" font-weight="bold">Legend</text>',
    ]
    start = x + 70
    cx, row = start, 0
    for (fill, stroke), dashed, label in items:
        needed = 30 + text_width(label)
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


def document(
    width: int,
    height: int,
    *,
    title: str,
    subtitle: str,
    description: str,
    content: Sequence[str],
) -> str:
    """The SVG file: title and description for screen readers, the arrow marker, a white
    page, the title and subtitle at the top left, then `content`."""
    return "\n".join(
        [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="{FONT}" font-size="{FONT_SIZE}" '
            'role="img" aria-labelledby="title desc">',
            f'<title id="title">{escape(title)}</title>',
            f'<desc id="desc">{escape(description)}</desc>',
            "<defs>"
            '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            'markerHeight="7" orient="auto-start-reverse">'
            f'<path d="M0,0 L10,5 L0,10 z" fill="{EDGE}"/></marker>'
            "</defs>",
            # An opaque background: the drawing stays readable in dark-mode viewers.
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
            f'<text x="{MARGIN}" y="{MARGIN + 16}" font-size="18" font-weight="bold">'
            f"{escape(title)}</text>",
            f'<text x="{MARGIN}" y="{MARGIN + 38}" fill="#333333">{escape(subtitle)}</text>',
            *content,
            "</svg>",
            "",
        ]
    )
