"""Immutable facts about a Proxmox host, as discovery reads them. No I/O here."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TypeVar

import attrs

from pvegpu.model.bootconfig import BootConfig
from pvegpu.pci import CpuList, PciAddress
from pvegpu.vendors import Vendor, vendor_of

CLASS_DISPLAY = 0x03
CLASS_BRIDGE = 0x06


class IommuGroupType(StrEnum):
    """`/sys/kernel/iommu_groups/N/type`."""

    DMA = "DMA"
    DMA_FQ = "DMA-FQ"
    IDENTITY = "identity"
    BLOCKED = "blocked"
    UNMANAGED = "unmanaged"

    @property
    def translates(self) -> bool:
        """DMA goes through IOMMU page tables (breaks GPU P2P on SEV-SNP hosts)."""
        return self in (IommuGroupType.DMA, IommuGroupType.DMA_FQ)


class IommuMode(StrEnum):
    OFF = "off"
    TRANSLATED = "translated"
    PASSTHROUGH = "passthrough"
    MIXED = "mixed"


class KernelModuleFlavor(StrEnum):
    OPEN = "open"
    PROPRIETARY = "proprietary"


@attrs.frozen
class PcieLink:
    current_speed: str
    current_width: int | None
    max_speed: str
    max_width: int | None


@attrs.frozen(order=True)
class PciFunction:
    """One PCI function as sysfs shows it."""

    address: PciAddress
    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    pci_class: int
    sysfs_path: str
    """Real path below the root, e.g. `sys/devices/pci0000:80/0000:80:01.1/0000:81:00.0`."""
    numa_node: int | None = None
    """None where firmware gave no node (`-1`)."""
    iommu_group: int | None = None
    driver: str | None = None
    driver_override: str | None = None
    local_cpus: CpuList | None = None
    link: PcieLink | None = None
    mdev_capable: bool = False

    @property
    def base_class(self) -> int:
        return self.pci_class >> 16

    @property
    def is_bridge(self) -> bool:
        return self.base_class == CLASS_BRIDGE

    @property
    def is_display(self) -> bool:
        return self.base_class == CLASS_DISPLAY

    @property
    def vendor_device(self) -> str:
        """`10de:2bb5`, the form pci.cfg, vfio-pci ids= and lspci -n use."""
        return f"{self.vendor:04x}:{self.device:04x}"

    @property
    def subsystem_id(self) -> str:
        return f"{self.subsystem_vendor:04x}:{self.subsystem_device:04x}"


def moves_with(gpu: PciFunction, other: PciFunction) -> bool:
    """Whether `other` goes wherever the GPU function goes (`GPU.companions`): another
    non-bridge function of its slot in its IOMMU group. An APU's slot also holds the
    host's USB controllers, its security processor and audio in groups of their own, and
    an SR-IOV PF's slot its VFs: none of them goes along."""
    return (
        other.address != gpu.address
        and other.address.slot == gpu.address.slot
        and other.iommu_group == gpu.iommu_group
        and not other.is_bridge
    )


@attrs.frozen(order=True)
class GPU:
    """A PCI display controller (class 0x03xxxx, any vendor) and its companion functions."""

    function: PciFunction
    companions: tuple[PciFunction, ...] = ()
    """Other functions of the same slot and the same IOMMU group (the .1 HD audio), which
    move with the GPU. Slot functions in other groups (an APU's USB controllers, an SR-IOV
    PF's virtual functions) are not companions: they stay where they are."""
    node_minor: int | None = None
    """The minor of its vendor's per-GPU device node (`DeviceNodes.gpu_path`, N of
    /dev/nvidiaN), from the vendor's per-GPU information file; None while unknown. The
    facts JSON keeps its first key, `nvidia_minor`."""
    model: str | None = None

    @property
    def address(self) -> PciAddress:
        return self.function.address

    @property
    def numa_node(self) -> int | None:
        return self.function.numa_node

    @property
    def iommu_group(self) -> int | None:
        return self.function.iommu_group

    @property
    def driver(self) -> str | None:
        return self.function.driver

    @property
    def vendor_device(self) -> str:
        return self.function.vendor_device

    @property
    def vendor(self) -> Vendor | None:
        """Its vendor's facts (`vendors/`), None for a vendor pvegpu has no module of."""
        return vendor_of(self.function)

    @property
    def node_path(self) -> str | None:
        """Its per-GPU device node now (`/dev/nvidia4`), None while its minor is unknown."""
        vendor = self.vendor
        if vendor is None or vendor.nodes is None or self.node_minor is None:
            return None
        return vendor.nodes.path(self.node_minor)

    @property
    def functions(self) -> tuple[PciFunction, ...]:
        return (self.function, *self.companions)


