"""The layout table: every GPU of the host, the pool it joins and the driver it ends on.

Also the functions that leave the host with a VM pool's GPUs, and the one line of host
facts (IOMMU, SEV-SNP, NVIDIA driver) printed above the table (rendering/host_picture.py,
shared with `pvegpu discover --svg`).
"""

from __future__ import annotations

import attrs

from pvegpu.hardware import VFIO_DRIVER, host_driver
from pvegpu.model.facts import GPU, HostFacts, PciFunction
from pvegpu.model.plan import Plan, Pool, PoolKind
from pvegpu.pci import PciAddress
from pvegpu.rendering.drawing import UNBOUND
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class LayoutRow:
    """One GPU of the host and where this plan leaves it."""

    index: int
    """Position in PCI address order over every GPU of the host (0-based)."""
    gpu: GPU
    pool: Pool | None
    driver_before: str
    driver_after: str
    purpose: str

    @property
    def address(self) -> PciAddress:
        return self.gpu.address

    @property
    def numa(self) -> str:
        return "-" if self.gpu.numa_node is None else str(self.gpu.numa_node)

    @property
    def driver_changes(self) -> bool:
        return self.driver_before != self.driver_after

    @property
    def driver(self) -> str:
        """`nvidia -> vfio-pci` when the plan moves it, else the one driver."""
        if self.driver_changes:
            return f"{self.driver_before} -> {self.driver_after}"
        return self.driver_after


@value_class
@attrs.frozen(eq=False, repr=False)
class MovingFunction:
    """A non-GPU function (the GPU's HD audio, a group mate) that moves to vfio-pci too."""

    pool: Pool
    function: PciFunction
    driver_before: str


def gpus_in_pci_order(facts: HostFacts) -> tuple[GPU, ...]:
    return tuple(sorted(facts.gpus, key=lambda g: g.address))


def pools_by_gpu(plan: Plan) -> dict[PciAddress, Pool]:
    """Each planned GPU's pool, built once: looking it up per GPU keeps the layout linear."""
    pools: dict[PciAddress, Pool] = {}
    for pool in plan.pools:
        for gpu in pool.gpus:
            pools.setdefault(gpu.address, pool)  # the first pool wins, as in spec order
    return pools


def driver_now(function: PciFunction) -> str:
    return function.driver or UNBOUND


def driver_after(pool: Pool | None, function: PciFunction) -> str:
    """The driver a function ends on: vfio-pci for VM pools, its host driver otherwise (a
    vGPU pool's virtual functions stay on theirs)."""
    if pool is None:
        return driver_now(function)
    if pool.moves_to_vfio:
        return VFIO_DRIVER
    return host_driver(function) or UNBOUND


def purpose(pool: Pool | None) -> str:
    """What a pool's GPUs are for, as one table cell."""
    if pool is None:
        return "unchanged (in no pool)"
    if pool.kind is PoolKind.LXC and pool.lxc is not None:
        inner = [pool.serving.engine, f"TP={pool.size}"] if pool.serving else [pool.name]
        text = f"LXC {pool.lxc.vmid} ({', '.join(inner)})"
        return f"{text}; mapping {pool.mapping.id}" if pool.mapping else text
    vgpu = f", vGPU {pool.vgpu_type}" if pool.vgpu_type is not None else ""
    if pool.mapping is not None:
        if pool.vm is not None:
            return f"VM {pool.vm.vmid} via mapping {pool.mapping.id}{vgpu}"
        return f"mapping {pool.mapping.id}{vgpu}, no VM yet"
    if pool.vm is not None:
        return f"VM {pool.vm.vmid}"
    return "vfio-pci, no VM yet"


def layout(plan: Plan) -> tuple[LayoutRow, ...]:
    """Every GPU of the host in PCI order, including those no pool touches, and every
    SR-IOV VF a pool names (a device of that pool on its own, not one of facts.gpus)."""
    rows = []
    pools = pools_by_gpu(plan)
    known = {g.address for g in plan.facts.gpus}
    vfs = [g for p in plan.pools for g in p.gpus if g.address not in known]
    shown = sorted((*plan.facts.gpus, *dict.fromkeys(vfs)), key=lambda g: g.address)
    for index, gpu in enumerate(shown):
        pool = pools.get(gpu.address)
        rows.append(
            LayoutRow(
                index=index,
                gpu=gpu,
                pool=pool,
                driver_before=driver_now(gpu.function),
                driver_after=driver_after(pool, gpu.function),
                purpose=purpose(pool),
            )
        )
    return tuple(rows)


def moving_functions(plan: Plan) -> tuple[MovingFunction, ...]:
    """Functions that are not GPUs but leave the host with them (VFIO takes whole groups)."""
    moving = []
    for pool in plan.vfio_pools:
        # A whole board's NVSwitches move for the fabric, not as group mates.
        gpu_addresses = {g.address for g in pool.gpus} | {s.address for s in pool.nvswitches}
        for function in pool.functions:
            if function.address not in gpu_addresses:
                moving.append(MovingFunction(pool, function, driver_now(function)))
    return tuple(moving)


def moving_nvswitches(plan: Plan) -> tuple[MovingFunction, ...]:
    """The NVSwitches that go to a VM with the whole board (planning/fabric.py)."""
    return tuple(
        MovingFunction(pool, switch, driver_now(switch))
        for pool in plan.vfio_pools
        for switch in pool.nvswitches
    )
