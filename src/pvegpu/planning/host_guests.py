"""Every guest on this node that names a GPU the plan gives elsewhere: changed, refused or
warned about, never passed over.

guests.py rewrites the pools' own guests; this module reads every guest config of the
node (discovery keeps them all), every section of each:

- another container's lines for one GPU (`devN`, bind mount, `c 195:N`) go: the bundle
  removes them from its main section and the revert restores the file;
- a rule for every GPU (`c 195:* rwm`, `c *:* rwm`, `a`) in a container the pool GPUs
  are not for, and a VM's hostpci line (raw address, or a mapping that still hands the
  device over after the plan) for a GPU that goes to a container or to another VM, are
  refused with a fix: which GPUs that guest should keep is the admin's decision;
- a pending change that grants one at the next start is refused (revert it first);
- a snapshot that grants one is a warning: a rollback brings it back;
- a VM on a mapping that shrinks or goes is listed.

The rules in words: docs/formats.md, "Every other guest on the node".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import GPU, ConfigFile, HostFacts
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.guests import LXC, guests
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.model.released import ContainerGpusRemoved
from pvegpu.planning.claims import (
    Claims,
    by_destination,
    container_may_hold,
    node_naming,
    vm_may_hold,
)
from pvegpu.planning.grants_every import EveryDevice, every_device, every_gpu
from pvegpu.planning.guests import gpu_majors
from pvegpu.planning.mapping_moves import MappingOutcome, mapping_outcome
from pvegpu.planning.numbering import NodeChange, Renumbering
from pvegpu.planning.vgpu import vm_line_problem
from pvegpu.pvefiles import hostpci, lxcconf
from pvegpu.pvefiles.guestconf import (
    PENDING_SECTIONS,
    ConfLine,
    Section,
    is_pending,
    is_snapshot,
)
from pvegpu.pvefiles.lxcconf import NodeNaming
from pvegpu.values import value_class
from pvegpu.vendors import VENDORS, DeviceNodes
from pvegpu.vendors.drm import DRM_MAJOR, DRM_NODES
from pvegpu.vendors.drm import node_path as drm_node_path
from pvegpu.wording import plural


@value_class
@attrs.frozen(eq=False, repr=False)
class GuestVerdict:
    removed: tuple[ContainerGpusRemoved, ...] = ()
    problems: tuple[Diagnostic, ...] = ()
    findings: tuple[Diagnostic, ...] = ()


@attrs.define
class _Collected:
    removed: list[ContainerGpusRemoved] = attrs.field(factory=list)
    problems: list[Diagnostic] = attrs.field(factory=list)
    findings: list[Diagnostic] = attrs.field(factory=list)
    every_device: dict[str, EveryDevice] = attrs.field(factory=dict)
    """A rule for every major (`a`, `c *:* rwm`) reaches the GPUs of every node family:
    one refusal per line, whatever families it was found in (`every_device`)."""


def judge_host(
    facts: HostFacts, pools: Sequence[Pool], numbers: Renumbering | None = None
) -> tuple[MappingOutcome, GuestVerdict]:
    """The mappings after the plan, then every guest judged against them."""
    claims = Claims(pools, facts.gpus)
    mappings = mapping_outcome(facts, pools, claims)
    return mappings, judge_guests(facts, pools, claims, mappings, numbers or Renumbering())


def judge_guests(
    facts: HostFacts,
    pools: Sequence[Pool],
    claims: Claims,
    mappings: MappingOutcome,
    numbers: Renumbering | None = None,
) -> GuestVerdict:
    """What every guest config on the node means for the plan's GPUs, and for the GPUs
    whose numbers the next boot changes (`numbers`)."""
    out = _Collected()
    if not pools:
        return GuestVerdict()
    own = {p.lxc.vmid for p in pools if p.lxc is not None}
    numbers = numbers or Renumbering()
    families = _node_families(facts, pools, numbers)
    naming = node_naming(facts)
    for kind, vmid, file in guests(facts).configs:
        config = guests(facts).config(file)
        if kind == LXC:
            _container(config, vmid, vmid in own, claims, families, naming, numbers, out)
        else:
            _vm(facts.node, config, vmid, claims, mappings, out)
    out.problems.extend(every_device(w, r, claims) for w, r in out.every_device.items())
    return GuestVerdict(tuple(out.removed), tuple(out.problems), tuple(out.findings))


@value_class
@attrs.frozen(eq=False, repr=False)
class _Family:
    """One stack's device nodes (NVIDIA's, or the DRM nodes AMD and Intel GPUs are handed
    over by) and the char majors of its driver stack on this host."""

    nodes: DeviceNodes
    majors: frozenset[int]


def _node_families(facts: HostFacts, pools: Sequence[Pool], numbers: Renumbering) -> list[_Family]:
    """The node families of the pools' GPUs, and of the nodes the next boot renumbers,
    once each: the lines other containers may hold them by."""
    found: dict[int, DeviceNodes] = {}
    for change in numbers.changes:
        if change.major == DRM_MAJOR:
            found.setdefault(DRM_MAJOR, DRM_NODES)
        for vendor in VENDORS:
            if vendor.nodes is not None and vendor.nodes.major == change.major:
                found.setdefault(change.major, vendor.nodes)
    for gpu in (g for p in pools for g in p.gpus):
        nodes = gpu.vendor.nodes if gpu.vendor is not None else None
        if nodes is not None and nodes.major not in found:
            found[nodes.major] = nodes
        # A GPU of another stack with DRM nodes (NVIDIA with nvidia-drm) is held by them too.
        if (gpu.drm_card is not None or gpu.drm_render is not None) and DRM_MAJOR not in found:
            found[DRM_MAJOR] = DRM_NODES
    return [_Family(n, gpu_majors(facts, n)) for n in found.values()]


def _numbered(config: GuestConfig) -> Iterator[tuple[Section, int, ConfLine]]:
    """Each line of the guest's main, pending and snapshot sections with its number in
    the file; `[special:...]` sections hand over no device and are skipped."""
    number = 0
    for section, lines in config.sections:
        for line in lines:
            number += 1
            if section.name is None or is_pending(section) or is_snapshot(section):
                yield section, number, line


def _node(gpu: GPU, nodes: DeviceNodes, minor: int | None) -> str:
    """The GPU as the line holds it: the node the line names (a DRM render or card node of
    an NVIDIA GPU too), or for a rule reaching every minor, the GPU's node of that family."""
    if minor is not None:
        path: str | None = drm_node_path(minor) if nodes.drm else nodes.path(minor)
    elif nodes.drm and not (gpu.vendor is not None and gpu.vendor.nodes is nodes):
        path = None if gpu.drm_render is None else drm_node_path(gpu.drm_render)
    else:
        # A GPU already on vfio-pci has no node now; a wildcard reaches it once nvidia has it.
        path = gpu.node_path
    return gpu.address.short if path is None else f"{path} ({gpu.address.short})"


