"""MIG in a pool's container: the capability nodes of its MIG instances stay.

A container that uses MIG instances holds, besides its GPU's node, the capability node
of each instance (and usually the host-wide `config`/`monitor` ones). When the pool
rewrites the container's GPU lines, those nodes are GPU lines too; without them CUDA in
the container sees no MIG device. So the new lines keep exactly the capability nodes the
container holds that belong to the pool's GPUs (their instances, by the driver's
procfs, `HostFacts.mig_caps`) and the host-wide ones it holds; a node of a GPU the
container no longer gets goes, and the plan says so; a node discovery cannot place (no
such instance now) is refused, since which GPU it meant is unknown.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import GPU, HostFacts, MigCap
from pvegpu.model.guests import guests
from pvegpu.model.plan import LxcContainer
from pvegpu.model.released import ContainerGpusRemoved
from pvegpu.model.schema import DeviceStyle
from pvegpu.pvefiles import lxccaps
from pvegpu.pvefiles.lxcconf import GpuLines
from pvegpu.vendors import VENDORS
from pvegpu.vendors.partitions import MigSource


def _tool(mig: MigSource) -> str:
    """The listing tool of the vendor whose MIG this is (it also creates instances)."""
    vendor = next(v for v in VENDORS if v.mig is mig)
    return vendor.tool.name if vendor.tool is not None else "the vendor's tool"


def _unknown(
    facts: HostFacts, mig: MigSource, held: lxccaps.CapsHeld, vmid: int, path: str
) -> Diagnostic | None:
    """`lxc-mig-caps-unknown`: capability nodes a container holds that no MIG instance the
    driver lists now has."""
    known = {c.minor for c in facts.mig_caps}
    unknown = sorted(m for m in held.minors if m not in known)
    if not unknown:
        return None
    nodes = ", ".join(mig.path(m) for m in unknown)
    return Diagnostic.error(
        "lxc-mig-caps-unknown",
        path,
        f"CT {vmid} holds {nodes}, which no MIG instance the driver lists now has "
        f"(/{mig.capabilities}): which GPU's instance it meant is unknown, so rewriting its "
        "GPU lines would drop it or keep a stale grant",
        f"create the MIG instances it uses ({_tool(mig)} mig -cgi <profiles> -C) and "
        "discover again, or remove the line from the container; then run pvegpu again",
    )


def _no_caps(
    facts: HostFacts, mig: MigSource, container: LxcContainer, gpus: Sequence[GPU]
) -> Iterator[Diagnostic]:
    """`lxc-mig-without-caps`: a pool GPU has MIG instances and the container holds none
    of their capability nodes, so CUDA in it sees no device of that GPU. Which instance
    it should use is the admin's choice, so nothing is added."""
    for gpu in gpus:
        caps = [c for c in facts.mig_caps if c.gpu_minor == gpu.node_minor]
        if gpu.node_minor is None or not caps:
            continue
        listed = ", ".join(_name(c, mig.path(c.minor)) for c in caps)
        yield Diagnostic(
            Severity.WARNING,
            "lxc-mig-without-caps",
            container.config_path,
            f"{gpu.address.short} ({gpu.node_path}) is in MIG mode with instances, and CT "
            f"{container.vmid} holds none of their capability nodes: CUDA in it sees no device "
            f"of that GPU. Give it the nodes of the instance it should use, the GPU "
            f"instance's and its compute instance's (pct set {container.vmid} --dev<N> <node>; "
            f"these are {listed}), then plan again",
        )


def check_findings(facts: HostFacts) -> Iterator[Diagnostic]:
    """`pvegpu check`: the containers holding capability nodes of no MIG instance (CUDA
    in them sees no MIG device there), by the plan's rule."""
    for mig in (v.mig for v in VENDORS if v.mig is not None):
        caps_major = facts.char_major(mig.major_name)
        for vmid, file in guests(facts).containers:
            held = guests(facts).config(file).caps_held(mig, caps_major)
            problem = _unknown(facts, mig, held, vmid, file.path)
            if problem is not None:
                yield Diagnostic(Severity.ERROR, problem.code, problem.subject, problem.message)


def _name(cap: MigCap, mig_path: str) -> str:
    return f"{mig_path} ({cap.name})"


