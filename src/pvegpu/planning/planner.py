"""plan(facts, spec) -> Plan: select each pool's GPUs and check every invariant at once.

Pure: no I/O. Everything the renderers need (existing config files included) is
already in the facts, so a plan can be made for a host from its snapshot anywhere.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError
from pvegpu.hardware import VFIO_DRIVER, host_driver
from pvegpu.model.facts import GPU, HostFacts, PciFunction
from pvegpu.model.plan import Plan, Pool, PoolKind
from pvegpu.model.schema import PoolSpec, Spec
from pvegpu.pci import PciAddress
from pvegpu.planning.acs import acs_problems
from pvegpu.planning.boot import boot_findings, boot_problems, vfio_ids_settings
from pvegpu.planning.claims import node_naming
from pvegpu.planning.count_choice import choose_counts, gpus_in_use
from pvegpu.planning.decide import decided_servings, serving_problems
from pvegpu.planning.driverctl import driverctl_problems
from pvegpu.planning.fabric import (
    board_switches,
    fabric_findings,
    fabric_problems,
    switch_functions,
)
from pvegpu.planning.findings import plan_findings
from pvegpu.planning.guest_ids import guest_id_problems
from pvegpu.planning.guests import lxc_container, pin_containers, vm_guest
from pvegpu.planning.host_changes import host_changes
from pvegpu.planning.host_guests import judge_host
from pvegpu.planning.leftover_servers import leftover_servers
from pvegpu.planning.mapping import pci_cfg_findings, pci_cfg_problems, pool_mapping
from pvegpu.planning.mdev import mdev_problems
from pvegpu.planning.mig import with_lost_caps
from pvegpu.planning.next_boot import next_boot_findings
from pvegpu.planning.numbering import Renumbering, next_boot_numbers, renumbering_findings
from pvegpu.planning.references import reference_judgments
from pvegpu.planning.split import split_problems
from pvegpu.planning.sriov import sriov_findings, sriov_problems, vf_device
from pvegpu.planning.vgpu import is_vgpu_vf, vgpu_problems, vgpu_source
from pvegpu.planning.vm_numa import vm_numa_findings, vm_numa_problems
from pvegpu.planning.vm_start import vm_start_findings, vm_start_problems
from pvegpu.pvefiles.lxcconf import NodeNaming
from pvegpu.vendors.nvswitch import is_switch


def plan(facts: HostFacts, spec: Spec) -> Plan:
    """Turn facts + spec into a Plan, or raise PlanError listing every problem found."""
    problems: list[Diagnostic] = []
    if spec.is_cluster:
        # One plan is one node's: planning/cluster.py plans each node of a cluster spec.
        raise PlanError.one(
            "cluster-spec",
            spec.source,
            f"the spec is for the nodes {', '.join(spec.nodes)}, not for one host",
            "plan it with plan_cluster (pvegpu plan --root NODE=DIR for every node)",
        )
    if spec.node != facts.node:
        problems.append(
            Diagnostic.error(
                "node-mismatch",
                "node",
                f"the spec is for node {spec.node!r} but the host is {facts.node!r}",
                f'set node = "{facts.node}" or point --root at the right host',
            )
        )
    choice_findings: list[Diagnostic] = []
    selections = _select(facts, spec, problems, choice_findings)
    # The pools whose GPUs or container are refused: their servers are not judged when the
    # plan is refused (decide.serving_problems), as that would only repeat the refusal.
    refused = {i for p in problems for i in _pool_index(p.subject)}
    overlaps = list(_overlaps(spec, selections))
    problems.extend(overlaps)
    refused |= _overlapping(selections) if overlaps else set()
    # A VM id that is a container's, or the other way round (planning/guest_ids.py).
    clashes = list(guest_id_problems(facts, spec))
    problems.extend(clashes)
    clashed = {i for p in clashes for i in _pool_index(p.subject)}
    refused |= clashed
    # The numbers the GPUs that stay get at the next boot, once the vfio pools' GPUs have
    # left their drivers: pool containers are given those (planning/numbering.py).
    chosen = list(zip(spec.pools, selections, strict=True))
    numbers = next_boot_numbers(
        facts,
        # A vGPU pool's VFs stay on their driver (planning/vgpu.py); VFs have no nodes.
        (g.address for p, gpus in chosen if p.vfio is not None for g in gpus),
        (g.address for p, gpus in chosen if p.lxc is not None for g in gpus),
    )
    naming = node_naming(facts)
    pools: list[Pool] = []
    guest_findings: list[Diagnostic] = []
    # Every pool's mapping id: a VM line on one is that pool's, never a renamed mapping's.
    ids = frozenset(p.mapping.id for p in spec.pools if p.mapping is not None)
    for index, (pool_spec, gpus) in enumerate(zip(spec.pools, selections, strict=True)):
        if gpus:
            where = f"pools[{index}]"
            before = len(problems)
            pools.append(
                _build_pool(
                    facts, pool_spec, where, gpus, problems, guest_findings, ids, numbers, naming
                )
            )
            if len(problems) > before:
                refused.add(index)
            if index in clashed:
                # The id is the other kind's guest: "create the container first" repeats
                # that one mistake, with a fix Proxmox refuses (the id is taken).
                problems[before:] = [p for p in problems[before:] if p.code != "lxc-config-missing"]
    problems.extend(pci_cfg_problems(facts, pools))
    problems.extend(split_problems(facts, pools))
    problems.extend(sriov_problems(facts, pools))
    problems.extend(fabric_problems(facts, pools))
    # A GPU with vGPUs on it stays on its host driver (planning/mdev.py).
    problems.extend(mdev_problems(facts, pools))
    problems.extend(acs_problems(facts, pools))
    problems.extend(driverctl_problems(facts, pools))
    problems.extend(vm_numa_problems(facts, pools))
    problems.extend(vm_start_problems(facts, pools))
    problems.extend(_vfio_ids_problems(facts, pools))
    problems.extend(boot_problems(facts, pools))
    # Every other guest and mapping on the node that names the pools' GPUs.
    mappings, others = judge_host(facts, pools, numbers)
    # Their MIG capability nodes go with the GPUs they lose (planning/mig.py).
    removed, caps_findings = with_lost_caps(facts, others.removed)
    others = attrs.evolve(others, removed=removed, findings=(*others.findings, *caps_findings))
    problems.extend((*mappings.problems, *others.problems))
    # Every other reference to a GPU on the host: hooks, hookscripts, host files, what
    # pvegpu cannot resolve (planning/references.py).
    reference_problems, reference_findings = reference_judgments(facts, pools, numbers)
    problems.extend(reference_problems)
    # The servers those containers keep running where pvegpu renders no unit (--tp 8 on 4).
    leftover = leftover_servers(facts, spec, pools, others.removed)
    problems.extend(leftover.problems)
    if problems:
        # The servers of the other pools are judged all the same: their problems come in
        # this refusal, not in the next run's (TP against the heads, the model, options).
        restarts = (*renumbering_findings(pools, numbers), *mappings.findings, *others.findings)
        provisional = Plan(facts=facts, spec=spec, pools=tuple(pools), findings=restarts)
        judged = {p.name for i, p in enumerate(spec.pools) if i not in refused}
        raise PlanError([*problems, *serving_problems(provisional, judged)])
    guest_findings.extend(pci_cfg_findings(facts, pools, mappings.moved))
    guest_findings.extend(vm_numa_findings(facts, pools))
    guest_findings.extend(vm_start_findings(facts, pools))
    guest_findings.extend((*mappings.findings, *others.findings))
    guest_findings.extend(reference_findings)
    guest_findings.extend(leftover.findings)
    findings = (
        *choice_findings,
        *plan_findings(facts, pools),
        *renumbering_findings(pools, numbers),
        *fabric_findings(facts, pools),
        *boot_findings(facts, pools),
        *sriov_findings(facts, pools),
        *guest_findings,
    )
    # What the next boot's kernel and driver change, judged knowing whether the runbook
    # reboots before the containers start again (planning/next_boot.py).
    reboots = any(f.reboot_first for f in findings)
    findings = (*findings, *next_boot_findings(facts, pools, numbers, reboots))
    result = Plan(
        facts=facts,
        spec=spec,
        pools=tuple(pools),
        findings=findings,
        containers_losing_gpus=others.removed,
        moved_map_lines=mappings.moved,
    )
    # Each server is decided here, once, and carried on its pool: the checks (TP vs
    # heads, memory fit, container driver, P2P) need the whole plan; they raise
    # PlanError themselves and otherwise add their findings. Renderers only read them.
    result = pin_containers(decided_servings(result))
    return attrs.evolve(result, host_changes=host_changes(facts, result.pools))


def _select(
    facts: HostFacts, spec: Spec, problems: list[Diagnostic], findings: list[Diagnostic]
) -> list[tuple[GPU, ...]]:
    """Each pool's GPUs in PCI order; `count` pools take what the others left, in order,
    one NUMA node's where one has enough (why not: to `findings`)."""
    selections: list[tuple[GPU, ...]] = [() for _ in spec.pools]
    if not facts.gpus and spec.pools:
        # One refusal that says what the host has, not one per pool blaming its selector.
        problems.append(_no_gpus(facts))
        return selections
    # The BMC's display is listed with the GPUs but never taken by a selector.
    poolable = [g for g in facts.gpus if not g.bmc_display]
    for i, pool in enumerate(spec.pools):
        where = f"pools[{i}]"
        if pool.numa_node is not None:
            selections[i] = tuple(g for g in poolable if g.numa_node == pool.numa_node)
            if not selections[i]:
                nodes = sorted({g.numa_node for g in facts.gpus if g.numa_node is not None})
                problems.append(
                    Diagnostic.error(
                        "pool-empty",
                        f"{where}.numa_node",
                        f"no GPU of this host is on NUMA node {pool.numa_node}",
                        f"GPUs are on NUMA nodes {nodes or 'none (firmware gives no node)'}",
                    )
                )
        elif pool.gpus is not None:
            selections[i] = tuple(_explicit(facts, pool.gpus, where, problems))
    claimed = {g.address for sel in selections for g in sel}
    # `count` pools take from what is left, in spec order, one NUMA node's GPUs where one
    # node has enough (planning/count_choice.py).
    free = [g for g in poolable if g.address not in claimed]
    if any(pool.count is not None for pool in spec.pools):
        in_use = gpus_in_use(facts)
        choose_counts(spec.pools, free, in_use, selections, problems, findings)
    return selections