def _container(
    config: GuestConfig,
    vmid: int,
    own: bool,
    claims: Claims,
    families: Sequence[_Family],
    naming: NodeNaming,
    numbers: Renumbering,
    out: _Collected,
) -> None:
    file = config.file
    snapshots: list[Diagnostic] = []
    changes = [
        change
        for f in families
        if (change := _changes(config, vmid, own, claims, f, naming, numbers, out, snapshots))
        is not None
    ]
    if len(changes) > 1:
        # One artifact per config: two stacks' lines (a GPU's /dev/nvidiaN and its DRM
        # nodes) would need one patch that knows both.
        out.problems.append(
            Diagnostic.error(
                "container-loses-gpus-of-two-stacks",
                file.path,
                f"CT {vmid} holds GPUs the plan gives elsewhere or renumbers by the nodes "
                "of more than one driver stack ("
                + ", ".join(c.removed.nodes.gpu_path.format(minor="N") for c in changes)
                + ")",
                "remove those lines from the container by hand (pct set "
                f"{vmid} --delete devN, or edit the raw lines), then run pvegpu again",
            )
        )
    else:
        for change in changes:
            out.removed.append(change.removed)
            if change.removed.minors:
                out.findings.append(
                    _loses_gpus(file, vmid, change.removed, change.taken, stopped=not own)
                )
            if change.removed.renumber:
                out.findings.append(_renumbered(file, vmid, change))
    out.findings.extend(snapshots)


