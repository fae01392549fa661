"""Every GPU reference on the host (`HostFacts.references`) judged against the plan.

The guest lines pvegpu rewrites (another container's `devN`, bind mount and cgroup rule,
a VM's `hostpciN`) are judged by host_guests.py and mapping_moves.py. This module judges
the rest, and makes "I cannot tell" a finding instead of silence:

- a reference pvegpu could not resolve to GPUs is named, with why and the fix
  (`gpu-reference-unresolved`): the plan moves or renumbers GPUs it may reach;
- LXC's vendor hook (`lxc.hook.mount: .../hooks/nvidia` and its `NVIDIA_VISIBLE_DEVICES`)
  that gives a container pool GPUs it may not hold, by index numbers the split shifts,
  or beside the devN entries of a pool's own container, is refused;
- a VM's `args:` passing a pool's device to QEMU is refused (`vm-args-takes-pool-gpu`);
- a host file or hookscript that moves a GPU a container pool keeps on its driver is
  refused (`binder-takes-host-gpu`); one that also binds a vfio pool's GPU races the
  split unit (`second-gpu-binder`);
- a host file, hook or hookscript naming a GPU node by number (a udev rule, a unit, a
  chown) that the split removes or renumbers is named (`gpu-reference-renumbered`), a
  CDI spec once with its devices (`cdi-spec-stale`, planning/cdi.py);
- a hook, hookscript or host file that is no binder but still acts on a GPU the plan
  gives to another guest is named (`gpu-reference-moved`), so no reference to a GPU the
  plan moves passes in silence;
- a container holding GPUs by the cgroup key this host does not apply is named
  (`lxc-cgroup-key-inert`, a host finding: `pvegpu check` reports it too).
The rules in words: docs/formats.md, "Every reference to a GPU".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.binder_units import binder_units
from pvegpu.model.facts import HostFacts, driver_order
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.model.references import GpuReference, Holder, ReferenceKind
from pvegpu.model.schema import DeviceStyle
from pvegpu.pci import PciAddress
from pvegpu.planning.cdi import cdi_findings
from pvegpu.planning.claims import by_destination, container_may_hold, vm_may_hold
from pvegpu.planning.numbering import Renumbering
from pvegpu.pvefiles.guestconf import PENDING_SECTIONS
from pvegpu.vendors import VENDORS
from pvegpu.vendors.drm import DRM_MAJOR
from pvegpu.wording import plural

# Kinds whose lines host_guests.py reads and rewrites itself; only what it cannot read
# (an unresolved one) is this module's.
_GUEST_LINES = (
    ReferenceKind.DEV_ENTRY,
    ReferenceKind.MOUNT_ENTRY,
    ReferenceKind.CGROUP2_RULE,
    ReferenceKind.CGROUP1_RULE,
    ReferenceKind.HOSTPCI,
    ReferenceKind.DRIVERCTL,  # planning/driverctl.py
)
# Binders whose action does not take a GPU off its driver (sysfs.conf's `sriov_numvfs`
# makes a PF's VFs; `gpu-reference-moved` names it when the plan moves that PF).
_HARMLESS_BINDS = ("bind",)
_HARMLESS_PREFIXES = ("sriov_numvfs",)
# Binders that keep a driver from loading: they take nothing from vfio-pci.
_BLACKLISTS = ("blacklist", "module_blacklist")


def reference_judgments(
    facts: HostFacts, pools: Sequence[Pool], numbers: Renumbering
) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """The refusals and findings the host's GPU references give against the plan."""
    problems: list[Diagnostic] = []
    findings: list[Diagnostic] = []
    if not pools:
        return problems, findings
    owners = _owners(pools)
    leaving = frozenset(a for p in pools if p.moves_to_vfio for a in _addresses(p))
    cdi: list[GpuReference] = []
    for ref in facts.references:
        if _snapshot(ref):
            continue  # history: a rollback is planned again (snapshot-grants-pool-gpus)
        if ref.inert is not None:
            continue  # cgroup_key_findings
        if ref.unresolved is not None and not _binder_unit(facts, ref):
            findings.append(_unresolved(ref, pools))
        if ref.kind in _GUEST_LINES:
            continue
        if ref.kind is ReferenceKind.GPU_HOOK:
            problems.extend(_hook(facts, ref, pools, owners, leaving))
        elif ref.kind is ReferenceKind.QEMU_ARGS:
            problems.extend(_qemu_args(ref, owners))
        elif ref.kind is ReferenceKind.CDI:
            cdi.append(ref)
        else:
            said = len(problems) + len(findings)
            problems.extend(_binder(ref, owners, findings))
            findings.extend(_by_number(ref, owners, leaving, numbers))
            if len(problems) + len(findings) == said and ref.unresolved is None:
                # Nothing above spoke for it: it still reaches a GPU the plan moves.
                findings.extend(_moved(ref, owners))
    findings.extend(cdi_findings(facts, cdi, owners, leaving, numbers))
    return problems, findings