_POOL = re.compile(r"pools\[(\d+)\]")


def _pool_index(subject: str) -> Iterator[int]:
    """The index of the pool a spec-path subject is in (`pools[2].gpus[0]` -> 2)."""
    found = _POOL.match(subject)
    if found is not None:
        yield int(found[1])


def _overlapping(selections: list[tuple[GPU, ...]]) -> set[int]:
    """The pools selecting a GPU another pool (or the pool itself, twice) selects too."""
    seen = Counter(g.address for gpus in selections for g in gpus)
    return {i for i, gpus in enumerate(selections) if any(seen[g.address] > 1 for g in gpus)}


def _no_gpus(facts: HostFacts) -> Diagnostic:
    """The refusal for a host without a GPU, naming what discovery found instead."""
    by_class: dict[int, list[PciFunction]] = defaultdict(list)
    for function in facts.functions:
        if not function.is_bridge:
            by_class[function.pci_class >> 8].append(function)
    found = [
        f"{len(functions)} of class {klass:#06x} ("
        + ", ".join(
            dict.fromkeys(
                f.vendor_device + (" VF" if f.is_virtual_function else "") for f in functions
            )
        )
        + ")"
        for klass, functions in sorted(by_class.items())
    ]
    return Diagnostic.error(
        "host-without-gpus",
        "pools",
        "this host has no GPU: no PCI function is a display controller (class 0x03) or a "
        "processing accelerator (class 0x12, not a virtual function); discovery found "
        + ("; ".join(found) if found else "no PCI function but bridges"),
        "a GPU the host has shows in lspci -nn; one missing there is not seated or powered "
        "or its slot is off in firmware; else point --root at the host with the GPUs",
    )


