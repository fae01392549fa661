"""`pvegpu check` without a plan: what can be wrong with a GPU host as it is.

Read through the root reader like discovery, so a snapshot can be checked as well as
the live host; nothing here runs a command. No rule here is check's own: each decision
the planner also makes is the planner's function (the unit systemd runs and its
drop-ins, `effective_dropins`; its TP, `unit_demand`; P2P on the container's GPUs,
`facts_p2p`; a pci.cfg map line against sysfs, `stale_map_findings`), so check and plan
cannot disagree on a host.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import attrs

from pvegpu.apply.boot_checks import absent_node_findings, staged_userspace_findings
from pvegpu.engines.common.environment import P2P_ENV
from pvegpu.engines.sglang.dropins import effective_dropins
from pvegpu.errors import PvegpuError
from pvegpu.formats.accounts import group_ids
from pvegpu.host.reader import RootReader
from pvegpu.model.facts import GPU, ConfigFile, HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.paths import (
    CONTAINER_LIBDIRS,
    DPKG_STATUS,
    GROUP_FILE,
    SYSTEM_UNIT_PATH,
    dropin_dirs,
)
from pvegpu.model.plan import Finding, Severity
from pvegpu.model.rootfs import STORAGE_CFG, locate_rootfs
from pvegpu.planning.acs import check_findings as acs_check_findings
from pvegpu.planning.container_groups import render_group
from pvegpu.planning.driverctl import driverctl_findings
from pvegpu.planning.fabric import check_findings as fabric_check_findings
from pvegpu.planning.findings import host_findings
from pvegpu.planning.mdev import check_findings as mdev_check_findings
from pvegpu.planning.mig import check_findings as mig_check_findings
from pvegpu.planning.next_boot import (
    Userspace,
    breaks_finding,
    dynamic_major_findings,
    host_next_boot_findings,
    unchecked_finding,
)
from pvegpu.planning.numbering import next_boot_numbers
from pvegpu.planning.sriov import check_findings as sriov_check_findings
from pvegpu.planning.stale_mappings import stale_map_findings
from pvegpu.planning.unit_gpus import unit_demand
from pvegpu.planning.vgpu import check_findings as vgpu_check_findings
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.guestconf import ConfLine, parse_lines, split_sections
from pvegpu.pvefiles.lxcconf import (
    dev_gid,
    gpu_minor,
    has_userspace_mount,
    is_gpu_line,
    unprivileged,
)
from pvegpu.serving.container import container_driver_state
from pvegpu.serving.next_boot import breaks_at_reboot, next_driver
from pvegpu.serving.p2p import facts_p2p
from pvegpu.serving.unitfile import ENVIRONMENT, SERVICE, UnitFile, environment_pairs, merge_units
from pvegpu.values import value_class
from pvegpu.vendors import (
    CONTAINER_NODES,
    CONTAINER_USERSPACE,
    CONTAINER_VENDOR,
    VENDORS,
    DeviceNodes,
)
from pvegpu.vendors.drm import DRM_NODES
from pvegpu.vendors.drm import node_path as drm_node_path

_CONF = re.compile(r"(\d+)\.conf")


@value_class
@attrs.frozen(eq=False, repr=False)
class RunningUnit:
    """What a server unit runs, as systemd merges it with its drop-ins."""

    tp: int
    environment: tuple[tuple[str, str], ...]
    """Its Environment= pairs, the last of a name winning as systemd has it."""
    p2p_disabled: bool

    def variable(self, name: str) -> str | None:
        return dict(self.environment).get(name)


def _containers(reader: RootReader) -> list[int]:
    """Every container with a config on this node, by vmid."""
    names = (
        reader.listdir("etc/pve/lxc", lambda n: bool(_CONF.fullmatch(n)))
        if reader.is_dir("etc/pve/lxc")
        else []
    )
    return sorted(int(n.removesuffix(".conf")) for n in names)


def _gpu_containers(reader: RootReader) -> list[int]:
    """The containers whose config hands them GPU nodes: NVIDIA's or DRM render nodes."""
    found = []
    for vmid in _containers(reader):
        text = reader.read(f"etc/pve/lxc/{vmid}.conf") or ""
        lines = parse_lines(split_sections(text)[0].text)
        if any(is_gpu_line(ln, n) for ln in lines for n in (CONTAINER_NODES, DRM_NODES)):
            found.append(vmid)
    return found


def _node_families(facts: HostFacts) -> list[tuple[DeviceNodes, frozenset[int]]]:
    """Each family of GPU nodes a container line can name, with the minors the host's GPUs
    have in it now: every vendor's own nodes (/dev/nvidiaN), and the DRM render and card
    nodes any GPU has (an NVIDIA one too, with nvidia-drm): their minors do not overlap."""
    families = [
        (
            v.nodes,
            frozenset(m for g in facts.gpus if g.vendor is v and (m := g.node_minor) is not None),
        )
        for v in VENDORS
        if v.nodes is not None and not v.nodes.drm
    ]
    drm = {g.drm_render for g in facts.gpus} | {g.drm_card for g in facts.gpus}
    families.append((DRM_NODES, frozenset(m for m in drm if m is not None)))
    return families


