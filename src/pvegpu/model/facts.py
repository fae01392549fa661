"""Immutable facts about a Proxmox host, as discovery reads them. No I/O here."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import TypeVar, cast

import attrs

from pvegpu.model.bootconfig import BootConfig, kernel_params
from pvegpu.model.partitions import MdevInstance as MdevInstance
from pvegpu.model.partitions import MdevType as MdevType
from pvegpu.model.partitions import MigCap as MigCap
from pvegpu.model.platform import PvePackages
from pvegpu.model.ports import OverrideSetting, PortAcs, override_settings
from pvegpu.model.references import CgroupVersion, GpuReference
from pvegpu.model.resources import Bar, HostCpu
from pvegpu.model.userspace import UserspaceFile
from pvegpu.pci import CpuList, PciAddress
from pvegpu.values import value_class, value_repr
from pvegpu.vendors import DRIVER_VERSION_VENDORS, Vendor, vendor_of
from pvegpu.vendors.bmc import is_bmc_display
from pvegpu.vendors.nvswitch import is_switch

_D = TypeVar("_D")

CLASS_DISPLAY = 0x03
CLASS_BRIDGE = 0x06
CLASS_ACCELERATOR = 0x12
"""Processing accelerators (0x1200: Instinct MI300X, Gaudi): GPUs for pvegpu."""
SUBCLASS_BRIDGE_OTHER = 0x80
"""0x0680, "bridge, other": an endpoint such as an NVSwitch, not a bridge to skip."""


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


@value_class
@attrs.frozen(eq=False, repr=False)
class PcieLink:
    current_speed: str
    current_width: int | None
    max_speed: str
    max_width: int | None


@value_repr
@attrs.frozen(order=True, repr=False)
class Sriov:
    """A physical function's SR-IOV state, as its sysfs directory shows it."""

    total_vfs: int
    """`sriov_totalvfs`: how many VFs the device can have."""
    num_vfs: int
    """`sriov_numvfs`: how many exist now (the PF's driver creates them when it is
    written; 0 before that, and whenever the PF has no driver)."""
    drivers_autoprobe: bool = True
    """`sriov_drivers_autoprobe`: whether a VF created now is probed by a driver (1, the
    kernel's default) or by none until its driver_override is set (0)."""
    vfs: tuple[PciAddress, ...] = ()
    """The VFs in `virtfnN` order (virtfn0 first)."""


@value_repr
@attrs.frozen(order=True, repr=False)
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
    physfn: PciAddress | None = None
    """SR-IOV: the physical function this is a virtual function of (its `physfn` link);
    None for every other function. A VF is a slice of its PF's device, never a GPU."""
    sriov: Sriov | None = None
    """SR-IOV: a physical function's `sriov_*` attributes and `virtfnN` links; None for
    a function without the capability (and for every VF)."""
    bars: tuple[Bar, ...] = ()
    """Its memory BARs and ROM (`resource`), read for GPUs and their companions only."""
    boot_vga: bool = False
    """`boot_vga` is 1: the display the firmware booted on, the host's console."""
    removable: bool = False
    """`removable`: behind a Thunderbolt/USB4 port, it comes and goes after boot."""

    @property
    def is_virtual_function(self) -> bool:
        return self.physfn is not None

    @property
    def base_class(self) -> int:
        return self.pci_class >> 16

    @property
    def is_bridge(self) -> bool:
        # Class 0x0680 ("bridge, other") is an endpoint with nothing behind it (an NVIDIA
        # NVSwitch): vfio-pci takes it like any device, so it is a group member, not a
        # bridge that stays on pcieport.
        return (
            self.base_class == CLASS_BRIDGE
            and (self.pci_class >> 8) & 0xFF != SUBCLASS_BRIDGE_OTHER
        )

    @property
    def is_display(self) -> bool:
        return self.base_class == CLASS_DISPLAY

    @property
    def is_gpu(self) -> bool:
        """A GPU for pvegpu: a display controller (0x03) or a processing accelerator
        (0x12: Instinct MI300X, Gaudi), which pools, the split and mappings take alike."""
        return self.base_class in (CLASS_DISPLAY, CLASS_ACCELERATOR)

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
        # A VF in its PF's group (no ACS) is still its own device, never a companion:
        # it stays where it is (a pool names it, or the group is refused whole).
        and other.physfn is None
    )