@value_class
@attrs.frozen(eq=False, repr=False)
class _Change:
    """What one container's config changes of one node family."""

    removed: ContainerGpusRemoved
    taken: list[tuple[str, Pool]]
    moved: list[tuple[str, NodeChange]]
    """The keys of its lines that move to new numbers, with the change."""


def _changes(
    config: GuestConfig,
    vmid: int,
    own: bool,
    claims: Claims,
    family: _Family,
    naming: NodeNaming,
    numbers: Renumbering,
    out: _Collected,
    snapshot_findings: list[Diagnostic],
) -> _Change | None:
    """What the container loses of one node family (its lines for pool GPUs that go
    elsewhere) and which of its lines move to new numbers, with the problems its other
    lines give and, into `snapshot_findings`, the warnings its snapshots do."""
    nodes, majors = family.nodes, family.majors
    minors: list[int] = []
    keys: list[str] = []
    taken: list[tuple[str, Pool]] = []
    moved: list[tuple[str, NodeChange]] = []
    snapshots: dict[str, list[tuple[str, Pool]]] = {}
    stale: dict[str, list[tuple[ConfLine, NodeChange]]] = {}
    renumbered = numbers.by_node
    file = config.file
    for section, number, line in _numbered(config):
        every = lxcconf.grants_every_gpu(line, nodes, naming)
        minor = lxcconf.gpu_minor(line, nodes, naming)
        change = None if minor is None else renumbered.get((nodes.major, minor))
        if every:
            hit = [
                (g, p)
                for g, p in claims.gpus()
                if not container_may_hold(p, vmid) and _on_major(g, nodes.major)
            ]
        elif minor is not None and (nodes.major, minor) in claims.by_node:
            hit = [claims.by_node[(nodes.major, minor)]]
            hit = [(g, p) for g, p in hit if not container_may_hold(p, vmid)]
        else:
            hit = []
        by_number = change is not None and lxcconf.gpu_minor(line, nodes) is not None
        if not hit and not (by_number and not (own and section.name is None)):
            continue
        where = f"{file.path} line {number}"
        if not hit:
            # A line by number for a GPU it keeps, whose number the next boot changes.
            assert change is not None  # by_number says so
            if is_snapshot(section) or is_pending(section):
                stale.setdefault(section.name or "", []).append((line, change))
            else:
                moved.append((line.key, change))
            continue
        named = [(_node(g, nodes, None if every else minor), p) for g, p in hit]
        if is_snapshot(section):
            snapshots.setdefault(section.name or "", []).extend(named)
        elif is_pending(section):
            out.problems.append(_pending(where, f"CT {vmid}", line, named, f"pct set {vmid}"))
        elif own and lxcconf.is_gpu_line(line, nodes, majors, naming):
            continue  # the pool's own container: guests.py rewrites all its GPU lines
        elif every and lxcconf.grants_every_device(line, naming):
            rule = out.every_device.setdefault(where, EveryDevice(vmid, line))
            rule.hit += [h for h in hit if h not in rule.hit]
            rule.families.append(nodes)
        elif every:
            out.problems.append(every_gpu(where, vmid, line, named, claims, nodes))
        elif minor is not None:
            minors.append(minor)
            keys.append(line.key)
            taken.extend(named)
    for name, items in snapshots.items():
        snapshot_findings.append(_snapshot(file.path, f"CT {vmid}", "pct", vmid, name, items))
    for name, lines in stale.items():
        snapshot_findings.append(_stale_numbers(file.path, vmid, name, lines, nodes))
    if not minors and not moved:
        return None
    lost = tuple(sorted(set(minors)))
    last = bool(lost) and not config.keeps_a_gpu(nodes, lost, naming)
    shared = config.shared_node_keys(nodes, majors, naming) if last else ()
    renumber = tuple(sorted({(c.before, c.after) for _, c in moved if c.before not in lost}))
    removed = ContainerGpusRemoved(
        vmid,
        file,
        lost,
        tuple(keys),
        majors if last else None,
        shared,
        nodes=nodes,
        renumber=renumber,
        naming=naming,
    )
    return _Change(removed, taken, moved)


