"""The host files the serving checks look at, read through the root reader into the facts.

A spec's paths (model config, container rootfs) are root-relative; every read goes through
`pvegpu.host.reader.RootReader`, so a link pointing out of the root (absolute or `../..`)
is resolved inside it like any other, and a file that is not there inside the root reads
as missing (the serving checks then report it), never as the outside file.

The container's root file system is found from its `rootfs:` line and storage.cfg
(`model/rootfs.py`); the spec's `container_rootfs` is read too when it names another path.
In it, the files of the serving engine's installed release are the engine's to name
(`InstalledFiles`, which the caller takes from `pvegpu.engines`): this reads them through
its reader for the engine, and imports none.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

from pvegpu.host.reader import RootReader, Trace
from pvegpu.model.decision import ServingFiles
from pvegpu.model.facts import ConfigFile, FileStat, HostFacts
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.guests import guests
from pvegpu.model.paths import (
    CONTAINER_LIBDIRS,
    DPKG_STATUS,
    GROUP_FILE,
    HOME_DEPTH,
    HOME_DIRS,
    OTHER_UNIT_DIRS,
    PASSWD_FILE,
    SYSTEM_UNIT_PATH,
    dropin_dirs,
    engine_config_path,
    root_relative,
)
from pvegpu.model.rootfs import STORAGE_CFG, locate_rootfs, rootfs_dirs
from pvegpu.model.schema import ServingSpec, Spec
from pvegpu.vendors import (
    CONTAINER_USERSPACE,
    LOCKED_MODULE_VENDORS,
    RUNTIME_MODULE_FILES,
    RUNTIME_RELEASE_FILES,
    Vendor,
)

InstalledFiles = Callable[[RootReader, ServingSpec, str], Iterable[ConfigFile]]
"""How the caller asks a serving's engine which files of the container whose root file
system is the `str` its installed release is read from, read through the reader
(`pvegpu.engines.installed_files`): an engine is above host/, so host/ is handed it."""

MASKED = "/dev/null"
"""A unit file or drop-in linked here is masked (systemd.unit(5))."""


def _is_shard(name: str) -> bool:
    return name.endswith(".safetensors")


def _is_library(name: str) -> bool:
    return CONTAINER_USERSPACE.library.fullmatch(name) is not None


def _is_dropin(name: str) -> bool:
    return name.endswith(".conf")


class _Found:
    """The files and sizes read so far, each path once."""

    def __init__(self, reader: RootReader) -> None:
        self.reader = reader
        self.files: dict[str, ConfigFile] = {}
        self.stats: dict[str, FileStat] = {}

    def add(self, rel: str) -> None:
        if rel not in self.files and (text := self.reader.read(rel)) is not None:
            self.files[rel] = ConfigFile(rel, text)

    def add_text(self, rel: str, text: str) -> None:
        self.files.setdefault(rel, ConfigFile(rel, text))

    def add_sizes(self, directory: str, keep: Callable[[str], bool]) -> None:
        for name in self.reader.listdir(directory, keep):
            rel = f"{directory}/{name}"
            if (size := self.reader.size(rel)) is not None:
                self.stats[rel] = FileStat(rel, size)


def read_serving_files(
    root: Path, spec: Spec, installed: InstalledFiles, *, trace: Trace | None = None
) -> ServingFiles:
    """Read what the servings of `spec` check: model config/index/shards, container files,
    and what `installed` says the engine reads of its release there."""
    return read_serving(RootReader(root, trace), spec, installed)


def read_serving(reader: RootReader, spec: Spec, installed: InstalledFiles) -> ServingFiles:
    """`read_serving_files` on a reader the caller keeps (one reading with discovery).

    The only I/O of serving checks; everything else takes the facts this returns.
    """
    found = _Found(reader)
    if any(p.lxc is not None and p.lxc.serving is not None for p in spec.pools):
        # The host module a container's runtime release is named beside.
        for module_file in RUNTIME_MODULE_FILES:
            found.add(module_file)
    for pool in spec.pools:
        if pool.lxc is not None:
            _add_groups(found, pool.lxc.vmid)
        serving = pool.lxc.serving if pool.lxc else None
        if pool.lxc is None or serving is None:
            continue
        try:
            model_config = root_relative(serving.model_config) if serving.model_config else None
            rootfs = root_relative(serving.container_rootfs) if serving.container_rootfs else None
        except ValueError:
            continue  # the serving checks report the path
        if model_config is not None:
            found.add(model_config)
            model_dir = posixpath.dirname(model_config)
            found.add(f"{model_dir}/model.safetensors.index.json")
            if reader.is_dir(model_dir):
                found.add_sizes(model_dir, _is_shard)
        for directory in _rootfs_candidates(reader, pool.lxc.vmid, rootfs):
            _read_container(found, directory, serving.unit)
            _add_engine_config(found, directory, serving)
            _add_python(found, directory, serving.python)
            for file in installed(reader, serving, directory):
                found.files.setdefault(file.path, file)
    return ServingFiles(tuple(found.files.values()), tuple(found.stats.values()))


def _add_groups(found: _Found, vmid: int) -> None:
    """An unprivileged container's /etc/group: the gid its device nodes get inside
    (planning/container_groups.py). A privileged one's ids are the host's: not read."""
    reader = found.reader
    path = f"etc/pve/lxc/{vmid}.conf"
    config = reader.read(path)
    if config is None or not GuestConfig(ConfigFile(path, config)).unprivileged:
        return
    location = locate_rootfs(vmid, config, reader.read(STORAGE_CFG))
    # Also where `pct mount` puts it, which the refusal's fix asks for on block storage.
    for directory in rootfs_dirs(vmid, location):
        found.add(f"{directory}/{GROUP_FILE}")


def _rootfs_candidates(reader: RootReader, vmid: int, spec_rootfs: str | None) -> list[str]:
    """Where the container's files may be: its storage's directory, then the spec's path.

    Both are read when they differ; the serving checks use the first that has files
    (`serving.container.container_rootfs`), so a subvolume that is not mounted falls back
    to the spec's path.
    """
    candidates: list[str] = []
    config = reader.read(f"etc/pve/lxc/{vmid}.conf")
    location = locate_rootfs(vmid, config, reader.read(STORAGE_CFG))
    if location.path is not None:
        candidates.append(location.path)
    if spec_rootfs is not None and spec_rootfs not in candidates:
        candidates.append(spec_rootfs)
    return candidates


def _read_container(found: _Found, rootfs: str, unit_name: str) -> None:
    """The driver files, the unit wherever systemd finds it, its drop-ins and its copies."""
    reader = found.reader
    found.add(f"{rootfs}/{DPKG_STATUS}")
    for release in RUNTIME_RELEASE_FILES:
        found.add(f"{rootfs}/{release}")
    # Whether the unit's user may open the GPU nodes (`serving.node_access`).
    found.add(f"{rootfs}/{GROUP_FILE}")
    found.add(f"{rootfs}/{PASSWD_FILE}")
    _add_libraries(found, rootfs)
    unit = f"{unit_name}.service"
    for directory_name in dict.fromkeys((*SYSTEM_UNIT_PATH, *OTHER_UNIT_DIRS)):
        rel_dir = f"{rootfs}/{directory_name}"
        if not reader.through_link(rel_dir):
            _add_unit_file(found, rootfs, f"{rel_dir}/{unit}")
    for directory_name in dropin_dirs(unit_name):
        rel_dir = f"{rootfs}/{directory_name}"
        if reader.through_link(rel_dir) or not reader.is_dir(rel_dir):
            continue
        for name in reader.listdir(rel_dir, _is_dropin):
            _add_unit_file(found, rootfs, f"{rel_dir}/{name}")
    for home in HOME_DIRS:
        for rel in reader.find(f"{rootfs}/{home}", unit, HOME_DEPTH):
            found.add(rel)


MAX_CONFIG_BYTES = 1024 * 1024
"""An engine's `--config` YAML is a few lines; a larger one is not read."""