@value_repr
@attrs.frozen(order=True, repr=False)
class GPU:
    """A PCI display controller (class 0x03xxxx) or processing accelerator (0x12xxxx),
    any vendor, and its companion functions."""

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
    drm_card: int | None = None
    """N of its DRM card node /dev/dri/cardN (the node's minor), when a DRM driver holds it."""
    drm_render: int | None = None
    """N of its DRM render node /dev/dri/renderDN (the node's minor: 128 and up)."""
    compute_partition: str | None = None
    """How its driver splits it into compute partitions (`SPX` whole, `CPX` into eight),
    for a vendor whose GPUs can be split (`Vendor.compute_partition`); None: not split by
    such a driver, or no such attribute."""
    uuid: str | None = None
    """Its stable name in its vendor's tools (`GPU-9c74604d-...`, what
    `NVIDIA_VISIBLE_DEVICES` and CDI specs may name it by), from the driver's information
    file; None while no driver that says it holds the GPU."""

    @property
    def bmc_display(self) -> bool:
        """The BMC's display controller (vendors/bmc.py): listed, never pooled."""
        fn = self.function
        return fn.base_class == CLASS_DISPLAY and is_bmc_display(fn.vendor, fn.device, fn.driver)

    @property
    def partitioned(self) -> bool:
        """Split into compute partitions whose nodes are not all the GPU's own."""
        vendor = self.vendor
        return (
            vendor is not None
            and self.compute_partition is not None
            and self.compute_partition != vendor.whole_partition
        )

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
    def container_minor(self) -> int | None:
        """The minor of the node a container gets for it: its vendor's own node
        (`node_minor`), or its DRM render node for a vendor reached through DRM."""
        vendor = self.vendor
        nodes = vendor.nodes if vendor is not None else None
        return self.drm_render if nodes is not None and nodes.drm else self.node_minor

    @property
    def node_path(self) -> str | None:
        """Its per-GPU device node now (`/dev/nvidia4`, `/dev/dri/renderD128`), None while
        its minor is unknown."""
        vendor = self.vendor
        minor = self.container_minor
        if vendor is None or vendor.nodes is None or minor is None:
            return None
        return vendor.nodes.path(minor)

    @property
    def functions(self) -> tuple[PciFunction, ...]:
        return (self.function, *self.companions)


def driver_order(gpus: Iterable[GPU]) -> tuple[PciAddress, ...]:
    """The GPUs a vendor's own driver numbers (`node_minor`), in PCI order: how its tools
    and container hook index them (NVML's order for NVIDIA)."""
    return tuple(
        g.address
        for g in sorted(gpus, key=lambda g: g.address)
        if g.node_minor is not None
        and (vendor := g.vendor) is not None
        and vendor.nodes is not None
        and not vendor.nodes.drm
    )


@value_class
@attrs.frozen(eq=False, repr=False)
class NumaNode:
    id: int
    cpus: CpuList
    memory_kib: int | None = None
    """`MemTotal` of the node's `meminfo`; None where not read."""
    free_kib: int | None = None
    """`MemFree` of the node's `meminfo` when discovery read it."""


@value_class
@attrs.frozen(eq=False, repr=False)
class IommuGroup:
    id: int
    members: tuple[PciAddress, ...]
    type: IommuGroupType | None = None


@value_class
@attrs.frozen(eq=False, repr=False)
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


@value_class
@attrs.frozen(eq=False, repr=False)
class GpuDriver:
    """A vendor's GPU kernel driver as loaded on the host (its `DriverVersionSource`)."""

    driver: str
    """The vendor's host driver (`Vendor.host_driver`): which driver this is."""
    version: str
    flavor: KernelModuleFlavor


