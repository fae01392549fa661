"""plan(facts, spec) -> Plan: select each pool's GPUs and check every invariant at once.

Pure: no I/O. Everything the renderers need (existing config files included) is
already in the facts, so a plan can be made for a host from its snapshot anywhere.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

import attrs

from pvegpu.errors import PlanError, Problem, RenderError
from pvegpu.hardware import VFIO_DRIVER, host_driver
from pvegpu.host.facts import GPU, HostFacts, PciFunction
from pvegpu.pci import PciAddress
from pvegpu.planning.findings import plan_findings
from pvegpu.planning.plan import (
    Finding,
    LxcContainer,
    Plan,
    Pool,
    PoolKind,
    VmGuest,
)
from pvegpu.pvefiles.pcicfg import mapping_for_pool
from pvegpu.serving import serving_findings
from pvegpu.spec.schema import PoolSpec, Spec


def plan(facts: HostFacts, spec: Spec) -> Plan:
    """Turn facts + spec into a Plan, or raise PlanError listing every problem found."""
    problems: list[Problem] = []
    if spec.node != facts.node:
        problems.append(
            Problem(
                "node-mismatch",
                "node",
                f"the spec is for node {spec.node!r} but the host is {facts.node!r}",
                f'set node = "{facts.node}" or point --root at the right host',
            )
        )
    selections = _select(facts, spec, problems)
    problems.extend(_overlaps(spec, selections))
    pools: list[Pool] = []
    for index, (pool_spec, gpus) in enumerate(zip(spec.pools, selections, strict=True)):
        if gpus:
            pool, pool_problems = _build_pool(facts, pool_spec, f"pools[{index}]", gpus)
            pools.append(pool)
            problems.extend(pool_problems)
    problems.extend(_vfio_ids_problems(facts, pools))
    if problems:
        raise PlanError(problems)
    result = Plan(
        facts=facts, spec=spec, pools=tuple(pools), findings=tuple(plan_findings(facts, pools))
    )
    # Serving checks (TP vs heads, memory fit, container driver, P2P) need the whole
    # plan; they raise PlanError themselves and otherwise add their findings.
    return with_findings(result, serving_findings(result))


def _select(facts: HostFacts, spec: Spec, problems: list[Problem]) -> list[tuple[GPU, ...]]:
    """Each pool's GPUs in PCI order; `count` pools take what the others left, in order."""
    selections: list[tuple[GPU, ...]] = [() for _ in spec.pools]
    for i, pool in enumerate(spec.pools):
        where = f"pools[{i}]"
        if pool.numa_node is not None:
            selections[i] = tuple(g for g in facts.gpus if g.numa_node == pool.numa_node)
            if not selections[i]:
                nodes = sorted({g.numa_node for g in facts.gpus if g.numa_node is not None})
                problems.append(
                    Problem(
                        "pool-empty",
                        f"{where}.numa_node",
                        f"no GPU of this host is on NUMA node {pool.numa_node}",
                        f"GPUs are on NUMA nodes {nodes or 'none (firmware gives no node)'}",
                    )
                )
        elif pool.gpus is not None:
            selections[i] = tuple(_explicit(facts, pool.gpus, where, problems))
    claimed = {g.address for sel in selections for g in sel}
    for i, pool in enumerate(spec.pools):
        if pool.count is None:
            continue
        free = [g for g in facts.gpus if g.address not in claimed]
        if len(free) < pool.count:
            problems.append(
                Problem(
                    "not-enough-gpus",
                    f"pools[{i}].count",
                    f"asks for {pool.count} GPUs but only {len(free)} are not in another pool",
                    f"lower count to {len(free)} or free GPUs from another pool",
                )
            )
        selections[i] = tuple(free[: pool.count])
        claimed.update(g.address for g in selections[i])
    return selections


def _explicit(
    facts: HostFacts, texts: Iterable[str], where: str, problems: list[Problem]
) -> Iterator[GPU]:
    for j, text in enumerate(texts):
        address = PciAddress.parse_lenient(text)  # the spec loader validated the syntax
        gpu = facts.gpu(address)
        if gpu is not None:
            yield gpu
            continue
        function = facts.function(address)
        message = (
            f"{address} is a {function.vendor_device} of class {function.pci_class:#08x}, "
            "not a display controller"
            if function
            else f"{address} is not on this host"
        )
        problems.append(
            Problem(
                "address-not-a-gpu" if function else "address-not-on-host",
                f"{where}.gpus[{j}]",
                message,
                "GPUs here: " + ", ".join(g.address.short for g in facts.gpus),
            )
        )


def _overlaps(spec: Spec, selections: list[tuple[GPU, ...]]) -> Iterator[Problem]:
    owners: dict[PciAddress, list[str]] = defaultdict(list)
    for pool, gpus in zip(spec.pools, selections, strict=True):
        for gpu in gpus:
            owners[gpu.address].append(pool.name)
    for address, names in sorted(owners.items()):
        if len(names) > 1:
            yield Problem(
                "gpu-in-two-pools",
                str(address),
                f"is selected by pools {', '.join(repr(n) for n in names)}",
                "a GPU can serve one pool: narrow the selectors (numa_node, gpus, count)",
            )


