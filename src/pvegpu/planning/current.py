"""The split a host has now, as pools of a spec: what `pvegpu init` writes for the admin to
edit into the split they want. Pure: every input is in the facts (`facts.references`,
the whole-host inventory of what reaches each GPU, and the files discovery read).

**Decision: a GPU goes into a pool only where planning that pool changes nothing on the
host; every other GPU is left out of the pools, with a note saying why.** A GPU no pool
names is one the plan never touches, so the spec `init` writes plans to no file change
for what it leaves out, and its pools describe what the host already does:

- a GPU on its host driver whose device nodes one container holds by `devN` entries
  (`devices = "dev"`) or by raw cgroup and mount lines (`devices = "raw"`): a container
  pool for that container;
- a GPU on vfio-pci that one VM holds by `hostpciN: mapping=<id>`, whose mapping in
  pci.cfg lists exactly the GPUs of the pool and nothing else: a vfio pool with that
  mapping and VM.

Left out, each with its reason (`CurrentSplit.notes`): a GPU two guests hold (a pool
gives a GPU to one), one held by a reference kind a pool does not write (LXC's GPU hook,
an `lxc.hook`, a VM's `args:` or hookscript, a rule reaching every GPU of a kind), a
reference pvegpu cannot resolve, a VM's line naming the GPU by address (a vfio pool gives
it by mapping: planning it would rewrite the line and add the mapping), a GPU on vfio-pci
held by a container or by no guest, a GPU on its host driver a VM holds (Proxmox binds it
to vfio-pci at the VM's start; a vfio pool would bind it at boot). NVIDIA vGPU virtual
functions and BMC displays are never pooled from the host's state either.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from pvegpu.hardware import VFIO_DRIVER
from pvegpu.model.current import CurrentNote, CurrentPool, CurrentSplit
from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.plan import PoolKind
from pvegpu.model.references import GpuReference, Holder, ReferenceKind
from pvegpu.pci import PciAddress
from pvegpu.planning.current_servers import container_servers
from pvegpu.pvefiles import pcicfg

_DEV_KINDS = frozenset({ReferenceKind.DEV_ENTRY})
_RAW_KINDS = frozenset(
    {ReferenceKind.CGROUP2_RULE, ReferenceKind.CGROUP1_RULE, ReferenceKind.MOUNT_ENTRY}
)
_VM_KINDS = frozenset({ReferenceKind.HOSTPCI})


def poolable(gpu: GPU) -> bool:
    """A whole GPU a pool may name: not a BMC display, not a virtual function."""
    return not gpu.bmc_display and not gpu.function.is_virtual_function


def _guest_refs(facts: HostFacts, address: PciAddress) -> list[GpuReference]:
    """The references of the guests' running configuration (not a snapshot's, not an
    inert key) that reach the GPU."""
    return [
        r
        for r in facts.references
        if r.holder is not Holder.HOST
        and r.vmid is not None
        and not r.section
        and r.inert is None
        and address in r.gpus
    ]


def _pending_refs(facts: HostFacts, address: PciAddress) -> list[GpuReference]:
    """The references of guests' pending sections (`[PENDING]`, `[pve:pending]`) that
    reach the GPU: changes `qm set`/`pct set` made while the guest ran."""
    return [
        r
        for r in facts.references
        if r.holder is not Holder.HOST and r.pending and r.inert is None and address in r.gpus
    ]


def _apply_pending(ref: GpuReference) -> str:
    command = "pct reboot" if ref.holder is Holder.CONTAINER else "qm reboot"
    return f"{command} {ref.vmid}"


def _mappings(facts: HostFacts) -> dict[str, pcicfg.PciMapping]:
    # A pci.cfg the planner refuses (and says why) has none: no mapping is used.
    return {m.id: m for m in pci_cfg(facts).mappings}


def _mapping_gpus(facts: HostFacts, mapping: pcicfg.PciMapping) -> set[PciAddress] | None:
    """The GPUs of this node a mapping lists, None when a line of it names anything else
    (another function, a whole slot, a device of another kind)."""
    found: set[PciAddress] = set()
    for entry in mapping.maps:
        if entry.node != facts.node:
            continue
        for path in entry.path.split(";"):
            try:
                address = PciAddress.parse(path if "." in path[-2:] else f"{path}.0")
            except ValueError:
                return None
            gpu = facts.gpu(address)
            if gpu is None or not poolable(gpu):
                return None
            found.add(address)
    return found


def _names_gpu_node(ref: GpuReference, gpu: GPU) -> bool:
    """Whether the reference gives the GPU's own node, the one a container pool writes
    (`/dev/nvidia4`, an AMD or Intel GPU's render node): not only its DRM node under
    nvidia-drm, whose pool would add NVIDIA's compute nodes."""
    vendor = gpu.vendor
    nodes = vendor.nodes if vendor is not None else None
    minor = gpu.container_minor
    if nodes is None or minor is None:
        return False
    if ref.node_path is not None:
        return ref.node_path == nodes.path(minor) or (
            nodes.drm and ref.node_path.endswith("-render") and gpu.address in ref.addresses
        )
    return ref.node is not None and ref.node.minor == minor and ref.node.major == nodes.major


def _own_node(gpu: GPU) -> str:
    path = gpu.node_path
    return f" {path}" if path is not None else ""


def _container_kind(refs: Sequence[GpuReference]) -> tuple[str | None, str]:
    kinds = {r.kind for r in refs}
    if kinds <= _DEV_KINDS:
        return "dev", ""
    if kinds <= _RAW_KINDS:
        return "raw", ""
    odd = sorted(str(k) for k in kinds - _DEV_KINDS - _RAW_KINDS)
    if odd:
        return None, f"by {', '.join(odd)}, which a container pool does not write"
    return None, "by devN entries and raw lines both: a pool writes one style"


def current_split(
    facts: HostFacts, withheld: Mapping[PciAddress, str] | None = None
) -> CurrentSplit:
    """The pools that describe the host's GPU use as it is, and what they leave out.
    `withheld`: GPUs to leave out of the pools anyway, with why (a pool of them plans to
    a change of a file: `pipeline.init_host` checks the pools by planning them)."""
    mappings = _mappings(facts)
    notes: list[CurrentNote] = []
    containers: dict[int, list[tuple[GPU, list[GpuReference]]]] = defaultdict(list)
    vms: dict[tuple[int, str], list[tuple[GPU, list[GpuReference]]]] = defaultdict(list)
    free: list[PciAddress] = []
    idle: list[GPU] = []

    def leave(gpu: GPU, message: str) -> None:
        notes.append(CurrentNote(str(gpu.address), message, gpu.address, expressed=False))

    for gpu in sorted(facts.gpus, key=lambda g: g.address):
        if not poolable(gpu):
            continue
        refs = _guest_refs(facts, gpu.address)
        _host_notes(facts, gpu, notes)
        if withheld and gpu.address in withheld:
            leave(gpu, withheld[gpu.address])
            continue
        unclear = [r for r in refs if r.unresolved or r.every]
        guests = sorted({r.guest for r in refs})
        on_vfio = gpu.driver == VFIO_DRIVER
        if unclear:
            r = unclear[0]
            why = r.every or r.unresolved
            leave(gpu, f"{r.guest} reaches it by `{r.text}` ({r.where}): {why}")
        elif len(guests) > 1:
            where = "; ".join(f"{r.guest} {r.where}" for r in refs)
            leave(gpu, f"held by {' and '.join(guests)} ({where}): a pool gives a GPU to one")
        elif not refs and (pending := _pending_refs(facts, gpu.address)):
            # Not free: the guest takes it at its next start, which no pool can say.
            r = pending[0]
            leave(
                gpu,
                f"{r.guest} takes it at its next start by its pending change `{r.text}` "
                f"({r.where}), which a pool cannot say (`{_apply_pending(r)}` applies it now)",
            )
        elif not refs:
            if on_vfio:
                idle.append(gpu)
            else:
                free.append(gpu.address)
        elif refs[0].holder is Holder.CONTAINER:
            style, why = _container_kind(refs)
            if on_vfio:
                leave(gpu, f"{refs[0].guest} holds it ({refs[0].where}) while it is on vfio-pci")
            elif style is None:
                leave(gpu, f"{refs[0].guest} holds it {why} ({refs[0].where})")
            elif not any(_names_gpu_node(r, gpu) for r in refs):
                own = _own_node(gpu)
                leave(
                    gpu,
                    f"{refs[0].guest} holds it by `{refs[0].text}` ({refs[0].where}), not by "
                    f"its own node{own}: a container pool would give that node too",
                )
            else:
                containers[refs[0].vmid or 0].append((gpu, refs))
        else:
            _vm_gpu(facts, gpu, refs, mappings, vms, leave)

    pools = [
        *_container_pools(facts, containers, mappings, notes),
        *_vm_pools(facts, vms, mappings, notes),
        *_idle_pools(facts, idle, mappings, notes),
    ]
    kept = _unique_names(_whole_guests(facts, pools, notes))
    poolable_gpus = tuple(g.address for g in facts.gpus if poolable(g))
    return CurrentSplit(facts.node, kept, tuple(free), tuple(notes), poolable_gpus)


_NAME_MAX = 64
"""The longest pool name a spec takes (docs/spec.md); a mapping id may have 128."""


def _unique_names(pools: tuple[CurrentPool, ...]) -> tuple[CurrentPool, ...]:
    """The pools with names a spec takes and no other pool has: an unused mapping's pool
    is named by its id, which may be another pool's name (`ct101`) or longer than a pool
    name may be; a spec refuses both."""
    taken = {p.name for p in pools}
    seen: set[str] = set()
    named = []
    for pool in pools:
        name, n = pool.name[:_NAME_MAX], 2
        while name in seen or (name != pool.name and name in taken):
            suffix = f"-{n}"
            name, n = pool.name[: _NAME_MAX - len(suffix)] + suffix, n + 1
        seen.add(name)
        named.append(pool if name == pool.name else attrs.evolve(pool, name=name))
    return tuple(named)


def _whole_guests(
    facts: HostFacts, pools: list[CurrentPool], notes: list[CurrentNote]
) -> tuple[CurrentPool, ...]:
    """The pools whose guest holds no GPU left out. A pool gives its guest exactly its
    GPUs: planning a pool of the GPUs a container holds but one would take that one away.
    Dropping a pool leaves its GPUs out too, so this runs until nothing more drops."""
    while True:
        left = {n.gpu for n in notes if not n.expressed}
        touched: dict[tuple[Holder, int | None], GpuReference] = {
            (r.holder, r.vmid): r
            for r in facts.references
            if r.holder is not Holder.HOST and not r.section and set(r.gpus) & left
        }
        kept = []
        for pool in pools:
            holder = Holder.CONTAINER if pool.kind is PoolKind.LXC else Holder.VM
            other = touched.get((holder, pool.vmid))
            if pool.vmid is None or other is None:
                kept.append(pool)
                continue
            gone = ", ".join(a.short for a in sorted(set(other.gpus) & left))
            notes.extend(
                CurrentNote(
                    str(a),
                    f"{other.guest} also holds {gone}, which is not expressed: a pool of "
                    "its other GPUs would take that away",
                    a,
                    expressed=False,
                )
                for a in pool.gpus
            )
        if len(kept) == len(pools):
            return tuple(kept)
        pools = kept


def _host_notes(facts: HostFacts, gpu: GPU, notes: list[CurrentNote]) -> None:
    """Host-side files that name the GPU (a driverctl override, modprobe.d ids): kept as
    they are, said in a comment."""
    for r in facts.references:
        if r.holder is Holder.HOST and gpu.address in r.gpus and r.inert is None:
            notes.append(
                CurrentNote(str(gpu.address), f"{r.kind} {r.where}: `{r.text}`", gpu.address)
            )


def _vm_gpu(
    facts: HostFacts,
    gpu: GPU,
    refs: Sequence[GpuReference],
    mappings: dict[str, pcicfg.PciMapping],
    vms: dict[tuple[int, str], list[tuple[GPU, list[GpuReference]]]],
    leave: Callable[[GPU, str], None],
) -> None:
    ref = refs[0]
    odd = sorted({str(r.kind) for r in refs} - {str(k) for k in _VM_KINDS})
    named = {r.mapping for r in refs}
    if odd:
        leave(gpu, f"{ref.guest} holds it by {', '.join(odd)} ({ref.where}): a pool writes hostpci")
    elif gpu.driver != VFIO_DRIVER:
        leave(
            gpu,
            f"{ref.guest} holds it ({ref.where}) while it is on {gpu.driver or 'no driver'}: "
            "a vfio pool would bind it to vfio-pci at boot",
        )
    elif None in named or len(named) != 1:
        leave(
            gpu,
            f"{ref.guest} names it by address (`{ref.text}`, {ref.where}): a vfio pool gives it "
            "by a mapping, so planning one rewrites that line and adds the mapping",
        )
    else:
        mapping = next(iter(named))
        assert mapping is not None
        if mapping not in mappings:
            leave(gpu, f"{ref.guest} names mapping {mapping}, which pci.cfg does not have")
        else:
            vms[(ref.vmid or 0, mapping)].append((gpu, list(refs)))


def _wheres(refs: Iterable[GpuReference]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.where for r in refs))