def _add_engine_config(found: _Found, rootfs: str, serving: ServingSpec) -> None:
    """The `--config FILE.yaml` the spec's extra_args pass to the engine, at its path in
    the container (relative: under the unit's WorkingDirectory=), for the sizes it sets."""
    words = serving.extra_args
    paths = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--config"]
    paths += [w.partition("=")[2] for w in words if w.startswith("--config=")]
    for path in paths:
        inside = engine_config_path(path, serving.working_directory)
        if inside is None:
            continue
        rel = f"{rootfs}/{inside.lstrip('/')}"
        size = found.reader.size(rel)
        if size is not None and size <= MAX_CONFIG_BYTES:
            found.add(rel)


def upgrading_vendors(facts: HostFacts) -> tuple[Vendor, ...]:
    """The vendors whose loaded driver the next boot replaces by another known version
    (`HostFacts.boot.kernels`), of those whose userspace is locked to it."""
    found = []
    for vendor in LOCKED_MODULE_VENDORS:
        module = facts.boot.kernels.module(vendor.host_driver)
        loaded = facts.gpu_driver(vendor.host_driver)
        if module is None or loaded is None:
            continue
        if module.version not in (None, loaded.version):
            found.append(vendor)
    return tuple(found)


def read_next_boot_userspace(reader: RootReader, facts: HostFacts) -> ServingFiles:
    """The userspace of every container holding GPU nodes of a driver the next boot
    replaces by another version (its dpkg status and the names of its libraries), for
    the planner to judge against that boot (`planning/next_boot.py`). Nothing while no
    such upgrade is pending."""
    vendors = upgrading_vendors(facts)
    if not vendors:
        return ServingFiles((), ())
    found = _Found(reader)
    for vmid in sorted({v for vendor in vendors for v in guests(facts).vendor_containers(vendor)}):
        # Its storage's directory, else where `pct mount` puts a block volume's files.
        for directory in rootfs_dirs(vmid, guests(facts).rootfs(vmid)):
            found.add(f"{directory}/{DPKG_STATUS}")
            _add_libraries(found, directory)
    return ServingFiles(tuple(found.files.values()), tuple(found.stats.values()))


