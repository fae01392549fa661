"""What a fake host is made of: attrs descriptions, and the checks that it could be real.

`HostSpec` holds the whole host, `DeviceSpec` one PCI function. `check` refuses what no
kernel would show (a parent that is not a bridge, a duplicate address, a virtual
function of a function that is not there) before anything is written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import attrs

from pvegpu.model.resources import Bar
from pvegpu.pci import PciAddress
from pvegpu.testing.kernels import KernelsSpec
from pvegpu.testing.partitions import (
    MdevSpec,
    MdevTypeSpec,
    MigInstance,
    VgpuSpec,
)
from pvegpu.testing.resources import CpuSpec, NodeMemory, check_bars
from pvegpu.testing.tree_files import HostSpecError
from pvegpu.values import value_class
from pvegpu.vendors.nvswitch import SWITCH_CLASS

BRIDGE_CLASS = 0x0604
"""PCI-to-PCI bridges (root ports, switch ports): class 0x0604xx."""
VGA_CLASS = 0x0300
"""VGA-compatible display controllers: the functions the kernel gives a `boot_vga`."""

# The /proc/devices lines of a stock Proxmox VE kernel, before any GPU driver loads.
# The kernel prints "%3d %s"; dynamic majors count down from 511 and from 254.
BASE_CHAR_DEVICES: tuple[tuple[int, str], ...] = (
    (1, "mem"),
    (4, "/dev/vc/0"),
    (4, "tty"),
    (4, "ttyS"),
    (5, "/dev/tty"),
    (5, "/dev/console"),
    (5, "/dev/ptmx"),
    (5, "ttyprintk"),
    (7, "vcs"),
    (10, "misc"),
    (13, "input"),
    (21, "sg"),
    (29, "fb"),
    (89, "i2c"),
    (108, "ppp"),
    (128, "ptm"),
    (136, "pts"),
    (180, "usb"),
    (189, "usb_device"),
    (202, "cpu/msr"),
    (226, "drm"),
    (240, "aux"),
    (241, "cec"),
    (242, "lirc"),
    (243, "ipmidev"),
    (244, "hidraw"),
    (245, "ttyDBC"),
    (246, "wwan_port"),
    (247, "bsg"),
    (248, "watchdog"),
    (249, "ptp"),
    (250, "pps"),
    (251, "rtc"),
    (252, "dax"),
    (253, "dimmctl"),
    (254, "gpiochip"),
)
BLOCK_DEVICES: tuple[tuple[int, str], ...] = (
    (7, "loop"),
    (8, "sd"),
    (9, "md"),
    (65, "sd"),
    (128, "sd"),
    (230, "zvol"),
    (252, "device-mapper"),
    (253, "virtblk"),
    (259, "blkext"),
)


@value_class
@attrs.frozen(eq=False, repr=False)
class Link:
    """A PCIe link as the `*_link_speed` / `*_link_width` attributes show it."""

    speed: str = "32.0 GT/s PCIe"
    width: int = 16
    max_speed: str | None = None
    """Defaults to `speed` (the link trained at its maximum)."""
    max_width: int | None = None
    """Defaults to `width`."""


@value_class
@attrs.frozen(eq=False, repr=False)
class DrmInfo:
    """The numbers of a GPU's DRM nodes, as the DRM core hands them out at probe."""

    card: int
    """N of /dev/dri/cardN (minor N)."""
    render: int
    """N of /dev/dri/renderDN (minor N, from 128)."""


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class NvidiaInfo:
    """What /proc/driver/nvidia/gpus/<BDF>/information says about a GPU on nvidia."""

    model: str
    minor: int
    """`Device Minor`: N of /dev/nvidiaN."""
    vbios: str = "98.02.52.00.02"
    dma_bits: int = 52
    uuid: str | None = None
    """`GPU-...`; derived from host name and address when None, so it is stable."""
    mig: tuple[MigInstance, ...] = ()
    """MIG instances: their capabilities under proc/driver/nvidia/capabilities/."""


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class ConfigSpace:
    """A `config` file as root reads it: the PCI Express capability and the extended
    capability list behind the 64-byte header (pvegpu.testing.config_space writes it)."""

    port_type: int = 0x6
    """The PCIe Device/Port Type: 0x4 root port, 0x5 switch upstream, 0x6 downstream, 0x7
    PCIe-to-PCI bridge, 0x0 endpoint."""
    acs_control: int | None = None
    """The ACS control register; None: no ACS capability. The kernel turns on source
    validation, request and completion redirect and upstream forwarding (0x1d)."""
    acs_capability: int = 0x5F
    """The ACS capability register: which controls the port has."""
    extended: tuple[int, ...] = (0x0001,)
    """Other extended capabilities, in list order before ACS (0x0001: AER)."""
    extended_space: bool = True
    """False: a 256-byte file, a function without extended configuration space."""


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class DeviceSpec:
    """One PCI function. `parent` is the address of the bridge it sits behind."""

    address: str
    vendor: int
    device: int
    pci_class: int
    parent: str | None = None
    """None: directly on a root bus, `sys/devices/pci<domain>:<its bus>/<BDF>`."""
    subsystem_vendor: int = 0
    subsystem_device: int = 0
    revision: int = 0
    numa_node: int = -1
    """-1 where firmware gives no proximity domain (desktops); local_cpulist is then all."""
    driver: str | None = None
    driver_override: str | None = None
    iommu_group: int | None = None
    irq: int | None = None
    """None: a stable number derived from the function's position on the host."""
    link: Link | None = None
    """None: no PCIe link attributes (host bridges, IOMMU functions)."""
    nvidia: NvidiaInfo | None = None
    """Written to /proc/driver/nvidia/gpus only while `driver` is nvidia."""
    secondary_bus: int | None = None
    """Bridges only; defaults to the bus of the functions behind it."""
    config_space: ConfigSpace | None = None
    """None: `config` is the 64-byte header an unprivileged read gives. Given: root's read,
    256 bytes or 4 KiB with the capabilities it describes (a bridge's ACS)."""
    physfn: str | None = None
    """SR-IOV: the physical function this is a virtual function of. It sits next to that
    function (same parent); the tree gets `physfn` -> it, `virtfnN` links back (N in
    address order) and the physical function's `sriov_numvfs` / `sriov_totalvfs`."""
    mdev_types: tuple[MdevTypeSpec, ...] = ()
    """Its `mdev_supported_types/` (a mediated device parent); none: not one."""
    vgpu: VgpuSpec | None = None
    """A virtual function's vGPU manager directory (`nvidia/`); None: none."""
    drm: DrmInfo | None = None
    """Its DRM nodes, written while `driver` is set (amdgpu, i915, xe, nvidia with
    nvidia-drm): `drm/card<N>` and `drm/renderD<M>` under the device, and the
    sys/class/drm links to them."""
    sriov_totalvfs: int | None = None
    """SR-IOV on a physical function: how many VFs it can have. None: the number of VFs
    described (no SR-IOV attributes at all without any). Give it with no VFs for a PF
    whose VFs are not created yet (`sriov_numvfs` 0, as before its driver loads)."""
    sriov_drivers_autoprobe: bool = True
    """A physical function's `sriov_drivers_autoprobe` (the kernel's default is 1)."""
    bars: tuple[Bar, ...] = ()
    """Its memory BARs and ROM, written to `resource` (`pvegpu.testing.resources`)."""
    boot_vga: bool = False
    """The firmware's boot display: `boot_vga` reads 1 (a VGA-class function's reads 0
    otherwise; other classes have no such file)."""
    removable: bool = False
    """Behind a Thunderbolt/USB4 port: `removable` reads `removable` (else no file)."""

    @property
    def pci_address(self) -> PciAddress:
        return PciAddress.parse(self.address)

    @property
    def is_bridge(self) -> bool:
        return self.pci_class >> 8 == BRIDGE_CLASS