def _explicit(
    facts: HostFacts, texts: Iterable[str], where: str, problems: list[Diagnostic]
) -> Iterator[GPU]:
    # A short address (`41:00.0`) leaves the domain out: it names that bus/device/function
    # in whichever domain has it, so a GPU behind Intel VMD (`10000:e1:00.0`) can be
    # written `e1:00.0` like any other. Indexed only when a spec writes one.
    by_bdf: dict[tuple[int, int, int], list[PciAddress]] | None = None
    for j, text in enumerate(texts):
        address = PciAddress.parse_lenient(text)  # the spec loader validated the syntax
        if not PciAddress.names_domain(text):
            if by_bdf is None:
                by_bdf = defaultdict(list)
                for fn in facts.functions:
                    by_bdf[fn.address.bus_device_function].append(fn.address)
            found = by_bdf.get(address.bus_device_function, [])
            if len(found) > 1:
                # Two domains with that bus: guessing one could hand a guest the wrong GPU.
                full = sorted(found)
                problems.append(
                    Diagnostic.error(
                        "address-ambiguous",
                        f"{where}.gpus[{j}]",
                        f"{text!r} is a function in {len(full)} PCI domains: "
                        + ", ".join(str(a) for a in full),
                        "write the one you mean in full: " + " or ".join(f'"{a}"' for a in full),
                    )
                )
                continue
            if found:
                address = found[0]
        gpu = facts.gpu(address)
        function = facts.function(address)
        if gpu is None and function is not None:
            # A GPU's SR-IOV VF, named by address: a device of the pool on its own.
            gpu = vf_device(facts, function)
        if gpu is not None and gpu.bmc_display:
            problems.append(
                Diagnostic.error(
                    "address-is-bmc-display",
                    f"{where}.gpus[{j}]",
                    f"{address} ({gpu.vendor_device}, {gpu.driver or 'no driver'}) is the "
                    "display of the board's management controller, the console its remote "
                    "KVM shows: no GPU for a VM or a container",
                    "GPUs here: " + ", ".join(_names(facts)),
                )
            )
            continue
        if gpu is not None:
            yield gpu
            continue
        message = (
            f"{address} is a {function.vendor_device} of class {function.pci_class:#08x}, "
            "not a GPU (a display controller, class 0x03, or processing accelerator, 0x12)"
            if function
            else f"{address} is not on this host"
        )
        if function is not None and is_switch(function):
            message += (
                "; an NVSwitch is not selected: it goes to the VM that gets every GPU of its board"
            )
        problems.append(
            Diagnostic.error(
                "address-not-a-gpu" if function else "address-not-on-host",
                f"{where}.gpus[{j}]",
                message,
                "GPUs here: " + ", ".join(_names(facts)),
            )
        )