def _owners(pools: Sequence[Pool]) -> dict[PciAddress, Pool]:
    return {a: p for p in pools for a in _addresses(p)}


def _addresses(pool: Pool) -> set[PciAddress]:
    return {*(g.address for g in pool.gpus), *(f.address for f in pool.functions)}


def _snapshot(ref: GpuReference) -> bool:
    return ref.section is not None and ref.section.lower() not in PENDING_SECTIONS


def _binder_unit(facts: HostFacts, ref: GpuReference) -> bool:
    """A unit `other-gpu-binder` already names (planning/findings.py)."""
    if ref.kind is not ReferenceKind.SYSTEMD_UNIT:
        return False
    return ref.path in binder_units(facts)


def _touched(pools: Sequence[Pool]) -> str:
    moved = sum(len(p.gpus) for p in pools if p.moves_to_vfio)
    kept = sum(len(p.gpus) for p in pools if not p.moves_to_vfio)
    parts = [f"moves {moved} GPU{'s' if moved != 1 else ''} to vfio-pci"] if moved else []
    parts += [f"gives {kept} to containers, VMs' vGPUs or the host"] if kept else []
    return " and ".join(parts)


def _fix(ref: GpuReference) -> str:
    vmid = ref.vmid
    fixes = {
        ReferenceKind.DEV_ENTRY: "name the node by number or by its /dev/dri/by-path name",
        ReferenceKind.MOUNT_ENTRY: "bind the node by number or by its /dev/dri/by-path name",
        ReferenceKind.CGROUP2_RULE: "write it as `c MAJOR:MINOR rwm` with numbers or `*`",
        ReferenceKind.CGROUP1_RULE: "write it as `c MAJOR:MINOR rwm` with numbers or `*`",
        ReferenceKind.GPU_HOOK: "name the GPUs by their UUIDs",
        ReferenceKind.LXC_HOOK: "make the hook name its devices by PCI address or node, or "
        f"remove the line (edit /etc/pve/lxc/{vmid}.conf)",
        ReferenceKind.HOSTPCI: f"remove the line (qm set {vmid} --delete hostpciN) or add "
        "the mapping for this node",
        ReferenceKind.QEMU_ARGS: f"pass the device as a hostpci line instead (qm set {vmid} "
        "--hostpciN <address>) and remove it from args",
        ReferenceKind.HOOKSCRIPT: "make the hookscript name its GPUs by PCI address, or "
        f"detach it (qm set {vmid} --delete hookscript)",
        ReferenceKind.SYSTEMD_UNIT: "make it name its devices by PCI address, or disable it "
        "(pvegpu's split unit binds by address)",
        ReferenceKind.SYSFS_CONF: "write the device's PCI address in the path, or remove the "
        "line (pvegpu's split unit binds by address)",
        ReferenceKind.UDEV_RULE: 'match the GPU by its PCI address (KERNELS=="<address>"), '
        "or remove the rule",
        ReferenceKind.CMDLINE: f"remove it from the kernel command line ({_CMDLINE_FILES})",
    }
    return fixes.get(ref.kind, "make it name its GPUs by PCI address, or remove it")