def _describable(mapping: pcicfg.PciMapping) -> bool:
    """A spec can say the mapping's description (none, or one without a comma)."""
    return mapping.description is None or "," not in mapping.description


def _exact_mapping(
    facts: HostFacts, gpus: Iterable[PciAddress], mappings: dict[str, pcicfg.PciMapping]
) -> pcicfg.PciMapping | None:
    """The mapping listing exactly these GPUs of this node, if one does (the first)."""
    wanted = set(gpus)
    return next(
        (m for m in mappings.values() if _mapping_gpus(facts, m) == wanted and _describable(m)),
        None,
    )


def _idle_pools(
    facts: HostFacts,
    idle: Sequence[GPU],
    mappings: dict[str, pcicfg.PciMapping],
    notes: list[CurrentNote],
) -> list[CurrentPool]:
    """GPUs on vfio-pci no guest holds: a vfio pool without a VM where a mapping no VM
    uses lists exactly some of them (the split a `pvegpu render` left for a VM to come)."""
    used = {r.mapping for r in facts.references if r.mapping is not None}
    left = {g.address for g in idle}
    pools = []
    for mapping in mappings.values():
        gpus = _mapping_gpus(facts, mapping)
        if mapping.id in used or not gpus or not gpus <= left or not _describable(mapping):
            continue
        left -= gpus
        pools.append(
            CurrentPool(
                name=mapping.id,
                kind=PoolKind.VFIO,
                gpus=tuple(sorted(gpus)),
                vmid=None,
                mapping=mapping.id,
                mapping_description=mapping.description,
            )
        )
    notes.extend(
        CurrentNote(
            str(a),
            "on vfio-pci and no guest holds it, and no unused mapping in "
            f"{pcicfg.PATH} lists exactly such GPUs: a vfio pool needs its mapping",
            a,
            expressed=False,
        )
        for a in sorted(left)
    )
    return pools


