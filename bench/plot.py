"""The growth plot: time per PCI function against tree size, one line per tool, as SVG.

Hand-written SVG (no plotting library): a log2 x axis of tree sizes, a linear y axis of
microseconds per function from zero, a polyline and labelled points per tool. A tool
that grows linearly draws a flat line; a rising line is work growing faster than the
host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

WIDTH, HEIGHT = 640, 380
LEFT, RIGHT, TOP, BOTTOM = 78, 150, 48, 56
COLOURS = ("#2957a4", "#a3342b", "#4e7d00", "#8a5a00")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above value."""
    if value <= 0:
        return 1.0
    power: float = 10.0 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value)


def growth_svg(
    title: str, sizes: Sequence[int], per_function_us: Mapping[str, Sequence[float]]
) -> str:
    """`per_function_us[tool][i]` is the median time per function at `sizes[i]`."""
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    top_value = _nice_ceiling(max(v for values in per_function_us.values() for v in values))
    low, high = math.log2(min(sizes)), math.log2(max(sizes))

    def x(size: int) -> float:
        return LEFT + (plot_w * (math.log2(size) - low) / (high - low) if high > low else 0)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top_value)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Verdana, sans-serif" '
        'font-size="12" role="img">',
        f"<title>{_escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{_escape(title)}</text>',
    ]
    for step in range(6):
        value = top_value * step / 5
        out.append(
            f'<line x1="{LEFT}" y1="{y(value):.1f}" x2="{LEFT + plot_w}" y2="{y(value):.1f}" '
            'stroke="#e4e4e4"/>'
        )
        out.append(
            f'<text x="{LEFT - 8}" y="{y(value) + 4:.1f}" text-anchor="end">{value:g}</text>'
        )
    for size in sizes:
        out.append(
            f'<text x="{x(size):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{size:,}</text>'
        )
    out += [
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" '
        'stroke="#333333"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#333333"/>',
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 14}" text-anchor="middle">'
        "PCI functions in the tree (log scale)</text>",
        f'<text x="18" y="{TOP + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 18 {TOP + plot_h / 2:.1f})">µs per function (median)</text>',
    ]
    for index, (tool, values) in enumerate(per_function_us.items()):
        colour = COLOURS[index % len(COLOURS)]
        points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in zip(sizes, values, strict=True))
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for size, value in zip(sizes, values, strict=True):
            out.append(f'<circle cx="{x(size):.1f}" cy="{y(value):.1f}" r="3.5" fill="{colour}"/>')
            out.append(
                f'<text x="{x(size) + 6:.1f}" y="{y(value) - 6:.1f}" fill="{colour}" '
                f'font-size="10">{value:.0f}</text>'
            )
        legend_y = TOP + 10 + index * 20
        out.append(
            f'<line x1="{LEFT + plot_w + 16}" y1="{legend_y}" x2="{LEFT + plot_w + 36}" '
            f'y2="{legend_y}" stroke="{colour}" stroke-width="2"/>'
        )
        out.append(f'<text x="{LEFT + plot_w + 42}" y="{legend_y + 4}">{_escape(tool)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
