"""Read a host's GPU topology from the sysfs/procfs/etc tree under a root.

`discover(root)` reads only below `root` (`root/sys`, `root/proc`, `root/etc`) and treats
it like `/`: symlinks are resolved inside the root (an absolute link target means
`root/...`, `..` stops at the root), so a fixture tree, an unpacked snapshot and the live
host are read the same way and nothing outside is touched. Directory listings are sorted
and every tuple in the result is in a fixed order, so the facts never depend on the
order the filesystem lists entries in.

A tree that is not what the kernel writes raises DiscoveryError at the first problem,
naming the path relative to the root; no partial facts are returned. docs/discovery.md
lists what is read and the error codes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

import attrs

from pvegpu.errors import DiscoveryError
from pvegpu.host import sysfs
from pvegpu.host.facts import (
    GPU,
    ConfigFile,
    HostFacts,
    IommuGroup,
    IommuState,
    NumaNode,
    NvidiaDriver,
    PcieLink,
    PciFunction,
    VfioIdsSetting,
)
from pvegpu.host.paths import SPLIT_SCRIPT
from pvegpu.pci import PciAddress

T = TypeVar("T")
R = TypeVar("R")

PCI_DEVICES = "sys/bus/pci/devices"
IOMMU_GROUPS = "sys/kernel/iommu_groups"
NODES = "sys/devices/system/node"
NVIDIA_GPUS = "proc/driver/nvidia/gpus"
MAX_LINK_HOPS = 40
"""The kernel's own limit on symlinks followed in one lookup (ELOOP)."""

RECAPTURE = "capture the host again with `pvegpu snapshot --root / --out host.tar.gz`"


@attrs.define
class Trace:
    """Everything discovery read, by real path relative to the root (see pvegpu.host.snapshot)."""

    files: dict[str, bytes] = attrs.field(factory=dict)
    links: dict[str, str] = attrs.field(factory=dict)
    dirs: set[str] = attrs.field(factory=set)


def _fail(code: str, subject: str, message: str, fix: str = RECAPTURE) -> NoReturn:
    raise DiscoveryError.one(code, subject, message, fix)


class Tree:
    """A root read as if it were `/`. Paths are relative to the root, `/`-separated."""

    def __init__(self, root: Path, trace: Trace | None = None) -> None:
        self.root = root
        self._prefix = f"{root}/"
        self.trace = trace if trace is not None else Trace()
        # Every path is resolved component by component (to stay inside the root), so
        # the same directories and links are looked at thousands of times: one lstat
        # each. A discovery is one reading of the tree, so caching is exact.
        self._stats: dict[str, os.stat_result | None] = {}

    def _lstat(self, rel: str) -> os.stat_result | None:
        if rel in self._stats:
            return self._stats[rel]
        try:
            st: os.stat_result | None = os.lstat(self._prefix + rel)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as err:
            _fail("unreadable", rel, f"cannot be read: {err.strerror}")
        self._stats[rel] = st
        return st

    def resolve(self, rel: str, *, follow: bool = True) -> str | None:
        """The real path of `rel` inside the root, or None when some component is missing.

        With follow=False the last component is not followed (like lstat/readlink).
        """
        pending = [p for p in rel.split("/") if p not in ("", ".")]
        pending.reverse()
        done: list[str] = []
        hops = 0
        while pending:
            name = pending.pop()
            if name == "..":
                if done:
                    done.pop()
                continue
            here = "/".join([*done, name])
            st = self._lstat(here)
            if st is None:
                return None
            if stat.S_ISLNK(st.st_mode) and (pending or follow):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    _fail("symlink-loop", rel, f"more than {MAX_LINK_HOPS} symlinks to resolve")
                target = self.readlink_real(here)
                if target.startswith("/"):
                    done = []
                pending.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
                continue
            done.append(name)
        return "/".join(done)

    def readlink_real(self, real: str) -> str:
        try:
            target = str((self.root / real).readlink())
        except OSError as err:
            _fail("unreadable", real, f"cannot read the link: {err.strerror}")
        self.trace.links[real] = target
        return target

    def readlink(self, rel: str) -> str | None:
        """The text of the symlink `rel`, or None when it is not a symlink."""
        real = self.resolve(rel, follow=False)
        if real is None:
            return None
        st = self._lstat(real)
        if st is None or not stat.S_ISLNK(st.st_mode):
            return None
        return self.readlink_real(real)

    def exists(self, rel: str) -> bool:
        real = self.resolve(rel)
        return real is not None and self._lstat(real) is not None

    def is_dir(self, rel: str) -> bool:
        real = self.resolve(rel)
        st = None if real is None else self._lstat(real)
        if real is None or st is None or not stat.S_ISDIR(st.st_mode):
            return False
        self.trace.dirs.add(real)
        return True

    def read(self, rel: str) -> str | None:
        """The text of file `rel`, or None when it does not exist."""
        real = self.resolve(rel)
        if real is None or self._lstat(real) is None:
            return None
        try:
            data = (self.root / real).read_bytes()
        except OSError as err:
            _fail("unreadable", rel, f"cannot be read: {err.strerror or err}")
        try:
            text = data.decode()
        except UnicodeDecodeError:
            _fail("unreadable", rel, "is not UTF-8 text")
        self.trace.files[real] = data
        return text

    def need(self, rel: str, what: str) -> str:
        text = self.read(rel)
        if text is None:
            _fail("missing-file", rel, f"does not exist; expected {what}")
        return text

    def listdir(self, rel: str, keep: Callable[[str], bool] = lambda _: True) -> list[str]:
        """Sorted names in directory `rel` that `keep` accepts; [] when it does not exist.

        A missing directory reads as empty: git keeps no empty directories, so a fixture
        tree or snapshot lacks sys/class/iommu where the kernel shows it empty.
        """
        real = self.resolve(rel)
        if real is None or not self.is_dir(real):
            return []
        try:
            names = sorted(p.name for p in (self.root / real).iterdir() if keep(p.name))
        except OSError as err:
            _fail("unreadable", rel, f"cannot be listed: {err.strerror}")
        self.trace.dirs.add(real)
        for name in names:
            entry = f"{real}/{name}" if real else name
            st = self._lstat(entry)
            if st is not None and stat.S_ISLNK(st.st_mode):
                self.readlink_real(entry)
            elif st is not None and stat.S_ISDIR(st.st_mode):
                self.trace.dirs.add(entry)
        return names