def _container_pools(
    facts: HostFacts,
    containers: dict[int, list[tuple[GPU, list[GpuReference]]]],
    mappings: dict[str, pcicfg.PciMapping],
    notes: list[CurrentNote],
) -> list[CurrentPool]:
    pools = []
    for vmid, held in sorted(containers.items()):
        styles = {_container_kind(refs)[0] for _, refs in held}
        if len(styles) != 1:
            for gpu, refs in held:
                notes.append(
                    CurrentNote(
                        str(gpu.address),
                        f"CT {vmid} holds its GPUs by devN entries and raw lines both "
                        f"({refs[0].where}): a pool writes one style",
                        gpu.address,
                        expressed=False,
                    )
                )
            continue
        style = styles.pop()
        access = (
            {_dev_access(r.text) for _, refs in held for r in refs} if style == "dev" else set()
        )
        mode, gid = next(iter(access)) if len(access) == 1 else (None, None)
        if style == "dev" and (len(access) != 1 or mode is None):
            why = (
                "sets no mode=, and a pool writes one (0666 unless `mode` says)"
                if len(access) == 1
                else "gives them with different mode= or gid= options, and a pool gives one"
            )
            notes.extend(
                CurrentNote(
                    str(gpu.address),
                    f"CT {vmid}'s devN lines ({refs[0].where}) {why}",
                    gpu.address,
                    expressed=False,
                )
                for gpu, refs in held
            )
            continue
        gpus = tuple(g.address for g, _ in held)
        mapping = _exact_mapping(facts, gpus, mappings)
        pools.append(
            CurrentPool(
                name=f"ct{vmid}",
                kind=PoolKind.LXC,
                gpus=gpus,
                vmid=vmid,
                devices=style,
                mode=mode,
                gid=gid,
                mapping=None if mapping is None else mapping.id,
                mapping_description=None if mapping is None else mapping.description,
                held_by=_wheres(r for _, refs in held for r in refs),
                servers=container_servers(facts, vmid),
            )
        )
    return pools