def _undo(ref: GpuReference) -> str:
    """How to take a binder out of the way, by kind."""
    undo = {
        ReferenceKind.UDEV_RULE: "edit the rule, then `udevadm control --reload`",
        ReferenceKind.SYSFS_CONF: "edit the file; sysfsutils applies it at every boot",
        ReferenceKind.SYSTEMD_UNIT: f"`systemctl disable {ref.path.rpartition('/')[2]}`",
        ReferenceKind.MODPROBE: "edit the file, then `update-initramfs -u -k all`",
        ReferenceKind.HOOKSCRIPT: f"`qm set {ref.vmid} --delete hookscript` detaches it",
        ReferenceKind.LXC_HOOK: f"the line is in /etc/pve/lxc/{ref.vmid}.conf",
        ReferenceKind.CMDLINE: f"remove it from {_CMDLINE_FILES}, then "
        "`proxmox-boot-tool refresh` or `update-grub`, and reboot",
    }
    return undo.get(ref.kind, f"the line is in /{ref.path}")


_CMDLINE_FILES = "/etc/kernel/cmdline, or GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub"


def _unresolved(ref: GpuReference, pools: Sequence[Pool]) -> Diagnostic:
    return Diagnostic(
        Severity.WARNING,
        "gpu-reference-unresolved",
        ref.where,
        f"{ref.guest}'s {ref.kind.value} `{ref.text.strip()}` may reach GPUs, but pvegpu "
        f"cannot tell which: {ref.unresolved}. This plan {_touched(pools)}: check that it "
        f"reaches none of them (or only those it should), or {_fix(ref)}, then run pvegpu "
        "again",
    )


def _names(gpus: Sequence[PciAddress], owners: dict[PciAddress, Pool]) -> str:
    """`81:00.0, 91:00.0, which the plan gives to vfio-pci (pool vm); 05:00.0`: grouped
    by where the plan sends them, GPUs in no pool last."""
    owned = by_destination((g.short, owners[g]) for g in gpus if g in owners)
    free = ", ".join(g.short for g in gpus if g not in owners)
    return "; ".join(p for p in (owned, free) if p)


# --- a vendor's LXC hook ---------------------------------------------------------------


def _hook(
    facts: HostFacts,
    ref: GpuReference,
    pools: Sequence[Pool],
    owners: dict[PciAddress, Pool],
    leaving: frozenset[PciAddress],
) -> Iterator[Diagnostic]:
    vmid = ref.vmid
    if vmid is None:
        return
    after = _hook_after(facts, ref, leaving)
    reached = list(dict.fromkeys((*ref.gpus, *after)))
    hook = next((v.container_hook for v in VENDORS if v.container_hook is not None), None)
    variable = hook.variable if hook is not None else "the hook's variable"
    own = next((p for p in pools if p.lxc is not None and p.lxc.vmid == vmid), None)
    keeps = [
        g
        for g in facts.gpus
        if g.address not in leaving
        and (g.address not in owners or container_may_hold(owners[g.address], vmid))
        and (own is None or g.address in owners)
        and g.uuid is not None
    ]
    # What it names today and keeps: the admin's GPUs, not those an index shifts onto.
    uuids = ",".join(g.uuid for g in keeps if g.uuid is not None and g.address in ref.gpus)
    fix = (
        f"set `lxc.environment: {variable}={uuids}` (the UUIDs of the GPUs CT {vmid} keeps)"
        if uuids
        else f"remove the hook and its {variable} line: CT {vmid} keeps none of its GPUs"
    )
    taken = [g for g in reached if g in owners and not container_may_hold(owners[g], vmid)]
    if taken:
        yield Diagnostic.error(
            "lxc-hook-grants-pool-gpu",
            ref.where,
            f"`{ref.text.strip()}` with {ref.selector} gives CT {vmid}, at every start, "
            f"{_names(taken, owners)}" + _hook_leaving(ref, taken, after, leaving),
            f"{fix}, then run pvegpu again",
        )
        return
    if ref.selector is not None and ref.every is None and list(ref.gpus) != after:
        yield Diagnostic.error(
            "lxc-hook-index-shifts",
            ref.where,
            f"{ref.selector} in CT {vmid} names GPUs by index in the driver's order, and the "
            "split takes GPUs out of that order: today it names "
            f"{', '.join(g.short for g in ref.gpus) or 'none'}, after the split "
            f"{', '.join(g.short for g in after) or 'none'}",
            f"name them by UUID instead: {fix}, then run pvegpu again",
        )
        return
    if own is not None and own.lxc is not None:
        outside = [g for g in reached if g not in _addresses(own)]
        if outside:
            yield Diagnostic.error(
                "lxc-hook-beyond-pool",
                ref.where,
                f"the hook gives CT {vmid} (pool {own.name}) GPUs outside its pool too "
                f"({', '.join(g.short for g in outside)}): its server would see more GPUs "
                "than the plan gives it, and the visible devices would name the wrong ones",
                f"{fix}, then run pvegpu again",
            )
        elif own.lxc.devices is DeviceStyle.DEV:
            yield Diagnostic.error(
                "lxc-hook-with-dev-entries",
                ref.where,
                f"the hook mounts CT {vmid}'s GPU nodes at every start, and the plan writes "
                "devN entries for the same nodes: pve-container then fails the start "
                "(`Could not mknod ... File exists`)",
                f"remove the hook and its {variable} line from /etc/pve/lxc/{vmid}.conf, or "
                f'set devices = "raw" in the pool, then run pvegpu again',
            )


