"""Reading what `pvegpu check` judges beyond the facts (model/observed.py): each
container's GPU lines, root file system (NVIDIA libraries, dpkg database, render group,
server units and their drop-in files), the device nodes under /dev, the staged userspace.

Read through the root reader like discovery, so a snapshot can be checked as well as the
live host. Nothing here decides: the planner's rules judge it (planning/host_checks.py).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from pvegpu.formats.accounts import group_ids
from pvegpu.host.reader import RootReader
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.guests import guests
from pvegpu.model.observed import ObservedContainer, ObservedHost, ObservedUnit
from pvegpu.model.paths import (
    CONTAINER_LIBDIRS,
    DPKG_STATUS,
    GROUP_FILE,
    SYSTEM_UNIT_PATH,
    USERSPACE_CURRENT,
    dropin_dirs,
)
from pvegpu.model.rootfs import STORAGE_CFG, locate_rootfs
from pvegpu.pvefiles.lxcconf import STAGED_USERSPACE, is_gpu_line, node_source
from pvegpu.vendors import CONTAINER_NODES, CONTAINER_USERSPACE, VENDORS
from pvegpu.vendors.drm import DRM_NODES

_CONF = re.compile(r"(\d+)\.conf")


def read_observed(
    reader: RootReader, facts: HostFacts, units: Mapping[int, Collection[str]] | None = None
) -> ObservedHost:
    """Every container of the node as check judges it; `units`: further units by vmid
    (a bundle's servers) to read as systemd loads them."""
    holders = {v.name: set(guests(facts).vendor_containers(v)) for v in VENDORS}
    has_dev = reader.is_dir("dev")
    containers = tuple(
        _container(reader, facts, vmid, holders, has_dev, (units or {}).get(vmid, ()))
        for vmid in _vmids(reader)
    )
    link = reader.readlink(USERSPACE_CURRENT)
    return ObservedHost(containers, has_dev, link, reader.is_dir(USERSPACE_CURRENT))


def _vmids(reader: RootReader) -> list[int]:
    names = (
        reader.listdir("etc/pve/lxc", lambda n: bool(_CONF.fullmatch(n)))
        if reader.is_dir("etc/pve/lxc")
        else []
    )
    return sorted(int(n.removesuffix(".conf")) for n in names)


def _container(
    reader: RootReader,
    facts: HostFacts,
    vmid: int,
    holders: Mapping[str, set[int]],
    has_dev: bool,
    wanted: Collection[str],
) -> ObservedContainer:
    # Its config as discovery read it (the facts' guests, parsed once); read here only
    # where the facts lack it (facts not of this reader), an absent one as empty.
    config = f"etc/pve/lxc/{vmid}.conf"
    parsed = guests(facts).container(vmid)
    if parsed is not None:
        location = guests(facts).rootfs(vmid)
    else:
        text = reader.read(config)
        parsed = GuestConfig(ConfigFile(config, text or ""))
        location = locate_rootfs(vmid, text, reader.read(STORAGE_CFG))
    lines = parsed.main
    gpu = any(is_gpu_line(ln, n) for ln in lines for n in (CONTAINER_NODES, DRM_NODES))
    group = reader.read(f"{location.path}/{GROUP_FILE}") if location.path else None
    rootfs = location.path if location.path and reader.is_dir(location.path) else None
    unread = location.why or f"/{location.path} is not a directory here"
    every = [n for v in VENDORS if (n := v.nodes) is not None] + [DRM_NODES]
    nodes = {
        node
        for ln in lines
        if (node := node_source(ln)) is not None
        and node != STAGED_USERSPACE
        and any(is_gpu_line(ln, n) for n in every)
    }
    present = frozenset(n for n in nodes if has_dev and reader.exists(n.lstrip("/")))
    libraries: list[str] = []
    status = None
    units: list[str] = []
    loaded: list[ObservedUnit] = []
    if rootfs is not None:
        libraries = [
            name
            for libdir in CONTAINER_LIBDIRS
            if reader.is_dir(f"{rootfs}/{libdir}") and not reader.through_link(f"{rootfs}/{libdir}")
            for name in reader.listdir(
                f"{rootfs}/{libdir}", lambda n: bool(CONTAINER_USERSPACE.library.match(n))
            )
        ]
        status = reader.read(f"{rootfs}/{DPKG_STATUS}")
        units = _units(reader, rootfs) if gpu else []
        for name in dict.fromkeys((*units, *wanted)):
            unit = _unit(reader, rootfs, name)
            if unit is not None:
                loaded.append(unit)
    return ObservedContainer(
        vmid=vmid,
        config=config,
        lines=lines,
        unprivileged=parsed.unprivileged,
        host_userspace=parsed.host_userspace,
        gpu=gpu,
        vendors=tuple(sorted(v for v, vmids in holders.items() if vmid in vmids)),
        rootfs=rootfs,
        unread=unread,
        groups=None if group is None else tuple((n, g) for n, (g, _) in group_ids(group).items()),
        libraries=tuple(libraries),
        dpkg_status=status,
        units=tuple(units),
        loaded=tuple(loaded),
        present_nodes=present,
    )


def _units(reader: RootReader, rootfs: str) -> list[str]:
    directory = f"{rootfs}/etc/systemd/system"
    if not reader.is_dir(directory):
        return []
    return sorted(
        n.removesuffix(".service")
        for n in reader.listdir(directory, lambda n: n.endswith(".service"))
    )


def _unit(reader: RootReader, rootfs: str, unit: str) -> ObservedUnit | None:
    """`<unit>.service` as systemd finds it: the first file of its search path, and the
    `.conf` files of its drop-in directories."""
    name = f"{unit}.service"
    loaded = (reader.read(f"{rootfs}/{d}/{name}") for d in SYSTEM_UNIT_PATH)
    text = next((t for t in loaded if t is not None), None)
    if text is None:
        return None
    files = tuple(
        ConfigFile(f"{path}/{n}", reader.read(f"{path}/{n}") or "")
        for directory in dropin_dirs(unit)
        if reader.is_dir(path := f"{rootfs}/{directory}")
        for n in reader.listdir(path, lambda n: n.endswith(".conf"))
    )
    return ObservedUnit(unit, text, files)
