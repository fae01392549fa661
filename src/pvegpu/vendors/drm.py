"""The kernel's DRM nodes, which AMD's and Intel's GPUs reach containers by.

Each DRM device has a card node (`/dev/dri/card<N>`, display and modesetting) and a
render node (`/dev/dri/renderD<M>`, compute and video without display rights), both on
char major 226, with the number in the name as the node's minor: cards from 0, render
nodes from 128. The numbers follow probe order and can change at reboot, as NVIDIA's
minors do. udev adds `/dev/dri/by-path/pci-<address>-{card,render}` links to them.
"""

from __future__ import annotations

import re

from pvegpu.vendors.vendor import DeviceNodes, DynamicNode, NodeMaker

DRM_MAJOR = 226
RENDER_PATH = "/dev/dri/renderD{minor}"
CARD_PATH = "/dev/dri/card{minor}"
_GPU_NODE = r"/dev/dri/(?:renderD|card)([0-9]+)"
_ANY_DRM = r"/dev/dri(?:/(?:card[0-9]+|renderD[0-9]+|by-path(?:/.*)?))?"


def drm_nodes(
    shared: tuple[str, ...] = (),
    dynamic: DynamicNode | None = None,
    makers: tuple[NodeMaker, ...] = (),
) -> DeviceNodes:
    """A vendor's container nodes when its GPUs are reached through DRM: each GPU's render
    node (and its card node for display), plus the vendor's own shared nodes. The DRM
    nodes appear as the driver binds a GPU (devtmpfs); `makers` make the shared ones."""
    extra = "".join(f"|{re.escape(path)}" for path in shared)
    return DeviceNodes(
        gpu_path=RENDER_PATH,
        gpu_node=re.compile(rf"^{_GPU_NODE}$"),
        any_node=re.compile(rf"^(?:{_ANY_DRM}{extra})$"),
        shared=shared,
        major=DRM_MAJOR,
        # card0.. and renderD128..: every minor of the major is one device's node.
        gpu_minors=range(256),
        dynamic=dynamic,
        stack_prefix=dynamic.module if dynamic is not None else None,
        drm=True,
        display_path=CARD_PATH,
        makers=makers,
    )


RENDER_BASE = 128
"""The first render node's minor: below it the minors are card nodes'."""


def node_path(minor: int) -> str:
    """The DRM node of a minor on major 226: a render node from 128, a card node below."""
    return (RENDER_PATH if minor >= RENDER_BASE else CARD_PATH).format(minor=minor)


DRM_NODES = drm_nodes()
"""Every GPU's DRM nodes, whatever its vendor (NVIDIA's too, with nvidia-drm): how a
container line names a render or card node."""