def mig_lines(
    facts: HostFacts,
    container: LxcContainer,
    gpus: Sequence[GPU],
    lines: GpuLines,
    problems: list[Diagnostic],
    findings: list[Diagnostic],
) -> GpuLines:
    """The container's new GPU lines with the MIG capability nodes it keeps."""
    vendors = {g.vendor for g in gpus if g.vendor is not None}
    mig = next((v.mig for v in vendors if v.mig is not None), None)
    if mig is None or container.config is None:
        return lines
    caps_major = facts.char_major(mig.major_name)
    held = guests(facts).config(container.config).caps_held(mig, caps_major)
    if not held.any:
        findings.extend(_no_caps(facts, mig, container, gpus))
        return lines
    path = container.config_path
    by_minor = {c.minor: c for c in facts.mig_caps}
    unknown = _unknown(facts, mig, held, container.vmid, path)
    if unknown is not None:
        problems.append(unknown)
        return lines
    minors = {g.node_minor for g in gpus if g.node_minor is not None}
    held_caps = list(facts.mig_caps) if held.every else [by_minor[m] for m in held.minors]
    own = sorted((c for c in held_caps if c.gpu_minor in minors), key=lambda c: c.minor)
    host_wide = sorted((c for c in held_caps if c.gpu_minor is None), key=lambda c: c.minor)
    # The host-wide nodes (config, monitor) only with an instance of its GPUs to use them on.
    kept = [c.minor for c in (host_wide if own else [])] + [c.minor for c in own]
    # A bind of every node never made other GPUs' instances the container's own.
    dropped = [c for c in (host_wide if held.every else held_caps) if c.minor not in kept]
    if container.devices is DeviceStyle.RAW and caps_major is None and kept:
        problems.append(
            Diagnostic.error(
                "mig-caps-major-unknown",
                path,
                f"raw device lines for CT {container.vmid}'s MIG capability nodes need the "
                f"{mig.major_name} major, but /proc/devices has none",
                f"create the MIG capability nodes (they register the {mig.major_name} major) "
                'and discover again, or use devices = "dev"',
            )
        )
        return lines
    if kept:
        named = ", ".join(_name(by_minor[m], mig.path(m)) for m in kept)
        findings.append(
            Diagnostic(
                Severity.INFO,
                "lxc-mig-caps-kept",
                path,
                f"CT {container.vmid} uses MIG: its GPU lines keep the capability nodes of "
                f"its instances on the pool's GPUs, {named}"
                + (
                    f" (its bind of all of {mig.directory} becomes one line per node)"
                    if held.every
                    else ""
                ),
            )
        )
    if dropped:
        gone = ", ".join(_name(c, mig.path(c.minor)) for c in dropped)
        findings.append(
            Diagnostic(
                Severity.WARNING,
                "lxc-mig-caps-dropped",
                path,
                f"CT {container.vmid} loses MIG capability nodes it holds: {gone}. They are "
                "of MIG instances on GPUs the pool does not give it (config and monitor stay "
                "only with an instance of its GPUs), so CUDA in it sees none of those "
                "instances afterwards; to keep them, put their GPU in the pool",
            )
        )
    caps = lxccaps.caps_lines(
        mig,
        kept,
        container.devices,
        mode=container.mode,
        gid=container.gid,
        caps_major=caps_major,
        written=held.entries,
    )
    return lxccaps.with_caps(lines, caps)


def with_lost_caps(
    facts: HostFacts, removed: tuple[ContainerGpusRemoved, ...]
) -> tuple[tuple[ContainerGpusRemoved, ...], list[Diagnostic]]:
    """Each other container that loses GPUs but keeps some, with the capability nodes it
    holds of the lost GPUs' MIG instances (and the host-wide ones, once it holds no other
    instance) to remove along. A container that keeps no GPU loses every GPU line, these
    included, already (`shared_majors`). The findings say which nodes go."""
    out = []
    findings: list[Diagnostic] = []
    for container in removed:
        mig = next((v.mig for v in VENDORS if v.nodes is container.nodes and v.mig), None)
        if mig is None or container.shared_majors is not None:
            out.append(container)
            continue
        caps_major = facts.char_major(mig.major_name)
        held = guests(facts).config(container.config).caps_held(mig, caps_major)
        by_minor = {c.minor: c for c in facts.mig_caps}
        caps = [by_minor[m] for m in sorted(held.minors) if m in by_minor]
        lost = {c.minor for c in caps if c.gpu_minor in container.minors}
        if any(c.gpu_minor is not None and c.minor not in lost for c in caps):
            gone = sorted(lost)
        else:
            gone = sorted(lost | {c.minor for c in caps if c.gpu_minor is None})
        if not lost:
            out.append(container)
            continue
        removal = lxccaps.CapsRemoval(mig, tuple(gone), caps_major)
        out.append(attrs.evolve(container, mig_caps=removal))
        names = ", ".join(_name(by_minor[m], mig.path(m)) for m in gone)
        findings.append(
            Diagnostic(
                Severity.WARNING,
                "lxc-mig-caps-dropped",
                container.config_path,
                f"CT {container.vmid} loses MIG capability nodes with the GPUs it loses: "
                f"{names}; the revert puts them back",
            )
        )
    return tuple(out), findings