def _renumbered(file: ConfigFile, vmid: int, change: _Change) -> Diagnostic:
    nodes = change.removed.nodes
    moves = ", ".join(
        dict.fromkeys(
            f"{key}: {_path(nodes, c.before)} -> {_path(nodes, c.after)} ({c.gpu.short})"
            for key, c in change.moved
        )
    )
    return Diagnostic(
        Severity.WARNING,
        "container-renumbered-at-reboot",
        file.path,
        f"CT {vmid} names GPUs it keeps by number, and after the reboot with the split their "
        f"nodes are numbered afresh: {moves}. The bundle moves those lines to the new "
        "numbers (the revert puts them back); they are right only after that reboot, so do "
        f"not start CT {vmid} before it (the runbook reboots), or it opens another GPU",
        reboot_first=True,
    )


def _path(nodes: DeviceNodes, minor: int) -> str:
    return drm_node_path(minor) if nodes.drm else nodes.path(minor)


def _stale_numbers(
    path: str,
    vmid: int,
    section: str,
    lines: list[tuple[ConfLine, NodeChange]],
    nodes: DeviceNodes,
) -> Diagnostic:
    """A pending change or snapshot naming GPUs by numbers the next boot changes: pvegpu
    edits neither, so it says what they will name."""
    pending = section.lower() in PENDING_SECTIONS
    moves = ", ".join(
        f"{line.key}: {_path(nodes, c.before)} ({c.gpu.short}) becomes {_path(nodes, c.after)}"
        for line, c in lines
    )
    if pending:
        keys = ",".join(dict.fromkeys(line.key for line, _ in lines))
        then = (
            f"applied at CT {vmid}'s next start, after that reboot, it opens another GPU or "
            f"none: revert it (pct set {vmid} --revert {keys}) and set it again after the reboot"
        )
    else:
        then = (
            f"a rollback to it after that reboot opens another GPU or none: after `pct "
            f"rollback {vmid} {section}`, run pvegpu again before starting CT {vmid}"
        )
    return Diagnostic(
        Severity.WARNING,
        "container-number-stale-at-reboot",
        f"{path} [{section}]",
        f"{'the pending change' if pending else f'snapshot {section}'} of CT {vmid} names "
        f"GPUs by today's numbers, which the reboot with the split changes ({moves}): {then}",
    )


def _on_major(gpu: GPU, major: int) -> bool:
    """Whether a rule for every minor of `major` reaches the GPU: its vendor's nodes are on
    it (on vfio-pci it has no node now, but gets one when the host driver has it back), or
    it has DRM nodes now and `major` is DRM's."""
    nodes = gpu.vendor.nodes if gpu.vendor is not None else None
    drm = major == DRM_MAJOR and (gpu.drm_card is not None or gpu.drm_render is not None)
    return drm or (nodes is not None and nodes.major == major)


