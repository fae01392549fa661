"""A container's rule that opens every GPU of a driver stack (`c 195:* rwm`) or every
device (`c *:* rwm`, `a`) in a container the pools' GPUs are not for: refused, with the
per-GPU rules the container may keep as the fix (`lxc-grants-all-gpus`). A rule for every
device reaches the GPUs of every stack (NVIDIA's nodes and DRM's of the same GPUs): it is
one refusal naming each GPU once, whose fix keeps the container's other devices.
host_guests.py finds the lines; this module words them.
"""

from __future__ import annotations

from pvegpu.diagnostic import Diagnostic
from pvegpu.model.facts import GPU
from pvegpu.model.plan import Pool
from pvegpu.planning.claims import Claims, by_destination, container_may_hold, container_node
from pvegpu.pvefiles.guestconf import ConfLine
from pvegpu.vendors import VENDORS, DeviceNodes


class EveryDevice:
    """A container's rule for every device, with what it reaches in each node family:
    filled in place while host_guests.py reads the families (a plain class, as the other
    collectors of the planner are)."""

    __slots__ = ("families", "hit", "line", "vmid")

    def __init__(self, vmid: int, line: ConfLine) -> None:
        self.vmid = vmid
        self.line = line
        self.hit: list[tuple[GPU, Pool]] = []
        self.families: list[DeviceNodes] = []


def every_gpu(
    where: str,
    vmid: int,
    line: ConfLine,
    named: list[tuple[str, Pool]],
    claims: Claims,
    nodes: DeviceNodes,
) -> Diagnostic:
    rules = _keep_rules(vmid, claims, nodes)
    holder = "a DRM driver" if nodes.drm else _holder(nodes)
    return Diagnostic.error(
        "lxc-grants-all-gpus",
        where,
        f"`{line.raw.strip()}` lets CT {vmid} open every GPU {holder} holds (before the "
        "split, after a revert, or when the split fails at boot), among them "
        f"{by_destination(named)}",
        f"replace it with one rule per GPU CT {vmid} keeps: {rules}then run pvegpu again"
        if rules
        else f"remove it: no GPU of this host is left for CT {vmid}; then run pvegpu again",
    )


def every_device(where: str, rule: EveryDevice, claims: Claims) -> Diagnostic:
    """A rule for every device (`a`): one refusal naming each GPU once, whatever nodes
    (NVIDIA's, DRM's) it is opened by; its fix keeps the container's other devices."""
    vmid = rule.vmid
    rules = "".join(_keep_rules(vmid, claims, nodes) for nodes in rule.families)
    named = [(g.address.short, p) for g, p in rule.hit]
    return Diagnostic.error(
        "lxc-grants-all-gpus",
        where,
        f"`{rule.line.raw.strip()}` lets CT {vmid} open every device, every GPU of every "
        "driver among them (before the split, after a revert, or when the split fails at "
        f"boot): {by_destination(named)}",
        f"replace it with rules for the devices CT {vmid} needs besides GPUs, and one per "
        f"GPU it keeps: {rules}then run pvegpu again"
        if rules
        else f"replace it with rules for the devices CT {vmid} needs (no GPU of this host is "
        "left for it); then run pvegpu again",
    )


def _keep_rules(vmid: int, claims: Claims, nodes: DeviceNodes) -> str:
    """`c 195:2 rwm` for each GPU of the family container `vmid` may keep, and its
    control node's; empty when it keeps none."""
    owners = {node: p for node, (_, p) in claims.by_node.items()}
    keeps = [
        (g, node)
        for g in claims.host_gpus
        if (node := container_node(g)) is not None
        and node[0] == nodes.major
        and (node not in owners or container_may_hold(owners[node], vmid))
    ]
    if not keeps:
        return ""
    rules = "".join(
        f"`c {major}:{minor} rwm` for {g.address.short}, " for g, (major, minor) in keeps
    )
    control = nodes.control_minor
    shared = nodes.shared[0].removeprefix("/dev/") if nodes.shared else None
    ending = (
        f"and `c {nodes.major}:{control} rwm` for {shared}; "
        if control is not None and shared
        else ""
    )
    return rules + ending


def _holder(nodes: DeviceNodes) -> str:
    return next((v.host_driver for v in VENDORS if v.nodes is nodes), "its driver")