@value_class
@attrs.frozen(eq=False, repr=False)
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


@value_class
@attrs.frozen(eq=False, repr=False)
class VfioIdsSetting:
    """A `vfio-pci.ids=` / `options vfio-pci ids=` found on the host, and where."""

    source: str
    ids: tuple[str, ...]

    def claimed(self, function: PciFunction) -> tuple[str, ...]:
        """The ids of this setting that make vfio-pci take `function`."""
        return tuple(i for i in self.ids if vfio_id_claims(i, function))


@value_class
@attrs.frozen(eq=False, repr=False)
class ConfigFile:
    """A Proxmox or system file read at discovery time, kept whole so patches are exact."""

    path: str
    """Relative to the root, e.g. `etc/pve/lxc/129.conf`."""
    content: str

    @property
    def sha256(self) -> str:
        import hashlib  # here: loading OpenSSL is start-up time `discover` does not need

        return hashlib.sha256(self.content.encode()).hexdigest()


@value_class
@attrs.frozen(eq=False, repr=False)
class FileStat:
    """A file known by path and size only (shared libraries, weight shards): no content."""

    path: str
    """Relative to the root."""
    size: int


@value_repr
@attrs.frozen(order=True, repr=False)
class DriverctlOverride:
    """A driver override driverctl persists (`/etc/driverctl.d/pci-<ADDR>`, its content
    the driver's name): its udev rule and `driverctl@.service` apply it at every boot."""

    address: PciAddress
    driver: str

    @property
    def path(self) -> str:
        """The file, relative to the root."""
        return f"etc/driverctl.d/pci-{self.address}"


@value_class
@attrs.frozen(eq=False, repr=False)
class FabricManager:
    """The host's Fabric Manager, the service that programs an HGX board's NVSwitches:
    whether its unit is installed and enabled, and the mode its configuration sets."""

    installed: bool = False
    """Its unit file is in one of systemd's unit directories."""
    enabled: bool = False
    """A `*.wants/` directory of etc/systemd/system links it: it starts at boot."""
    mode: int | None = None
    """`FABRIC_MODE` of its configuration file: 0 full passthrough, 1 shared NVSwitch
    multitenancy, 2 vGPU; None where the file is absent or does not set it."""