def _hook_leaving(
    ref: GpuReference,
    taken: Sequence[PciAddress],
    after: Sequence[PciAddress],
    leaving: frozenset[PciAddress],
) -> str:
    """What the GPUs the split takes from the driver do to the hook's next starts."""
    if not any(g in leaving for g in taken):
        return ""
    if ref.every is None:
        return (
            "; a GPU that leaves the driver also fails the hook, and the container does not start"
        )
    # `all` is resolved at each start: until the split moves them (and again after a
    # revert, or when the split fails at boot) it takes them; then it quietly has fewer.
    return (
        f" (until the split moves them; then `all` is the {plural(len(after), 'GPU')} the "
        f"driver still holds, not the {len(ref.gpus)} it names today)"
    )


def _hook_after(
    facts: HostFacts, ref: GpuReference, leaving: frozenset[PciAddress]
) -> list[PciAddress]:
    """The GPUs the hook reaches after the split: indices count only the GPUs the driver
    still holds; `every` is what it still holds; UUIDs stay their GPUs."""
    order = driver_order(facts.gpus)
    after = [a for a in order if a not in leaving]
    if ref.every is not None:
        return after
    value = (ref.selector or "").partition("=")[2]
    by_uuid = {g.uuid: g.address for g in facts.gpus if g.uuid is not None}
    found: list[PciAddress] = []
    for item in (i.strip() for i in value.split(",")):
        index = item.partition(":")[0]
        if index.isascii() and index.isdigit():
            if int(index) < len(after):
                found.append(after[int(index)])
        elif item in by_uuid:
            found.append(by_uuid[item])
    return sorted(set(found))


# --- QEMU args -------------------------------------------------------------------------


def _qemu_args(ref: GpuReference, owners: dict[PciAddress, Pool]) -> Iterator[Diagnostic]:
    taken = [a for a in ref.addresses if a in owners]
    if taken and ref.vmid is not None:
        yield Diagnostic.error(
            "vm-args-takes-pool-gpu",
            ref.where,
            f"`{ref.text.strip()}` hands VM {ref.vmid} {_names(taken, owners)}: QEMU opens "
            "it behind every mapping and hostpci line, so two guests (or one twice) take the "
            "device",
            f"{_fix(ref)}, then run pvegpu again",
        )


# --- host files and scripts that move GPUs ---------------------------------------------


