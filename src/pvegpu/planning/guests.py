"""What each pool changes in its guest's config, decided once: the container's GPU lines,
the VM's hostpci lines and NUMA pin, and what in the existing file stands in their way.

The renderers (rendering/lxc.py, rendering/vm.py) only put these decisions into the
existing files with `pvefiles`. Every refusal an existing file can cause is found here,
by the patch functions' own checks, so rendering an accepted plan cannot fail. Both
functions add to the planner's `problems` (refusals) and `findings` (warnings).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import attrs

from pvegpu.errors import Problem
from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.plan import Finding, LxcContainer, Plan, Pool, Severity, VmGuest
from pvegpu.model.schema import CpusetPolicy, DeviceStyle, PoolSpec
from pvegpu.planning.mapping_moves import old_mappings
from pvegpu.pvefiles import hostpci, lxcconf, qemuconf
from pvegpu.pvefiles.pcicfg import PciMapping
from pvegpu.vendors import CONTAINER_NODES


def gpu_majors(facts: HostFacts) -> frozenset[int]:
    """The container nodes' fixed major plus every major of their driver stack in
    /proc/devices (the dynamic ones): old cgroup rules on them are GPU lines."""
    return CONTAINER_NODES.majors((c.major, c.name) for c in facts.char_majors)


def lxc_container(
    facts: HostFacts,
    spec: PoolSpec,
    gpus: Sequence[GPU],
    problems: list[Problem],
    findings: list[Finding],
) -> LxcContainer | None:
    """The container of an LXC pool with the GPU lines its config gets."""
    if spec.lxc is None:
        return None
    vmid = spec.lxc.vmid
    container = LxcContainer(
        vmid,
        spec.lxc.devices,
        spec.lxc.mode,
        spec.lxc.gid,
        facts.file(f"etc/pve/lxc/{vmid}.conf"),
        cpuset_policy=spec.lxc.cpuset,
    )
    path = container.config_path
    own: list[Problem] = []
    if container.config is None:
        own.append(
            Problem(
                "lxc-config-missing",
                path,
                f"container {vmid} does not exist on this node",
                f"create it first (pct create {vmid} ...); pvegpu edits containers, "
                "Proxmox creates them",
            )
        )
    own.extend(_gpu_problems(gpus))
    uvm_major = facts.char_major(CONTAINER_NODES.dynamic_module)
    if uvm_major is None:
        if container.devices is DeviceStyle.RAW:
            own.append(
                Problem(
                    "nvidia-uvm-major-unknown",
                    path,
                    "raw device lines need the nvidia-uvm major, but /proc/devices has no "
                    "nvidia-uvm (the module is not loaded)",
                    'load it (nvidia-modprobe -u -c=0) and discover again, or use devices = "dev"',
                )
            )
        else:
            # Proxmox stats each devN node at start; a missing /dev/nvidia-uvm fails it.
            findings.append(
                Finding(
                    Severity.WARNING,
                    "nvidia-uvm-not-loaded",
                    path,
                    "nvidia-uvm is not loaded, and the container's devN entry for "
                    "/dev/nvidia-uvm fails its start without it: load it "
                    "(nvidia-modprobe -u -c=0) before starting the container",
                )
            )
    elif container.devices is DeviceStyle.RAW:
        findings.append(
            Finding(
                Severity.INFO,
                "nvidia-uvm-major-dynamic",
                path,
                f"raw lines give the container nvidia-uvm by major {uvm_major} "
                f"(`c {uvm_major}:0`, `c {uvm_major}:1`), the one /proc/devices shows now; the "
                "kernel hands that number out when nvidia-uvm loads, so a driver update (or "
                "another module loading first) can change it and CUDA in the container then "
                "fails. After a driver update run `pvegpu check` (it reports the stale rule) "
                'and render again, or use devices = "dev", which needs no major',
            )
        )
    problems.extend(own)
    if own or container.config is None:
        return container
    lines = lxcconf.gpu_lines(
        CONTAINER_NODES,
        gpus,
        container.devices,
        mode=container.mode,
        gid=container.gid,
        uvm_major=uvm_major,
    )
    problems.extend(lxcconf.dev_slot_problems(container.config.content, CONTAINER_NODES, lines))
    return attrs.evolve(container, gpu_lines=lines, gpu_majors=gpu_majors(facts))


def _gpu_problems(gpus: Sequence[GPU]) -> list[Problem]:
    problems: list[Problem] = []
    for gpu in gpus:
        if gpu.vendor is None or gpu.vendor.nodes is not CONTAINER_NODES:
            problems.append(
                Problem(
                    "lxc-gpu-not-nvidia",
                    str(gpu.address),
                    f"is a {gpu.vendor_device}; only NVIDIA device nodes are handed to "
                    "containers so far",
                    "give this GPU to a vfio pool, or leave it out of the container's pool",
                )
            )
        elif gpu.node_minor is None:
            problems.append(
                Problem(
                    "gpu-minor-unknown",
                    str(gpu.address),
                    f"is on {gpu.driver or 'no driver'}, so its /dev/nvidiaN minor is unknown "
                    "(nvidia assigns it when it binds)",
                    "return it to nvidia first (pvegpu-vfio-split revert), then plan again",
                )
            )
    return problems


def vm_guest(
    facts: HostFacts,
    spec: PoolSpec,
    gpus: Sequence[GPU],
    mapping: PciMapping | None,
    problems: list[Problem],
    findings: list[Finding],
    pool_mappings: Collection[str] = (),
) -> VmGuest | None:
    """The VM of a vfio pool: its hostpci lines over the pool's mapping, its NUMA pin.

    `pool_mappings`: the mapping ids of every pool of the spec. A mapping the pool's GPUs
    leave is an old one whose lines the VM's follow them, unless it is a pool's mapping:
    then a line on it is that pool's, judged by host_guests.py.
    """
    if spec.vfio is None or spec.vfio.vm is None:
        return None
    vmid, numa = spec.vfio.vm.vmid, spec.vfio.vm.numa
    path = f"etc/pve/qemu-server/{vmid}.conf"
    config = facts.file(path)
    if spec.mapping is None:
        problems.append(
            Problem(
                "vm-without-mapping",
                f"pool {spec.name!r}",
                f"VM {vmid} gets its GPUs through a PCI mapping, and the pool has none",
                f'add mapping = {{ id = "{spec.name}" }} to the pool',
            )
        )
    pin = _numa_pin(facts, gpus, path, problems) if numa else None
    # What the mapping hands over on this node, exactly as pci.cfg will say it: a raw
    # hostpci line for one of these devices is the same device a second time.
    mapped = tuple(m.path for m in mapping.maps if m.node == facts.node) if mapping else ()
    mapping_id = spec.mapping.id if spec.mapping is not None else ""
    # A renamed mapping: the VM's lines on the old id follow the GPUs to the new one.
    old = old_mappings(facts, mapping_id, mapped) if mapping_id else ()
    old = tuple(o for o in old if o not in pool_mappings)
    pcie = True
    if config is not None:
        pcie = qemuconf.is_q35(config.content)
        if mapping_id:
            args = (config.content, mapping_id, len(gpus))
            own = qemuconf.hostpci_problems(*args, numa=numa, mapped=mapped, old=old, subject=path)
            problems.extend(own)
            if not own:
                patched = qemuconf.patch_hostpci(*args, pcie=pcie, mapped=mapped, old=old)
                findings.extend(_converted(path, mapping_id, patched.conversions))
        if not pcie:
            findings.append(
                Finding(
                    Severity.WARNING,
                    "vm-not-q35",
                    path,
                    "the hostpci lines get no pcie=1: the machine is not q35, so the GPUs "
                    f"sit on a legacy PCI bus; for PCIe passthrough: qm set {vmid} "
                    "--machine q35",
                )
            )
    return VmGuest(
        vmid,
        numa,
        config,
        mapping_id=mapping_id,
        count=len(gpus),
        numa_pin=pin,
        mapped=mapped,
        pcie=pcie,
        old_mappings=old,
    )


def _converted(
    path: str, mapping_id: str, conversions: Sequence[hostpci.Conversion]
) -> list[Finding]:
    """One finding per line moved off a mapping the GPUs leave: its diff shows a changed
    mapping id, and the reviewer should see that the VM keeps its devices and options."""
    findings: list[Finding] = []
    for c in conversions:
        if c.old_mapping is None:
            continue  # a raw address: the artifact's reason names it
        same = c.before.partition(":")[0] == c.after.partition(":")[0]
        where = (
            "in place (same index, options kept)"
            if same
            else "to a free index (a pending change holds its old one), options kept,"
        )
        findings.append(
            Finding(
                Severity.INFO,
                "vm-hostpci-converted",
                path,
                f"`{c.before}` becomes `{c.after}`: the pool's GPUs leave mapping "
                f"{c.old_mapping} for {mapping_id}, so the line follows them {where} "
                "instead of a second line next to one on a mapping without them",
            )
        )
    return findings


def _numa_pin(
    facts: HostFacts, gpus: Sequence[GPU], subject: str, problems: list[Problem]
) -> qemuconf.NumaPin | None:
    nodes = {g.numa_node for g in gpus}
    node = next(iter(nodes)) if len(nodes) == 1 else None
    numa = next((n for n in facts.numa_nodes if n.id == node), None)
    if node is None or numa is None:
        known = sorted(nodes, key=lambda n: -1 if n is None else n)
        problems.append(
            Problem(
                "vm-numa-ambiguous",
                subject,
                f"NUMA pinning needs the pool's GPUs on one known node; they are on "
                f"{', '.join('unknown' if n is None else str(n) for n in known)}",
                "select GPUs of one NUMA node for this pool, or set numa = false for the VM",
            )
        )
        return None
    return qemuconf.NumaPin(numa.id, numa.cpus)


def pin_containers(plan: Plan) -> Plan:
    """Each serving container's cpuset: the CPUs of the node its decided server is pinned to.

    A step after the servers are decided, so the rule that picks the node lives in one
    place (serving/numa.py); `cores` above that node's CPU count is a finding, since the
    cpuset caps the container whatever `cores` says.
    """
    nodes = {n.id: n for n in plan.facts.numa_nodes}
    pools: list[Pool] = []
    findings: list[Finding] = []
    for pool in plan.pools:
        pin = pool.serving.numa if pool.serving is not None else None
        container = pool.lxc
        node = nodes.get(pin.node) if pin is not None else None
        if container is None or container.config is None or node is None:
            pools.append(pool)
            continue
        if container.cpuset_policy is CpusetPolicy.KEEP:
            # The unit's CPUAffinity= only takes CPUs the container's cgroup has, and
            # without a cpuset line pvestatd picks and moves those CPUs every 10 s.
            held = lxcconf.cpuset(container.config.content)
            if held is not None and set(node.cpus.cpus) <= set(held.cpus):
                pools.append(pool)
                continue
            findings.append(
                Finding(
                    Severity.WARNING,
                    "lxc-cpuset-kept",
                    container.config_path,
                    f'cpuset = "keep": the server\'s unit pins CPUAffinity= to NUMA node '
                    f"{node.id} ({node.cpus}), but the container's CPU set is left as it is; "
                    "without a `lxc.cgroup2.cpuset.cpus` line holding those CPUs pvestatd "
                    "moves the container's CPUs and the affinity fails or drifts",
                )
            )
            pools.append(pool)
            continue
        pools.append(attrs.evolve(pool, lxc=attrs.evolve(container, cpuset=node)))
        cores = lxcconf.cores(container.config.content, container.config_path)
        if cores is not None and cores > len(node.cpus):
            findings.append(
                Finding(
                    Severity.WARNING,
                    "lxc-cores-beyond-node",
                    container.config_path,
                    f"cores: {cores} > {len(node.cpus)} CPUs of NUMA node {node.id}, which the "
                    f"container's cpuset is pinned to: lower cores to {len(node.cpus)} or less",
                )
            )
    return attrs.evolve(plan, pools=tuple(pools), findings=(*plan.findings, *findings))