def container_node_findings(reader: RootReader, facts: HostFacts) -> Iterator[Finding]:
    """Each container's GPU lines against the nodes the host's GPUs have now, and its devN
    entries' gid against its own render group: what a reboot or an image update moves.

    A node no GPU has any more (the numbering changed at boot, the GPU left its driver)
    fails the container's start with a devN entry and hands it nothing with a bind mount.
    """
    families = _node_families(facts)
    every = [n for v in VENDORS if (n := v.nodes) is not None] + [DRM_NODES]
    for vmid in _containers(reader):
        path = f"etc/pve/lxc/{vmid}.conf"
        text = reader.read(path) or ""
        lines = parse_lines(split_sections(text)[0].text)
        reported: set[str] = set()
        for nodes, have in families:
            gone = sorted({m for ln in lines if (m := gpu_minor(ln, nodes)) is not None} - have)
            if gone:
                paths = [drm_node_path(m) if nodes.drm else nodes.path(m) for m in gone]
                reported.update(paths)
                names = ", ".join(paths)
                yield Finding(
                    Severity.ERROR,
                    "container-node-missing",
                    path,
                    f"CT {vmid} names {names}, which no GPU of the host has now: the "
                    "numbering changed at boot or the GPU left its driver; the container "
                    "fails to start (devN) or gets no GPU (bind mount). Plan again",
                )
        yield from absent_node_findings(reader, vmid, path, lines, every, reported)
        yield from _node_group(reader, vmid, path, text, lines)


def _node_group(
    reader: RootReader, vmid: int, path: str, text: str, lines: Sequence[ConfLine]
) -> Iterator[Finding]:
    """An unprivileged container's DRM devN gid against its own render group now."""
    if not unprivileged(text):
        return
    drm = (ln for ln in lines if gpu_minor(ln, DRM_NODES) is not None)
    gids = {gid for ln in drm if (gid := dev_gid(ln)) is not None}
    location = locate_rootfs(vmid, text, reader.read(STORAGE_CFG))
    group = reader.read(f"{location.path}/{GROUP_FILE}") if location.path else None
    if not gids or group is None:
        return
    groups = group_ids(group)
    name = render_group(groups)
    if name is not None and gids != {groups[name][0]}:
        yield Finding(
            Severity.WARNING,
            "container-node-group-changed",
            path,
            f"CT {vmid}'s render nodes get gid {', '.join(map(str, sorted(gids)))}, but its "
            f"{name} group is {groups[name][0]} now: its users lose the GPUs unless the mode "
            "lets everyone open them. Plan again",
        )


def _container_gpus(reader: RootReader, facts: HostFacts, vmid: int) -> tuple[GPU, ...]:
    """The host's GPUs whose device nodes the container's config hands it: its pool."""
    main = split_sections(reader.read(f"etc/pve/lxc/{vmid}.conf") or "")[0]
    lines = parse_lines(main.text)
    minors = {gpu_minor(line, CONTAINER_NODES) for line in lines} - {None}
    renders = {gpu_minor(line, DRM_NODES) for line in lines} - {None}
    return tuple(g for g in facts.gpus if g.node_minor in minors or g.drm_render in renders)


def container_rootfs(reader: RootReader, vmid: int) -> str | None:
    """The container's root file system under the root, if it is a directory there."""
    location = locate_rootfs(
        vmid, reader.read(f"etc/pve/lxc/{vmid}.conf"), reader.read(STORAGE_CFG)
    )
    if location.path is None or not reader.is_dir(location.path):
        return None
    return location.path


def serving_unit(reader: RootReader, vmid: int, unit: str) -> RunningUnit | None:
    """The server `<unit>.service` runs in the container, as the planner reads a unit:
    the first file of systemd's search path with the drop-ins it applies."""
    rootfs = container_rootfs(reader, vmid)
    if rootfs is None:
        return None
    name = f"{unit}.service"
    loaded = (reader.read(f"{rootfs}/{d}/{name}") for d in SYSTEM_UNIT_PATH)
    text = next((t for t in loaded if t is not None), None)
    if text is None:
        return None
    files = [
        ConfigFile(f"{path}/{n}", reader.read(f"{path}/{n}") or "")
        for directory in dropin_dirs(unit)
        if reader.is_dir(path := f"{rootfs}/{directory}")
        for n in reader.listdir(path, lambda n: n.endswith(".conf"))
    ]
    dropins = effective_dropins(files, rootfs, unit)
    return _running(merge_units((text, *(d.text for d in dropins))))


