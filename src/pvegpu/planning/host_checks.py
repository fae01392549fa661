"""`pvegpu check`'s judgement of a host as it is, by the planner's own rules.

What discovery read of the containers, their root file systems and /dev
(`ObservedHost`, host/observed.py) is judged here with the functions the planner
decides by: a container's userspace against the host module (`container_driver_problems`,
the planner's refusal), P2P on a multi-GPU server (the planner's decision: `facts_p2p`
on the container's GPUs, or the plan's own where a plan serves the unit), the unit
systemd runs and its drop-ins (`effective_dropins`, `unit_demand`), the next boot's
driver (`next_driver`), pci.cfg against sysfs (`stale_map_findings`), and the planner's
host findings. So check and plan cannot disagree on a host: check has no rule of its own.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.engines.common.dropins import effective_dropins
from pvegpu.engines.common.environment import P2P_ENV
from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.observed import ObservedContainer, ObservedHost, ObservedUnit
from pvegpu.model.paths import NODES_UNIT_NAME, USERSPACE_CURRENT, USERSPACE_SCRIPT
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
from pvegpu.pvefiles.guestconf import LineKind
from pvegpu.pvefiles.lxcconf import (
    STAGED_USERSPACE,
    dev_gid,
    gpu_minor,
    is_gpu_line,
    node_source,
)
from pvegpu.serving.container import container_driver_problems, container_driver_state
from pvegpu.serving.next_boot import NextDriver, breaks_at_reboot, next_driver
from pvegpu.serving.p2p import facts_p2p
from pvegpu.serving.unitfile import ENVIRONMENT, SERVICE, UnitFile, environment_pairs, merge_units
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_NODES, CONTAINER_VENDOR, VENDORS, DeviceNodes
from pvegpu.vendors.drm import DRM_NODES
from pvegpu.vendors.drm import node_path as drm_node_path


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


def running_unit(observed: ObservedHost, vmid: int, unit: str) -> RunningUnit | None:
    """The server `<unit>.service` runs in the container, as the planner reads a unit:
    the first file of systemd's search path with the drop-ins the engine says it applies."""
    container = observed.container(vmid)
    if container is None or container.rootfs is None:
        return None
    found = container.unit(unit)
    return None if found is None else _running(container.rootfs, found)


def _running(rootfs: str, unit: ObservedUnit) -> RunningUnit | None:
    dropins = effective_dropins(unit.dropins, rootfs, unit.name)
    merged: UnitFile = merge_units((unit.text, *(d.text for d in dropins)))
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


def host_checks(
    facts: HostFacts, observed: ObservedHost, planned: Collection[tuple[int, str]] = ()
) -> Iterator[Diagnostic]:
    """Everything check reports of the host as it is. `planned`: the (vmid, unit) of the
    servers a plan decides; their P2P is the plan's, compared by check with the unit."""
    loaded = facts.gpu_driver(CONTAINER_VENDOR.host_driver)
    host_version = loaded.version if loaded else None
    # A driver upgrade installed, not yet running: judged as the planner does (next_boot.py).
    pending = next_driver(facts)
    pending = pending if pending is not None and pending.changes else None
    for container in (c for c in observed.containers if c.gpu):
        yield from _container_checks(facts, observed, container, host_version, pending, planned)
    yield from container_node_findings(facts, observed)
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


def _container_checks(
    facts: HostFacts,
    observed: ObservedHost,
    container: ObservedContainer,
    host_version: str | None,
    pending: NextDriver | None,
    planned: Collection[tuple[int, str]],
) -> Iterator[Diagnostic]:
    vmid = container.vmid
    # With the host's staged userspace its GPU programs run that, not their own.
    bypassed = container.host_userspace
    yield from staged_userspace_findings(observed, container, host_version)
    rootfs = container.rootfs
    if rootfs is None:
        if pending is not None and pending.vendor.name in container.vendors:
            yield unchecked_finding(vmid, container.unread, pending)
        return
    state = container_driver_state(container.libraries, container.dpkg_status)
    mismatch = (
        container_driver_problems(state, host_version, rootfs=rootfs, vmid=vmid)
        if not bypassed and host_version is not None and state.versions
        else ()
    )
    for problem in mismatch:
        # The planner's refusal, as check's finding: its message and the fix it names.
        yield Diagnostic(
            Severity.ERROR, problem.code, f"CT {vmid}", f"{problem.message}. Fix: {problem.fix}"
        )
    if not mismatch and pending is not None and breaks_at_reboot(state, pending):
        yield breaks_finding(f"CT {vmid}", vmid, Userspace(rootfs, state), pending, None)
    # The plan's P2P judgement on the plan's groups: those of the container's GPUs. A
    # unit a plan serves has the plan's P2P (a spec's p2p and p2p_reason included):
    # check compares it with the plan (`serving-p2p-on`), not with the facts alone.
    p2p_on, _ = facts_p2p(facts, _container_gpus(facts, container))
    for unit in container.units:
        if (vmid, unit) in planned:
            continue
        running = running_unit(observed, vmid, unit)
        if running is not None and running.tp > 1 and not p2p_on and not running.p2p_disabled:
            yield Diagnostic(
                Severity.ERROR,
                "p2p-under-translation",
                f"CT {vmid}:/etc/systemd/system/{unit}.service",
                f"TP {running.tp} with P2P on while the IOMMU translates DMA: P2P transfers "
                "corrupt or hang; set NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce",
            )