@attrs.frozen
class NumaNode:
    id: int
    cpus: CpuList


@attrs.frozen
class IommuGroup:
    id: int
    members: tuple[PciAddress, ...]
    type: IommuGroupType | None = None


@attrs.frozen
class IommuState:
    enabled: bool
    units: tuple[str, ...] = ()
    """Entries of /sys/class/iommu (`dmar0` Intel, `ivhd0` AMD)."""

    @property
    def vendor(self) -> str | None:
        if any(u.startswith("ivhd") for u in self.units):
            return "amd"
        if any(u.startswith("dmar") for u in self.units):
            return "intel"
        return None


@attrs.frozen
class GpuDriver:
    """A vendor's GPU kernel driver as loaded on the host (its `DriverVersionSource`)."""

    driver: str
    """The vendor's host driver (`Vendor.host_driver`): which driver this is."""
    version: str
    flavor: KernelModuleFlavor


@attrs.frozen
class CharMajor:
    major: int
    name: str


PCI_ANY_ID = 0xFFFFFFFF
"""The kernel's wildcard for an id field (`~0`)."""


def vfio_id_claims(vfio_id: str, function: PciFunction) -> bool:
    """Does a vfio-pci id (`vendor:device[:subvendor[:subdevice[:class[:class_mask]]]]`,
    as vfio-pci parses it: missing subsystem fields match any, class mask 0 any) match?"""
    fields = [int(f, 16) for f in vfio_id.split(":")]
    fields += [PCI_ANY_ID, PCI_ANY_ID, 0, 0][len(fields) - 2 :]
    vendor, device, subvendor, subdevice, pci_class, class_mask = fields
    return (
        (vendor, device) == (function.vendor, function.device)
        and subvendor in (PCI_ANY_ID, function.subsystem_vendor)
        and subdevice in (PCI_ANY_ID, function.subsystem_device)
        and (pci_class ^ function.pci_class) & class_mask == 0
    )


@attrs.frozen
class VfioIdsSetting:
    """A `vfio-pci.ids=` / `options vfio-pci ids=` found on the host, and where."""

    source: str
    ids: tuple[str, ...]

    def claimed(self, function: PciFunction) -> tuple[str, ...]:
        """The ids of this setting that make vfio-pci take `function`."""
        return tuple(i for i in self.ids if vfio_id_claims(i, function))


@attrs.frozen
class ConfigFile:
    """A Proxmox or system file read at discovery time, kept whole so patches are exact."""

    path: str
    """Relative to the root, e.g. `etc/pve/lxc/129.conf`."""
    content: str

    @property
    def sha256(self) -> str:
        import hashlib  # here: loading OpenSSL is start-up time `discover` does not need

        return hashlib.sha256(self.content.encode()).hexdigest()


@attrs.frozen
class FileStat:
    """A file known by path and size only (shared libraries, weight shards): no content."""

    path: str
    """Relative to the root."""
    size: int


