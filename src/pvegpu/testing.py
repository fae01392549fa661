"""Build fake Proxmox hosts on disk: sysfs, procfs and /etc trees laid out like the kernel's.

Describe a host with `HostSpec` (PCI functions as `DeviceSpec`, NUMA, IOMMU, drivers,
extra files) and `write_host(spec, root)` writes a tree that `pvegpu.host.discover` (and any
tool calling readlink/realpath) reads like the real thing:

- real device directories under `sys/devices/pci<domain>:<root bus>/<bridges...>/<BDF>/`
  holding `vendor`, `device`, `subsystem_vendor`, `subsystem_device`, `class`,
  `revision`, `numa_node`, `local_cpulist`, `current_link_speed`, `max_link_speed`,
  `current_link_width`, `max_link_width`, `driver_override`, `enable`, `irq`; bridges
  (class 0x0604) also a `pci_bus/<domain>:<secondary bus>/` directory;
- `sys/bus/pci/devices/<BDF>` relative symlinks into them (`../../../devices/...`);
- `driver` -> `.../bus/pci/drivers/<name>` (absent when unbound) with the driver's
  back-link, `iommu_group` -> `.../kernel/iommu_groups/N` with `devices/<BDF>` back-links
  and `type`, `sys/class/iommu/<unit>` (empty, and no groups, when the IOMMU is off);
- `sys/devices/system/node/`, `sys/module/kvm_amd/parameters/sev_snp`,
  `sys/module/nvidia/{version,taint}`, `proc/driver/nvidia/version` and
  `proc/driver/nvidia/gpus/<BDF>/information` (only for functions bound to nvidia),
  `proc/devices`, `proc/cmdline`, `etc/hostname`, pmxcfs's `etc/pve/{local,lxc,
  qemu-server}` links into `etc/pve/nodes/<node>/`, plus any files you add.

Output is deterministic: the same spec always gives the same bytes, link texts and modes
(files 0644, directories 0755). `FIXTURE_HOSTS` names the trees committed under
`fixtures/sysfs/`; `python -m pvegpu.testing regenerate fixtures/sysfs` rewrites them.

Example::

    from pvegpu.testing import DeviceSpec, HostSpec, IommuUnit, NvidiaInfo, NvidiaModule
    from pvegpu.testing import write_host

    host = HostSpec(
        hostname="lab1",
        cmdline="BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1",
        numa=("0-15",),
        iommu_units=(IommuUnit("dmar0"),),
        nvidia=NvidiaModule(version="580.95.05", open=False),
        devices=(
            DeviceSpec(address="0000:00:01.0", vendor=0x8086, device=0x352A,
                       pci_class=0x060400, driver="pcieport", iommu_group=1),
            DeviceSpec(address="0000:01:00.0", parent="0000:00:01.0", vendor=0x10DE,
                       device=0x2204, pci_class=0x030000, driver="nvidia", iommu_group=2,
                       nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 3090", minor=0)),
        ),
    )
    write_host(host, tmp_path / "lab1")
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from pvegpu.pci import CpuList, PciAddress

FILE_MODE = 0o644
DIR_MODE = 0o755

BRIDGE_CLASS = 0x0604
"""PCI-to-PCI bridges (root ports, switch ports): class 0x0604xx."""

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


@attrs.frozen
class Link:
    """A PCIe link as the `*_link_speed` / `*_link_width` attributes show it."""

    speed: str = "32.0 GT/s PCIe"
    width: int = 16
    max_speed: str | None = None
    """Defaults to `speed` (the link trained at its maximum)."""
    max_width: int | None = None
    """Defaults to `width`."""


@attrs.frozen(kw_only=True)
class NvidiaInfo:
    """What /proc/driver/nvidia/gpus/<BDF>/information says about a GPU on nvidia."""

    model: str
    minor: int
    """`Device Minor`: N of /dev/nvidiaN."""
    vbios: str = "98.02.52.00.02"
    dma_bits: int = 52
    uuid: str | None = None
    """`GPU-...`; derived from host name and address when None, so it is stable."""


@attrs.frozen(kw_only=True)
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

    @property
    def pci_address(self) -> PciAddress:
        return PciAddress.parse(self.address)

    @property
    def is_bridge(self) -> bool:
        return self.pci_class >> 8 == BRIDGE_CLASS


@attrs.frozen
class IommuUnit:
    """An entry of sys/class/iommu: `ivhdN` (AMD) or `dmarN` (Intel)."""

    name: str
    device: str | None = None
    """PCI function hosting the unit (AMD IOMMUs are PCI functions); None: virtual."""


@attrs.frozen(kw_only=True)
class NvidiaModule:
    """The loaded nvidia kernel module."""

    version: str
    open: bool = True
    """Open kernel module (required by Blackwell) or the proprietary one."""
    build: str | None = None
    """Text after the version on the NVRM line; a plausible build stamp when None."""
    uvm_major: int = 509
    caps_major: int | None = 510


@attrs.frozen(kw_only=True)
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


_DEFAULT_BUILD = "Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Nov 27 02:18:11 UTC 2025"


class HostSpecError(ValueError):
    """The description cannot be a real host (a dangling parent, a duplicate address)."""


def write_host(desc: HostSpec, root: Path) -> None:
    """Write the tree for `desc` under `root`, which must not exist or be empty."""
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise FileExistsError(f"{root} exists and is not an empty directory")
    _Writer(desc, root).write()


class _Writer:
    def __init__(self, desc: HostSpec, root: Path) -> None:
        self.desc = desc
        self.root = root
        self.by_address = _check(desc)
        self.ordered = sorted(self.by_address.values(), key=lambda d: d.pci_address)
        self.all_cpus = CpuList([c for text in desc.numa for c in CpuList.parse(text).cpus])

    # -- low level: every write goes through here, so modes never depend on the umask

    def dir(self, rel: str) -> None:
        parts = Path(rel).parts
        for i in range(len(parts) + 1):
            sub = self.root.joinpath(*parts[:i])
            if not sub.is_dir():
                sub.mkdir()
                sub.chmod(DIR_MODE)

    def file(self, rel: str, content: str) -> None:
        self.dir(rel.rpartition("/")[0])
        root = Path(os.path.realpath(self.root))
        # Resolved so that files given as etc/pve/lxc/... land in pmxcfs's node directory.
        real = Path(os.path.realpath(self.root / rel))
        if not real.is_relative_to(root):
            raise HostSpecError(f"{rel} would be written outside the root, at {real}")
        if real.exists() or real.is_symlink():
            raise HostSpecError(f"{rel} is written twice")
        self.dir(real.parent.relative_to(root).as_posix())
        real.write_bytes(content.encode())
        real.chmod(FILE_MODE)

    def link(self, rel: str, target: str) -> None:
        parent, _, _ = rel.rpartition("/")
        self.dir(parent)
        (self.root / rel).symlink_to(target)

    def rel_link(self, rel: str, target_rel: str) -> None:
        """A relative link like the kernel's, from `rel` to `target_rel` (both root-relative)."""
        parent = rel.rpartition("/")[0] or "."
        self.link(rel, os.path.relpath(target_rel, parent))

    # -- the tree

    def write(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(DIR_MODE)
        self.write_pci()
        self.write_iommu()
        self.write_numa()
        self.write_modules()
        self.write_proc()
        self.write_etc()

    def device_dir(self, dev: DeviceSpec) -> str:
        chain = [dev]
        while chain[-1].parent is not None:
            chain.append(self.by_address[chain[-1].parent])
        top = chain[-1].pci_address
        names = [d.address for d in reversed(chain)]
        return "/".join(["sys/devices", f"pci{top.domain:04x}:{top.bus:02x}", *names])

    def irq(self, dev: DeviceSpec) -> int:
        if dev.irq is not None:
            return dev.irq
        # Legacy INTx numbers above the 24 IO-APIC pins, handed out in bus order.
        return 24 + 2 * self.ordered.index(dev)

    def local_cpus(self, dev: DeviceSpec) -> CpuList:
        if dev.numa_node < 0:
            return self.all_cpus
        return CpuList.parse(self.desc.numa[dev.numa_node])

    def write_pci(self) -> None:
        self.dir("sys/bus/pci/devices")
        self.file("sys/bus/pci/drivers_autoprobe", "1\n")
        self.file("sys/bus/pci/drivers_probe", "")
        self.file("sys/bus/pci/rescan", "")
        drivers = {d.driver for d in self.ordered if d.driver} | set(self.desc.extra_drivers)
        for name in sorted(drivers):
            for attr in ("bind", "new_id", "remove_id", "uevent", "unbind"):
                self.file(f"sys/bus/pci/drivers/{name}/{attr}", "")
        for dev in self.ordered:
            self.write_device(dev)

    def write_device(self, dev: DeviceSpec) -> None:
        path = self.device_dir(dev)
        attrs_ = {
            "vendor": f"0x{dev.vendor:04x}",
            "device": f"0x{dev.device:04x}",
            "subsystem_vendor": f"0x{dev.subsystem_vendor:04x}",
            "subsystem_device": f"0x{dev.subsystem_device:04x}",
            "class": f"0x{dev.pci_class:06x}",
            "revision": f"0x{dev.revision:02x}",
            "numa_node": str(dev.numa_node),
            "local_cpulist": str(self.local_cpus(dev)),
            "driver_override": dev.driver_override or "(null)",
            "enable": "1" if dev.driver else "0",
            "irq": str(self.irq(dev)),
        }
        if dev.link is not None:
            attrs_ |= {
                "current_link_speed": dev.link.speed,
                "current_link_width": str(dev.link.width),
                "max_link_speed": dev.link.max_speed or dev.link.speed,
                "max_link_width": str(dev.link.max_width or dev.link.width),
            }
        for name, value in sorted(attrs_.items()):
            self.file(f"{path}/{name}", value + "\n")
        self.rel_link(f"sys/bus/pci/devices/{dev.address}", path)
        if dev.is_bridge:
            bus = self.secondary_bus(dev)
            domain = dev.pci_address.domain
            self.file(
                f"{path}/pci_bus/{domain:04x}:{bus:02x}/cpulistaffinity",
                f"{self.local_cpus(dev)}\n",
            )
        if dev.driver:
            driver_dir = f"sys/bus/pci/drivers/{dev.driver}"
            self.rel_link(f"{path}/driver", driver_dir)
            self.rel_link(f"{driver_dir}/{dev.address}", path)
        if dev.iommu_group is not None:
            group_dir = f"sys/kernel/iommu_groups/{dev.iommu_group}"
            self.rel_link(f"{path}/iommu_group", group_dir)
            self.rel_link(f"{group_dir}/devices/{dev.address}", path)

    def secondary_bus(self, bridge: DeviceSpec) -> int:
        if bridge.secondary_bus is not None:
            return bridge.secondary_bus
        buses = {d.pci_address.bus for d in self.ordered if d.parent == bridge.address}
        if len(buses) != 1:
            raise HostSpecError(
                f"bridge {bridge.address}: give secondary_bus (functions behind it: "
                f"{len(buses)} buses)"
            )
        return buses.pop()

    def write_iommu(self) -> None:
        self.dir("sys/class/iommu")
        self.dir("sys/kernel/iommu_groups")
        groups = sorted({d.iommu_group for d in self.ordered if d.iommu_group is not None})
        for group in groups:
            self.file(f"sys/kernel/iommu_groups/{group}/type", self.desc.group_type + "\n")
        for unit in self.desc.iommu_units:
            if unit.device is not None:
                home = f"{self.device_dir(self.by_address[unit.device])}/iommu/{unit.name}"
            else:
                home = f"sys/devices/virtual/iommu/{unit.name}"
            if unit.name.startswith("ivhd"):
                self.file(f"{home}/amd-iommu/cap", "0x00190000\n")
                self.file(f"{home}/amd-iommu/features", "0x246577efa2254afa\n")
            else:
                self.file(f"{home}/intel-iommu/version", "1:0\n")
                self.file(f"{home}/intel-iommu/cap", "0xd2008c40660462\n")
            self.rel_link(f"sys/class/iommu/{unit.name}", home)

    def write_numa(self) -> None:
        nodes = f"0-{len(self.desc.numa) - 1}" if len(self.desc.numa) > 1 else "0"
        for name in ("has_cpu", "has_memory", "online", "possible"):
            self.file(f"sys/devices/system/node/{name}", nodes + "\n")
        for index, cpus in enumerate(self.desc.numa):
            self.file(f"sys/devices/system/node/node{index}/cpulist", f"{CpuList.parse(cpus)}\n")

    def write_modules(self) -> None:
        if self.desc.sev_snp is not None:
            flag = "Y\n" if self.desc.sev_snp else "N\n"
            for name in ("sev", "sev_es", "sev_snp"):
                self.file(f"sys/module/kvm_amd/parameters/{name}", flag)
        nv = self.desc.nvidia
        if nv is not None:
            self.file("sys/module/nvidia/version", nv.version + "\n")
            # Out-of-tree and unsigned (OE); the proprietary module also taints P.
            self.file("sys/module/nvidia/taint", "OE\n" if nv.open else "POE\n")

    def write_proc(self) -> None:
        self.file("proc/cmdline", self.desc.cmdline + "\n")
        char = list(BASE_CHAR_DEVICES) + list(self.desc.char_devices)
        nv = self.desc.nvidia
        if nv is not None:
            char += [(195, "nvidia"), (nv.uvm_major, "nvidia-uvm")]
            if nv.caps_major is not None:
                char.append((nv.caps_major, "nvidia-caps"))
        # The kernel lists majors in ascending order, registration order within one.
        char.sort(key=lambda entry: entry[0])
        lines = ["Character devices:", *(f"{m:3d} {n}" for m, n in char), ""]
        lines += ["Block devices:", *(f"{m:3d} {n}" for m, n in BLOCK_DEVICES)]
        self.file("proc/devices", "\n".join(lines) + "\n")
        if nv is None:
            return
        build = nv.build or _DEFAULT_BUILD
        banner = (
            f"NVIDIA UNIX Open Kernel Module for x86_64  {nv.version}  {build}"
            if nv.open
            else f"NVIDIA UNIX x86_64 Kernel Module  {nv.version}  {build}"
        )
        self.file(
            "proc/driver/nvidia/version",
            f"NVRM version: {banner}\nGCC version:  gcc version 14.2.0 (Debian 14.2.0-19) \n",
        )
        for dev in self.ordered:
            if dev.driver == "nvidia" and dev.nvidia is not None:
                self.file(
                    f"proc/driver/nvidia/gpus/{dev.address}/information",
                    self.nvidia_information(dev, dev.nvidia),
                )

    def nvidia_information(self, dev: DeviceSpec, info: NvidiaInfo) -> str:
        gpu_uuid = info.uuid or "GPU-" + str(
            uuid.uuid5(uuid.NAMESPACE_DNS, f"{dev.address}.{self.desc.hostname}.pvegpu")
        )
        # The exact seq_printf formats of nv-procfs.c: "Key: \t value", padding included.
        return (
            f"Model: \t\t {info.model}\n"
            f"IRQ:   \t\t {self.irq(dev)}\n"
            f"GPU UUID: \t {gpu_uuid}\n"
            f"Video BIOS: \t {info.vbios}\n"
            "Bus Type: \t PCIe\n"
            f"DMA Size: \t {info.dma_bits} bits\n"
            f"DMA Mask: \t {(1 << info.dma_bits) - 1:#x}\n"
            f"Bus Location: \t {dev.address}\n"
            f"Device Minor: \t {info.minor}\n"
            "GPU Excluded:\t No\n"
        )

    def write_etc(self) -> None:
        self.file("etc/hostname", self.desc.hostname + "\n")
        if self.desc.pve:
            # pmxcfs shows the local node's directories under these fixed names.
            node_dir = f"nodes/{self.desc.hostname}"
            for sub in ("lxc", "qemu-server"):
                self.dir(f"etc/pve/{node_dir}/{sub}")
                self.link(f"etc/pve/{sub}", f"{node_dir}/{sub}")
            self.link("etc/pve/local", node_dir)
        for rel, target in sorted(self.desc.symlinks.items()):
            self.link(rel, target)
        for rel, content in sorted(self.desc.files.items()):
            self.file(rel, content)


def _check(desc: HostSpec) -> dict[str, DeviceSpec]:
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
        if dev.driver == "nvidia" and (desc.nvidia is None or dev.nvidia is None):
            raise HostSpecError(f"{dev.address}: on nvidia needs NvidiaInfo and NvidiaModule")
    for address in units:
        if address not in by_address:
            raise HostSpecError(f"IOMMU unit on {address}, which is not described")
    return by_address


# -- committed fixtures


def fixture_hosts() -> Mapping[str, Callable[[], HostSpec]]:
    """The hosts committed under fixtures/sysfs/<name>/, by name."""
    from pvegpu.fixture_hosts import HOSTS

    return HOSTS


def regenerate(dest: Path, names: Sequence[str] | None = None) -> list[Path]:
    """Rewrite fixtures/sysfs/<name>/ for every registered host (or `names`)."""
    hosts = fixture_hosts()
    chosen = list(names) if names else sorted(hosts)
    unknown = [n for n in chosen if n not in hosts]
    if unknown:
        raise KeyError(f"no fixture host {', '.join(unknown)}; known: {', '.join(sorted(hosts))}")
    written: list[Path] = []
    for name in chosen:
        root = dest / name
        if root.exists():
            shutil.rmtree(root)
        write_host(hosts[name](), root)
        written.append(root)
    return written


@attrs.frozen
class TreeEntry:
    """One entry of a tree as git can keep it: a file or a symlink (empty dirs are lost)."""

    kind: str
    """`file` or `link`."""
    data: bytes
    """File content, or the link text."""
    executable: bool = False


def tree_entries(root: Path) -> dict[str, TreeEntry]:
    """Files and symlinks under `root` by relative path, to compare trees byte for byte.

    Directories are not listed: git keeps no empty directory, so a committed tree and a
    freshly written one agree on every file and link but not on empty directories.
    """
    found: dict[str, TreeEntry] = {}
    for path in _walk(root):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            found[rel] = TreeEntry("link", str(path.readlink()).encode())
        elif stat.S_ISREG(st.st_mode):
            found[rel] = TreeEntry("file", path.read_bytes(), bool(st.st_mode & stat.S_IXUSR))
    return found


def _walk(root: Path) -> Iterator[Path]:
    for entry in sorted(root.iterdir()):
        yield entry
        if entry.is_dir() and not entry.is_symlink():
            yield from _walk(entry)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "regenerate":
        print("usage: python -m pvegpu.testing regenerate DEST [NAME...]", file=sys.stderr)
        return 2
    for root in regenerate(Path(args[1]), args[2:]):
        print(f"wrote {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