def _container_gpus(facts: HostFacts, container: ObservedContainer) -> tuple[GPU, ...]:
    """The host's GPUs whose device nodes the container's config hands it: its pool."""
    minors = {gpu_minor(line, CONTAINER_NODES) for line in container.lines} - {None}
    renders = {gpu_minor(line, DRM_NODES) for line in container.lines} - {None}
    return tuple(g for g in facts.gpus if g.node_minor in minors or g.drm_render in renders)


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


def container_node_findings(facts: HostFacts, observed: ObservedHost) -> Iterator[Diagnostic]:
    """Each container's GPU lines against the nodes the host's GPUs have now, and its devN
    entries' gid against its own render group: what a reboot or an image update moves.

    A node no GPU has any more (the numbering changed at boot, the GPU left its driver)
    fails the container's start with a devN entry and hands it nothing with a bind mount.
    """
    families = _node_families(facts)
    every = [n for v in VENDORS if (n := v.nodes) is not None] + [DRM_NODES]
    for container in observed.containers:
        vmid, path, lines = container.vmid, container.config, container.lines
        reported: set[str] = set()
        for nodes, have in families:
            gone = sorted({m for ln in lines if (m := gpu_minor(ln, nodes)) is not None} - have)
            if gone:
                paths = [drm_node_path(m) if nodes.drm else nodes.path(m) for m in gone]
                reported.update(paths)
                names = ", ".join(paths)
                yield Diagnostic(
                    Severity.ERROR,
                    "container-node-missing",
                    path,
                    f"CT {vmid} names {names}, which no GPU of the host has now: the "
                    "numbering changed at boot or the GPU left its driver; the container "
                    "fails to start (devN) or gets no GPU (bind mount). Plan again",
                )
        yield from absent_node_findings(observed, container, every, reported)
        yield from _node_group(container)


def _node_group(container: ObservedContainer) -> Iterator[Diagnostic]:
    """An unprivileged container's DRM devN gid against its own render group now."""
    if not container.unprivileged:
        return
    drm = (ln for ln in container.lines if gpu_minor(ln, DRM_NODES) is not None)
    gids = {gid for ln in drm if (gid := dev_gid(ln)) is not None}
    if not gids or container.groups is None:
        return
    groups = dict(container.groups)
    name = render_group(groups)
    if name is not None and gids != {groups[name]}:
        yield Diagnostic(
            Severity.WARNING,
            "container-node-group-changed",
            container.config,
            f"CT {container.vmid}'s render nodes get gid {', '.join(map(str, sorted(gids)))}, "
            f"but its {name} group is {groups[name]} now: its users lose the GPUs unless "
            "the mode lets everyone open them. Plan again",
        )


def absent_node_findings(
    observed: ObservedHost,
    container: ObservedContainer,
    families: Sequence[DeviceNodes],
    reported: Collection[str],
) -> Iterator[Diagnostic]:
    """Each GPU line of the container's main section whose node does not exist under the
    root's /dev; `reported`: nodes another finding already names (a GPU's node by a number
    no GPU has now). A root without /dev (a snapshot, a fixture tree) has none to see."""
    if not observed.has_dev:
        return
    vmid = container.vmid
    for number, line in enumerate(container.lines, start=1):
        node = node_source(line)
        if node is None or node in reported or node == STAGED_USERSPACE:
            continue
        family = next((n for n in families if is_gpu_line(line, n)), None)
        if family is None or node in container.present_nodes:
            continue
        devn = line.kind is LineKind.KEY
        effect = (
            f"`pct start {vmid}` fails"
            if devn
            else "the container starts without it (a bind mount of a missing node)"
        )
        command = family.make_command(node)
        how = (
            f"`{' '.join(command)}` makes it; {NODES_UNIT_NAME} does so at every boot "
            "before guests start once a plan with this container is applied"
            if command is not None
            else "it appears once its driver holds the GPU (a MIG instance's node, once "
            "the instance is made again)"
        )
        yield Diagnostic(
            Severity.ERROR,
            "device-node-missing",
            f"{container.config} line {number}",
            f"CT {vmid}'s {line.key} names {node}, which does not exist on the host: "
            f"{effect}. {how}",
        )


def staged_userspace_findings(
    observed: ObservedHost, container: ObservedContainer, host_version: str | None
) -> Iterator[Diagnostic]:
    """A container bind-mounting the staged host userspace gets the loaded module's
    version: `current` must point at it (the boot unit ran since the last driver change)."""
    if not container.host_userspace or host_version is None:
        return
    staged = observed.staged_link
    if staged == host_version and observed.staged_is_dir:
        return
    now = f"is {staged}" if staged else "holds none"
    yield Diagnostic(
        Severity.ERROR,
        "host-userspace-stale",
        f"/{USERSPACE_CURRENT}",
        f"CT {container.vmid} bind-mounts the host's staged driver userspace "
        f"({container.config}), which {now}, while the loaded module is {host_version}: the "
        "container fails to start (nothing staged) or its server fails CUDA init (another "
        f"version). Run `/{USERSPACE_SCRIPT} stage` (its journal says why the boot unit did "
        f"not), then restart CT {container.vmid}",
    )


def _mappings(facts: HostFacts) -> Iterator[Diagnostic]:
    """pci.cfg's map lines of this node against sysfs, by the planner's rule
    (`stale_map_findings`): every line, the pools' own too (nothing rewrites them now)."""
    existing = pci_cfg(facts)
    if existing.file is None:
        return
    if existing.error is not None:
        for p in existing.error.problems:
            yield Diagnostic(Severity.ERROR, p.code, p.subject, p.message)
        return
    yield from stale_map_findings(facts, existing.sections, live=True)