@attrs.frozen
class HostFacts:
    node: str
    functions: tuple[PciFunction, ...]
    gpus: tuple[GPU, ...]
    numa_nodes: tuple[NumaNode, ...]
    iommu_groups: tuple[IommuGroup, ...]
    iommu: IommuState
    sev_snp: bool
    gpu_drivers: tuple[GpuDriver, ...]
    """The loaded GPU drivers whose version pvegpu reads, one per vendor at most."""
    char_majors: tuple[CharMajor, ...]
    cmdline: str
    vfio_ids: tuple[VfioIdsSetting, ...]
    files: tuple[ConfigFile, ...] = ()
    stats: tuple[FileStat, ...] = ()
    """Files whose name and size matter, not their content (serving.read_serving_files)."""
    boot: BootConfig = attrs.field(factory=BootConfig)
    """The next boot's kernel command lines and early modules (`/proc/cmdline` is this one)."""

    _index: _FactsIndex | None = attrs.field(default=None, init=False, eq=False, repr=False)
    """Lookups by key, built on first use (see `_lookups`); not a fact, never compared."""

    @property
    def _lookups(self) -> _FactsIndex:
        # Planning asks for a function, GPU, group or file per device: scanning the tuples
        # each time made a plan quadratic in the host's size. Built once, on first use,
        # because facts are frozen and an evolved copy starts without one.
        if self._index is None:
            object.__setattr__(self, "_index", _FactsIndex.of(self))
        assert self._index is not None  # set just above; for mypy
        return self._index

    def function(self, address: PciAddress) -> PciFunction | None:
        return self._lookups.functions.get(address)

    def gpu(self, address: PciAddress) -> GPU | None:
        return self._lookups.gpus.get(address)

    def group(self, group_id: int) -> IommuGroup | None:
        return self._lookups.groups.get(group_id)

    def file(self, path: str) -> ConfigFile | None:
        return self._lookups.files.get(path)

    def slot_functions(self, address: PciAddress) -> tuple[PciFunction, ...]:
        """Every function of the address's slot (`dddd:bb:dd`), in facts order."""
        return self._lookups.slots.get(address.slot, ())

    def stats_in(self, directory: str) -> tuple[FileStat, ...]:
        """Stats of the files directly in `directory` (relative to the root)."""
        prefix = directory.rstrip("/") + "/"
        return tuple(
            s for s in self.stats if s.path.startswith(prefix) and "/" not in s.path[len(prefix) :]
        )

    def gpu_driver(self, driver: str | None) -> GpuDriver | None:
        """The loaded version of host driver `driver` (a `Vendor.host_driver`), if read."""
        return next((d for d in self.gpu_drivers if d.driver == driver), None)

    def char_major(self, name: str) -> int | None:
        return next((c.major for c in self.char_majors if c.name == name), None)

    @property
    def iommu_mode(self) -> IommuMode:
        if not self.iommu.enabled:
            return IommuMode.OFF
        kinds = {g.type.translates for g in self.iommu_groups if g.type is not None}
        if kinds == {False}:
            return IommuMode.PASSTHROUGH
        if kinds == {True, False}:
            return IommuMode.MIXED
        return IommuMode.TRANSLATED


_K = TypeVar("_K")
_V = TypeVar("_V")


def _first_by_key(items: tuple[_V, ...], key: Callable[[_V], _K]) -> dict[_K, _V]:
    """The first item per key, as a scan from the front would find it."""
    found: dict[_K, _V] = {}
    for item in items:
        found.setdefault(key(item), item)
    return found


@attrs.frozen
class _FactsIndex:
    functions: dict[PciAddress, PciFunction]
    gpus: dict[PciAddress, GPU]
    groups: dict[int, IommuGroup]
    files: dict[str, ConfigFile]
    slots: dict[str, tuple[PciFunction, ...]]

    @classmethod
    def of(cls, facts: HostFacts) -> _FactsIndex:
        slots: dict[str, list[PciFunction]] = {}
        for function in facts.functions:
            slots.setdefault(function.address.slot, []).append(function)
        return cls(
            functions=_first_by_key(facts.functions, lambda f: f.address),
            gpus=_first_by_key(facts.gpus, lambda g: g.address),
            groups=_first_by_key(facts.iommu_groups, lambda g: g.id),
            files=_first_by_key(facts.files, lambda f: f.path),
            slots={slot: tuple(members) for slot, members in slots.items()},
        )