def _loses_gpus(
    file: ConfigFile,
    vmid: int,
    loss: ContainerGpusRemoved,
    taken: list[tuple[str, Pool]],
    *,
    stopped: bool = False,
) -> Diagnostic:
    """`stopped`: another container's, which the runbook shuts down before the split
    when it keeps no GPU (rendering/review/emptied_steps.py)."""
    stop = f"stop whatever uses them in CT {vmid} before the split, and check"
    if loss.shared_majors is not None and stopped:
        stop = (
            f"the runbook shuts CT {vmid} down before the split (it holds them open while "
            "it runs) and leaves it stopped; check"
        )
    if loss.shared_majors is None:
        check = "what it runs against the GPUs it keeps"
    elif loss.shared_keys:
        check = (
            "that nothing in it needs a GPU: it keeps none, so its lines for the shared "
            f"{_stack(loss.nodes)} nodes ({', '.join(loss.shared_keys)}) go too"
        )
    else:
        check = "that nothing in it needs a GPU: it keeps none"
    return Diagnostic(
        Severity.WARNING,
        "container-loses-gpus",
        file.path,
        f"CT {vmid} names {by_destination(taken)}. "
        f"The bundle removes those lines ({', '.join(loss.keys)}) and the revert puts them "
        f"back; {stop} {check}",
    )


def _stack(nodes: DeviceNodes) -> str:
    """How messages name a node family: by the vendor whose nodes they are (AMD's include
    /dev/kfd), DRM for the kernel's nodes alone (another stack's GPU held by them)."""
    return next((v.name for v in VENDORS if v.nodes is nodes), "DRM")


def _pending(
    where: str, guest: str, line: ConfLine, named: list[tuple[str, Pool]], setter: str
) -> Diagnostic:
    return Diagnostic.error(
        "pending-grants-pool-gpu",
        where,
        f"the pending change `{line.raw.strip()}` gives {guest}, at its next start, "
        f"{by_destination(named)}",
        f"revert it ({setter} --revert {line.key}), then run pvegpu again",
    )


def _snapshot(
    path: str, guest: str, tool: str, vmid: int, name: str, named: list[tuple[str, Pool]]
) -> Diagnostic:
    return Diagnostic(
        Severity.WARNING,
        "snapshot-grants-pool-gpus",
        f"{path} [{name}]",
        f"a rollback to snapshot {name} gives {guest} back {by_destination(named)}. "
        f"After `{tool} rollback {vmid} {name}`, run pvegpu again "
        f"before starting it, or remove the snapshot (`{tool} delsnapshot {vmid} {name}`)",
    )


def _vm(
    node: str,
    config: GuestConfig,
    vmid: int,
    claims: Claims,
    mappings: MappingOutcome,
    out: _Collected,
) -> None:
    snapshots: dict[str, list[tuple[str, Pool]]] = {}
    # By mapping: (key, pending) of the lines on one that shrinks or goes.
    shrinking: dict[str, list[tuple[str, bool]]] = {}
    # Mappings the pool's GPUs leave: guests.py converts this VM's lines on them when it
    # is the pool's, and mapping_moves.py refuses those it cannot convert.
    leaving = {m for p in claims.pools if p.vm and p.vm.vmid == vmid for m in p.vm.old_mappings}
    file = config.file
    for section, number, line in _numbered(config):
        use = hostpci.hostpci_use(line)
        if use is None or (section.name is None and use.mapping in leaving):
            continue
        hosts = use.hosts if use.mapping is None else mappings.devices.get(use.mapping, ())
        hit = [c for c in claims.of_hosts(hosts) if not vm_may_hold(c.pool, vmid)]
        named = [(str(c.function.address), c.pool) for c in hit]
        where = f"{file.path} line {number}"
        if not hit and not is_snapshot(section):
            # A vGPU pool's VF reaches a VM only with the pool's type (planning/vgpu.py).
            held = (c.pool for c in claims.of_hosts(hosts))
            wrong = vm_line_problem(where, vmid, line, section.name is None, held)
            if wrong is not None:
                out.problems.append(wrong)
        if hit and is_snapshot(section):
            snapshots.setdefault(section.name or "", []).extend(named)
        elif hit and is_pending(section):
            out.problems.append(_pending(where, f"VM {vmid}", line, named, f"qm set {vmid}"))
        elif hit:
            out.problems.append(_takes(where, vmid, line, use.key, named))
        elif (section.name is None or is_pending(section)) and use.mapping is not None:
            # A pending line is the next start's: it names the mapping as much as a main one.
            owner = next(
                (p for p in claims.pools if p.mapping and p.mapping.id == use.mapping), None
            )
            if mappings.shrinks(use.mapping) and not (owner and owner.vm and owner.vm.vmid == vmid):
                shrinking.setdefault(use.mapping, []).append((use.key, is_pending(section)))
    for mapping_id, keys in shrinking.items():
        out.findings.append(_shrinks(node, file.path, vmid, mapping_id, keys, mappings))
    for name, items in snapshots.items():
        out.findings.append(_snapshot(file.path, f"VM {vmid}", "qm", vmid, name, items))