@value_class
@attrs.frozen(eq=False, repr=False)
class IommuUnit:
    """An entry of sys/class/iommu: `ivhdN` (AMD) or `dmarN` (Intel)."""

    name: str
    device: str | None = None
    """PCI function hosting the unit (AMD IOMMUs are PCI functions); None: virtual."""


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class NvidiaModule:
    """The loaded nvidia kernel module."""

    version: str
    open: bool = True
    """Open kernel module (required by Blackwell) or the proprietary one."""
    build: str | None = None
    """Text after the version on the NVRM line; a plausible build stamp when None."""
    uvm_major: int | None = 509
    """nvidia-uvm's major in /proc/devices; None: not loaded (after a boot, until something
    loads it: nvidia-modprobe -u, or a CUDA program run as root)."""
    caps_major: int | None = 510


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class HostSpec:
    """A whole host. Paths in `files` and `symlinks` are relative to the root."""

    hostname: str
    cmdline: str
    devices: tuple[DeviceSpec, ...]
    numa: tuple[str, ...] = ("0-15",)
    """cpulist of node0, node1, ..."""
    iommu_units: tuple[IommuUnit, ...] = ()
    """Empty: IOMMU off (sys/class/iommu empty, no groups)."""
    group_type: str = "DMA-FQ"
    """`type` of every IOMMU group: DMA, DMA-FQ or identity (iommu=pt)."""
    sev_snp: bool | None = None
    """None: no kvm_amd module (Intel hosts)."""
    nvidia: NvidiaModule | None = None
    char_devices: tuple[tuple[int, str], ...] = ()
    """proc/devices lines beyond BASE_CHAR_DEVICES and the nvidia ones."""
    extra_drivers: tuple[str, ...] = ()
    """Loaded PCI drivers with no device bound (sys/bus/pci/drivers/<name>/)."""
    pve: bool = True
    """Write pmxcfs's etc/pve/{local,lxc,qemu-server} links into etc/pve/nodes/<node>/."""
    files: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    symlinks: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    """path -> link text, written as is."""
    mdevs: tuple[MdevSpec, ...] = ()
    """Mediated devices that exist (`sys/bus/mdev/devices/<uuid>`)."""
    cpu: CpuSpec | None = None
    """Written to /proc/cpuinfo, a block per CPU of `numa`; None: no such file."""
    node_memory: tuple[NodeMemory, ...] = ()
    """Each node's `meminfo`, one per entry of `numa`; empty: none written."""
    kernels: KernelsSpec | None = None
    """The running and installed kernels, their DKMS builds and the boot loader's pick of
    the next (`pvegpu.testing.kernels`); None: none of those files."""
    driver_userspace: str | None = None
    """The NVIDIA driver userspace version installed in the host root (libraries with
    their soname links in usr/lib/x86_64-linux-gnu, the tools in usr/bin, as the .run
    installer lays them out: `pvegpu.testing.userspace`); None: none. `files` and
    `symlinks` are written after it, so a test can replace one of them."""


