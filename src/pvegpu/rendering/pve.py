"""The Proxmox renderers: container configs, the cluster PCI mapping, VM configs.

Each is `Plan -> tuple[Artifact, ...]` and patches the file discovery read (kept whole
in the facts), so an artifact's `base` is exactly what the patch was computed from.
Problems of every pool are collected and raised together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

import attrs

from pvegpu.errors import Problem, RenderError
from pvegpu.hardware import NVIDIA_MAJOR
from pvegpu.host.facts import HostFacts, NumaNode
from pvegpu.planning.plan import PciMapping, Plan, Pool
from pvegpu.pvefiles import lxcconf, pcicfg, qemuconf
from pvegpu.pvefiles.guestconf import split_sections
from pvegpu.rendering.artifact import REVIEW, Artifact
from pvegpu.spec.schema import DeviceStyle
from pvegpu.wording import plural

PVE_MODE = 0o640
"""pmxcfs shows every file under /etc/pve as 0640 root:www-data, whatever is written."""
SNIPPET_DIR = "snippets/qemu-server"
"""Review-only lines for VMs that do not exist yet: pvegpu never writes a guest config
that Proxmox did not create, and /etc/pve is no place for side files."""


T = TypeVar("T")


def _collect(pools: Iterable[Pool], build: Callable[[Pool], T | None]) -> list[T]:
    """Run `build` on every pool, raising all problems together instead of the first."""
    results: list[T] = []
    problems: list[Problem] = []
    for pool in pools:
        try:
            result = build(pool)
        except RenderError as error:
            problems.extend(error.problems)
            continue
        if result is not None:
            results.append(result)
    if problems:
        raise RenderError(problems)
    return results


def nvidia_majors(facts: HostFacts) -> frozenset[int]:
    """195 plus every NVIDIA char major in /proc/devices (nvidia-uvm, nvidia-caps, ...)."""
    named = {c.major for c in facts.char_majors if c.name.startswith("nvidia")}
    return frozenset({NVIDIA_MAJOR, *named})


def _count_gpu_lines(text: str, majors: frozenset[int]) -> int:
    main = split_sections(text)[0]
    return sum(lxcconf.is_gpu_line(line, majors) for line in main.lines)


def _serving_cpus(facts: HostFacts, pool: Pool) -> NumaNode | None:
    """The NUMA node whose CPUs the container's serving unit is pinned to, if any.

    The same rule as the unit's CPUAffinity: a serving section and all GPUs on one node
    that the facts know CPUs of. Then the container's cpuset must hold those CPUs, or
    systemd cannot apply the affinity inside it.
    """
    nodes = set(pool.numa_nodes)
    if pool.serving is None or len(nodes) != 1 or None in nodes:
        return None
    node = next((n for n in facts.numa_nodes if n.id in nodes), None)
    return node if node is not None and node.cpus else None


def render_lxc_configs(plan: Plan) -> tuple[Artifact, ...]:
    """One patched etc/pve/lxc/<vmid>.conf per container pool."""
    facts = plan.facts
    majors = nvidia_majors(facts)
    uvm_major = facts.char_major("nvidia-uvm")

    def build(pool: Pool) -> Artifact | None:
        container = pool.lxc
        if container is None:
            return None
        if container.config is None:
            raise RenderError.one(
                "lxc-config-missing",
                container.config_path,
                f"container {container.vmid} does not exist on {facts.node}",
                f"create the container first (pct create {container.vmid} ...); pvegpu "
                "edits containers, Proxmox creates them",
            )
        lines = lxcconf.gpu_lines(
            pool.gpus,
            container.devices,
            mode=container.mode,
            gid=container.gid,
            uvm_major=uvm_major,
            subject=container.config_path,
        )
        numa = _serving_cpus(facts, pool)
        cpuset = numa.cpus if numa is not None else None
        base = container.config.content
        content = lxcconf.patch_gpu_lines(base, lines, majors, cpuset=cpuset)
        nodes = ", ".join(f"nvidia{g.nvidia_minor}" for g in pool.gpus)
        if content == base:
            reason = f"LXC {container.vmid} already has exactly these GPU lines ({nodes})"
            if numa is not None:
                reason += f" and CPU set (NUMA node {numa.id})"
        else:
            style = "devN entries" if container.devices is DeviceStyle.DEV else "raw lxc.* lines"
            old = _count_gpu_lines(base, majors)
            reason = (
                f"LXC {container.vmid}: GPUs {nodes} + nvidiactl, nvidia-uvm, nvidia-uvm-tools "
                f"as {style}, replacing {plural(old, 'old GPU line')}"
            )
            if numa is not None:
                reason += (
                    f"; {lxcconf.CPUSET}: {numa.cpus} pins the container to NUMA node "
                    f"{numa.id}, the serving unit's CPUAffinity"
                )
            reason += "; other lines and snapshots kept"
        cores = lxcconf.cores(content)
        if numa is not None and cores is not None and cores > len(numa.cpus):
            # The pinned cpuset caps the container at the node's CPUs whatever `cores` says.
            reason += (
                f"; cores: {cores} > {len(numa.cpus)} CPUs of NUMA node {numa.id}: lower cores"
            )
        if container.devices is DeviceStyle.DEV and uvm_major is None:
            # Proxmox stats each devN node at start; a missing /dev/nvidia-uvm fails it.
            reason += "; nvidia-uvm is not loaded: load it before starting the container"
        return Artifact(container.config_path, content, reason, PVE_MODE, base=container.config)

    return tuple(_collect(plan.lxc_pools, build))


def _pool_mapping(facts: HostFacts, pool: Pool) -> PciMapping | None:
    mapping = pool.mapping
    if mapping is None:
        return None
    if not mapping.maps:
        built = pcicfg.mapping_for_pool(facts, pool, mapping.id, mapping.description)
        mapping = attrs.evolve(mapping, maps=built.maps)
    if mapping.mdev is None and any(g.function.mdev_capable for g in pool.gpus):
        # Proxmox refuses to start a VM on an mdev-capable device mapped without `mdev 1`.
        mapping = attrs.evolve(mapping, mdev=True)
    return mapping


def render_pci_cfg(plan: Plan) -> tuple[Artifact, ...]:
    """etc/pve/mapping/pci.cfg with every pool's mapping; nothing when no pool has one."""
    facts = plan.facts
    mappings = _collect(plan.pools, lambda pool: _pool_mapping(facts, pool))
    if not mappings:
        return ()
    twice = [i for i, n in Counter(m.id for m in mappings).items() if n > 1]
    if twice:
        raise RenderError(
            Problem(
                "mapping-id-twice",
                f"{pcicfg.PATH} mapping {mapping_id!r}",
                "two pools name the same mapping; a VM would get GPUs of either pool",
                "give each pool its own mapping id",
            )
            for mapping_id in twice
        )
    base = facts.file(pcicfg.PATH)
    if base is None:
        content = pcicfg.format(mappings)
        dropped: tuple[int, ...] = ()
    else:
        content = pcicfg.patch(base.content, mappings)
        dropped = pcicfg.comment_lines(base.content)
    summary = ", ".join(f"{m.id} ({plural(len(m.maps), 'device')})" for m in mappings)
    if base is not None and content == base.content:
        reason = f"PCI mappings {summary} on {facts.node} are already as planned"
    else:
        reason = f"PCI mappings {summary} on {facts.node}, from discovered sysfs values"
    if dropped:
        reason += f"; drops {plural(len(dropped), '# comment line')}, as every Proxmox write does"
    return (Artifact(pcicfg.PATH, content, reason, PVE_MODE, base=base),)