def _build_pool(
    facts: HostFacts, spec: PoolSpec, where: str, gpus: tuple[GPU, ...]
) -> tuple[Pool, list[Problem]]:
    problems: list[Problem] = []
    kind = PoolKind.VFIO if spec.vfio is not None else PoolKind.LXC
    if kind is PoolKind.VFIO:
        functions = _vfio_functions(facts, gpus, where, problems)
        driver = VFIO_DRIVER
    else:
        functions = tuple(sorted(f for g in gpus for f in g.functions))
        drivers = {host_driver(g.function) for g in gpus}
        driver = ", ".join(sorted(d or "?" for d in drivers))
    lxc = _lxc(facts, spec, where, gpus, problems)
    vm = None
    if spec.vfio is not None and spec.vfio.vm is not None:
        vmid = spec.vfio.vm.vmid
        vm = VmGuest(vmid, spec.vfio.vm.numa, facts.file(f"etc/pve/qemu-server/{vmid}.conf"))
    pool = Pool(
        name=spec.name,
        kind=kind,
        gpus=gpus,
        functions=functions,
        driver=driver,
        numa_nodes=tuple(sorted({g.numa_node for g in gpus}, key=lambda n: -1 if n is None else n)),
        lxc=lxc,
        vm=vm,
        serving=spec.lxc.serving if spec.lxc else None,
    )
    # Without an IOMMU a vfio pool is already refused (no-iommu); no second report.
    if spec.mapping is not None and (facts.iommu.enabled or kind is PoolKind.LXC):
        try:
            mapping = mapping_for_pool(facts, pool, spec.mapping.id, spec.mapping.description)
        except RenderError as err:
            problems.extend(err.problems)
        else:
            pool = attrs.evolve(pool, mapping=mapping)
    return pool, problems


def _vfio_functions(
    facts: HostFacts, gpus: tuple[GPU, ...], where: str, problems: list[Problem]
) -> tuple[PciFunction, ...]:
    """Every non-bridge member of each GPU's IOMMU group: VFIO takes groups, not devices."""
    if not facts.iommu.enabled:
        problems.append(
            Problem(
                "no-iommu",
                where,
                "this host has no active IOMMU (/sys/class/iommu is empty), so vfio-pci "
                "passthrough is impossible",
                "enable it in firmware (VT-d / AMD-Vi) and on the kernel command line "
                "(intel_iommu=on), reboot, and plan again",
            )
        )
        return tuple(sorted(f for g in gpus for f in g.functions))
    own = {f.address for g in gpus for f in g.functions}
    members: dict[PciAddress, PciFunction] = {}
    for gpu in gpus:
        group = facts.group(gpu.iommu_group) if gpu.iommu_group is not None else None
        if group is None:
            problems.append(
                Problem(
                    "gpu-without-iommu-group",
                    str(gpu.address),
                    "has no IOMMU group although the IOMMU is on",
                    "check the firmware's IOMMU/ACS settings for this slot",
                )
            )
            continue
        for address in group.members:
            function = facts.function(address)
            if function is None or function.is_bridge:
                continue
            if address not in own:
                problems.append(
                    Problem(
                        "foreign-device-in-group",
                        str(gpu.address),
                        f"IOMMU group {group.id} also holds {address} "
                        f"({function.vendor_device}, class {function.pci_class:#08x}, "
                        f"driver {function.driver or 'none'}); passing the GPU through would "
                        "take that device away from the host",
                        "move the GPU to a slot with its own group (or enable ACS in firmware); "
                        "never use pcie_acs_override on a host that matters",
                    )
                )
            members[address] = function
    return tuple(members[a] for a in sorted(members))


def _lxc(
    facts: HostFacts, spec: PoolSpec, where: str, gpus: tuple[GPU, ...], problems: list[Problem]
) -> LxcContainer | None:
    if spec.lxc is None:
        return None
    vmid = spec.lxc.vmid
    config = facts.file(f"etc/pve/lxc/{vmid}.conf")
    if config is None:
        problems.append(
            Problem(
                "lxc-config-missing",
                f"etc/pve/lxc/{vmid}.conf",
                f"container {vmid} does not exist on this node",
                f"create it first (pct create {vmid} ...); pvegpu edits containers, "
                "Proxmox creates them",
            )
        )
    for gpu in gpus:
        if not gpu.is_nvidia:
            problems.append(
                Problem(
                    "lxc-gpu-not-nvidia",
                    str(gpu.address),
                    f"is a {gpu.vendor_device}; only NVIDIA device nodes are handed to "
                    "containers so far",
                    "give this GPU to a vfio pool, or leave it out of the container's pool",
                )
            )
        elif gpu.nvidia_minor is None:
            problems.append(
                Problem(
                    "gpu-minor-unknown",
                    str(gpu.address),
                    f"is on {gpu.driver or 'no driver'}, so its /dev/nvidiaN minor is unknown "
                    "(nvidia assigns it when it binds)",
                    "return it to nvidia first (pvegpu-vfio-split revert), then plan again",
                )
            )
    return LxcContainer(vmid, spec.lxc.devices, spec.lxc.mode, spec.lxc.gid, config)


def _vfio_ids_problems(facts: HostFacts, pools: list[Pool]) -> Iterator[Problem]:
    """`vfio-pci ids=` claims by vendor:device: it would take host-side twins too."""
    host_side = [g for p in pools if p.kind is PoolKind.LXC for g in p.gpus]
    for setting in facts.vfio_ids:
        for gpu in host_side:
            hit = sorted({i for f in gpu.functions for i in setting.claimed(f)})
            if hit:
                yield Problem(
                    "vfio-ids-grab-host-gpu",
                    setting.source,
                    f"sets vfio-pci ids={','.join(setting.ids)}, which also claims "
                    f"{gpu.address} ({', '.join(hit)}) that must stay on the host",
                    "remove that ids= setting; pvegpu binds vfio GPUs by address "
                    "(driver_override) instead",
                )
                break


def with_findings(plan_: Plan, findings: Iterable[Finding]) -> Plan:
    """A plan with more findings (later stages, such as serving checks, add theirs)."""
    return attrs.evolve(plan_, findings=(*plan_.findings, *findings))
