"""Read a host's GPU topology from the sysfs/procfs/etc tree under a root.

`discover(root)` reads only below `root` (`root/sys`, `root/proc`, `root/etc`), through a
`pvegpu.host.reader.RootReader`: symlinks are resolved inside the root as if it were `/`,
only regular files are opened, each at most 64 MiB, so a fixture tree, an unpacked
snapshot and the live host are read the same way and nothing outside is touched.
Directory listings are sorted
and every tuple in the result is in a fixed order, so the facts never depend on the
order the filesystem lists entries in.

A tree that is not what the kernel writes raises DiscoveryError at the first problem,
naming the path relative to the root; no partial facts are returned. docs/discovery.md
lists what is read and the error codes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import attrs

from pvegpu.formats.dpkg import installed_packages
from pvegpu.host import sysfs
from pvegpu.host.acs import override_settings, read_acs_ports
from pvegpu.host.boot import read_boot
from pvegpu.host.cluster_guests import read_cluster_guests
from pvegpu.host.driverctl import read_driverctl
from pvegpu.host.fabric import read_fabric_manager
from pvegpu.host.gpus import read_gpus
from pvegpu.host.kernels import read_kernels
from pvegpu.host.listing import Listing
from pvegpu.host.partitions import read_mdev, read_mig
from pvegpu.host.reader import RECAPTURE, RootReader, Trace, fail
from pvegpu.host.reader import parsed as _parse
from pvegpu.host.references import read_cgroup, read_references
from pvegpu.host.serving_files import add_serving_files, read_next_boot_userspace
from pvegpu.host.userspace import read_driver_userspace
from pvegpu.model.facts import (
    ConfigFile,
    GpuDriver,
    HostFacts,
    IommuGroup,
    IommuState,
    KernelModuleFlavor,
    NumaNode,
    PcieLink,
    PciFunction,
    Sriov,
    VfioIdsSetting,
)
from pvegpu.model.paths import DPKG_STATUS, OWN_SCRIPTS, SPLIT_INITRAMFS_HOOK, SPLIT_UDEV_RULE
from pvegpu.model.platform import PvePackages
from pvegpu.model.resources import HostCpu
from pvegpu.pci import CpuList, PciAddress
from pvegpu.vendors import DRIVER_VERSION_VENDORS, VENDORS, Vendor

T = TypeVar("T")
R = TypeVar("R")

PCI_DEVICES = "sys/bus/pci/devices"
IOMMU_GROUPS = "sys/kernel/iommu_groups"
NODES = "sys/devices/system/node"
VGA_CLASS = 0x0300
# The kernel's mdev directory and each vendor's own (`Vendor.mdev_dirs`).
MDEV_DIRS = ("mdev_supported_types", *(d for v in VENDORS for d in v.mdev_dirs))


def discover(root: Path = Path("/"), *, trace: Trace | None = None) -> HostFacts:
    """Read the host under `root`. `trace`, if given, records every file and link read."""
    return read_host(RootReader(root, trace))


def read_host(reader: RootReader) -> HostFacts:
    """`discover` on a reader the caller keeps (pipeline.discover_for reads on with it)."""
    if not reader.root.is_dir():
        fail(
            "missing-root",
            str(reader.root),
            "the root directory does not exist (or is not a directory)",
            "pass --root a host's / or an unpacked `pvegpu snapshot`",
        )
    node = _parse(
        "etc/hostname", reader.need("etc/hostname", "the node's host name"), sysfs.hostname
    )
    if not reader.exists(PCI_DEVICES):
        fail(
            "missing-dir",
            PCI_DEVICES,
            "does not exist; is the root a host's / (with sys and proc mounted)?",
            "pass --root the directory that holds sys/, proc/ and etc/",
        )
    cpus = _cpulists()
    # Listed before the functions: the listing's d_types then save an lstat of each group
    # directory when the functions' iommu_group links are resolved.
    group_names = reader.listdir(IOMMU_GROUPS)
    names = reader.listdir(PCI_DEVICES)
    functions = tuple(_function(reader, name, cpus) for name in names)
    numa = _numa_nodes(reader)
    units = tuple(reader.listdir("sys/class/iommu"))
    # A group member is nearly always a function read just before: its address is reused
    # (each entry's name is its address's str, checked in _function).
    known = dict(zip(names, (fn.address for fn in functions), strict=True))
    groups = _iommu_groups(reader, known, group_names)
    _check_groups(functions, groups)
    cmdline = reader.need("proc/cmdline", "the kernel command line")
    mdev_types, mdev_instances = read_mdev(reader, functions)
    boot = read_boot(reader)
    functions = _with_gpu_details(reader, functions)
    gpus = read_gpus(reader, functions)
    drivers = _gpu_drivers(reader)
    boot = attrs.evolve(boot, kernels=read_kernels(reader, boot, gpus, drivers))
    # The ports' ACS matters only while the override makes the groups lie (host/acs.py).
    acs_ports = (
        read_acs_ports(reader, functions, tuple(g.function for g in gpus))
        if override_settings(cmdline, boot)
        else ()
    )
    char_majors = _parse(
        "proc/devices",
        reader.need("proc/devices", "the 'Character devices:' list"),
        sysfs.proc_devices,
    )
    files = _config_files(reader)
    drivers = _gpu_drivers(reader)
    driverctl = read_driverctl(reader)
    mig_caps = read_mig(reader)
    cgroup = read_cgroup(reader, cmdline)
    references = read_references(
        reader,
        node=node,
        gpus=gpus,
        functions=functions,
        mig_caps=mig_caps,
        char_majors=char_majors,
        files=files,
        driverctl=driverctl,
        cgroup=cgroup,
    )
    facts = HostFacts(
        node=node,
        functions=functions,
        gpus=gpus,
        numa_nodes=numa,
        iommu_groups=groups,
        iommu=IommuState(enabled=bool(units), units=units),
        sev_snp=_sev_snp(reader),
        gpu_drivers=drivers,
        char_majors=char_majors,
        cmdline=cmdline.strip(),
        vfio_ids=_vfio_ids(reader, cmdline),
        boot=boot,
        acs_ports=acs_ports,
        driverctl=driverctl,
        files=files,
        # The other nodes' guests, by name: guest ids are cluster-wide (planning/guest_ids.py).
        stats=read_cluster_guests(reader, node),
        mdev_types=mdev_types,
        mdev_instances=mdev_instances,
        mig_caps=mig_caps,
        fabric_manager=read_fabric_manager(reader, functions),
        cpu=_host_cpu(reader),
        pve=_pve_packages(reader),
        cgroup=cgroup,
        references=references,
        driver_userspace=read_driver_userspace(reader, drivers),
    )
    # With a driver upgrade pending, the userspace of every GPU container (next_boot.py).
    return add_serving_files(facts, read_next_boot_userspace(reader, facts))


def _function(reader: RootReader, name: str, cpus: Callable[[str], CpuList]) -> PciFunction:
    base = f"{PCI_DEVICES}/{name}"
    address = _parse(base, name, PciAddress.parse)
    if str(address) != name:
        # The kernel writes lowercase, the domain as %04x (`10000:e1:00.0` behind Intel
        # VMD, never `00010000:`); `0000:0A:00.0` next to `0000:0a:00.0` would be two
        # entries for one address.
        fail("bad-value", base, f"expected the kernel's form {str(address)!r}")
    # The device link is resolved once; every attribute is then read relative to the
    # real directory (about 25 readlinks per device otherwise). Errors still name the
    # path as accessed, `sys/bus/pci/devices/<BDF>/<file>`.
    real = reader.directory(base)
    if real is None:
        found = reader.resolve(base)
        if found is None:
            fail(
                "dangling-link",
                base,
                f"points to {reader.readlink(base)!r}, which does not exist under the root",
            )
        fail("not-a-directory", base, f"resolves to {found}, which is not a directory")
    # Listed once: its d_types say which attributes are regular files, so each is opened
    # without an lstat first, and an absent one costs nothing (pvegpu.host.listing).
    listing = Listing(reader, real, base)

    def optional(file: str, process: Callable[[str], T]) -> T | None:
        path = f"{base}/{file}"
        text = listing.read(file, path)
        return None if text is None else _parse(path, text, process)

    def hex_id(file: str, digits: int) -> int:
        path = f"{base}/{file}"
        text = listing.need(file, f"0x and {digits} hex digits", path)
        try:
            return sysfs.hex_id(text, digits)
        except ValueError as err:
            fail("bad-value", path, str(err))

    speed = optional("current_link_speed", sysfs.link_speed)
    link = None
    if speed is not None:
        link = PcieLink(
            current_speed=speed,
            current_width=optional("current_link_width", sysfs.link_width),
            max_speed=optional("max_link_speed", sysfs.link_speed) or speed,
            max_width=optional("max_link_width", sysfs.link_width),
        )
    # The ids from `uevent`: one read instead of five, the same cached fields of the
    # kernel's pci_dev (no config space access, so a device in D3cold stays asleep).
    # Without it (older snapshots, hand-made trees) the five attribute files are read.
    uevent = listing.read("uevent", f"{base}/uevent")
    if uevent is not None:
        path = f"{base}/uevent"
        vendor, device, subsystem_vendor, subsystem_device, pci_class, slot = _parse(
            path, uevent, sysfs.pci_uevent
        )
        if slot != name:
            fail("bad-value", path, f"says PCI_SLOT_NAME={slot}, not {name}")
    else:
        vendor = hex_id("vendor", 4)
        device = hex_id("device", 4)
        subsystem_vendor = hex_id("subsystem_vendor", 4)
        subsystem_device = hex_id("subsystem_device", 4)
        pci_class = hex_id("class", 6)
    return PciFunction(
        address=address,
        vendor=vendor,
        device=device,
        subsystem_vendor=subsystem_vendor,
        subsystem_device=subsystem_device,
        pci_class=pci_class,
        sysfs_path=real,
        numa_node=optional("numa_node", sysfs.numa_node),
        iommu_group=_iommu_group_link(listing, base) if "iommu_group" in listing else None,
        driver=_driver_link(listing, base) if "driver" in listing else None,
        driver_override=optional("driver_override", sysfs.driver_override),
        local_cpus=optional("local_cpulist", cpus),
        link=link,
        # Proxmox treats these directories as "mdev capable" and then wants `mdev 1`.
        mdev_capable=any(listing.is_dir(d, f"{base}/{d}") for d in MDEV_DIRS),
        physfn=_function_link(listing, base, "physfn") if "physfn" in listing else None,
        sriov=_sriov(listing, base) if "sriov_totalvfs" in listing else None,
    )


def _function_link(listing: Listing, base: str, name: str) -> PciAddress:
    """The address a `physfn` / `virtfnN` link of a device names (a sibling device)."""
    path = f"{base}/{name}"
    found = listing.link_directory(name, path)
    target = None if found is None else found[0]
    if found is None or found[1] is None:
        fail(
            "dangling-link",
            path,
            f"points to {target!r}, which is not a PCI device directory under the root",
            "an SR-IOV link names a device the kernel lists; " + RECAPTURE,
        )
    return _parse(path, found[0].rstrip("/").rpartition("/")[2], PciAddress.parse)


def _sriov(listing: Listing, base: str) -> Sriov:
    """A physical function's SR-IOV attributes and its `virtfn0..N-1` links."""

    def number(file: str) -> int:
        path = f"{base}/{file}"
        return _parse(path, listing.need(file, "a number of VFs", path), sysfs.count)

    total, num = number("sriov_totalvfs"), number("sriov_numvfs")
    if num > total:
        fail(
            "bad-value",
            f"{base}/sriov_numvfs",
            f"says {num} VFs, more than sriov_totalvfs ({total})",
        )
    autoprobe_path = f"{base}/sriov_drivers_autoprobe"
    # Kernels before 4.12 have no such file: their VFs are always probed.
    autoprobe = listing.read("sriov_drivers_autoprobe", autoprobe_path)
    vfs = []
    for index in range(num):
        name = f"virtfn{index}"
        if name not in listing:
            fail(
                "missing-file",
                f"{base}/{name}",
                f"does not exist, but sriov_numvfs says {num} VFs",
                RECAPTURE,
            )
        vfs.append(_function_link(listing, base, name))
    return Sriov(
        total_vfs=total,
        num_vfs=num,
        drivers_autoprobe=(
            True if autoprobe is None else _parse(autoprobe_path, autoprobe, sysfs.flag)
        ),
        vfs=tuple(vfs),
    )