def _parse(path: str, raw: R, process: Callable[[R], T]) -> T:
    """Run a pure parser; its ValueError becomes a bad-value problem about `path`."""
    try:
        return process(raw)
    except ValueError as err:
        _fail("bad-value", path, str(err))


def discover(root: Path = Path("/"), *, trace: Trace | None = None) -> HostFacts:
    """Read the host under `root`. `trace`, if given, records every file and link read."""
    if not root.is_dir():
        _fail(
            "missing-root",
            str(root),
            "the root directory does not exist (or is not a directory)",
            "pass --root a host's / or an unpacked `pvegpu snapshot`",
        )
    tree = Tree(root, trace)
    node = _parse("etc/hostname", tree.need("etc/hostname", "the node's host name"), sysfs.hostname)
    if not tree.is_dir(PCI_DEVICES):
        _fail(
            "missing-dir",
            PCI_DEVICES,
            "does not exist; is the root a host's / (with sys and proc mounted)?",
            "pass --root the directory that holds sys/, proc/ and etc/",
        )
    functions = tuple(_function(tree, name) for name in tree.listdir(PCI_DEVICES))
    numa = _numa_nodes(tree)
    units = tuple(tree.listdir("sys/class/iommu"))
    groups = _iommu_groups(tree)
    _check_groups(functions, groups)
    cmdline = tree.need("proc/cmdline", "the kernel command line")
    return HostFacts(
        node=node,
        functions=functions,
        gpus=_gpus(tree, functions),
        numa_nodes=numa,
        iommu_groups=groups,
        iommu=IommuState(enabled=bool(units), units=units),
        sev_snp=_sev_snp(tree),
        nvidia=_nvidia_driver(tree),
        char_majors=_parse(
            "proc/devices",
            tree.need("proc/devices", "the 'Character devices:' list"),
            sysfs.proc_devices,
        ),
        cmdline=cmdline.strip(),
        vfio_ids=_vfio_ids(tree, cmdline),
        files=_config_files(tree),
    )


