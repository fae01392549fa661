"""Large hosts of any size, for scale tests and benchmarks: GPUs, NVMe, NICs with SR-IOV.

`mixed_host(functions)` fills root ports with slots in a fixed rotation, alternating NUMA
nodes: a GPU with its HD audio function, an NVMe drive, a dual-port NIC whose ports each
have virtual functions. Every function has its own IOMMU group except a GPU and its
audio, which share one like on real boards. The same count always gives the same host.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import attrs

from pvegpu.testing.hostspec import DeviceSpec, HostSpec, IommuUnit, Link, NvidiaInfo, NvidiaModule

GPU_MODEL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
NIC_VFS_PER_PORT = 6
PORTS_PER_DOMAIN = 31 * 8
"""Root ports 00:01.0 to 00:1f.7 of each PCI domain, one bus behind each."""

_GEN5 = Link("32.0 GT/s PCIe", 16)
_GEN4_X4 = Link("16.0 GT/s PCIe", 4)


@attrs.define
class _Numbering:
    """IOMMU groups and nvidia minors, handed out in the order slots are built."""

    groups: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))
    minors: Iterator[int] = attrs.field(factory=itertools.count)


Slot = Callable[[str, int, int, _Numbering], Iterator[DeviceSpec]]
"""(port address, bus behind it, NUMA node, numbering) -> the functions behind the port."""


def _gpu(port: str, bus: int, node: int, numbers: _Numbering) -> Iterator[DeviceSpec]:
    """An RTX PRO 6000 on nvidia and its HD audio function, in one IOMMU group."""
    group = next(numbers.groups)
    for function, device, pci_class, driver in (
        (0, 0x2BB5, 0x030200, "nvidia"),
        (1, 0x22E8, 0x040300, "snd_hda_intel"),
    ):
        yield DeviceSpec(
            address=f"{port[:4]}:{bus:02x}:00.{function}",
            parent=port,
            vendor=0x10DE,
            device=device,
            pci_class=pci_class,
            subsystem_vendor=0x10DE,
            subsystem_device=0x204B,
            revision=0xA1,
            numa_node=node,
            driver=driver,
            iommu_group=group,
            link=_GEN5,
            nvidia=NvidiaInfo(model=GPU_MODEL, minor=next(numbers.minors))
            if function == 0
            else None,
        )


def _nvme(port: str, bus: int, node: int, numbers: _Numbering) -> Iterator[DeviceSpec]:
    yield DeviceSpec(
        address=f"{port[:4]}:{bus:02x}:00.0",
        parent=port,
        vendor=0x144D,
        device=0xA80A,
        pci_class=0x010802,
        subsystem_vendor=0x144D,
        subsystem_device=0xAA0A,
        numa_node=node,
        driver="nvme",
        iommu_group=next(numbers.groups),
        link=_GEN4_X4,
    )


def _nic(port: str, bus: int, node: int, numbers: _Numbering) -> Iterator[DeviceSpec]:
    """An E810 dual-port NIC; each port's virtual functions follow at devfn 2, 3, ..."""
    domain = port[:4]
    for pf_index in range(2):
        yield DeviceSpec(
            address=f"{domain}:{bus:02x}:00.{pf_index}",
            parent=port,
            vendor=0x8086,
            device=0x1592,
            pci_class=0x020000,
            subsystem_vendor=0x8086,
            subsystem_device=0x0002,
            revision=0x02,
            numa_node=node,
            driver="ice",
            iommu_group=next(numbers.groups),
            link=_GEN4_X4,
        )
    for pf_index in range(2):
        for vf_index in range(NIC_VFS_PER_PORT):
            devfn = 2 + pf_index * NIC_VFS_PER_PORT + vf_index
            yield DeviceSpec(
                address=f"{domain}:{bus:02x}:{devfn // 8:02x}.{devfn % 8}",
                parent=port,
                physfn=f"{domain}:{bus:02x}:00.{pf_index}",
                vendor=0x8086,
                device=0x1889,
                pci_class=0x020000,
                subsystem_vendor=0x8086,
                subsystem_device=0x0000,
                revision=0x02,
                numa_node=node,
                driver="iavf",
                iommu_group=next(numbers.groups),
            )


ROTATION: tuple[Slot, ...] = (_gpu, _nvme, _nic)


def _port(domain: int, index: int, node: int, numbers: _Numbering) -> DeviceSpec:
    device, function = divmod(index, 8)
    return DeviceSpec(
        address=f"{domain:04x}:00:{device + 1:02x}.{function}",
        vendor=0x1022,
        device=0x14AB,
        pci_class=0x060400,
        numa_node=node,
        driver="pcieport",
        iommu_group=next(numbers.groups),
        link=_GEN5,
        secondary_bus=index + 1,
    )


def mixed_host(functions: int, *, numa_nodes: int = 2, hostname: str = "synthetic") -> HostSpec:
    """A host of exactly `functions` PCI functions (root ports included).

    The last slot may be cut short (fewer virtual functions, a GPU without its audio
    function); the rest of the host is what `ROTATION` builds, port after port.
    """
    if functions < 1 or numa_nodes < 1:
        raise ValueError("a host has at least one function and one NUMA node")
    numbers = _Numbering()
    devices: list[DeviceSpec] = []
    slot = 0
    while len(devices) < functions:
        domain, index = divmod(slot, PORTS_PER_DOMAIN)
        node = slot % numa_nodes
        port = _port(domain, index, node, numbers)
        devices.append(port)
        behind = ROTATION[slot % len(ROTATION)](port.address, index + 1, node, numbers)
        devices.extend(behind)
        slot += 1
    cpus = 64
    return HostSpec(
        hostname=hostname,
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/sda1 amd_iommu=on",
        devices=tuple(devices[:functions]),
        numa=tuple(f"{n * cpus}-{n * cpus + cpus - 1}" for n in range(numa_nodes)),
        iommu_units=(IommuUnit("ivhd0"),),
        sev_snp=False,
        nvidia=NvidiaModule(version="590.48.01"),
    )