@value_class
@attrs.frozen(eq=False, repr=False)
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
    mdev_types: tuple[MdevType, ...] = ()
    """Virtual GPU types the functions offer (mediated device parents, vendor vGPU VFs)."""
    mdev_instances: tuple[MdevInstance, ...] = ()
    """Virtual GPUs that exist now, by parent function."""
    mig_caps: tuple[MigCap, ...] = ()
    """MIG capability nodes the GPU driver lists (its MIG instances and host-wide ones)."""
    acs_ports: tuple[PortAcs, ...] = ()
    """The bridges above the GPUs and their ACS, in address order: read only while
    `pcie_acs_override` is on (this boot or the next), when the IOMMU groups stop saying
    what the hardware isolates (`pvegpu.host.acs`)."""
    driverctl: tuple[DriverctlOverride, ...] = ()
    """driverctl's persisted overrides, in address order: a second binder at every boot."""
    fabric_manager: FabricManager = attrs.field(factory=FabricManager)
    """The host's NVLink Fabric Manager service (`vendors/nvswitch.py`), read only on a
    host with NVSwitches; its default (not installed) everywhere else."""
    cpu: HostCpu | None = None
    """The CPU's vendor and physical address width (`/proc/cpuinfo`); None: not read."""
    pve: PvePackages = attrs.field(factory=PvePackages)
    """The installed Proxmox packages' versions (`var/lib/dpkg/status`)."""
    cgroup: CgroupVersion = CgroupVersion.V2
    """The cgroup hierarchy of the devices controller: which `lxc.cgroup*.devices.allow`
    key LXC applies on this host (`host/references.py` reads it)."""
    references: tuple[GpuReference, ...] = ()
    """Every place on the host that reaches a GPU, in every guest and on the host itself,
    with the GPUs each reaches now or why that is unknown (`model/references.py`)."""
    driver_userspace: tuple[UserspaceFile, ...] = ()
    """The loaded GPU driver's userspace files in the host root, of the module's exact
    version (`host/userspace.py`), in path order; empty when no such driver is loaded."""

    _index: _FactsIndex | None = attrs.field(default=None, init=False, eq=False, repr=False)
    """Lookups by key, built on first use (see `_lookups`); not a fact, never compared."""

    @property
    def _lookups(self) -> _FactsIndex:
        # Planning asks for a function, GPU, group or file per device: scanning the tuples
        # each time made a plan quadratic in the host's size. Built once, on first use,
        # because facts are frozen and an evolved copy starts without one.
        if self._index is None:
            object.__setattr__(self, "_index", _FactsIndex(self))
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

    def virtual_functions(self, address: PciAddress) -> tuple[PciFunction, ...]:
        """The VFs of physical function `address` that discovery saw, in virtfnN order."""
        function = self.function(address)
        if function is None or function.sriov is None:
            return ()
        found = (self.function(vf) for vf in function.sriov.vfs)
        return tuple(f for f in found if f is not None)

    @property
    def nvswitches(self) -> tuple[PciFunction, ...]:
        """The host's NVSwitches (`vendors.nvswitch.is_switch`), in address order."""
        return tuple(f for f in self.functions if is_switch(f))

    def derived(self, build: Callable[[HostFacts], _D]) -> _D:
        """`build(self)`, worked out once per facts value and kept with its lookups: a
        typed view of its raw files (`model.guests.guests`)."""
        memo = self._lookups.derived
        if build not in memo:
            memo[build] = build(self)
        return cast(_D, memo[build])

    @property
    def cmdline_params(self) -> tuple[tuple[str, str], ...]:
        """This boot's kernel command line (`/proc/cmdline`) as (key, value) pairs in order
        (`model.bootconfig.kernel_params`)."""
        return kernel_params(self.cmdline)

    @property
    def acs_overrides(self) -> tuple[OverrideSetting, ...]:
        """Where `pcie_acs_override` is on: this boot's command line, then each of the
        next boot's (`model.ports.override_settings`); empty when none sets it."""
        return override_settings(self.cmdline, self.boot)

    def stats_in(self, directory: str) -> tuple[FileStat, ...]:
        """Stats of the files directly in `directory` (relative to the root)."""
        prefix = directory.rstrip("/") + "/"
        return tuple(
            s for s in self.stats if s.path.startswith(prefix) and "/" not in s.path[len(prefix) :]
        )

    def reported_drivers(self) -> tuple[Vendor, ...]:
        """The vendors whose driver version a summary of the host gives: those with a GPU
        here or their driver loaded (an Intel box's summary says nothing of NVIDIA)."""
        return tuple(
            v
            for v in DRIVER_VERSION_VENDORS
            if self.gpu_driver(v.host_driver) is not None or any(g.vendor is v for g in self.gpus)
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


class _FactsIndex:
    """A HostFacts' lookups by key, built on first use. A plain class, not a value: it is
    never compared or shown, and an attrs class costs its generated methods' compile on
    every command's import path."""

    __slots__ = ("derived", "files", "functions", "gpus", "groups", "slots")

    def __init__(self, facts: HostFacts) -> None:
        slots: dict[str, list[PciFunction]] = {}
        for function in facts.functions:
            slots.setdefault(function.address.slot, []).append(function)
        self.functions = _first_by_key(facts.functions, lambda f: f.address)
        self.gpus = _first_by_key(facts.gpus, lambda g: g.address)
        self.groups = _first_by_key(facts.iommu_groups, lambda g: g.id)
        self.files = _first_by_key(facts.files, lambda f: f.path)
        self.slots = {slot: tuple(members) for slot, members in slots.items()}
        self.derived: dict[Callable[[HostFacts], object], object] = {}