def _names(facts: HostFacts) -> list[str]:
    """The GPUs as a spec may write them: short (`81:00.0`) on a host with domain 0000
    only, in full once there are others, where a short one may be ambiguous."""
    gpus = [g for g in facts.gpus if not g.bmc_display]
    if all(fn.address.domain == 0 for fn in facts.functions):
        return [g.address.short for g in gpus]
    return [str(g.address) for g in gpus]


def _overlaps(spec: Spec, selections: list[tuple[GPU, ...]]) -> Iterator[Diagnostic]:
    owners: dict[PciAddress, list[str]] = defaultdict(list)
    for i, (pool, gpus) in enumerate(zip(spec.pools, selections, strict=True)):
        # From the selection, not the spec's text: `81:00.0` and `0000:81:00.0` (or a
        # short address found in another domain) are one GPU written two ways.
        for address, n in Counter(g.address for g in gpus).items():
            if n > 1:
                # Its own mistake, in the pool's own key: not a clash between two pools.
                yield Diagnostic.error(
                    "gpu-listed-twice",
                    f"pools[{i}].gpus",
                    f"lists {address} {'twice' if n == 2 else f'{n} times'}",
                    f"list {address} once",
                )
        for gpu in dict.fromkeys(gpus):
            owners[gpu.address].append(pool.name)
    for address, names in sorted(owners.items()):
        if len(names) > 1:
            yield Diagnostic.error(
                "gpu-in-two-pools",
                str(address),
                f"is selected by pools {', '.join(repr(n) for n in names)}",
                "a GPU can serve one pool: narrow the selectors (numa_node, gpus, count)",
            )


def _build_pool(
    facts: HostFacts,
    spec: PoolSpec,
    where: str,
    gpus: tuple[GPU, ...],
    problems: list[Diagnostic],
    findings: list[Diagnostic],
    mapping_ids: frozenset[str] = frozenset(),
    numbers: Renumbering | None = None,
    naming: NodeNaming | None = None,
) -> Pool:
    """The pool with every decision made; its refusals go to `problems`."""
    kind = PoolKind.VFIO if spec.vfio is not None else PoolKind.LXC
    # Without an IOMMU a vfio pool is already refused (no-iommu); no second report.
    wants_mapping = spec.mapping is not None and (facts.iommu.enabled or kind is PoolKind.LXC)
    # vfio-pci and a PCI mapping both take IOMMU groups: a GPU without one is reported
    # here, once, and neither its pool's functions nor its mapping look at it again.
    groupless = (
        _without_iommu_group(facts, gpus)
        if wants_mapping or (kind is PoolKind.VFIO and facts.iommu.enabled)
        else []
    )
    problems.extend(groupless)
    # A whole NVSwitch board goes to its VM with its NVSwitches (planning/fabric.py).
    switches = board_switches(facts, kind, gpus)
    vgpu_type = spec.vfio.vgpu_type if spec.vfio is not None else None
    if kind is PoolKind.VFIO:
        # NVIDIA vGPU VFs stay on the host driver; the VM gets them as vGPUs (vgpu.py).
        problems.extend(vgpu_problems(facts, gpus, vgpu_type, where))
        vgpus = {g.address for g in gpus if is_vgpu_vf(g.function)}
        functions = _vfio_functions(facts, gpus, where, problems)
        functions = tuple(f for f in functions if f.address not in vgpus)
        if switches:
            board = switch_functions(facts, switches, f"pool {spec.name!r}", problems)
            moved = {f.address: f for f in (*functions, *board)}
            functions = tuple(moved[a] for a in sorted(moved))
        driver = VFIO_DRIVER
        if vgpu_type is not None:
            drivers = {host_driver(g.function) for g in gpus}
            driver = ", ".join(sorted(d or "?" for d in drivers))
    else:
        functions = tuple(sorted(f for g in gpus for f in g.functions))
        drivers = {host_driver(g.function) for g in gpus}
        driver = ", ".join(sorted(d or "?" for d in drivers))
    lxc = lxc_container(facts, spec, gpus, problems, findings, where, numbers, naming)
    mapping = None
    moves = kind is PoolKind.VFIO and vgpu_type is None
    if spec.mapping is not None and wants_mapping and not groupless:
        mapping, mapping_problems = pool_mapping(facts, gpus, spec.mapping, switches, moves=moves)
        problems.extend(mapping_problems)
    return Pool(
        name=spec.name,
        kind=kind,
        gpus=gpus,
        functions=functions,
        driver=driver,
        numa_nodes=tuple(sorted({g.numa_node for g in gpus}, key=lambda n: -1 if n is None else n)),
        lxc=lxc,
        vm=vm_guest(
            facts, spec, gpus, mapping, problems, findings, mapping_ids, switches=len(switches)
        ),
        mapping=mapping,
        nvswitches=switches,
        vgpu_type=vgpu_type if kind is PoolKind.VFIO else None,
        vgpu_source=(
            vgpu_source(gpus) if kind is PoolKind.VFIO and vgpu_type is not None else None
        ),
    )