def _add_libraries(found: _Found, rootfs: str) -> None:
    """The names and sizes of the container's NVIDIA libraries (their versions)."""
    for libdir in CONTAINER_LIBDIRS:
        # A symlinked libdir (merged-/usr `lib -> usr/lib`) is an alias of one read anyway.
        directory = f"{rootfs}/{libdir}"
        if not found.reader.through_link(directory) and found.reader.is_dir(directory):
            found.add_sizes(directory, _is_library)


def _add_python(found: _Found, rootfs: str, python: str) -> None:
    """The unit's interpreter, as a size 0 at its spec path, when the container has that
    name; nothing when it does not, and the serving checks then warn.

    The name is not followed: a venv's `python3 -> /usr/bin/python3.12` points into the
    container, which only the container resolves. A snapshot carries the name as an empty
    file (an absolute link cannot be unpacked safely), so its size is never used: 0.
    """
    reader = found.reader
    rel = f"{rootfs}/{python.lstrip('/')}"
    real = reader.resolve(rel, follow=False)
    if real is None:
        return
    if reader.trace is not None and real not in reader.trace.dirs:
        reader.trace.sized.add(real)
    found.stats.setdefault(rel, FileStat(rel, 0))


def _add_unit_file(found: _Found, rootfs: str, rel: str) -> None:
    """A unit or drop-in, its link resolved inside the container; a masked one reads empty.

    A drop-in linked to /dev/null sets nothing and hides the drop-ins of the same name
    further down the search path, exactly what an empty file does, so the facts get an
    empty file (the link itself is in the trace; the host's /dev/null, a device, is never
    opened). An absolute link target is a path inside the container, not on the host.
    """
    target = found.reader.readlink(rel)
    if target == MASKED:
        found.add_text(rel, "")
    elif target is not None and target.startswith("/"):
        text = found.reader.read(f"{rootfs}/{target.lstrip('/')}", subject=rel)
        if text is not None:
            found.add_text(rel, text)
    else:
        found.add(rel)


def add_serving_files(facts: HostFacts, found: ServingFiles) -> HostFacts:
    """`facts` plus the serving files found, those discovery read already kept once."""
    have = {f.path for f in facts.files}
    have_stats = {s.path for s in facts.stats}
    return attrs.evolve(
        facts,
        files=(*facts.files, *(f for f in found.files if f.path not in have)),
        stats=(*facts.stats, *(s for s in found.stats if s.path not in have_stats)),
    )


def with_serving_files(
    facts: HostFacts, root: Path, spec: Spec, installed: InstalledFiles
) -> HostFacts:
    """`facts` plus what `read_serving_files` finds (call between discover and plan)."""
    return add_serving_files(facts, read_serving_files(root, spec, installed))
