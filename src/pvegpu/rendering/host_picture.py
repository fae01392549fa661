"""The host as it is, as a picture: NUMA nodes, PCIe switches, GPUs and who uses them.

A pure function of HostFacts, for `pvegpu discover --svg` (host_svg.py draws it): no
spec, no plan. NUMA nodes hold GPUs in PCI order; a GPU behind a PCIe switch hangs off
a box for that switch (the switch's upstream port, as the GPU's sysfs path shows it);
each GPU says its functions, IOMMU group, driver and device node; every guest (and the
host itself) that reaches a GPU today, by any of the ways `HostFacts.references` lists,
is a box with an edge to each GPU it reaches. Ids are pvegpu's own (`gpu3`, `user1`),
never a name read from the host, so a guest name is only ever escaped text.

The host facts line (IOMMU, SEV-SNP, drivers) is here too: the bundle's SUMMARY.md and
topology.svg say the host in the same words (review/gpu_layout.py re-exports it).
"""

from __future__ import annotations

import attrs

from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.guests import LXC, QEMU, guests
from pvegpu.model.kernels import ModuleOrigin
from pvegpu.model.ports import upstream_bridges
from pvegpu.model.references import GpuReference, Holder
from pvegpu.pci import PciAddress
from pvegpu.rendering.drawing import UNBOUND, Box
from pvegpu.values import value_class
from pvegpu.vendors import Vendor
from pvegpu.wording import plural


def _driver(facts: HostFacts, vendor: Vendor) -> str:
    loaded = facts.gpu_driver(vendor.host_driver)
    if loaded is None:
        return "not loaded"
    text = f"{loaded.version} ({loaded.flavor} kernel module)"
    # An upgrade installed and not yet running (planning/next_boot.py).
    kernel = facts.boot.kernels.next_boot
    module = facts.boot.kernels.module(vendor.host_driver)
    if module is not None and module.version not in (None, loaded.version):
        text += f", {module.version} after the next boot (kernel {kernel})"
    elif module is not None and module.origin is ModuleOrigin.NONE:
        text += f", none after the next boot (kernel {kernel} has no module)"
    return text


def host_facts_line(facts: HostFacts) -> str:
    """IOMMU mode, SEV-SNP and driver version: the three facts the split depends on."""
    unit = {"amd": "AMD-Vi", "intel": "VT-d"}.get(facts.iommu.vendor or "", "")
    types = sorted({str(g.type) for g in facts.iommu_groups if g.type is not None})
    detail = ", ".join(x for x in (unit, f"groups {'/'.join(types)}" if types else "") if x)
    iommu = f"{facts.iommu_mode}" + (f" ({detail})" if detail else "")
    drivers = "".join(f"{v.name} driver: {_driver(facts, v)} · " for v in facts.reported_drivers())
    nodes = sorted({g.numa_node for g in facts.gpus if g.numa_node is not None})
    return (
        f"IOMMU: {iommu} · SEV-SNP: {'on' if facts.sev_snp else 'off'} · "
        f"{drivers}{plural(len(facts.gpus), 'GPU')} on "
        f"{plural(len(nodes), 'NUMA node')}"
    )


@value_class
@attrs.frozen(eq=False, repr=False)
class Attachment:
    """GPUs that reach the CPU the same way: behind one PCIe switch (`switch`), or each
    on its own root port (`switch` None, one GPU)."""

    switch: Box | None
    gpus: tuple[Box, ...]


@value_class
@attrs.frozen(eq=False, repr=False)
class HostNuma:
    box: Box
    attachments: tuple[Attachment, ...]

    @property
    def gpus(self) -> tuple[Box, ...]:
        return tuple(g for a in self.attachments for g in a.gpus)


@value_class
@attrs.frozen(eq=False, repr=False)
class User:
    """A guest or the host, and the GPUs it reaches: (GPU box id, only through a
    reference that reaches every GPU of a kind)."""

    box: Box
    edges: tuple[tuple[str, bool], ...]