def _vfio_functions(
    facts: HostFacts, gpus: tuple[GPU, ...], where: str, problems: list[Diagnostic]
) -> tuple[PciFunction, ...]:
    """Every non-bridge member of each GPU's IOMMU group: VFIO takes groups, not devices."""
    if not facts.iommu.enabled:
        problems.append(
            Diagnostic.error(
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
    # Each group's members are looked at once, however many of the pool's GPUs it holds.
    foreign_in: dict[int, list[PciFunction]] = {}
    for gpu in gpus:
        group = facts.group(gpu.iommu_group) if gpu.iommu_group is not None else None
        if group is None:
            continue  # refused once, by _without_iommu_group
        if group.id not in foreign_in:
            foreign_in[group.id] = []
            for address in group.members:
                function = facts.function(address)
                if function is None or function.is_bridge:
                    continue
                if address not in own:
                    foreign_in[group.id].append(function)
                members[address] = function
        for function in foreign_in[group.id]:
            problems.append(
                Diagnostic.error(
                    "foreign-device-in-group",
                    str(gpu.address),
                    f"IOMMU group {group.id} also holds {function.address} "
                    f"({function.vendor_device}, class {function.pci_class:#08x}, "
                    f"driver {function.driver or 'none'}); passing the GPU through would "
                    "take that device away from the host",
                    "move the GPU to a slot with its own group (or enable ACS in firmware); "
                    "never use pcie_acs_override on a host that matters",
                )
            )
    return tuple(members[a] for a in sorted(members))


def _without_iommu_group(facts: HostFacts, gpus: tuple[GPU, ...]) -> list[Diagnostic]:
    """One refusal per GPU that passthrough cannot take: it has no IOMMU group."""
    return [
        Diagnostic.error(
            "gpu-without-iommu-group",
            str(gpu.address),
            "has no IOMMU group, so neither vfio-pci nor a PCI mapping can take it",
            "enable the IOMMU (VT-d / AMD-Vi) in firmware and on the kernel command line, "
            "check the firmware's ACS setting for this slot, then discover again",
        )
        for gpu in gpus
        if gpu.iommu_group is None or facts.group(gpu.iommu_group) is None
    ]


def _vfio_ids_problems(facts: HostFacts, pools: list[Pool]) -> Iterator[Diagnostic]:
    """`vfio-pci ids=` claims by vendor:device: it would take host-side twins too, now
    (proc/cmdline, modprobe.d) or at the next boot (the boot loader's command line)."""
    host_side = [g for p in pools if p.kind is PoolKind.LXC for g in p.gpus]
    for setting, what, fix in vfio_ids_settings(facts):
        for gpu in host_side:
            hit = sorted({i for f in gpu.functions for i in setting.claimed(f)})
            if hit:
                yield Diagnostic.error(
                    "vfio-ids-grab-host-gpu",
                    setting.source,
                    f"{what}, which also claims {gpu.address} ({', '.join(hit)}) that must "
                    "stay on the host",
                    fix,
                )
                break
