"""Discovery of every GPU reference on the host (`model/references.py`), in one pass.

Reads what the references are in: the guest configs discovery already holds, the scripts
their hooks and hookscripts run, and the host's udev rules, units, modprobe.d,
sysfs.conf, driverctl overrides and CDI specs; resolves each through one `GpuIndex`. A
file it cannot read, or cannot tie to a GPU, becomes a reference marked `unresolved`
with the reason: the planner names those, never passes them over. The cgroup hierarchy
the host boots decides which cgroup key is live (the other is marked `inert`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

from pvegpu.errors import DiscoveryError, RenderError
from pvegpu.host import host_references as on_host
from pvegpu.host.cdi_specs import CDI_DIRS, cdi_references
from pvegpu.host.gpu_index import GpuIndex
from pvegpu.host.guest_references import container_references, vm_references
from pvegpu.host.reader import RootReader
from pvegpu.host.script_scan import ReadScript
from pvegpu.model.facts import GPU, CharMajor, ConfigFile, DriverctlOverride, MigCap, PciFunction
from pvegpu.model.references import CgroupVersion, GpuReference
from pvegpu.pci import PciAddress
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.storagecfg import Storage, parse_storage_cfg

_LXC = re.compile(r"^etc/pve/lxc/([0-9]+)\.conf$")
_QEMU = re.compile(r"^etc/pve/qemu-server/([0-9]+)\.conf$")
_SCRIPT_LIMIT = 1 << 20
"""Scripts larger than this are not read for references (a hook is a few KiB)."""
# Where pve-storage mounts a file storage that names no `path` of its own.
_MOUNTED_STORAGES = ("nfs", "cifs", "cephfs", "glusterfs")
_FILE_STORAGES = ("dir", "btrfs", *_MOUNTED_STORAGES)
_UNIFIED_OFF = re.compile(r"(?:^|\s)systemd\.unified_cgroup_hierarchy=(?:0|false|no|off)(?:\s|$)")


def read_cgroup(reader: RootReader, cmdline: str) -> CgroupVersion:
    """The hierarchy holding the devices controller: v2 when /sys/fs/cgroup is the
    unified hierarchy, v1 when a devices controller of its own is mounted there (legacy
    or hybrid); read from the command line where the snapshot has no /sys/fs/cgroup."""
    if reader.exists("sys/fs/cgroup/cgroup.controllers"):
        return CgroupVersion.V2
    if reader.is_dir("sys/fs/cgroup/devices"):
        return CgroupVersion.V1
    return CgroupVersion.V1 if _UNIFIED_OFF.search(cmdline) else CgroupVersion.V2


def read_references(
    reader: RootReader,
    *,
    node: str,
    gpus: Iterable[GPU],
    functions: Iterable[PciFunction],
    mig_caps: Iterable[MigCap],
    char_majors: Iterable[CharMajor],
    files: Iterable[ConfigFile],
    driverctl: Iterable[DriverctlOverride],
    cgroup: CgroupVersion,
) -> tuple[GpuReference, ...]:
    """Every GPU reference of the host under the reader's root."""
    functions = tuple(functions)
    index = GpuIndex(gpus, functions, mig_caps, char_majors, _mdev_parents(reader))
    files = tuple(files)
    by_path = {f.path: f.content for f in files}
    found: list[GpuReference] = []

    def script(path: str) -> ReadScript:
        rel = path.lstrip("/")
        try:
            size = reader.size(rel)
            data = None if size is None or size > _SCRIPT_LIMIT else reader.read_bytes(rel)
        except DiscoveryError as err:
            # A FIFO, a directory, a link loop where a script should be: named, not fatal.
            return ReadScript(None, rel, err.problems[0].message)
        if size is None:
            return ReadScript(None, rel, f"no such file under the root: {path}")
        if size > _SCRIPT_LIMIT:
            return ReadScript(None, rel, f"{size} bytes, more than a script pvegpu reads")
        if data is None:
            return ReadScript(None, rel, f"not a readable file: {path}")
        if b"\0" in data:
            return ReadScript(None, rel, "a binary program, not a script pvegpu can read")
        return ReadScript(_text(data), rel)

    def dev_link(path: str) -> str | None:
        return reader.readlink(path.lstrip("/")) if path.startswith("/dev/dri/by-") else None

    mappings = _MappingPaths(by_path.get(pcicfg.PATH), node)
    storages = parse_storage_cfg(by_path.get("etc/pve/storage.cfg", ""))

    def hookscript(volume: str) -> ReadScript:
        location = _volume_path(volume, storages)
        if location.startswith("!"):
            return ReadScript(None, volume, location[1:])
        return script(location)

    for file in files:
        if (ct := _LXC.match(file.path)) is not None:
            found += container_references(
                file.path, int(ct[1]), file.content, index, cgroup, script, dev_link
            )
        elif (vm := _QEMU.match(file.path)) is not None:
            found += vm_references(
                file.path, int(vm[1]), file.content, index, mappings, hookscript, script
            )
    units = [
        (f.path, f.content)
        for f in files
        if f.path.startswith("etc/systemd/system/") and f.path.endswith(".service")
    ]
    found += on_host.unit_references(units, index, script)
    modprobe = [(f.path, f.content) for f in files if f.path.startswith("etc/modprobe.d/")]
    found += on_host.modprobe_references(modprobe, index, functions)
    found += on_host.driverctl_references(driverctl, index)
    found += on_host.cmdline_references(_read_file(reader, on_host.CMDLINE) or "", index, functions)
    found += on_host.udev_references(
        _read_dir(reader, on_host.UDEV_DIR, ".rules"), index, functions
    )
    sysfs = _read_dir(reader, on_host.SYSFS_DIR, ".conf")
    if (text := _read_file(reader, on_host.SYSFS_CONF)) is not None:
        sysfs.insert(0, (on_host.SYSFS_CONF, text))
    found += on_host.sysfs_references(sysfs, index)
    cdi = [f for d in CDI_DIRS for f in _read_dir(reader, d, (".yaml", ".yml", ".json"))]
    found += cdi_references(cdi, index)
    return tuple(found)


