"""Hypothesis strategies for whole hosts and specs (plan-level properties)."""

from __future__ import annotations

from hypothesis import strategies as st

from pvegpu.host.facts import (
    GPU,
    HostFacts,
    IommuGroup,
    IommuGroupType,
    IommuState,
    NumaNode,
    PciFunction,
)
from pvegpu.pci import CpuList, PciAddress
from pvegpu.spec.schema import LxcSpec, MappingSpec, PoolSpec, Spec, VfioSpec


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
        gpus.append(GPU(gpu_fn, tuple(companions), nvidia_minor=minor))
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
        nvidia=None,
        char_majors=(),
        cmdline="",
        vfio_ids=(),
    )


@st.composite
def specs(draw: st.DrawFn, host: HostFacts) -> Spec:
    """1-3 pools selecting by NUMA node, explicit addresses or count, LXC or vfio."""
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
        if draw(st.booleans()):
            pools.append(
                PoolSpec(name=f"p{i}", lxc=LxcSpec(vmid=100 + i), **select)  # type: ignore[arg-type]
            )
        else:
            pools.append(
                PoolSpec(  # type: ignore[arg-type]
                    name=f"p{i}", vfio=VfioSpec(), mapping=MappingSpec(f"map{i}"), **select
                )
            )
    return Spec(node="pve1", pools=tuple(pools))