@value_class
@attrs.frozen(eq=False, repr=False)
class HostPicture:
    title: str
    subtitle: str
    description: str
    numa: tuple[HostNuma, ...]
    users: tuple[User, ...]
    drivers: tuple[str, ...]
    """The GPUs' drivers now, in order of appearance, for the legend."""

    @property
    def any_switch(self) -> bool:
        return any(a.switch is not None for n in self.numa for a in n.attachments)

    @property
    def any_every(self) -> bool:
        return any(every for u in self.users for _, every in u.edges)


def _others_in_group(facts: HostFacts, gpu: GPU) -> tuple[PciAddress, ...]:
    """Members of the GPU's IOMMU group that are neither its functions nor a bridge (a
    switch's ports share a group without ACS): what would have to leave with it."""
    group = facts.group(gpu.iommu_group) if gpu.iommu_group is not None else None
    if group is None:
        return ()
    own = {f.address for f in gpu.functions}
    found = []
    for address in group.members:
        function = facts.function(address)
        if address not in own and not (function is not None and function.is_bridge):
            found.append(address)
    return tuple(found)


def _gpu_box(facts: HostFacts, index: int, gpu: GPU) -> Box:
    driver = gpu.driver or UNBOUND
    lines = [f"GPU {index} · {gpu.address.short}", gpu.model or gpu.vendor_device]
    state = driver
    if gpu.iommu_group is not None:
        others = _others_in_group(facts, gpu)
        state += f" · IOMMU group {gpu.iommu_group}"
        if others:
            state += f" + {plural(len(others), 'other device')}"
    lines.append(state)
    if gpu.companions:
        lines.append(
            "with "
            + ", ".join(f".{c.address.function} {c.driver or UNBOUND}" for c in gpu.companions)
        )
    if gpu.bmc_display:
        lines.append("BMC display (never pooled)")
    elif gpu.node_path is not None:
        lines.append(gpu.node_path)
    if (sriov := gpu.function.sriov) is not None:
        lines.append(f"SR-IOV: {sriov.num_vfs} of {sriov.total_vfs} VFs")
    details = [str(gpu.address), gpu.vendor_device]
    if gpu.model:
        details.append(gpu.model)
    if (link := gpu.function.link) is not None:
        width = "" if link.current_width is None else f" x{link.current_width}"
        details.append(f"link {link.current_speed}{width}")
    bridges = upstream_bridges(gpu.function)
    if bridges:
        details.append(f"root port {bridges[0].short}")
    if others := _others_in_group(facts, gpu):
        details.append("IOMMU group also holds " + " ".join(str(a) for a in others))
    return Box(f"gpu{index}", tuple(lines), driver=driver, tooltip=", ".join(details))


def _switch_of(gpu: GPU) -> tuple[PciAddress, PciAddress] | None:
    """(upstream port, root port) of the switch nearest the GPU; None when the GPU sits
    on its root port. A switch is an upstream port below a bridge with downstream ports
    below it: root port, upstream, downstream, GPU is the shortest such path."""
    bridges = upstream_bridges(gpu.function)
    return (bridges[-2], bridges[0]) if len(bridges) >= 3 else None


def _numa_groups(facts: HostFacts, index: dict[PciAddress, int]) -> tuple[HostNuma, ...]:
    by_node: dict[int | None, list[GPU]] = {}
    for gpu in sorted(facts.gpus, key=lambda g: (g.numa_node is None, g.numa_node or 0)):
        by_node.setdefault(gpu.numa_node, []).append(gpu)
    cpus = {n.id: n.cpus for n in facts.numa_nodes}
    groups = []
    switches: dict[PciAddress, int] = {}
    for node, members in by_node.items():
        if node is None:
            box = Box("numa_none", ("no NUMA node", "firmware gives none"))
        else:
            extra = (f"CPUs {cpus[node]}",) if cpus.get(node) else ()
            box = Box(f"numa{node}", (f"NUMA {node}", *extra))
        # The GPUs behind one switch in one block, at the place of the first of them.
        blocks: dict[PciAddress, list[GPU]] = {}
        for gpu in members:
            found = _switch_of(gpu)
            blocks.setdefault(found[0] if found else gpu.address, []).append(gpu)
        attachments = []
        for key, gpus in blocks.items():
            boxes = tuple(_gpu_box(facts, index[g.address], g) for g in gpus)
            found = _switch_of(gpus[0])
            switch = None
            if found is not None and found[0] == key:
                number = switches.setdefault(key, len(switches))
                upstream, root = found
                switch = Box(
                    f"switch{number}",
                    ("PCIe switch", f"upstream port {upstream.short}", f"root port {root.short}"),
                    tooltip=f"PCIe switch: upstream port {upstream}, below root port {root}",
                )
            attachments.append(Attachment(switch, boxes))
        groups.append(HostNuma(box, tuple(attachments)))
    return tuple(groups)