def _numa_pin(facts: HostFacts, pool: Pool, subject: str) -> qemuconf.NumaPin:
    nodes = set(pool.numa_nodes)
    node = next(iter(nodes)) if len(nodes) == 1 else None
    numa = next((n for n in facts.numa_nodes if n.id == node), None)
    if node is None or numa is None:
        raise RenderError.one(
            "vm-numa-ambiguous",
            subject,
            f"NUMA pinning needs the pool's GPUs on one known node; they are on "
            f"{', '.join('unknown' if n is None else str(n) for n in pool.numa_nodes)}",
            "select GPUs of one NUMA node for this pool, or set numa = false for the VM",
        )
    return qemuconf.NumaPin(numa.id, numa.cpus)


def _span(indices: tuple[int, ...]) -> str:
    return ", ".join(f"hostpci{i}" for i in indices)


def render_vm_configs(plan: Plan) -> tuple[Artifact, ...]:
    """Patched etc/pve/qemu-server/<vmid>.conf per VM pool, or a review snippet if absent."""
    facts = plan.facts

    def build(pool: Pool) -> Artifact | None:
        vm = pool.vm
        if vm is None:
            return None
        if pool.mapping is None:
            raise RenderError.one(
                "vm-without-mapping",
                f"pool {pool.name!r}",
                f"VM {vm.vmid} gets its GPUs through a PCI mapping, and the pool has none",
                f'add mapping = {{ id = "{pool.name}" }} to the pool',
            )
        pin = _numa_pin(facts, pool, vm.config_path) if vm.numa else None
        if vm.config is None:
            text = qemuconf.snippet(vm.vmid, pool.mapping.id, pool.size, pin, facts.node)
            return Artifact(
                f"{SNIPPET_DIR}/{vm.vmid}.conf",
                text,
                f"VM {vm.vmid} does not exist: lines to add once it is created (q35)",
                target=REVIEW,
            )
        mapping = _pool_mapping(facts, pool)
        assert mapping is not None  # pool.mapping is set, checked above; for mypy
        # What the mapping hands over on this node, exactly as pci.cfg will say it: a raw
        # hostpci line for one of these devices is the same device a second time.
        mapped = [m.path for m in mapping.maps if m.node == facts.node]
        patched = qemuconf.patch_hostpci(
            vm.config.content,
            pool.mapping.id,
            pool.size,
            numa=pin,
            mapped=mapped,
            subject=vm.config_path,
        )
        reason = f"VM {vm.vmid}: {_span(patched.indices)} use mapping {pool.mapping.id}"
        reason += ", pcie=1" if patched.pcie else ""
        if patched.converted:
            # A raw hostpci line disappears from the diff: say that it became the mapping.
            reason += (
                f"; raw host address of the pool's GPU on {_span(patched.converted)} "
                "replaced by the mapping, options kept"
            )
        if pin is not None:
            reason += f"; pinned to NUMA node {pin.hostnode} (numa0, affinity {pin.cpus})"
        if not patched.pcie:
            reason += (
                f"; no pcie=1: the machine is not q35 (qm set {vm.vmid} --machine q35 "
                "for PCIe passthrough)"
            )
        if patched.text == vm.config.content:
            reason = f"VM {vm.vmid} already uses mapping {pool.mapping.id} as planned"
        return Artifact(vm.config_path, patched.text, reason, PVE_MODE, base=vm.config)

    return tuple(_collect(plan.vfio_pools, build))