def _cpulists() -> Callable[[str], CpuList]:
    """`sysfs.cpulist`, once per distinct text: the functions of a node share its list."""
    known: dict[str, CpuList] = {}

    def parse(raw: str) -> CpuList:
        found = known.get(raw)
        if found is None:
            found = known[raw] = sysfs.cpulist(raw)
        return found

    return parse


def _driver_link(listing: Listing, base: str) -> str:
    """The driver's name, from a listed `driver` (the caller checked it is listed)."""
    path = f"{base}/driver"
    found = listing.link_directory("driver", path)
    if found is None:
        fail("bad-value", path, "is not a symlink; expected a link to bus/pci/drivers/<name>")
    target, driver = found
    if driver is None:
        fail(
            "dangling-link",
            path,
            f"points to {target!r}, which does not exist under the root",
            "the driver directory must exist while a device is bound; " + RECAPTURE,
        )
    return target.rstrip("/").rpartition("/")[2]


def _iommu_group_link(listing: Listing, base: str) -> int | None:
    """The group number of a listed `iommu_group`; None when it is not a symlink."""
    path = f"{base}/iommu_group"
    found = listing.link_directory("iommu_group", path)
    if found is None:
        return None
    target, group = found
    name = target.rstrip("/").rpartition("/")[2]
    if not _is_number(name):
        fail("bad-value", path, f"points to {target!r}; expected .../kernel/iommu_groups/<N>")
    if group != f"{IOMMU_GROUPS}/{name}":
        fail(
            "dangling-link",
            path,
            f"points to {target!r}, which is not a directory {IOMMU_GROUPS}/{name}",
            "Proxmox refuses a device whose iommu_group link target is missing; " + RECAPTURE,
        )
    return int(name)


