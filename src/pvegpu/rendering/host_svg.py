"""`pvegpu discover --svg`: the host as it is, drawn as the bundle's topology.svg is.

NUMA nodes -> PCIe switches (a column only on a host that has one) -> GPUs -> the
guests and host files that use them, laid out in fixed columns from PCI order with
rendering/drawing.py's boxes, colours and legend: the same facts give the same bytes.
Imports neither jinja2 nor the planner, so `discover --svg` stays a reading command.
"""

from __future__ import annotations

from pvegpu.model.facts import HostFacts
from pvegpu.rendering.drawing import (
    COLUMN_GAP,
    GROUP_GAP,
    HEADER_H,
    MARGIN,
    ROW_GAP,
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
from pvegpu.rendering.host_picture import HostPicture, host_picture

MIN_WIDTH = {"numa": 130, "switch": 150, "gpu": 170, "user": 170}


def host_svg(facts: HostFacts) -> str:
    """The picture of `host_picture(facts)` as an SVG document."""
    picture = host_picture(facts)
    gpus = [g for group in picture.numa for g in group.gpus]
    switches = [a.switch for n in picture.numa for a in n.attachments if a.switch is not None]
    numa_w = column_width(MIN_WIDTH["numa"], [n.box for n in picture.numa])
    switch_w = column_width(MIN_WIDTH["switch"], switches) if switches else 0
    gpu_w = column_width(MIN_WIDTH["gpu"], gpus)
    user_w = column_width(MIN_WIDTH["user"], [u.box for u in picture.users])
    numa_x = MARGIN
    switch_x = numa_x + numa_w + COLUMN_GAP
    gpu_x = switch_x + (switch_w + COLUMN_GAP if switches else 0)
    user_x = gpu_x + gpu_w + COLUMN_GAP
    right = user_x + user_w if picture.users else gpu_x + gpu_w
    width = max(right + MARGIN, text_width(picture.subtitle) + 2 * MARGIN)
    top = MARGIN + HEADER_H

    # GPUs in rows, NUMA node by node, a switch's GPUs together; a NUMA box spans its
    # GPUs and a switch box its own (each at least as tall as its label).
    placed_gpus: dict[str, Placed] = {}
    placed_numa: list[Placed] = []
    placed_switches: list[Placed] = []
    # NUMA node -> switch -> GPU, or NUMA node -> GPU: thin grey lines.
    rules: list[str] = []
    y = top
    for group in picture.numa:
        start = y
        # What hangs off the NUMA node: switches, and GPUs on their own root port.
        hanging: list[Placed] = []
        for attachment in group.attachments:
            first = y
            rows = []
            for gpu in attachment.gpus:
                h = box_height(gpu)
                rows.append(Placed(gpu, gpu_x, y, gpu_w, h, bold_first=False))
                y += h + ROW_GAP
            placed_gpus.update((p.box.id, p) for p in rows)
            if attachment.switch is None:
                hanging += rows
                continue
            span = max(y - ROW_GAP - first, box_height(attachment.switch))
            switch = Placed(attachment.switch, switch_x, first, switch_w, span)
            placed_switches.append(switch)
            hanging.append(switch)
            rules += [line(switch.right, g.cy, g.x, g.cy) for g in rows]
            y = first + span + ROW_GAP
        span = max(y - ROW_GAP - start, box_height(group.box))
        numa = Placed(group.box, numa_x, start, numa_w, span)
        placed_numa.append(numa)
        rules += [line(numa.right, h.cy, h.x, h.cy) for h in hanging]
        y = start + span + GROUP_GAP
    gpu_bottom = y if picture.numa else top + GROUP_GAP

    # Each user centred on the GPUs it reaches, top to bottom in that order; one that
    # reaches none (what it names is not here, or cannot be told) below the others.
    wanted = []
    for user in picture.users:
        reached = [placed_gpus[gpu].cy for gpu, _ in user.edges]
        wanted.append((user.box, sum(reached) / len(reached) if reached else float(gpu_bottom)))
    wanted.sort(key=lambda w: w[1])  # stable: equal centres keep the picture's order
    stacked, user_bottom = stack(wanted, user_x, user_w, top)
    by_id = {p.box.id: p for p in stacked}
    placed_users = [by_id[u.box.id] for u in picture.users]
    bottom = max(gpu_bottom, user_bottom) - GROUP_GAP + MARGIN

    body = rules
    for user, placed in zip(picture.users, placed_users, strict=True):
        for gpu_id, every in user.edges:
            g = placed_gpus[gpu_id]
            stroke = g.box.colours[1]
            body.append(curve(g.right, g.cy, placed.x - 2, placed.cy, stroke, dashed=every))
    body += [svg_box(p) for p in placed_numa]
    body += [svg_box(p) for p in placed_switches]
    body += [svg_box(p) for p in placed_gpus.values()]
    body += [svg_box(p) for p in placed_users]
    if not picture.numa:
        none = "no GPUs: no PCI function of class 0x03 or 0x12"
        body.append(f'<text x="{MARGIN}" y="{top + 12}">{none}</text>')

    swatches, legend_h = legend(_legend_items(picture), MARGIN, bottom, width - 2 * MARGIN)
    heads = [(numa_x + numa_w // 2, "NUMA node")]
    if switches:
        heads.append((switch_x + switch_w // 2, "PCIe switch"))
    heads.append((gpu_x + gpu_w // 2, "GPU (PCI order)"))
    if picture.users:
        heads.append((user_x + user_w // 2, "used by"))
    return document(
        width,
        bottom + legend_h + MARGIN,
        title=picture.title,
        subtitle=picture.subtitle,
        description=picture.description,
        content=[*(column_heads(heads, top) if picture.numa else []), *body, *swatches],
    )


def _legend_items(picture: HostPicture) -> list[LegendItem]:
    items: list[LegendItem] = [(driver_colours(d), False, f"on {d}") for d in picture.drivers]
    if picture.any_every:
        items.append(
            (
                ("#ffffff", "#555555"),
                True,
                "dashed: reaches every GPU of a kind, not this one by name",
            )
        )
    return items