def _function(tree: Tree, name: str) -> PciFunction:
    base = f"{PCI_DEVICES}/{name}"
    address = _parse(base, name, PciAddress.parse)
    real = tree.resolve(base)
    if real is None or not tree.is_dir(real):
        _fail(
            "dangling-link",
            base,
            f"points to {tree.readlink(base)!r}, which does not exist under the root",
        )

    def attr(file: str, process: Callable[[str], T], what: str) -> T:
        path = f"{base}/{file}"
        return _parse(path, tree.need(path, what), process)

    def optional(file: str, process: Callable[[str], T]) -> T | None:
        path = f"{base}/{file}"
        text = tree.read(path)
        return None if text is None else _parse(path, text, process)

    def hex_id(file: str, digits: int) -> int:
        return attr(file, lambda raw: sysfs.hex_id(raw, digits), f"0x and {digits} hex digits")

    speed = optional("current_link_speed", sysfs.link_speed)
    link = None
    if speed is not None:
        link = PcieLink(
            current_speed=speed,
            current_width=optional("current_link_width", sysfs.link_width),
            max_speed=optional("max_link_speed", sysfs.link_speed) or speed,
            max_width=optional("max_link_width", sysfs.link_width),
        )
    return PciFunction(
        address=address,
        vendor=hex_id("vendor", 4),
        device=hex_id("device", 4),
        subsystem_vendor=hex_id("subsystem_vendor", 4),
        subsystem_device=hex_id("subsystem_device", 4),
        pci_class=hex_id("class", 6),
        sysfs_path=real,
        numa_node=optional("numa_node", sysfs.numa_node),
        iommu_group=_iommu_group_link(tree, base),
        driver=_driver_link(tree, base),
        driver_override=optional("driver_override", sysfs.driver_override),
        local_cpus=optional("local_cpulist", sysfs.cpulist),
        link=link,
        # Proxmox treats these directories as "mdev capable" and then wants `mdev 1`.
        mdev_capable=tree.is_dir(f"{base}/mdev_supported_types") or tree.is_dir(f"{base}/nvidia"),
    )


def _driver_link(tree: Tree, base: str) -> str | None:
    path = f"{base}/driver"
    target = tree.readlink(path)
    if target is None:
        if tree.exists(path):
            _fail("bad-value", path, "is not a symlink; expected a link to bus/pci/drivers/<name>")
        return None
    if not tree.is_dir(path):
        _fail(
            "dangling-link",
            path,
            f"points to {target!r}, which does not exist under the root",
            "the driver directory must exist while a device is bound; " + RECAPTURE,
        )
    return target.rstrip("/").rpartition("/")[2]


def _iommu_group_link(tree: Tree, base: str) -> int | None:
    path = f"{base}/iommu_group"
    target = tree.readlink(path)
    if target is None:
        return None
    name = target.rstrip("/").rpartition("/")[2]
    if not name.isdigit():
        _fail("bad-value", path, f"points to {target!r}; expected .../kernel/iommu_groups/<N>")
    real = tree.resolve(path)
    if real != f"{IOMMU_GROUPS}/{name}" or not tree.is_dir(real):
        _fail(
            "dangling-link",
            path,
            f"points to {target!r}, which is not a directory {IOMMU_GROUPS}/{name}",
            "Proxmox refuses a device whose iommu_group link target is missing; " + RECAPTURE,
        )
    return int(name)


def _numa_nodes(tree: Tree) -> tuple[NumaNode, ...]:
    def is_node(name: str) -> bool:
        return name.startswith("node") and name[4:].isdigit()

    nodes = []
    for name in tree.listdir(NODES, is_node):
        path = f"{NODES}/{name}/cpulist"
        cpus = _parse(path, tree.need(path, "the node's CPU list"), sysfs.cpulist)
        nodes.append(NumaNode(int(name[4:]), cpus))
    return tuple(sorted(nodes, key=lambda n: n.id))


def _iommu_groups(tree: Tree) -> tuple[IommuGroup, ...]:
    groups = []
    for name in tree.listdir(IOMMU_GROUPS):
        base = f"{IOMMU_GROUPS}/{name}"
        if not name.isdigit():
            _fail("bad-value", base, "expected only numbered group directories")
        members = tuple(
            sorted(
                _parse(f"{base}/devices/{m}", m, PciAddress.parse)
                for m in tree.listdir(f"{base}/devices")
            )
        )
        kind = tree.read(f"{base}/type")
        group_type = None if kind is None else _parse(f"{base}/type", kind, sysfs.iommu_group_type)
        groups.append(IommuGroup(int(name), members, group_type))
    return tuple(sorted(groups, key=lambda g: g.id))


