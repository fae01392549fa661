"""`pvegpu check` without a plan: what can be wrong with a GPU host as it is.

Read through the root reader like discovery, so a snapshot can be checked as well as
the live host; nothing here runs a command.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import attrs

from pvegpu.errors import PvegpuError
from pvegpu.host.facts import HostFacts
from pvegpu.host.paths import CONTAINER_LIBDIRS, DPKG_STATUS, dropin_dirs
from pvegpu.host.reader import RootReader
from pvegpu.host.rootfs import STORAGE_CFG, locate_rootfs
from pvegpu.planning.plan import Finding, Severity
from pvegpu.pvefiles.guestconf import parse_lines, split_sections
from pvegpu.pvefiles.lxcconf import is_gpu_line, raw_uvm_majors
from pvegpu.pvefiles.pcicfg import parse_mappings
from pvegpu.serving.container import container_driver_state
from pvegpu.serving.unitfile import (
    UnitFile,
    environment_pairs,
    exec_words,
    launch_options,
    merge_units,
)
from pvegpu.vendors import CONTAINER_NODES, CONTAINER_USERSPACE

_TP_FLAGS = ("--tp", "--tp-size", "--tensor-parallel-size")
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


def container_rootfs(reader: RootReader, vmid: int) -> str | None:
    """The container's root file system under the root, if it is a directory there."""
    location = locate_rootfs(
        vmid, reader.read(f"etc/pve/lxc/{vmid}.conf"), reader.read(STORAGE_CFG)
    )
    if location.path is None or not reader.is_dir(location.path):
        return None
    return location.path


def serving_unit(reader: RootReader, vmid: int, unit: str) -> RunningUnit | None:
    rootfs = container_rootfs(reader, vmid)
    if rootfs is None:
        return None
    text = reader.read(f"{rootfs}/etc/systemd/system/{unit}.service")
    if text is None:
        return None
    dropins = []
    for directory in dropin_dirs(unit):
        path = f"{rootfs}/{directory}"
        if reader.is_dir(path):
            dropins += [
                reader.read(f"{path}/{n}") or ""
                for n in sorted(reader.listdir(path, lambda n: n.endswith(".conf")))
            ]
    return _running(merge_units((text, *dropins)))


def _running(merged: UnitFile) -> RunningUnit | None:
    starts = merged.values("Service", "ExecStart")
    options = launch_options(exec_words(starts[-1])) if starts else None
    if options is None:
        return None
    tp = 1
    for i, word in enumerate(options):
        flag, eq, value = word.partition("=")
        if flag in _TP_FLAGS:
            raw = value if eq else (options[i + 1] if i + 1 < len(options) else "1")
            tp = int(raw) if raw.isdigit() else tp
    env = dict(environment_pairs(merged.values("Service", "Environment")))
    return RunningUnit(tp, env.get("CUDA_VISIBLE_DEVICES"), env.get("NCCL_P2P_DISABLE") == "1")


def _units(reader: RootReader, rootfs: str) -> list[str]:
    directory = f"{rootfs}/etc/systemd/system"
    if not reader.is_dir(directory):
        return []
    return sorted(
        n.removesuffix(".service")
        for n in reader.listdir(directory, lambda n: n.endswith(".service"))
    )


def host_checks(reader: RootReader, facts: HostFacts) -> Iterator[Finding]:
    host_version = facts.nvidia.version if facts.nvidia else None
    translated = any(g.type is not None and g.type.translates for g in facts.iommu_groups)
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
        for unit in _units(reader, rootfs):
            running = serving_unit(reader, vmid, unit)
            if running is not None and running.tp > 1 and translated and not running.p2p_disabled:
                yield Finding(
                    Severity.ERROR,
                    "p2p-under-translation",
                    f"CT {vmid}:/etc/systemd/system/{unit}.service",
                    f"TP {running.tp} with P2P on while the IOMMU translates DMA: P2P transfers "
                    "corrupt or hang; set NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce",
                )
    yield from _uvm_majors(reader, facts)
    yield from _mappings(reader, facts)
    yield from _vfio_ids(facts)


def _uvm_majors(reader: RootReader, facts: HostFacts) -> Iterator[Finding]:
    """Raw-style containers allow nvidia-uvm by its major, which the kernel hands out
    when the module loads: after a driver update it can differ from the rendered rule."""
    major = facts.char_major("nvidia-uvm")
    if major is None:
        return
    for vmid in _gpu_containers(reader):
        text = reader.read(f"etc/pve/lxc/{vmid}.conf") or ""
        allowed = raw_uvm_majors(text, CONTAINER_NODES)
        if allowed is not None and major not in allowed:
            yield Finding(
                Severity.ERROR,
                "container-uvm-major-stale",
                f"etc/pve/lxc/{vmid}.conf",
                f"CT {vmid} bind-mounts /dev/nvidia-uvm but allows no `c {major}:` rule: "
                f"nvidia-uvm's major is {major} now (/proc/devices), so CUDA fails in the "
                'container; render and apply again (or use devices = "dev")',
            )


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
    functions = {str(f.address): f for f in facts.functions}
    for mapping in mappings:
        for m in mapping.maps:
            if m.node != facts.node:
                continue
            path = m.path if m.path.count(":") == 2 else f"0000:{m.path}"
            f = functions.get(path if "." in path else f"{path}.0")
            subject = f"/etc/pve/mapping/pci.cfg [{mapping.id}] {m.path}"
            if f is None:
                yield Finding(Severity.ERROR, "mapping-stale", subject, "no such device on the bus")
                continue
            wrong = []
            if m.id != f"{f.vendor:04x}:{f.device:04x}":
                wrong.append(f"id {m.id} is {f.vendor:04x}:{f.device:04x}")
            if m.iommugroup is not None and m.iommugroup != f.iommu_group:
                wrong.append(f"iommugroup {m.iommugroup} is {f.iommu_group}")
            sub = f"{f.subsystem_vendor:04x}:{f.subsystem_device:04x}"
            if m.subsystem_id is not None and m.subsystem_id != sub:
                wrong.append(f"subsystem-id {m.subsystem_id} is {sub}")
            if wrong:
                yield Finding(
                    Severity.ERROR, "mapping-stale", subject,
                    f"{'; '.join(wrong)} in sysfs: Proxmox refuses to start a guest on it",
                )  # fmt: skip


def _vfio_ids(facts: HostFacts) -> Iterator[Finding]:
    for setting in facts.vfio_ids:
        claimed: dict[str, int] = {}
        for gpu in facts.gpus:
            if setting.claimed(gpu.function):
                key = f"{gpu.function.vendor:04x}:{gpu.function.device:04x}"
                claimed[key] = claimed.get(key, 0) + 1
        for ids, count in claimed.items():
            if count > 1:
                yield Finding(
                    Severity.WARNING, "vfio-ids-identical", setting.source,
                    f"vfio-pci ids={','.join(setting.ids)} takes all {count} GPUs {ids}, "
                    "not only the VM's: bind by address instead (pvegpu's split)",
                )  # fmt: skip