def guest_name(facts: HostFacts, ref: GpuReference) -> str:
    """The container's `hostname:` or the VM's `name:` from its config's main section;
    empty when the config has none (or is not among the files discovery read)."""
    kind = {Holder.CONTAINER: LXC, Holder.VM: QEMU}.get(ref.holder)
    if kind is None or ref.vmid is None:
        return ""
    config = guests(facts).file(kind, ref.vmid)
    if config is None:
        return ""
    key = "hostname" if ref.holder is Holder.CONTAINER else "name"
    return guests(facts).config(config).value(key) or ""


def _users(facts: HostFacts, ids: dict[PciAddress, str]) -> tuple[User, ...]:
    """Who reaches each GPU now: the main and pending sections of each guest's config (a
    snapshot is history) and the host's files; a reference that does nothing here (the
    other cgroup hierarchy's key) is left out, as `pvegpu discover` leaves it out."""
    kinds: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    edges: dict[str, dict[str, bool]] = {}
    unknown: dict[str, int] = {}
    for ref in facts.references:
        if (ref.section is not None and not ref.pending) or ref.inert is not None:
            continue
        guest = ref.guest
        names.setdefault(guest, guest_name(facts, ref))
        kind = ref.kind.value + (" (pending)" if ref.pending else "")
        kinds.setdefault(guest, [])
        if kind not in kinds[guest]:
            kinds[guest].append(kind)
        reached = edges.setdefault(guest, {})
        for gpu in ref.gpus:
            if gpu in ids:
                # Dashed only while every way this guest reaches the GPU is a blanket one.
                reached[ids[gpu]] = reached.get(ids[gpu], True) and ref.every is not None
        if ref.unresolved is not None:
            unknown[guest] = unknown.get(guest, 0) + 1
    order = sorted(kinds, key=_guest_order)
    users = []
    for number, guest in enumerate(order):
        lines = [guest.replace("the host", "this host")]
        if names[guest]:
            lines.append(names[guest])
        lines.append(", ".join(kinds[guest]))
        if guest in unknown:
            lines.append(f"? {plural(unknown[guest], 'reference')} pvegpu cannot resolve")
        gpus = sorted(edges[guest].items(), key=lambda e: int(e[0].removeprefix("gpu")))
        users.append(User(Box(f"user{number}", tuple(lines)), tuple(gpus)))
    return tuple(users)


def _guest_order(guest: str) -> tuple[int, int]:
    """Containers, then VMs, by VMID; the host last."""
    kind, _, number = guest.partition(" ")
    rank = {"CT": 0, "VM": 1}.get(kind, 2)
    return rank, int(number) if number.isdigit() else 0


def host_picture(facts: HostFacts) -> HostPicture:
    gpus = sorted(facts.gpus, key=lambda g: g.address)
    index = {g.address: i for i, g in enumerate(gpus)}
    ids = {address: f"gpu{i}" for address, i in index.items()}
    users = _users(facts, ids)
    described = []
    for i, gpu in enumerate(gpus):
        holders = [u.box.lines[0] for u in users if any(e == ids[gpu.address] for e, _ in u.edges)]
        used = f", used by {', '.join(holders)}" if holders else ""
        described.append(f"GPU {i} {gpu.address.short} on {gpu.driver or UNBOUND}{used}")
    return HostPicture(
        title=f"GPUs of {facts.node} now",
        subtitle=host_facts_line(facts),
        description=f"{facts.node}: " + ("; ".join(described) or "no GPUs"),
        numa=_numa_groups(facts, index),
        users=users,
        drivers=tuple(dict.fromkeys(g.driver or UNBOUND for g in gpus)),
    )
