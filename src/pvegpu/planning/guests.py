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

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import GPU, ConfigFile, HostFacts
from pvegpu.model.guests import LXC, QEMU, guests
from pvegpu.model.paths import NODES_UNIT_NAME, vm_config
from pvegpu.model.plan import LxcContainer, Plan, Pool, VmGuest
from pvegpu.model.schema import CpusetPolicy, DeviceStyle, PoolSpec
from pvegpu.planning.claims import node_naming
from pvegpu.planning.container_groups import render_gid
from pvegpu.planning.mapping_moves import old_mappings
from pvegpu.planning.mig import mig_lines
from pvegpu.planning.numbering import Renumbering
from pvegpu.planning.userspace import host_userspace_problems
from pvegpu.pvefiles import hostpci, lxcconf, qemuconf
from pvegpu.pvefiles.lxcconf import NodeNaming
from pvegpu.pvefiles.pcicfg import PciMapping
from pvegpu.vendors import CONTAINER_NODES, DeviceNodes


def stale_dynamic_majors(
    facts: HostFacts, config: ConfigFile | None, nodes: DeviceNodes
) -> frozenset[int]:
    """The majors of a raw-style container's rules for its dynamic node (nvidia-uvm, kfd)
    that no device has any more (/proc/devices lists none): an earlier boot's, which a
    kernel or driver update handed out anew. Its own GPU lines, so the patch replaces
    them; a major now listed for another device is not taken for one."""
    if config is None:
        return frozenset()
    allowed = guests(facts).config(config).raw_uvm_majors(nodes) or ()
    listed = {c.major for c in facts.char_majors}
    return frozenset(m for m in allowed if m not in listed)


def gpu_majors(facts: HostFacts, nodes: DeviceNodes) -> frozenset[int]:
    """The nodes' fixed major plus every major of their driver stack in /proc/devices
    (the dynamic ones): old cgroup rules on them are GPU lines."""
    return nodes.majors((c.major, c.name) for c in facts.char_majors)


def lxc_container(
    facts: HostFacts,
    spec: PoolSpec,
    gpus: Sequence[GPU],
    problems: list[Diagnostic],
    findings: list[Diagnostic],
    where: str,
    numbers: Renumbering | None = None,
    naming: NodeNaming | None = None,
) -> LxcContainer | None:
    """The container of an LXC pool with the GPU lines its config gets; `where`: the
    pool's spec path, for problems about its own keys. `numbers`: the nodes the next boot
    renumbers, whose new numbers the lines get (the runbook reboots before the container
    starts: planning/numbering.py)."""
    if spec.lxc is None:
        return None
    vmid = spec.lxc.vmid
    # The host's naming, once per plan when the planner hands it in (it reads every GPU).
    naming = naming if naming is not None else node_naming(facts)
    container = LxcContainer(
        vmid,
        spec.lxc.devices,
        spec.lxc.mode,
        spec.lxc.gid,
        guests(facts).file(LXC, vmid),
        cpuset_policy=spec.lxc.cpuset,
        naming=naming,
        userspace=spec.lxc.userspace,
    )
    path = container.config_path
    own: list[Diagnostic] = []
    if container.config is None:
        own.append(
            Diagnostic.error(
                "lxc-config-missing",
                path,
                f"container {vmid} does not exist on this node",
                f"create it first (pct create {vmid} ...); pvegpu edits containers, "
                "Proxmox creates them",
            )
        )
    nodes = _pool_nodes(gpus, own, serves=spec.lxc.serving is not None)
    if nodes is None:
        problems.extend(own)
        return container
    own.extend(_gpu_problems(gpus, nodes))
    if spec.lxc.display and nodes.display_path is None:
        # Said, not dropped: a spec asking for display and getting compute nodes only
        # would look granted in review.
        own.append(
            Diagnostic.error(
                "lxc-display-unsupported",
                f"{where}.lxc.display",
                f"display = true: the container nodes of {gpus[0].vendor_device} GPUs "
                f"({nodes.gpu_path.format(minor='N')} and the shared ones) have no display "
                "node pvegpu hands over; CUDA and NVENC need none",
                "remove display = true, or pass the GPU to a VM for a desktop",
            )
        )
    vendor = gpus[0].vendor if gpus else None
    if container.host_userspace and vendor is not None:
        own.extend(host_userspace_problems(facts, vendor, where))
    dynamic_major = _dynamic_node(facts, nodes, container, own, findings)
    gid = container.gid
    if gid is None and nodes.drm and container.config is not None:
        gid = render_gid(facts, container, own, findings)
    problems.extend(own)
    if own or container.config is None:
        return container
    lines = lxcconf.gpu_lines(
        nodes,
        gpus,
        container.devices,
        mode=container.mode,
        gid=gid,
        uvm_major=dynamic_major,
        display=spec.lxc.display,
        renumber=numbers.minors(nodes.major) if numbers is not None else None,
        allow_key=naming.allow_key,
    )
    # The capability nodes of its MIG instances stay with it (planning/mig.py).
    lines = mig_lines(facts, attrs.evolve(container, gid=gid), gpus, lines, problems, findings)
    if container.host_userspace:
        # The staged host userspace is one of its GPU lines: replaced and removed with them.
        lines = attrs.evolve(lines, raw=(*lines.raw, lxcconf.userspace_mount()))
    problems.extend(guests(facts).config(container.config).dev_slot_problems(nodes, lines, naming))
    majors = gpu_majors(facts, nodes) | stale_dynamic_majors(facts, container.config, nodes)
    group_gid = gid if container.gid is None else None
    return attrs.evolve(
        container, gpu_lines=lines, gpu_majors=majors, nodes=nodes, group_gid=group_gid
    )