def _check_groups(functions: tuple[PciFunction, ...], groups: tuple[IommuGroup, ...]) -> None:
    members = {g.id: set(g.members) for g in groups}
    for fn in functions:
        if fn.iommu_group is not None and fn.address not in members.get(fn.iommu_group, ()):
            _fail(
                "iommu-group-mismatch",
                f"{IOMMU_GROUPS}/{fn.iommu_group}/devices",
                f"does not list {fn.address}, whose iommu_group link points here",
            )


def _gpus(tree: Tree, functions: tuple[PciFunction, ...]) -> tuple[GPU, ...]:
    gpus = []
    for fn in functions:
        if not fn.is_display:
            continue
        companions = tuple(
            other
            for other in functions
            if other.address != fn.address
            and other.address.slot == fn.address.slot
            and not other.is_bridge
        )
        minor = model = None
        path = f"{NVIDIA_GPUS}/{fn.address}/information"
        text = tree.read(path)
        if text is not None:
            info = _parse(path, text, sysfs.nvidia_information)
            minor = _parse(path, info, sysfs.device_minor)
            model = info.get("Model")
            if info.get("Bus Location", str(fn.address)) != str(fn.address):
                _fail("bad-value", path, f"says Bus Location {info['Bus Location']}")
        gpus.append(GPU(fn, companions, minor, model))
    return tuple(gpus)


def _sev_snp(tree: Tree) -> bool:
    path = "sys/module/kvm_amd/parameters/sev_snp"
    text = tree.read(path)
    return False if text is None else _parse(path, text, sysfs.module_bool)


def _nvidia_driver(tree: Tree) -> NvidiaDriver | None:
    path = "proc/driver/nvidia/version"
    text = tree.read(path)
    if text is not None:
        return _parse(path, text, sysfs.nvidia_proc_version)
    path = "sys/module/nvidia/version"
    text = tree.read(path)
    if text is None:
        return None
    version = _parse(path, text, sysfs.nvidia_module_version)
    taint = "sys/module/nvidia/taint"
    flavor = _parse(taint, tree.need(taint, "the module's taint flags"), sysfs.module_flavor)
    return NvidiaDriver(version, flavor)


def _modprobe_confs(tree: Tree) -> list[str]:
    # modprobe reads only *.conf files from modprobe.d.
    return [f"etc/modprobe.d/{n}" for n in tree.listdir("etc/modprobe.d", _is_conf)]


def _is_conf(name: str) -> bool:
    return name.endswith(".conf")


def _vfio_ids(tree: Tree, cmdline: str) -> tuple[VfioIdsSetting, ...]:
    found = [
        VfioIdsSetting("proc/cmdline", ids)
        for ids in _parse("proc/cmdline", cmdline, sysfs.cmdline_vfio_ids)
    ]
    for path in _modprobe_confs(tree):
        text = tree.need(path, "a modprobe.d file")
        found += [VfioIdsSetting(path, ids) for ids in _parse(path, text, sysfs.modprobe_vfio_ids)]
    return tuple(sorted(found, key=lambda s: s.source))


def _config_files(tree: Tree) -> tuple[ConfigFile, ...]:
    paths = [f"etc/pve/lxc/{n}" for n in tree.listdir("etc/pve/lxc", _is_conf)]
    paths += [f"etc/pve/qemu-server/{n}" for n in tree.listdir("etc/pve/qemu-server", _is_conf)]
    paths += [p for p in ("etc/pve/mapping/pci.cfg", "etc/pve/storage.cfg") if tree.exists(p)]
    paths += _modprobe_confs(tree)
    # Host units: the split unit of an earlier run (the new one patches it) and any
    # hand-made unit that also moves GPUs between drivers (the planner warns).
    paths += [f"etc/systemd/system/{n}" for n in tree.listdir("etc/systemd/system", _is_unit)]
    # pvegpu's installed split script: read so a re-render patches, not replaces, it.
    paths += [p for p in (SPLIT_SCRIPT,) if tree.exists(p)]
    return tuple(ConfigFile(p, tree.need(p, "a readable file")) for p in sorted(paths))


def _is_unit(name: str) -> bool:
    return name.endswith(".service")