def _is_number(name: str) -> bool:
    """ASCII digits only (what `[0-9]+` matches): str.isdigit() alone also takes '²'."""
    return name.isascii() and name.isdigit()


def _numa_nodes(reader: RootReader) -> tuple[NumaNode, ...]:
    def is_node(name: str) -> bool:
        return name.startswith("node") and _is_number(name[4:])

    nodes = []
    for name in reader.listdir(NODES, is_node):
        path = f"{NODES}/{name}/cpulist"
        cpus = _parse(path, reader.need(path, "the node's CPU list"), sysfs.cpulist)
        node = int(name[4:])
        # Optional: snapshots and trees from before it was read have no meminfo.
        meminfo = reader.read(f"{NODES}/{name}/meminfo")
        total = free = None
        if meminfo is not None:
            total, free = _parse(f"{NODES}/{name}/meminfo", (meminfo, node), _meminfo)
        nodes.append(NumaNode(node, cpus, total, free))
    return tuple(sorted(nodes, key=lambda n: n.id))


def _meminfo(raw: tuple[str, int]) -> tuple[int, int | None]:
    return sysfs.node_meminfo(*raw)


def _host_cpu(reader: RootReader) -> HostCpu | None:
    text = reader.read("proc/cpuinfo")
    return None if text is None else _parse("proc/cpuinfo", text, sysfs.cpuinfo)