def _pool_nodes(
    gpus: Sequence[GPU], problems: list[Diagnostic], *, serves: bool = False
) -> DeviceNodes | None:
    """The device nodes of the pool's vendor, or None with the refusal: a GPU of a vendor
    with none pvegpu knows, or GPUs of two vendors (one container config gets one
    vendor's lines, which one pool's userspace opens; and a pool that `serves` runs one
    tensor-parallel group, whose collective library, NCCL or RCCL, is one vendor's)."""
    vendors = {g.vendor for g in gpus}
    unknown = [g for g in gpus if g.vendor is None or g.vendor.nodes is None]
    for gpu in unknown:
        problems.append(
            Diagnostic.error(
                "lxc-gpu-vendor-unknown",
                str(gpu.address),
                f"is a {gpu.vendor_device}; pvegpu knows no device nodes of its vendor to "
                "hand to a container",
                "give this GPU to a vfio pool, or leave it out of the container's pool",
            )
        )
    if unknown:
        return None
    if len(vendors) > 1:
        names = sorted(v.name for v in vendors if v is not None)
        server = (
            "; and the pool's server runs them as one tensor-parallel group, whose "
            "all-reduce (NCCL on CUDA, RCCL on ROCm) cannot span two vendors' GPUs"
            if serves
            else ""
        )
        problems.append(
            Diagnostic.error(
                "lxc-pool-mixed-vendors",
                ", ".join(str(g.address) for g in gpus),
                f"are GPUs of {' and '.join(names)}: a container pool hands over one "
                f"vendor's device nodes, which one userspace opens{server}",
                "split them into one pool per vendor (each with its own container"
                + (" and server)" if serves else ")"),
            )
        )
        return None
    vendor = next(iter(vendors)) if vendors else None
    return vendor.nodes if vendor is not None else CONTAINER_NODES


def _dynamic_node(
    facts: HostFacts,
    nodes: DeviceNodes,
    container: LxcContainer,
    problems: list[Diagnostic],
    findings: list[Diagnostic],
) -> int | None:
    """The major of the nodes' dynamic node (nvidia-uvm, kfd) for raw lines, with what its
    module's absence, or its number's changing, means for the container."""
    dynamic = nodes.dynamic
    if dynamic is None:
        return None
    path, module = container.config_path, dynamic.module
    major = facts.char_major(module)
    if major is None:
        if container.devices is DeviceStyle.RAW:
            problems.append(
                Diagnostic.error(
                    f"{module}-major-unknown",
                    path,
                    f"raw device lines need the {module} major, but /proc/devices has no "
                    f"{module} (the module is not loaded)",
                    f'load it ({dynamic.load}) and discover again, or use devices = "dev"',
                )
            )
        elif nodes.make_command(dynamic.node) is not None:
            # Proxmox stats each devN node at start; a missing node fails it. The bundle's
            # nodes unit makes it, in the runbook and at every boot (rendering/boot_units).
            findings.append(
                Diagnostic(
                    Severity.INFO,
                    f"{module}-not-loaded",
                    path,
                    f"{module} is not loaded, and the container's devN entry for "
                    f"{dynamic.node} fails its start without it: {NODES_UNIT_NAME} loads "
                    f"it and makes the node ({dynamic.load}) before the container starts, in "
                    "the runbook and at every boot",
                )
            )
        else:
            findings.append(
                Diagnostic(
                    Severity.WARNING,
                    f"{module}-not-loaded",
                    path,
                    f"{module} is not loaded, and the container's devN entry for "
                    f"{dynamic.node} fails its start without it: load it "
                    f"({dynamic.load}) before starting the container",
                )
            )
    elif container.devices is DeviceStyle.RAW:
        rules = ", ".join(f"`c {major}:{m}`" for m in dynamic.minors)
        findings.append(
            Diagnostic(
                Severity.INFO,
                f"{module}-major-dynamic",
                path,
                f"raw lines give the container {module} by major {major} ({rules}), the one "
                "/proc/devices shows now; the kernel hands that number out when "
                f"{dynamic.loaded_by} loads, so a driver update (or another module loading "
                "first) can change it "
                f"and {dynamic.user} in the container then fails. After a driver update run "
                "`pvegpu check` (it reports the stale rule) and render again, or use "
                'devices = "dev", which needs no major',
            )
        )
    return major


