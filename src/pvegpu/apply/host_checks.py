"""`pvegpu check` without a plan: what can be wrong with a GPU host as it is.

Read through the root reader like discovery, so a snapshot can be checked as well as
the live host; nothing here runs a command. No rule here is check's own: each decision
the planner also makes is the planner's function (the unit systemd runs and its
drop-ins, `effective_dropins`; its TP, `unit_demand`; P2P on the container's GPUs,
`facts_p2p`; a pci.cfg path, `HostId`), so check and plan cannot disagree on a host.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import attrs

from pvegpu.engines.common.environment import P2P_ENV
from pvegpu.engines.sglang.dropins import effective_dropins
from pvegpu.errors import PvegpuError
from pvegpu.host.reader import RootReader
from pvegpu.host.rootfs import STORAGE_CFG, locate_rootfs
from pvegpu.model.facts import GPU, ConfigFile, HostFacts, PciFunction
from pvegpu.model.paths import CONTAINER_LIBDIRS, DPKG_STATUS, SYSTEM_UNIT_PATH, dropin_dirs
from pvegpu.model.plan import Finding, Severity
from pvegpu.planning.acs import check_findings as acs_check_findings
from pvegpu.planning.driverctl import driverctl_findings
from pvegpu.planning.fabric import check_findings as fabric_check_findings
from pvegpu.planning.findings import host_findings
from pvegpu.planning.mdev import check_findings as mdev_check_findings
from pvegpu.planning.mig import check_findings as mig_check_findings
from pvegpu.planning.sriov import check_findings as sriov_check_findings
from pvegpu.planning.unit_gpus import VISIBLE, unit_demand
from pvegpu.pvefiles.guestconf import parse_lines, split_sections
from pvegpu.pvefiles.hostpci import host_ids
from pvegpu.pvefiles.lxcconf import gpu_minor, is_gpu_line
from pvegpu.pvefiles.pcicfg import PciMap, parse_mappings
from pvegpu.serving.container import container_driver_state
from pvegpu.serving.p2p import facts_p2p
from pvegpu.serving.unitfile import ENVIRONMENT, SERVICE, UnitFile, environment_pairs, merge_units
from pvegpu.vendors import CONTAINER_NODES, CONTAINER_USERSPACE, CONTAINER_VENDOR

_CONF = re.compile(r"(\d+)\.conf")


@attrs.frozen
class RunningUnit:
    """What a server unit runs, as systemd merges it with its drop-ins."""

    tp: int
    visible: str | None
    p2p_disabled: bool


def _gpu_containers(reader: RootReader) -> list[int]:
    names = (
        reader.listdir("etc/pve/lxc", lambda n: bool(_CONF.fullmatch(n)))
        if reader.is_dir("etc/pve/lxc")
        else []
    )
    found = []
    for name in sorted(names):
        text = reader.read(f"etc/pve/lxc/{name}") or ""
        main = split_sections(text)[0]
        if any(is_gpu_line(line, CONTAINER_NODES) for line in parse_lines(main.text)):
            found.append(int(name.removesuffix(".conf")))
    return found


def _container_gpus(reader: RootReader, facts: HostFacts, vmid: int) -> tuple[GPU, ...]:
    """The host's GPUs whose device nodes the container's config hands it: its pool."""
    main = split_sections(reader.read(f"etc/pve/lxc/{vmid}.conf") or "")[0]
    minors = {gpu_minor(line, CONTAINER_NODES) for line in parse_lines(main.text)}
    return tuple(g for g in facts.gpus if g.node_minor is not None and g.node_minor in minors)


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
    env = dict(environment_pairs(merged.values(SERVICE, ENVIRONMENT)))
    return RunningUnit(
        tp.value if tp is not None and tp.value is not None else 1,
        env.get(VISIBLE),
        env.get(P2P_ENV) == "1",
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
    for vmid in _gpu_containers(reader):
        rootfs = container_rootfs(reader, vmid)
        if rootfs is None:
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
        if host_version is not None and versions and versions != [host_version]:
            yield Finding(
                Severity.ERROR,
                "container-driver-mismatch",
                f"CT {vmid}",
                f"NVIDIA userspace {', '.join(versions)} in the container, {host_version} on the "
                "host: CUDA and NCCL fail or hang; install the host's version in the container",
            )
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
    yield from _mappings(reader, facts)
    yield from host_findings(facts)
    yield from acs_check_findings(facts)
    yield from fabric_check_findings(facts)
    yield from driverctl_findings(facts)
    yield from mdev_check_findings(facts)
    yield from mig_check_findings(facts)
    yield from sriov_check_findings(facts)


def _mappings(reader: RootReader, facts: HostFacts) -> Iterator[Finding]:
    text = reader.read("etc/pve/mapping/pci.cfg")
    if text is None:
        return
    try:
        mappings = parse_mappings(text)
    except PvegpuError as err:
        for p in err.problems:
            yield Finding(Severity.ERROR, p.code, p.subject, p.message)
        return
    functions = {
        (f.address.domain, f.address.bus, f.address.device, f.address.function): f
        for f in facts.functions
    }
    for mapping in mappings:
        for m in mapping.maps:
            if m.node != facts.node:
                continue
            # A path as pci.cfg and hostpci spell it (domain optional, `;` lists); a slot
            # is judged by its function 0, whose ids Proxmox checks.
            hosts = host_ids([m.path])
            found = [functions.get((h.domain, h.bus, h.device, h.function or 0)) for h in hosts]
            subject = f"/etc/pve/mapping/pci.cfg [{mapping.id}] {m.path}"
            if not found or None in found:
                yield Finding(Severity.ERROR, "mapping-stale", subject, "no such device on the bus")
                continue
            wrong = list(dict.fromkeys(w for f in found if f is not None for w in _stale(m, f)))
            if wrong:
                yield Finding(
                    Severity.ERROR, "mapping-stale", subject,
                    f"{'; '.join(wrong)} in sysfs: Proxmox refuses to start a guest on it",
                )  # fmt: skip


def _stale(m: PciMap, f: PciFunction) -> Iterator[str]:
    """What of map line `m` no longer matches the function it names."""
    if m.id != f"{f.vendor:04x}:{f.device:04x}":
        yield f"id {m.id} is {f.vendor:04x}:{f.device:04x}"
    if m.iommugroup is not None and m.iommugroup != f.iommu_group:
        yield f"iommugroup {m.iommugroup} is {f.iommu_group}"
    sub = f"{f.subsystem_vendor:04x}:{f.subsystem_device:04x}"
    if m.subsystem_id is not None and m.subsystem_id != sub:
        yield f"subsystem-id {m.subsystem_id} is {sub}"