def check(desc: HostSpec) -> dict[str, DeviceSpec]:
    """Every device by address, or HostSpecError naming the first impossible part."""
    by_address: dict[str, DeviceSpec] = {}
    for dev in desc.devices:
        if str(dev.pci_address) != dev.address:
            raise HostSpecError(f"{dev.address}: write addresses like the kernel, 0000:81:00.0")
        if dev.address in by_address:
            raise HostSpecError(f"{dev.address} is described twice")
        by_address[dev.address] = dev
    units = {u.device for u in desc.iommu_units if u.device is not None}
    for dev in desc.devices:
        if dev.parent is not None:
            parent = by_address.get(dev.parent)
            if parent is None or not parent.is_bridge:
                raise HostSpecError(f"{dev.address}: parent {dev.parent} is not a bridge here")
        if dev.iommu_group is not None and not desc.iommu_units:
            raise HostSpecError(f"{dev.address}: IOMMU groups need iommu_units (IOMMU on)")
        if not -1 <= dev.numa_node < len(desc.numa):
            raise HostSpecError(f"{dev.address}: no NUMA node {dev.numa_node}")
        # An NVSwitch (class 0x0680) on nvidia has no /proc/driver/nvidia/gpus entry, nor
        # has a vGPU manager's virtual function (nvidia-smi lists the physical GPUs only).
        own_entry = dev.pci_class >> 8 != SWITCH_CLASS and dev.physfn is None
        if dev.driver == "nvidia" and (desc.nvidia is None or (dev.nvidia is None and own_entry)):
            raise HostSpecError(f"{dev.address}: on nvidia needs NvidiaInfo and NvidiaModule")
        if (bad := check_bars(dev.address, dev.pci_class, dev.bars)) is not None:
            raise HostSpecError(bad)
        if dev.boot_vga and dev.pci_class >> 8 != VGA_CLASS:
            raise HostSpecError(f"{dev.address}: only a VGA-class function has boot_vga")
        if dev.physfn is not None:
            _check_virtual_function(dev, by_address.get(dev.physfn))
            if dev.sriov_totalvfs is not None:
                raise HostSpecError(f"{dev.address}: a virtual function has no VFs itself")
    if sum(d.boot_vga for d in desc.devices) > 1:
        raise HostSpecError("more than one boot_vga device: the firmware boots on one")
    if desc.node_memory and len(desc.node_memory) != len(desc.numa):
        raise HostSpecError(f"{len(desc.node_memory)} node_memory entries, {len(desc.numa)} nodes")
    vfs = Counter(d.physfn for d in desc.devices if d.physfn is not None)
    for dev in desc.devices:
        if dev.sriov_totalvfs is not None and dev.sriov_totalvfs < vfs[dev.address]:
            raise HostSpecError(
                f"{dev.address}: {vfs[dev.address]} VFs described, sriov_totalvfs "
                f"{dev.sriov_totalvfs}"
            )
    for address in units:
        if address not in by_address:
            raise HostSpecError(f"IOMMU unit on {address}, which is not described")
    if (impossible := check_partitions(desc, by_address)) is not None:
        raise HostSpecError(impossible)
    return by_address


def _check_virtual_function(vf: DeviceSpec, pf: DeviceSpec | None) -> None:
    if pf is None or pf.physfn is not None or pf.is_bridge:
        raise HostSpecError(f"{vf.address}: physfn {vf.physfn} is not a physical function here")
    if pf.parent != vf.parent:
        raise HostSpecError(f"{vf.address}: a virtual function sits next to {pf.address}")


def check_partitions(desc: HostSpec, by_address: dict[str, DeviceSpec]) -> str | None:
    """What no kernel would show of the GPU partitions, or None."""
    for mdev in desc.mdevs:
        parent = by_address.get(mdev.parent)
        if parent is None or mdev.type_id not in {t.type_id for t in parent.mdev_types}:
            return f"mdev {mdev.uuid}: {mdev.parent} offers no type {mdev.type_id}"
    for dev in desc.devices:
        if dev.vgpu is not None and dev.physfn is None:
            return f"{dev.address}: vGPU types live on an SR-IOV virtual function"
        mig = dev.nvidia.mig if dev.nvidia is not None else ()
        if mig and dev.driver != "nvidia":
            return f"{dev.address}: MIG instances need the GPU on nvidia"
    return None