def _gpu_problems(gpus: Sequence[GPU], nodes: DeviceNodes) -> list[Diagnostic]:
    problems: list[Diagnostic] = []
    for gpu in gpus:
        split = gpu.vendor if gpu.partitioned else None
        if split is not None:
            # Its other partitions' render nodes belong to platform devices sysfs does not
            # tie to this GPU: the container would get partition 0 alone, and silently.
            attribute = f"/sys/bus/pci/devices/{gpu.address}/{split.compute_partition}"
            problems.append(
                Diagnostic.error(
                    "lxc-gpu-partitioned",
                    str(gpu.address),
                    f"is split into {gpu.compute_partition} compute partitions ({attribute}): "
                    "only the first partition's render node is the GPU's own, the others' "
                    "are nodes of other devices, so a container would get one partition of it",
                    f"make it whole first (echo {split.whole_partition} > {attribute}, with "
                    "nothing using it), then plan again; or pass the GPU to a VM",
                )
            )
            continue
        if gpu.container_minor is not None:
            continue
        vendor = gpu.vendor
        driver = vendor.host_driver if vendor is not None else "its driver"
        problems.append(
            Diagnostic.error(
                "gpu-minor-unknown",
                str(gpu.address),
                f"is on {gpu.driver or 'no driver'}, so its {nodes.gpu_path.format(minor='N')} "
                f"minor is unknown ({driver} assigns it when it binds)",
                f"return it to {driver} first (pvegpu-vfio-split revert), then plan again",
            )
        )
    return problems


def vm_guest(
    facts: HostFacts,
    spec: PoolSpec,
    gpus: Sequence[GPU],
    mapping: PciMapping | None,
    problems: list[Diagnostic],
    findings: list[Diagnostic],
    pool_mappings: Collection[str] = (),
    *,
    switches: int = 0,
) -> VmGuest | None:
    """The VM of a vfio pool: its hostpci lines over the pool's mapping, its NUMA pin.

    `pool_mappings`: the mapping ids of every pool of the spec. A mapping the pool's GPUs
    leave is an old one whose lines the VM's follow them, unless it is a pool's mapping:
    then a line on it is that pool's, judged by host_guests.py. `switches`: how many
    NVSwitches the mapping carries besides the GPUs (a whole board), a line each.
    """
    if spec.vfio is None or spec.vfio.vm is None:
        return None
    vmid, numa = spec.vfio.vm.vmid, spec.vfio.vm.numa
    path = vm_config(vmid)
    config = guests(facts).file(QEMU, vmid)
    if spec.mapping is None:
        problems.append(
            Diagnostic.error(
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
    # A vGPU pool's lines name the type Proxmox sets on the VF at start (planning/vgpu.py).
    mdev = spec.vfio.vgpu_type
    if config is not None:
        parsed = guests(facts).config(config)
        pcie = parsed.is_q35
        if mapping_id:
            count = len(gpus) + switches
            own = parsed.hostpci_problems(mapping_id, count, numa=numa, mapped=mapped, old=old)
            problems.extend(own)
            if not own:
                patched = qemuconf.patch_hostpci(
                    config.content, mapping_id, count, pcie=pcie, mapped=mapped, old=old, mdev=mdev
                )
                findings.extend(_converted(path, mapping_id, patched.conversions))
        if not pcie:
            findings.append(
                Diagnostic(
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
        count=len(gpus) + switches,
        numa_pin=pin,
        mapped=mapped,
        pcie=pcie,
        old_mappings=old,
        mdev=mdev,
    )


def _converted(
    path: str, mapping_id: str, conversions: Sequence[hostpci.Conversion]
) -> list[Diagnostic]:
    """One finding per line moved off a mapping the GPUs leave: its diff shows a changed
    mapping id, and the reviewer should see that the VM keeps its devices and options."""
    findings: list[Diagnostic] = []
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
            Diagnostic(
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
    facts: HostFacts, gpus: Sequence[GPU], subject: str, problems: list[Diagnostic]
) -> qemuconf.NumaPin | None:
    nodes = {g.numa_node for g in gpus}
    node = next(iter(nodes)) if len(nodes) == 1 else None
    numa = next((n for n in facts.numa_nodes if n.id == node), None)
    if node is None or numa is None:
        known = sorted(nodes, key=lambda n: -1 if n is None else n)
        problems.append(
            Diagnostic.error(
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
    findings: list[Diagnostic] = []
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
            held = guests(plan.facts).config(container.config).cpuset
            if held is not None and set(node.cpus.cpus) <= set(held.cpus):
                pools.append(pool)
                continue
            findings.append(
                Diagnostic(
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
        cores = guests(plan.facts).config(container.config).cores()
        if cores is not None and cores > len(node.cpus):
            findings.append(
                Diagnostic(
                    Severity.WARNING,
                    "lxc-cores-beyond-node",
                    container.config_path,
                    f"cores: {cores} > {len(node.cpus)} CPUs of NUMA node {node.id}, which the "
                    f"container's cpuset is pinned to: lower cores to {len(node.cpus)} or less",
                )
            )
    return attrs.evolve(plan, pools=tuple(pools), findings=(*plan.findings, *findings))
