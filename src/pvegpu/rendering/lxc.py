"""etc/pve/lxc/<vmid>.conf of every container pool, patched with the lines plan() decided.

The patch is computed from the file discovery read (kept whole in the facts), so the
artifact's `base` is exactly what it was computed from. Nothing here refuses: plan()
found every problem of the existing file, and its warnings are findings.
"""

from __future__ import annotations

from pvegpu.model.artifact import Artifact
from pvegpu.model.facts import HostFacts
from pvegpu.model.paths import PVE_MODE
from pvegpu.model.plan import LxcContainer, Plan, Pool
from pvegpu.model.released import ContainerGpusRemoved
from pvegpu.model.schema import DeviceStyle
from pvegpu.pvefiles import lxcconf
from pvegpu.pvefiles.guestconf import split_sections
from pvegpu.vendors import CONTAINER_NODES
from pvegpu.wording import plural


def _count_gpu_lines(text: str, majors: frozenset[int]) -> int:
    main = split_sections(text)[0]
    return sum(lxcconf.is_gpu_line(line, CONTAINER_NODES, majors) for line in main.lines)


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
    content = lxcconf.remove_gpu_nodes(
        container.config.content, CONTAINER_NODES, container.minors, container.shared_majors
    )
    nodes = ", ".join(f"/dev/nvidia{m}" for m in container.minors)
    reason = (
        f"LXC {container.vmid}: {', '.join(container.keys)} for {nodes} removed, GPUs the "
        "plan gives elsewhere"
    )
    if container.shared_keys:
        reason += (
            f"; it keeps no GPU, so {', '.join(container.shared_keys)} for the shared "
            "NVIDIA nodes (nvidiactl, nvidia-uvm) go too"
        )
    reason += "; other lines and snapshots kept"
    return Artifact(container.config_path, content, reason, PVE_MODE, base=container.config)


def _container_config(facts: HostFacts, pool: Pool, container: LxcContainer) -> Artifact:
    assert container.config is not None  # plan() refuses a container that does not exist
    numa = container.cpuset
    cpuset = numa.cpus if numa is not None else None
    base = container.config.content
    majors = frozenset({CONTAINER_NODES.major, *container.gpu_majors})
    content = lxcconf.patch_gpu_lines(
        base, CONTAINER_NODES, container.gpu_lines, majors, cpuset=cpuset
    )
    nodes = ", ".join(f"nvidia{g.node_minor}" for g in pool.gpus)
    if content == base:
        reason = f"LXC {container.vmid} already has exactly these GPU lines ({nodes})"
        if numa is not None:
            reason += f" and CPU set (NUMA node {numa.id})"
    else:
        style = "devN entries" if container.devices is DeviceStyle.DEV else "raw lxc.* lines"
        old = _count_gpu_lines(base, majors)
        reason = (
            f"LXC {container.vmid}: GPUs {nodes} + nvidiactl, nvidia-uvm, nvidia-uvm-tools "
            f"as {style}, replacing {plural(old, 'old GPU line')}"
        )
        if numa is not None:
            reason += (
                f"; {lxcconf.CPUSET}: {numa.cpus} pins the container to NUMA node "
                f"{numa.id}, the serving unit's CPUAffinity"
            )
        reason += "; other lines and snapshots kept"
    return Artifact(container.config_path, content, reason, PVE_MODE, base=container.config)