def _dev_access(text: str) -> tuple[str | None, int | None]:
    """The `mode=` and `gid=` of a `devN: PATH,gid=44,mode=0660` line as written (its value
    after the key); None where it sets none. A gid that is not a number is kept as None
    and its line then differs from what a pool writes: the round trip shows it."""
    value = text.partition(":")[2].strip()
    options = dict(o.partition("=")[::2] for o in value.split(",")[1:])
    gid = options.get("gid", "")
    return options.get("mode"), int(gid) if gid.isascii() and gid.isdigit() else None


def _vm_pools(
    facts: HostFacts,
    vms: dict[tuple[int, str], list[tuple[GPU, list[GpuReference]]]],
    mappings: dict[str, pcicfg.PciMapping],
    notes: list[CurrentNote],
) -> list[CurrentPool]:
    pools = []
    users: dict[str, int] = defaultdict(int)
    used_by: dict[int, list[str]] = defaultdict(list)
    for vmid, used in vms:
        users[used] += 1
        used_by[vmid].append(used)
    for (vmid, mapping_id), held in sorted(vms.items()):
        mapping = mappings[mapping_id]
        gpus = {g.address for g, _ in held}
        why = None
        if users[mapping_id] > 1:
            why = f"mapping {mapping_id} is used by several VMs: a vfio pool has one VM"
        elif len(used_by[vmid]) > 1:
            # Two pools for one VM are refused (spec-duplicate-guest); one pool has one
            # mapping, and planning it would rewrite the VM's other lines onto it.
            why = (
                f"VM {vmid} holds its GPUs by mappings {', '.join(sorted(used_by[vmid]))}: "
                "a vfio pool gives its VM one mapping"
            )
        elif _mapping_gpus(facts, mapping) != gpus:
            why = (
                f"mapping {mapping_id} in {pcicfg.PATH} lists other devices than the GPUs "
                f"VM {vmid} holds: a pool's mapping lists exactly its GPUs"
            )
        elif len(lines := _wheres(r for _, refs in held for r in refs)) < len(gpus):
            # One `hostpciN: mapping=ID` line takes one device of the mapping, whichever
            # is free at the VM's start; a pool gives its VM every GPU of its mapping.
            why = (
                f"VM {vmid} takes {len(lines)} of the {len(gpus)} GPUs mapping {mapping_id} "
                f"lists ({'; '.join(lines)}), Proxmox choosing which at its start: a pool "
                "gives its VM every GPU of its mapping"
            )
        elif not _describable(mapping):
            why = f"mapping {mapping_id}'s description holds a ',', which a spec cannot say"
        if why is not None:
            notes.extend(
                CurrentNote(str(g.address), why, g.address, expressed=False) for g, _ in held
            )
            continue
        pools.append(
            CurrentPool(
                name=f"vm{vmid}",
                kind=PoolKind.VFIO,
                gpus=tuple(g.address for g, _ in held),
                vmid=vmid,
                mapping=mapping_id,
                mapping_description=mapping.description,
                held_by=_wheres(r for _, refs in held for r in refs),
            )
        )
    return pools
