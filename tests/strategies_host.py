"""Hypothesis strategies for whole hosts and specs (plan-level properties)."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import strategies as st

from pvegpu.model.facts import (
    GPU,
    DriverctlOverride,
    FabricManager,
    HostFacts,
    IommuGroup,
    IommuGroupType,
    IommuState,
    MdevInstance,
    MdevType,
    MigCap,
    NumaNode,
    PciFunction,
    Sriov,
)
from pvegpu.model.ports import AcsState, PortAcs, PortType
from pvegpu.model.schema import LxcSpec, MappingSpec, PoolSpec, Spec, VfioSpec
from pvegpu.pci import CpuList, PciAddress


def _function(address: PciAddress, vendor: int, device: int, cls: int, **kw: object) -> PciFunction:
    return PciFunction(
        address=address,
        vendor=vendor,
        device=device,
        subsystem_vendor=vendor,
        subsystem_device=0x204B,
        pci_class=cls,
        sysfs_path=f"sys/devices/pci0000:00/{address}",
        **kw,  # type: ignore[arg-type]
    )


@st.composite
def hosts(draw: st.DrawFn, iommu: bool | None = None) -> HostFacts:
    """A host with 1-8 GPUs over 1-2 NUMA nodes; some with audio, some sharing a group."""
    n = draw(st.integers(1, 8))
    # Mostly IOMMU hosts: without one every vfio pool is refused and proves little.
    iommu_on = draw(st.integers(0, 4)) > 0 if iommu is None else iommu
    buses = draw(st.lists(st.integers(1, 0xFE), min_size=n, max_size=n, unique=True))
    functions: list[PciFunction] = []
    gpus: list[GPU] = []
    groups: dict[int, list[PciAddress]] = {}
    next_group = 10
    for minor, bus in enumerate(sorted(buses)):
        numa = draw(st.integers(0, 1))
        group = next_group if iommu_on else None
        next_group += 1
        addr = PciAddress(0, bus, 0, 0)
        gpu_fn = _function(
            addr,
            0x10DE,
            draw(st.sampled_from([0x2BB5, 0x2204])),
            0x030200,
            numa_node=numa,
            iommu_group=group,
            driver="nvidia",
        )
        if draw(st.integers(0, 3)) == 0:
            # An SR-IOV PF (a vGPU card) with VFs of their own groups: not GPUs, not companions.
            vfs = [PciAddress(0, bus, 2, i) for i in range(draw(st.integers(0, 3)))]
            gpu_fn = attrs.evolve(
                gpu_fn,
                sriov=Sriov(
                    len(vfs) + draw(st.integers(0, 4)), len(vfs), draw(st.booleans()), tuple(vfs)
                ),
            )
            for vf_address in vfs:
                vf_group = next_group if iommu_on else None
                next_group += 1
                vf = _function(
                    vf_address, 0x10DE, gpu_fn.device, 0x030200, numa_node=numa,
                    iommu_group=vf_group, driver=draw(st.sampled_from([None, "nvidia"])),
                    physfn=addr,
                )  # fmt: skip
                functions.append(vf)
                if vf_group is not None:
                    groups[vf_group] = [vf_address]
        companions = []
        members = [addr]
        if draw(st.booleans()):
            audio = _function(
                addr.with_function(1),
                0x10DE,
                0x22E8,
                0x040300,
                numa_node=numa,
                iommu_group=group,
                driver="snd_hda_intel",
            )
            companions.append(audio)
            members.append(audio.address)
        if iommu_on and draw(st.integers(0, 5)) == 0:
            # A non-ACS switch: an NVMe shares the GPU's group.
            nvme = _function(
                PciAddress(1, bus, 0, 0),
                0x144D,
                0xA80A,
                0x010802,
                numa_node=numa,
                iommu_group=group,
                driver="nvme",
            )
            functions.append(nvme)
            members.append(nvme.address)
        functions.extend([gpu_fn, *companions])
        # nvidia-drm gives some GPUs DRM nodes too (the facts leave the keys out otherwise).
        drm = draw(st.none() | st.integers(0, 63))
        render = None if drm is None else 128 + drm
        gpus.append(
            GPU(gpu_fn, tuple(companions), node_minor=minor, drm_card=drm, drm_render=render)
        )
        if group is not None:
            groups[group] = sorted(members)
    return HostFacts(
        node="pve1",
        functions=tuple(sorted(functions)),
        gpus=tuple(sorted(gpus)),
        numa_nodes=(NumaNode(0, CpuList.parse("0-7")), NumaNode(1, CpuList.parse("8-15"))),
        iommu_groups=tuple(
            IommuGroup(g, tuple(m), IommuGroupType.DMA_FQ) for g, m in sorted(groups.items())
        ),
        iommu=IommuState(iommu_on, ("dmar0",) if iommu_on else ()),
        sev_snp=False,
        gpu_drivers=(),
        char_majors=(),
        cmdline="",
        vfio_ids=(),
        # Fabric Manager's facts (read on an NVSwitch host), sometimes set, to round-trip.
        fabric_manager=draw(
            st.just(FabricManager())
            | st.builds(FabricManager, st.booleans(), st.booleans(), st.none() | st.integers(0, 2))
        ),
        # vGPU types and instances, MIG capability nodes: sometimes there, to round-trip.
        **draw(_partitions([g.address for g in gpus])),
    )


@st.composite
def _partitions(draw: st.DrawFn, parents: list[PciAddress]) -> dict[str, Any]:
    if not parents or draw(st.booleans()):
        return {}
    parent = st.sampled_from(parents)
    name = st.none() | st.text("GRID T4-1Bx", min_size=1, max_size=12)
    count = st.none() | st.integers(0, 32)
    kind = st.sampled_from(["nvidia-222", "i915-GVTg_V5_4", "nvidia-1414"])
    types = st.lists(st.builds(MdevType, parent, kind, name, count), max_size=3)
    uuid = st.none() | st.uuids().map(str)
    live = st.builds(MdevInstance, parent, st.none() | st.just("nvidia-222"), uuid)
    optional = st.none() | st.integers(0, 14)
    cap_name = st.sampled_from(["mig/config", "gpu0/mig/gi1", "gpu0/mig/gi1/ci0"])
    cap = st.builds(MigCap, st.integers(1, 300), optional, optional, optional, cap_name)
    instances, caps = st.lists(live, max_size=3), st.lists(cap, max_size=4)
    return {
        "mdev_types": tuple(draw(types)),
        "mdev_instances": tuple(draw(instances)),
        "mig_caps": tuple(draw(caps)),
    }


def _clean(host: HostFacts, gpu: GPU) -> bool:
    """The GPU's IOMMU group holds only its own functions and bridges: a vfio pool can
    take it whole."""
    if gpu.iommu_group is None:
        return False
    group = host.group(gpu.iommu_group)
    own = {f.address for f in gpu.functions}
    return group is not None and all(
        a in own or ((f := host.function(a)) is not None and f.is_bridge) for a in group.members
    )


def _pool(name: str, vfio: bool, i: int, **select: Any) -> PoolSpec:
    """Pool `name` with one selector (`select`), LXC 100+i or vfio with mapping map<i>."""
    if vfio:
        return PoolSpec(name=name, vfio=VfioSpec(), mapping=MappingSpec(f"map{i}"), **select)
    return PoolSpec(name=name, lxc=LxcSpec(vmid=100 + i), **select)


@st.composite
def specs(draw: st.DrawFn, host: HostFacts, vfio_anywhere: bool = False) -> Spec:
    """Mostly specs plan() accepts, built from the host's GPUs; one in five is wild.

    An accepted spec: 1-3 pools with disjoint selections, by NUMA node (one no other pool
    takes from), by explicit addresses, or by a count of what the others leave, each an
    LXC pool or, where every selected GPU's IOMMU group is clean, a vfio pool
    (`vfio_anywhere`: on any group, for properties of that refusal). The wild ones
    (wild_specs) select and pick consumers blindly, so refusals stay covered.
    """
    if draw(st.integers(0, 4)) == 0:
        return draw(wild_specs(host))
    by_node: dict[int, list[GPU]] = {}
    for gpu in host.gpus:
        if gpu.numa_node is not None:
            by_node.setdefault(gpu.numa_node, []).append(gpu)
    free = list(host.gpus)
    # (selector, its GPUs); a count pool's GPUs are known once every other pool has chosen.
    pools: list[tuple[dict[str, object], list[GPU]]] = []
    for _ in range(draw(st.integers(1, 3))):
        nodes = sorted(n for n, members in by_node.items() if all(g in free for g in members))
        options = [*(["gpus", "count"] if free else []), *(["numa"] if nodes else [])]
        if not options:
            break
        how = draw(st.sampled_from(options))
        if how == "numa":
            node = draw(st.sampled_from(nodes))
            pools.append(({"numa_node": node}, by_node[node]))
        elif how == "gpus":
            picked = draw(st.lists(st.sampled_from(free), min_size=1, max_size=3, unique=True))
            short = draw(st.booleans())
            addresses = tuple(g.address.short if short else str(g.address) for g in picked)
            pools.append(({"gpus": addresses}, picked))
        else:
            pools.append(({"count": 0}, []))
        free = [g for g in free if all(g not in mine for _, mine in pools)]
    # Count pools take from what the others leave, in spec order, at least one each: drop
    # them where too few GPUs are left. Which ones they take is the planner's choice (one
    # NUMA node's where one has enough, planning/count_choice.py): a count pool is made a
    # vfio pool only where every GPU it may take is clean, so its candidates are all of them.
    counted = [select for select, _ in pools if "count" in select]
    if len(free) < len(counted):
        pools = [(select, mine) for select, mine in pools if "count" not in select]
        counted = []
    left = len(free)
    for j, select in enumerate(counted):
        n = draw(st.integers(1, left - (len(counted) - j - 1)))
        select["count"] = n
        next(mine for s, mine in pools if s is select).extend(free)
        left -= n
    if not pools:
        return draw(wild_specs(host))
    return Spec(
        node="pve1",
        pools=tuple(
            _pool(
                f"p{i}",
                host.iommu.enabled
                and (vfio_anywhere or all(_clean(host, g) for g in mine))
                and draw(st.booleans()),
                i,
                **select,
            )
            for i, (select, mine) in enumerate(pools)
        ),
    )


@st.composite
def wild_specs(draw: st.DrawFn, host: HostFacts) -> Spec:
    """1-3 pools selecting by NUMA node, explicit addresses or count, LXC or vfio, with no
    regard for overlaps, group members or the IOMMU: plan() refuses most."""
    pools = []
    for i in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["numa", "gpus", "count"]))
        select: dict[str, object] = {}
        if how == "numa":
            select["numa_node"] = draw(st.integers(0, 1))
        elif how == "gpus":
            picked = draw(st.lists(st.sampled_from(host.gpus), min_size=1, max_size=3))
            select["gpus"] = tuple(str(g.address) for g in picked)
        else:
            select["count"] = draw(st.integers(1, 4))
        pools.append(_pool(f"p{i}", draw(st.booleans()), i, **select))
    return Spec(node="pve1", pools=tuple(pools))


@st.composite
def with_ports_and_driverctl(draw: st.DrawFn, host: HostFacts) -> HostFacts:
    """`host` with drawn ACS ports above its GPUs and driverctl overrides of its functions
    (issue 19, item 6 and 7): only for the facts document, the plan ignores them here."""
    buses = draw(st.lists(st.integers(0, 0xFF), max_size=3, unique=True))
    addresses = sorted(PciAddress(0, bus, 0, 0) for bus in buses)
    ports = tuple(
        PortAcs(
            a,
            draw(st.sampled_from(AcsState)),
            draw(st.none() | st.sampled_from(PortType)),
        )
        for a in addresses
    )
    picked = draw(st.lists(st.sampled_from(host.functions), max_size=3, unique=True))
    overrides = tuple(
        sorted(
            DriverctlOverride(f.address, draw(st.sampled_from(["vfio-pci", "nvidia", "nvme"])))
            for f in picked
        )
    )
    return attrs.evolve(host, acs_ports=ports, driverctl=overrides)