def _running(merged: UnitFile) -> RunningUnit | None:
    servers = unit_demand(merged).servers
    if not servers:
        return None
    # A size that is no number (`${TP}` from an EnvironmentFile=) is not guessed: TP 1.
    tp = servers[-1].option("tp")
    pairs = tuple(environment_pairs(merged.values(SERVICE, ENVIRONMENT)))
    return RunningUnit(
        tp.value if tp is not None and tp.value is not None else 1,
        pairs,
        dict(pairs).get(P2P_ENV) == "1",
    )


def _units(reader: RootReader, rootfs: str) -> list[str]:
    directory = f"{rootfs}/etc/systemd/system"
    if not reader.is_dir(directory):
        return []
    return sorted(
        n.removesuffix(".service")
        for n in reader.listdir(directory, lambda n: n.endswith(".service"))
    )


def host_checks(reader: RootReader, facts: HostFacts) -> Iterator[Finding]:
    loaded = facts.gpu_driver(CONTAINER_VENDOR.host_driver)
    host_version = loaded.version if loaded else None
    # A driver upgrade installed, not yet running: judged as the planner does (next_boot.py).
    pending = next_driver(facts)
    pending = pending if pending is not None and pending.changes else None
    holders = guests(facts).vendor_containers(pending.vendor) if pending is not None else ()
    for vmid in _gpu_containers(reader):
        config = f"etc/pve/lxc/{vmid}.conf"
        text = reader.read(config) or ""
        # With the host's staged userspace its GPU programs run that, not their own.
        bypassed = has_userspace_mount(text)
        yield from staged_userspace_findings(reader, vmid, config, text, host_version)
        rootfs = container_rootfs(reader, vmid)
        if rootfs is None:
            if pending is not None and vmid in holders:
                yield unchecked_finding(vmid, _unread(reader, vmid), pending)
            continue
        libraries = [
            name
            for libdir in CONTAINER_LIBDIRS
            if reader.is_dir(f"{rootfs}/{libdir}") and not reader.through_link(f"{rootfs}/{libdir}")
            for name in reader.listdir(
                f"{rootfs}/{libdir}", lambda n: bool(CONTAINER_USERSPACE.library.match(n))
            )
        ]
        state = container_driver_state(libraries, reader.read(f"{rootfs}/{DPKG_STATUS}"))
        versions = sorted({v for _, v in (*state.libraries, *state.packages)})
        if not bypassed and host_version is not None and versions and versions != [host_version]:
            yield Finding(
                Severity.ERROR,
                "container-driver-mismatch",
                f"CT {vmid}",
                f"NVIDIA userspace {', '.join(versions)} in the container, {host_version} on the "
                "host: CUDA and NCCL fail or hang; install the host's version in the container, "
                'or give its pool userspace = "host" (the host\'s own, staged at every boot)',
            )
        elif pending is not None and breaks_at_reboot(state, pending):
            yield breaks_finding(f"CT {vmid}", vmid, Userspace(rootfs, state), pending, None)
        # The plan's P2P judgement on the plan's groups: those of the container's GPUs.
        p2p_on, _ = facts_p2p(facts, _container_gpus(reader, facts, vmid))
        for unit in _units(reader, rootfs):
            running = serving_unit(reader, vmid, unit)
            if running is not None and running.tp > 1 and not p2p_on and not running.p2p_disabled:
                yield Finding(
                    Severity.ERROR,
                    "p2p-under-translation",
                    f"CT {vmid}:/etc/systemd/system/{unit}.service",
                    f"TP {running.tp} with P2P on while the IOMMU translates DMA: P2P transfers "
                    "corrupt or hang; set NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce",
                )
    yield from container_node_findings(reader, facts)
    yield from _mappings(facts)
    yield from host_findings(facts)
    yield from host_next_boot_findings(facts, next_boot_numbers(facts, ()))
    yield from dynamic_major_findings(facts)
    yield from acs_check_findings(facts)
    yield from fabric_check_findings(facts)
    yield from driverctl_findings(facts)
    yield from mdev_check_findings(facts)
    yield from mig_check_findings(facts)
    yield from sriov_check_findings(facts)
    yield from vgpu_check_findings(facts)


def _unread(reader: RootReader, vmid: int) -> str:
    """Why a container's root file system is not a directory under the root."""
    location = locate_rootfs(
        vmid, reader.read(f"etc/pve/lxc/{vmid}.conf"), reader.read(STORAGE_CFG)
    )
    return location.why or f"/{location.path} is not a directory here"


def _mappings(facts: HostFacts) -> Iterator[Finding]:
    """pci.cfg's map lines of this node against sysfs, by the planner's rule
    (`stale_map_findings`): every line, the pools' own too (nothing rewrites them now)."""
    existing = facts.file(pcicfg.PATH)
    if existing is None:
        return
    try:
        sections = pcicfg.parse(existing.content)
    except PvegpuError as err:
        for p in err.problems:
            yield Finding(Severity.ERROR, p.code, p.subject, p.message)
        return
    yield from stale_map_findings(facts, sections, live=True)
