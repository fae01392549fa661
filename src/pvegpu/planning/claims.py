"""Where the plan sends each GPU and function of its pools, and which guests may keep them.

A pool's GPUs have one owner after the split: a container pool's container (or the
host, for a pool without one), a vfio pool's VM (or any VM, for a pool without one).
Every other guest that names them is in the way; host_guests.py and mapping_moves.py
ask here who that is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from pvegpu.model.facts import GPU, HostFacts, PciFunction
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.model.references import CgroupVersion
from pvegpu.pvefiles.hostpci import HostId
from pvegpu.pvefiles.lxcconf import NodeNaming
from pvegpu.values import value_class
from pvegpu.vendors.drm import DRM_MAJOR


def node_naming(facts: HostFacts) -> NodeNaming:
    """How container lines on this host name GPU nodes: the devices.allow key its cgroup
    hierarchy applies, and udev's stable by-path names of the GPUs' DRM nodes."""
    stable = []
    for gpu in facts.gpus:
        for kind, minor in (("card", gpu.drm_card), ("render", gpu.drm_render)):
            if minor is not None:
                stable.append((f"/dev/dri/by-path/pci-{gpu.address}-{kind}", minor))
    other = CgroupVersion.V1 if facts.cgroup is CgroupVersion.V2 else CgroupVersion.V2
    return NodeNaming(facts.cgroup.allow_key, tuple(stable), other.allow_key)


@value_class
@attrs.frozen(eq=False, repr=False)
class Claim:
    """One function of a pool, as hostpci and pci.cfg name devices."""

    function: PciFunction
    pool: Pool
    host: HostId


def destination(pool: Pool) -> str:
    """Where the pool's GPUs go, for messages: `LXC 129 (pool ct)`."""
    if pool.kind is PoolKind.VFIO:
        vm = f"VM {pool.vm.vmid} on " if pool.vm is not None else ""
        return f"{vm}vfio-pci (pool {pool.name})"
    if pool.lxc is not None:
        return f"LXC {pool.lxc.vmid} (pool {pool.name})"
    return f"the host's {pool.driver} (pool {pool.name})"


def container_may_hold(pool: Pool, vmid: int) -> bool:
    """Whether container `vmid` may keep this pool's GPU nodes: a container pool's own
    container, or anyone for a pool that keeps its GPUs on the host without one."""
    if pool.kind is PoolKind.VFIO:
        return False
    return pool.lxc is None or pool.lxc.vmid == vmid


def vm_may_hold(pool: Pool, vmid: int) -> bool:
    """Whether VM `vmid` may pass this pool's devices through: the pool's own VM, or any
    VM for a vfio pool that names none. A container pool's GPUs stay on the host."""
    if pool.kind is not PoolKind.VFIO:
        return False
    return pool.vm is None or pool.vm.vmid == vmid


def container_node(gpu: GPU) -> tuple[int, int] | None:
    """(major, minor) of the node a container gets for the GPU, None while unknown."""
    vendor = gpu.vendor
    minor = gpu.container_minor
    if vendor is None or vendor.nodes is None or minor is None:
        return None
    return vendor.nodes.major, minor


def device_nodes(gpu: GPU) -> tuple[tuple[int, int], ...]:
    """(major, minor) of every node a guest line can hold the GPU by: its container node,
    and its DRM card and render nodes (an NVIDIA GPU has those too with nvidia-drm)."""
    found = [node] if (node := container_node(gpu)) is not None else []
    found += [(DRM_MAJOR, n) for n in (gpu.drm_card, gpu.drm_render) if n is not None]
    return tuple(dict.fromkeys(found))


def _host_id(function: PciFunction) -> HostId:
    a = function.address
    return HostId(a.domain, a.bus, a.device, a.function)


class Claims:
    """The pools' GPUs by their container node (major, minor: `/dev/nvidia4` is 195:4, a
    render node 226:128) and their functions by slot, for lookups from every guest line
    on the host."""

    def __init__(self, pools: Sequence[Pool], host_gpus: Sequence[GPU] = ()) -> None:
        self.pools = tuple(pools)
        self.host_gpus = tuple(host_gpus)
        """Every GPU of the host, in a pool or not."""
        self.by_node: dict[tuple[int, int], tuple[GPU, Pool]] = {}
        self._slots: dict[tuple[int, int, int], list[Claim]] = {}
        for pool in pools:
            for gpu in pool.gpus:
                for node in device_nodes(gpu):
                    self.by_node[node] = (gpu, pool)
            # The functions that move, and a vGPU pool's VFs, which stay but are its too.
            own = (*pool.functions, *(f for g in pool.gpus for f in g.functions))
            for function in dict.fromkeys(own):
                claim = Claim(function, pool, _host_id(function))
                key = (claim.host.domain, claim.host.bus, claim.host.device)
                self._slots.setdefault(key, []).append(claim)

    def of_hosts(self, hosts: Iterable[HostId]) -> list[Claim]:
        """The pools' functions that any of these host ids hands over, in address order."""
        found: dict[PciFunction, Claim] = {}
        for host in hosts:
            for claim in self._slots.get((host.domain, host.bus, host.device), ()):
                if host.overlaps(claim.host):
                    found.setdefault(claim.function, claim)
        return [found[f] for f in sorted(found)]

    def gpus(self) -> list[tuple[GPU, Pool]]:
        """Every pool GPU with its pool, in pool order."""
        return [(gpu, pool) for pool in self.pools for gpu in pool.gpus]


def by_destination(items: Iterable[tuple[str, Pool]]) -> str:
    """`a, b, which the plan gives to LXC 129 (pool ct); c, which ...`: grouped by pool."""
    groups: dict[str, list[str]] = {}
    pools: dict[str, Pool] = {}
    for name, pool in items:
        if name not in groups.setdefault(pool.name, []):
            groups[pool.name].append(name)
        pools[pool.name] = pool
    return "; ".join(
        f"{', '.join(names)}, which the plan gives to {destination(pools[p])}"
        for p, names in groups.items()
    )