def _binder(
    ref: GpuReference,
    owners: dict[PciAddress, Pool],
    findings: list[Diagnostic],
) -> Iterator[Diagnostic]:
    if ref.binds is None or _harmless(ref.binds):
        return
    if ref.kind is ReferenceKind.MODPROBE and ref.ids and ref.binds == "vfio-pci ids=":
        return  # vfio-ids-grab-host-gpu and vfio-ids-identical judge ids= (planner.py)
    hit = [g for g in ref.gpus if g in owners]
    host_side = [g for g in hit if owners[g].kind is not PoolKind.VFIO]
    own_vm = (
        ref.holder is Holder.VM
        and ref.vmid is not None
        and all(owners[g].vm is not None and owners[g].vm.vmid == ref.vmid for g in hit)  # type: ignore[union-attr]
    )
    if not host_side and ref.binds in _BLACKLISTS:
        return  # keeping a driver off GPUs that go to vfio-pci agrees with the split
    if host_side and ref.binds == "blacklist":
        remove = (
            f"remove it from the kernel command line ({_CMDLINE_FILES})"
            if ref.kind is ReferenceKind.CMDLINE
            else "remove the line"
        )
        findings.append(
            Diagnostic(
                Severity.WARNING,
                "gpu-driver-blacklisted",
                ref.where,
                f"`{ref.text.strip()}` keeps the driver from loading by itself at boot, and "
                f"the plan keeps {_names(host_side, owners)} on it: they come up without a "
                "driver unless something loads it by name (modules-load.d, a service); "
                f"{remove} if nothing does",
            )
        )
    elif host_side and not own_vm:
        yield Diagnostic.error(
            "binder-takes-host-gpu",
            ref.where,
            f"{ref.guest}'s {ref.kind.value} `{ref.text.strip()}` ({ref.binds}) moves "
            f"{_names(host_side, owners)}: "
            + (
                "at every start or stop of the VM"
                if ref.kind is ReferenceKind.HOOKSCRIPT
                else "at every boot"
                if ref.holder is Holder.HOST
                else f"at every start of {ref.guest}"
            )
            + ", away from the driver the plan keeps them on",
            f"remove it, or make it touch only devices the plan does not keep on the host "
            f"({_undo(ref)}), then run pvegpu again",
        )
    elif hit and ref.kind is not ReferenceKind.SYSTEMD_UNIT:
        findings.append(
            Diagnostic(
                Severity.WARNING,
                "second-gpu-binder",
                ref.where,
                f"{ref.guest}'s {ref.kind.value} `{ref.text.strip()}` ({ref.binds}) also "
                f"moves {_names(hit, owners)}: it and pvegpu's split unit race at every "
                + ("start or stop of the VM" if ref.kind is ReferenceKind.HOOKSCRIPT else "boot")
                + ", and the last one wins; once the split unit is installed, "
                f"{_fix(ref)}",
            )
        )


def _by_number(
    ref: GpuReference,
    owners: dict[PciAddress, Pool],
    leaving: frozenset[PciAddress],
    numbers: Renumbering,
) -> Iterator[Diagnostic]:
    """A host file naming a GPU node by number, when the split takes it away or the next
    boot numbers it afresh (host_guests.py rewrites containers' lines; these it cannot)."""
    node = ref.node
    if node is None or node.major is None or node.minor is None or not ref.gpus:
        return
    gpu = ref.gpus[0]
    change = numbers.by_node.get((node.major, node.minor))
    if ref.kind is ReferenceKind.UDEV_RULE:
        fix = 'match the GPU by its PCI address (KERNELS=="<address>") instead'
    elif node.major == DRM_MAJOR:
        fix = "name the node by its stable name (/dev/dri/by-path/pci-<address>-card|render)"
    else:
        fix = "name the GPU by its PCI address or its UUID"
    if gpu in leaving:
        heir = next(
            (c.gpu for c in numbers.changes if (c.major, c.after) == (node.major, node.minor)),
            None,
        )
        then = (
            f", and after the reboot that number is {_names([heir], owners)}"
            if heir is not None
            else ""
        )
        message = (
            f"`{ref.text.strip()}` names {ref.node_path or node} of {_names([gpu], owners)}: "
            f"after the split that node is gone{then}; {fix}"
        )
    elif change is not None:
        message = (
            f"`{ref.text.strip()}` names {gpu.short} by its number now ({change.before}), "
            f"which is {change.after} after the reboot with the split: then it names "
            f"another GPU or none; {fix}"
        )
    else:
        return
    yield Diagnostic(Severity.WARNING, "gpu-reference-renumbered", ref.where, message)