def _with_gpu_details(
    reader: RootReader, functions: tuple[PciFunction, ...]
) -> tuple[PciFunction, ...]:
    """The functions, each GPU and its slot mates with their BARs, `boot_vga` and
    `removable`: what a VM's start depends on. Only GPUs (and what moves with them) go
    to a VM, so only theirs are read: for every function it would be a seventh more
    files on a large host (bench/), which the discover target cannot spare."""
    slots = {f.address.slot for f in functions if f.is_gpu and not f.is_virtual_function}
    return tuple(
        _gpu_details(reader, f) if f.address.slot in slots and not f.is_bridge else f
        for f in functions
    )


def _gpu_details(reader: RootReader, fn: PciFunction) -> PciFunction:
    base = f"{PCI_DEVICES}/{fn.address}"

    def optional(file: str, process: Callable[[str], T]) -> T | None:
        text = reader.read(file, at=fn.sysfs_path, subject=f"{base}/{file}")
        return None if text is None else _parse(f"{base}/{file}", text, process)

    bars = optional("resource", sysfs.resource_bars)
    # The kernel gives only VGA-class functions the file: no lookup for the others.
    boot_vga = optional("boot_vga", sysfs.flag) if fn.pci_class >> 8 == VGA_CLASS else None
    removable = optional("removable", sysfs.removable)
    if not (bars or boot_vga or removable):
        return fn
    return attrs.evolve(fn, bars=bars or (), boot_vga=bool(boot_vga), removable=bool(removable))


def _iommu_groups(
    reader: RootReader, known: dict[str, PciAddress], names: list[str]
) -> tuple[IommuGroup, ...]:
    groups = []
    for name in names:
        base = f"{IOMMU_GROUPS}/{name}"
        if not _is_number(name):
            fail("bad-value", base, "expected only numbered group directories")
        members = tuple(
            sorted(
                known.get(m) or _parse(f"{base}/devices/{m}", m, PciAddress.parse)
                for m in reader.listdir(f"{base}/devices")
            )
        )
        kind = reader.read(f"{base}/type")
        group_type = None if kind is None else _parse(f"{base}/type", kind, sysfs.iommu_group_type)
        groups.append(IommuGroup(int(name), members, group_type))
    return tuple(sorted(groups, key=lambda g: g.id))