_MDEV_DEVICES = "sys/bus/mdev/devices"


def _mdev_parents(reader: RootReader) -> dict[str, PciAddress]:
    """Each mediated device's UUID -> the PCI function it lives under (its link's
    parent directory), for `args:` lines that pass one by its sysfs path."""
    found: dict[str, PciAddress] = {}
    for uuid in reader.listdir(_MDEV_DEVICES):
        try:
            real = reader.directory(f"{_MDEV_DEVICES}/{uuid}")
        except DiscoveryError:
            continue
        parent = (real or "").rpartition("/")[0].rpartition("/")[2]
        try:
            found[uuid.lower()] = PciAddress.parse(parent)
        except ValueError:
            continue  # a parent that is no PCI function, or a dangling link
    return found


def _read_dir(
    reader: RootReader, directory: str, suffix: str | tuple[str, ...]
) -> list[tuple[str, str]]:
    """The texts of a directory's files of a kind. What is no regular file (a FIFO, a
    directory named like one) is passed over, as udev and sysfsutils pass it over; bytes
    that are not UTF-8 (a Latin-1 comment) do not hide the rest of the file."""
    names = reader.listdir(directory, lambda n: n.endswith(suffix))
    texts = [(f"{directory}/{n}", _read_file(reader, f"{directory}/{n}")) for n in names]
    return [(p, t) for p, t in texts if t is not None]


def _read_file(reader: RootReader, path: str) -> str | None:
    """`_read_dir` of one file: None when it is missing or no regular file."""
    try:
        data = reader.read_bytes(path)
    except DiscoveryError:
        return None
    return None if data is None else _text(data)


def _text(data: bytes) -> str:
    """A host file's bytes as text: UTF-8, any other byte replaced (U+FFFD)."""
    return data.decode(errors="replace")


class _MappingPaths:
    """pci.cfg's map line paths of this node by mapping id, parsed on first use. A file
    pvegpu cannot parse leaves every mapping line unresolved rather than failing
    discovery: the planner refuses such a file where it matters."""

    __slots__ = ("_node", "_paths", "_text")

    def __init__(self, text: str | None, node: str) -> None:
        self._text, self._node = text, node
        self._paths: dict[str, tuple[str, ...]] | None = None

    def __call__(self, mapping_id: str) -> tuple[str, ...] | None:
        if self._paths is None:
            try:
                sections = pcicfg.parse(self._text or "")
            except RenderError:
                sections = ()
            self._paths = {
                s.id: tuple(m.get("path") or "" for m in s.maps if m.node == self._node)
                for s in sections
            }
        return self._paths.get(mapping_id)


def _volume_path(volume: str, storages: dict[str, Storage]) -> str:
    """The host path of a `hookscript:` volume (`local:snippets/gpu.sh`); `!why` when it
    has none pvegpu can read."""
    storage_id, sep, name = volume.partition(":")
    if not sep or not name.startswith("snippets/") or ".." in name.split("/"):
        return f"!{volume!r} is not a snippets volume (<storage>:snippets/<file>)"
    storage = storages.get(storage_id)
    if storage is None:
        return f"!storage {storage_id} is not in storage.cfg"
    if storage.type not in _FILE_STORAGES:
        return f"!storage {storage_id} is {storage.type} storage, which holds no files"
    base = storage.get("path")
    if base is None and storage.type in _MOUNTED_STORAGES:
        base = f"/mnt/pve/{storage_id}"
    if base is None:
        return f"!storage {storage_id} names no path"
    return posixpath.join(base, name)