def _harmless(binds: str) -> bool:
    """A binder's action that takes no GPU off its driver (`bind`, `sriov_numvfs = 7`)."""
    return binds in _HARMLESS_BINDS or binds.startswith(_HARMLESS_PREFIXES)


def _moved(ref: GpuReference, owners: dict[PciAddress, Pool]) -> Iterator[Diagnostic]:
    """A hook, hookscript or host file that reaches a GPU the plan gives to a guest other
    than its own (to a VM on vfio-pci, or to another container) and that nothing above
    judged: what it does there is no longer the admin's intent (`gpu-reference-moved`)."""
    if ref.binds is not None and not _harmless(ref.binds):
        return  # a binder: `_binder` and the planner's ids= checks judge those
    elsewhere = [g for g in ref.gpus if g in owners and not _may_hold(owners[g], ref)]
    if not elsewhere:
        return
    when = {
        Holder.CONTAINER: f"at every start of CT {ref.vmid}",
        Holder.VM: f"at every start and stop of VM {ref.vmid}",
    }.get(ref.holder, "at every boot")
    names = _names(elsewhere, owners)
    reach = names if ref.every is None else f"{ref.every}, among them {names}"
    yield Diagnostic(
        Severity.WARNING,
        "gpu-reference-moved",
        ref.where,
        f"{ref.guest}'s {ref.kind.value} `{ref.text.strip()}` reaches {reach}: {when} it "
        "still acts on GPUs the plan gives to another guest. Check what it does to them; "
        f"{_fix(ref)}, then run pvegpu again",
    )


def _may_hold(pool: Pool, ref: GpuReference) -> bool:
    """Whether the reference's holder keeps the pool's GPU: its own container or VM, and
    the host for every GPU that stays on a host driver."""
    if ref.holder is Holder.CONTAINER and ref.vmid is not None:
        return container_may_hold(pool, ref.vmid)
    if ref.holder is Holder.VM and ref.vmid is not None:
        return vm_may_hold(pool, ref.vmid)
    return not pool.moves_to_vfio


def cgroup_key_findings(
    facts: HostFacts, own: frozenset[int] = frozenset()
) -> Iterator[Diagnostic]:
    """Containers that hold GPUs by the devices.allow key of the hierarchy this host does
    not apply (`lxc.cgroup.*` on cgroup2 hosts, ignored outright by LXC 7.0): they have no
    access through those lines. A pool's own container (`own`) loses them with its patch
    (they are its GPU lines); every other container is named with the fix. A host finding
    (planning/findings.py): plans and `pvegpu check` report it alike."""
    by_file: dict[str, list[GpuReference]] = {}
    for ref in facts.references:
        if ref.inert is not None and ref.main_section and (ref.gpus or ref.every):
            by_file.setdefault(ref.path, []).append(ref)
    for path, refs in by_file.items():
        vmid = refs[0].vmid
        if vmid in own:
            continue
        key = refs[0].kind.value
        lines = ", ".join(str(r.line) for r in refs)
        gpus = sorted({g for r in refs for g in r.gpus})
        live = facts.cgroup.allow_key
        why = refs[0].inert
        if refs[0].kind is ReferenceKind.CGROUP1_RULE and facts.pve.lxc_ignores_cgroup_v1:
            why = (
                f"LXC {facts.pve.lxc_major} (lxc-pve {facts.pve.lxc}) ignores every "
                "lxc.cgroup.* key (pve-container warns of them at start)"
            )
        yield Diagnostic(
            Severity.WARNING,
            "lxc-cgroup-key-inert",
            path,
            f"CT {vmid} allows GPU nodes by `{key}` (line{'s' if len(refs) > 1 else ''} "
            f"{lines}: {', '.join(g.short for g in gpus) or 'every GPU'}), but {why}: it "
            f"has no access through {'them' if len(refs) > 1 else 'it'}. Replace "
            f"{'them' if len(refs) > 1 else 'it'} with `{live}` rules for the GPUs it should "
            f"have (one `c MAJOR:MINOR rwm` each, in /etc/pve/lxc/{vmid}.conf), or remove "
            f"{'them' if len(refs) > 1 else 'it'}",
        )