def _check_groups(functions: tuple[PciFunction, ...], groups: tuple[IommuGroup, ...]) -> None:
    members = {g.id: set(g.members) for g in groups}
    for fn in functions:
        if fn.iommu_group is not None and fn.address not in members.get(fn.iommu_group, ()):
            fail(
                "iommu-group-mismatch",
                f"{IOMMU_GROUPS}/{fn.iommu_group}/devices",
                f"does not list {fn.address}, whose iommu_group link points here",
            )


def _pve_packages(reader: RootReader) -> PvePackages:
    """The Proxmox packages' versions from the host's dpkg status (none: not a PVE root,
    or a snapshot that did not take the file)."""
    text = reader.read(DPKG_STATUS)
    return PvePackages() if text is None else PvePackages.of(installed_packages(text))


def _sev_snp(reader: RootReader) -> bool:
    path = "sys/module/kvm_amd/parameters/sev_snp"
    text = reader.read(path)
    return False if text is None else _parse(path, text, sysfs.module_bool)


def _gpu_drivers(reader: RootReader) -> tuple[GpuDriver, ...]:
    found = (_driver_version(reader, v) for v in DRIVER_VERSION_VENDORS)
    return tuple(d for d in found if d is not None)


def _driver_version(reader: RootReader, vendor: Vendor) -> GpuDriver | None:
    """The vendor's loaded host driver's version and flavor, None when it is not loaded
    (or the vendor gives no file to read it from)."""
    source = vendor.driver_version
    if source is None:
        return None
    text = reader.read(source.banner)
    if text is not None:
        version, open_module = _parse(source.banner, text, source.parse_banner)
        flavor = KernelModuleFlavor.OPEN if open_module else KernelModuleFlavor.PROPRIETARY
        return GpuDriver(vendor.host_driver, version, flavor)
    text = reader.read(source.module_version)
    if text is None:
        return None
    version = _parse(source.module_version, text, source.parse_module_version)
    taint = source.module_taint
    flavor = _parse(taint, reader.need(taint, "the module's taint flags"), sysfs.module_flavor)
    return GpuDriver(vendor.host_driver, version, flavor)


def _modprobe_confs(reader: RootReader) -> list[str]:
    # modprobe reads only *.conf files from modprobe.d.
    return [f"etc/modprobe.d/{n}" for n in reader.listdir("etc/modprobe.d", _is_conf)]


def _is_conf(name: str) -> bool:
    return name.endswith(".conf")


def _vfio_ids(reader: RootReader, cmdline: str) -> tuple[VfioIdsSetting, ...]:
    found = [
        VfioIdsSetting("proc/cmdline", ids)
        for ids in _parse("proc/cmdline", cmdline, sysfs.cmdline_vfio_ids)
    ]
    for path in _modprobe_confs(reader):
        text = reader.need(path, "a modprobe.d file")
        found += [VfioIdsSetting(path, ids) for ids in _parse(path, text, sysfs.modprobe_vfio_ids)]
    return tuple(sorted(found, key=lambda s: s.source))


def _config_files(reader: RootReader) -> tuple[ConfigFile, ...]:
    paths = [f"etc/pve/lxc/{n}" for n in reader.listdir("etc/pve/lxc", _is_conf)]
    paths += [f"etc/pve/qemu-server/{n}" for n in reader.listdir("etc/pve/qemu-server", _is_conf)]
    paths += [p for p in ("etc/pve/mapping/pci.cfg", "etc/pve/storage.cfg") if reader.exists(p)]
    paths += _modprobe_confs(reader)
    # Host units: the split unit of an earlier run (the new one patches it) and any
    # hand-made unit that also moves GPUs between drivers (the planner warns).
    units = [f"etc/systemd/system/{n}" for n in reader.listdir("etc/systemd/system", _is_unit)]
    # A masked unit (`systemctl mask`) is a link to /dev/null: no unit, nothing to read.
    paths += [u for u in units if reader.readlink(u) != "/dev/null"]
    # pvegpu's installed scripts (the split's, the boot units') and initramfs hook: read
    # so a re-render patches, not replaces, them.
    paths += [p for p in (*OWN_SCRIPTS, SPLIT_INITRAMFS_HOOK, SPLIT_UDEV_RULE) if reader.exists(p)]
    return tuple(ConfigFile(p, reader.need(p, "a readable file")) for p in sorted(paths))


def _is_unit(name: str) -> bool:
    return name.endswith(".service")