def _takes(
    where: str, vmid: int, line: ConfLine, key: str, named: list[tuple[str, Pool]]
) -> Diagnostic:
    # A vfio pool's GPUs could be this VM's instead; a container pool's stay on the host.
    vfio = all(p.kind is PoolKind.VFIO for _, p in named)
    harm = (
        f"VM {vmid} and that VM would both pass them through, and whichever starts second fails"
        if vfio
        else f"starting VM {vmid} would bind them to vfio-pci, away from the container"
    )
    return Diagnostic.error(
        "vm-takes-pool-gpu",
        where,
        f"`{line.raw.strip()}` hands VM {vmid} {by_destination(named)}: {harm}",
        f"remove the line (qm set {vmid} --delete {key})"
        + (f" or make VM {vmid} the pool's VM" if vfio else "")
        + ", then run pvegpu again",
    )


def _shrinks(
    node: str,
    path: str,
    vmid: int,
    mapping_id: str,
    keys: list[tuple[str, bool]],
    mappings: MappingOutcome,
) -> Diagnostic:
    main = [key for key, later in keys if not later]
    pending = [key for key, later in keys if later]
    named = [*main, *(f"the pending {k}" for k in pending)]
    used = f"{', '.join(named)} {'uses' if len(named) == 1 else 'use'} mapping {mapping_id}"
    before, after = mappings.shrinks(mapping_id) or (0, 0)
    targets = mappings.removed(mapping_id) or tuple(
        t for m in mappings.moved if m.mapping_id == mapping_id for t in m.targets
    )
    moved = f" (its devices move to {', '.join(targets)})" if targets else ""
    if mappings.removed(mapping_id) or after == 0:
        removed = bool(mappings.removed(mapping_id))
        # Proxmox looks the mapping up on the node the VM starts on: without a line of
        # that node it refuses the start ("PCI device mapping not found").
        gone = (
            "which the plan removes"
            if removed
            else f"which keeps no device on {node} after the plan"
        )
        missing = "a missing mapping" if removed else f"a mapping without a device on {node}"
        commands = [f"qm set {vmid} --delete {','.join(main)}"] if main else []
        commands += [f"qm set {vmid} --revert {','.join(pending)}"] if pending else []
        message = (
            f"{used}, {gone}{moved}: VM {vmid} does not start{'' if removed else f' on {node}'} "
            f"while a hostpci line names {missing}; remove "
            f"{'it' if len(keys) == 1 else 'them'} ({'; '.join(commands)})"
        )
    else:
        message = (
            f"{used}, which goes from {plural(before, 'device')} to {after} on {node}: "
            f"each line takes one free device at start, so VM {vmid} gets fewer GPUs, or "
            f"does not start when none is free; check its hostpci lines (qm config {vmid})"
        )
    return Diagnostic(Severity.WARNING, "vm-mapping-shrinks", path, message)
