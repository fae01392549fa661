"""etc/pve/lxc/<vmid>.conf of every container pool, patched with the lines plan() decided.

The patch is computed from the file discovery read (kept whole in the facts), so the
artifact's `base` is exactly what it was computed from. Nothing here refuses: plan()
found every problem of the existing file, and its warnings are findings.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from pvegpu.model.artifact import Artifact
from pvegpu.model.facts import HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.paths import PVE_MODE
from pvegpu.model.plan import LxcContainer, Plan, Pool
from pvegpu.model.released import ContainerGpusRemoved
from pvegpu.model.schema import DeviceStyle
from pvegpu.pvefiles import lxccaps, lxcconf
from pvegpu.vendors import DeviceNodes
from pvegpu.vendors.drm import node_path as drm_node_path
from pvegpu.wording import plural


def _name(nodes: DeviceNodes, minor: int) -> str:
    """A node by file name: `nvidia4`, `renderD129`, `card1`."""
    return posixpath.basename(drm_node_path(minor) if nodes.drm else nodes.path(minor))


def _names(paths: Iterable[str]) -> str:
    """Node paths as the reasons name them, by file name: `nvidiactl, renderD128`."""
    return ", ".join(posixpath.basename(p) for p in paths)


def _gpu_nodes(pool: Pool, lines: lxcconf.GpuLines) -> list[str]:
    """The pool's GPUs' nodes the lines hand over: each GPU's node, and its card node
    when the spec asks for display."""
    written = {v.split(",")[0] for v in lines.devices}
    written |= {v.split()[0] for k, v in lines.raw if k == lxcconf.MOUNT_ENTRY and v.split()}
    found = []
    for gpu in pool.gpus:
        card = None if gpu.drm_card is None else drm_node_path(gpu.drm_card)
        found += [p for p in (gpu.node_path, card) if p is not None and p in written]
    return found


def render_lxc_configs(plan: Plan) -> tuple[Artifact, ...]:
    """One patched etc/pve/lxc/<vmid>.conf per container pool, and per other container
    that loses lines for the pools' GPUs."""
    pools = tuple(
        _container_config(plan.facts, pool, pool.lxc)
        for pool in plan.lxc_pools
        if pool.lxc is not None
    )
    return pools + tuple(_losing_gpus(c) for c in plan.containers_losing_gpus)


def _losing_gpus(container: ContainerGpusRemoved) -> Artifact:
    nodes = container.nodes
    content = lxcconf.remove_gpu_nodes(
        container.config.content,
        nodes,
        container.minors,
        container.shared_majors,
        container.naming,
    )
    reasons = []
    if container.minors:
        paths = ", ".join(nodes.path(m) for m in container.minors)
        reasons.append(
            f"{', '.join(container.keys)} for {paths} removed, GPUs the plan gives elsewhere"
        )
    if container.renumber:
        # After the removal: a line the container loses is not also moved.
        content = lxcconf.renumber_gpu_nodes(
            content, nodes, dict(container.renumber), container.naming
        )
        moves = ", ".join(f"{_name(nodes, a)} -> {_name(nodes, b)}" for a, b in container.renumber)
        reasons.append(
            f"lines of the GPUs it keeps moved to their numbers after the reboot ({moves})"
        )
    reason = f"LXC {container.vmid}: " + "; ".join(reasons)
    if container.shared_keys:
        reason += (
            f"; it keeps no GPU, so {', '.join(container.shared_keys)} for the shared "
            f"nodes ({_names(nodes.shared)}) go too"
        )
    if (caps := container.mig_caps) is not None:
        # The MIG capability nodes of those GPUs' instances go with them (planning/mig.py).
        content = lxccaps.remove_caps(content, caps)
        reason += f"; with them {_names(tuple(caps.mig.path(m) for m in caps.minors))}"
    reason += "; other lines and snapshots kept"
    return Artifact(container.config_path, content, reason, PVE_MODE, base=container.config)


def _container_config(facts: HostFacts, pool: Pool, container: LxcContainer) -> Artifact:
    assert container.config is not None  # plan() refuses a container that does not exist
    numa = container.cpuset
    cpuset = numa.cpus if numa is not None else None
    base = container.config.content
    device_nodes = container.nodes
    majors = frozenset({device_nodes.major, *container.gpu_majors})
    content = lxcconf.patch_gpu_lines(
        base, device_nodes, container.gpu_lines, majors, cpuset=cpuset, naming=container.naming
    )
    nodes = _names(_gpu_nodes(pool, container.gpu_lines))
    if content == base:
        reason = f"LXC {container.vmid} already has exactly these GPU lines ({nodes})"
        if numa is not None:
            reason += f" and CPU set (NUMA node {numa.id})"
    else:
        style = "devN entries" if container.devices is DeviceStyle.DEV else "raw lxc.* lines"
        parsed = guests(facts).config(container.config)
        old = parsed.gpu_line_count(device_nodes, majors, container.naming)
        shared = f" + {_names(device_nodes.shared)}" if device_nodes.shared else ""
        reason = (
            f"LXC {container.vmid}: GPUs {nodes}{shared} "
            f"as {style}, replacing {plural(old, 'old GPU line')}"
        )
        if container.group_gid is not None:
            reason += f"; group {container.group_gid}: the container's own render group"
        if numa is not None:
            reason += (
                f"; {lxcconf.CPUSET}: {numa.cpus} pins the container to NUMA node "
                f"{numa.id}, the serving unit's CPUAffinity"
            )
        if container.host_userspace:
            reason += (
                f"; the host's staged driver userspace bind-mounted read-only at "
                f"/{lxcconf.DRIVER_MOUNT_POINT}"
            )
        reason += "; other lines and snapshots kept"
    return Artifact(container.config_path, content, reason, PVE_MODE, base=container.config)
