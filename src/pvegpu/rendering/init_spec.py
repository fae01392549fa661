"""The spec `pvegpu init` writes: the current split (`planning/current.py`) as TOML in the
format of docs/spec.md, commented with what discovery found, for the admin to edit.

Every value goes through `formats.toml` (strings quoted as tomllib reads them back,
comments kept to one line). What the spec cannot express is said at its place: at the
GPU's line of the inventory, and in the list at the top; a host without a pool gets a
commented example pool, since a spec needs one to plan.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Iterable

from pvegpu.formats.toml import basic_string, comment
from pvegpu.model.current import CurrentNote, CurrentPool, CurrentSplit
from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.plan import PoolKind
from pvegpu.model.references import Holder
from pvegpu.pci import PciAddress

_WIDTH = 88


def _c(text: str = "", indent: str = "") -> str:
    """`text` as `#` comment lines of at most 88 columns (a longer word stays whole);
    continuation lines indented by `indent` more."""
    body = comment(text)
    lead = len(body) - len(body.lstrip(" "))
    wrapped = textwrap.wrap(
        body.lstrip(" "),
        width=_WIDTH - 2,
        initial_indent=" " * lead,
        subsequent_indent=" " * lead + indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return "\n".join(f"# {line}".rstrip() for line in wrapped) or "#"


def _place(gpu: GPU) -> str:
    """`NUMA 0, group 12`: where the GPU sits, what a split is drawn by."""
    numa = "no NUMA node" if gpu.numa_node is None else f"NUMA {gpu.numa_node}"
    group = "no IOMMU group" if gpu.iommu_group is None else f"group {gpu.iommu_group}"
    return f"{numa}, {group}"


def _models(facts: HostFacts, split: CurrentSplit) -> list[str]:
    """One line per vendor:device id: its model and how many GPUs a pool may name are one."""
    count: dict[str, int] = defaultdict(int)
    name: dict[str, str] = {}
    poolable = set(split.poolable)
    for gpu in facts.gpus:
        if gpu.address in poolable:
            count[gpu.vendor_device] += 1
            name.setdefault(gpu.vendor_device, gpu.model or "model not known")
    return [_c(f"  {vd}  {name[vd]} ({n})", "    ") for vd, n in sorted(count.items())]


def _users(facts: HostFacts, gpu: GPU) -> str:
    guests = sorted(
        {
            r.guest
            for r in facts.references
            if gpu.address in r.gpus and r.holder is not Holder.HOST and not r.section
        }
    )
    return ", ".join(guests) if guests else "free"


def _header(
    facts: HostFacts, split: CurrentSplit, notes: dict[PciAddress, list[CurrentNote]]
) -> list[str]:
    iommu = facts.iommu_mode
    drivers = ", ".join(f"{d.driver} {d.version} ({d.flavor})" for d in facts.gpu_drivers)
    lines = [
        _c(f"pvegpu init: the GPU split of Proxmox VE node {facts.node} as it is now."),
        _c("Edit it into the split you want, then review: pvegpu plan --root / --spec FILE"),
        _c("As written, planning it moves no GPU to another driver, gives no guest other"),
        _c("GPUs and changes no file: it may add pvegpu's own boot files (the device-node"),
        _c("unit of a container pool, the vfio split unit of a vfio pool). GPUs the pools"),
        _c("do not name are left as they are."),
        "#",
        _c(
            f"IOMMU {iommu.value}, SEV-SNP {'on' if facts.sev_snp else 'off'}"
            + (f", {drivers}" if drivers else "")
        ),
        _c("Models (vendor:device, how many):"),
        *_models(facts, split),
        _c("GPUs (id, NUMA node, IOMMU group, driver: held by):"),
    ]
    for gpu in sorted(facts.gpus, key=lambda g: g.address):
        if gpu.function.is_virtual_function:
            continue
        if gpu.bmc_display:
            lines.append(_c(f"  {gpu.address}  BMC display ({gpu.driver}): never pooled"))
            continue
        driver = gpu.driver or "no driver"
        lines.append(
            _c(
                f"  {gpu.address}  {gpu.vendor_device}, {_place(gpu)}, {driver}: "
                f"{_users(facts, gpu)}",
                "    ",
            )
        )
        for note in notes.get(gpu.address, ()):
            mark = "not expressed" if not note.expressed else "note"
            lines.append(_c(f"      {mark}: {note.message}", "  "))
        vfs = facts.virtual_functions(gpu.address)
        if vfs:
            lines.append(_c(f"      {len(vfs)} SR-IOV virtual functions: not pooled by init"))
    by_node: dict[int | None, list[str]] = defaultdict(list)
    poolable = set(split.poolable)
    for gpu in sorted(facts.gpus, key=lambda g: g.address):
        if gpu.address in poolable:
            by_node[gpu.numa_node].append(gpu.address.short)
    for node in facts.numa_nodes:
        gpus = " ".join(by_node.get(node.id, ())) or "-"
        lines.append(_c(f"NUMA {node.id} (cpus {node.cpus}): {gpus}"))
    if None in by_node:
        lines.append(_c(f"no NUMA node: {' '.join(by_node[None])}"))
    free = " ".join(a.short for a in split.free) or "none"
    lines.append(_c(f"Free GPUs (host driver, no guest): {free}"))
    if split.unexpressed:
        count = len({n.gpu for n in split.unexpressed})
        lines.append(
            _c(
                f"Not expressed: {count} GPU(s), marked above: left out of the pools, so "
                "planning leaves them as they are."
            )
        )
    return lines


def _pool(facts: HostFacts, pool: CurrentPool) -> list[str]:
    if pool.vmid is None:
        said = f"On vfio-pci, no VM uses them yet; mapping {pool.mapping} lists them."
    else:
        guest = f"CT {pool.vmid}" if pool.kind is PoolKind.LXC else f"VM {pool.vmid}"
        said = f"{guest} holds these now: {_places(pool.held_by)}."
    lines = ["", _c(said), "[[pools]]"]
    lines.append(f"name = {basic_string(pool.name)}")
    lines.append("gpus = [")
    for address in pool.gpus:
        gpu = facts.gpu(address)
        place = f"  {_c(_place(gpu))}" if gpu is not None else ""
        lines.append(f"  {basic_string(str(address))},{place}")
    lines.append("]")
    if pool.mapping is not None:
        parts = [f"id = {basic_string(pool.mapping)}"]
        if pool.mapping_description is not None:
            parts.append(f"description = {basic_string(pool.mapping_description)}")
        lines.append(f"mapping = {{ {', '.join(parts)} }}")
    lines.append("")
    for server in pool.servers:
        enabled = "enabled" if server.enabled else "installed, not enabled"
        lines.append(
            _c(
                f"The container has {server.unit} ({enabled}, {server.path}): {server.server}, "
                f"{server.size}.{_short(server.gpus, len(pool.gpus))} pvegpu leaves that "
                "unit alone until [pools.lxc.serving] "
                "is added (docs/serving.md); then it renders the unit anew."
            )
        )
    if pool.kind is PoolKind.LXC:
        lines += [
            "[pools.lxc]",
            f"vmid = {pool.vmid}",
            f"devices = {basic_string(pool.devices or 'dev')}",
        ]
        if pool.mode is not None and pool.mode != "0666":  # 0666: the spec's default
            lines.append(f"mode = {basic_string(pool.mode)}")
        if pool.gid is not None:
            lines.append(f"gid = {pool.gid}")
    else:
        lines += ["[pools.vfio]"]
        if pool.vmid is not None:
            lines += ["", "[pools.vfio.vm]", f"vmid = {pool.vmid}"]
    return lines


def _short(needs: int | None, has: int) -> str:
    if needs is None or needs <= has:
        return ""
    return f" It opens {needs} GPUs and the container has {has}: it fails when started."


def _places(wheres: Iterable[str]) -> str:
    """`etc/pve/lxc/129.conf lines 4, 5, 7` from `... line 4`, `... line 5`, ..."""
    by_file: dict[str, list[str]] = defaultdict(list)
    for where in wheres:
        path, sep, line = where.partition(" line ")
        by_file[path].extend([line] if sep else [])
    return ", ".join(
        path + ("" if not lines else f" line{'s' if len(lines) > 1 else ''} {', '.join(lines)}")
        for path, lines in by_file.items()
    )


def _example(facts: HostFacts, split: CurrentSplit) -> list[str]:
    """A commented pool to start from: the free GPUs to a container, else a NUMA node's."""
    if split.free:
        said = "the free GPUs to container 100"
        selector = f"gpus = [{', '.join(basic_string(str(a)) for a in split.free)}]"
    else:
        poolable = set(split.poolable)
        numa = min(
            (g.numa_node for g in facts.gpus if g.address in poolable and g.numa_node is not None),
            default=0,
        )
        said = f"every GPU of NUMA node {numa} to container 100"
        selector = f"numa_node = {numa}"
    return [
        _c(f"A spec needs a pool to plan; for example, {said}:"),
        "# [[pools]]",
        '# name = "example"',
        f"# {selector}",
        "#",
        "# [pools.lxc]",
        "# vmid = 100",
    ]


def render_current(facts: HostFacts, split: CurrentSplit) -> str:
    """The spec text of `split`, commented with what `facts` show."""
    notes: dict[PciAddress, list[CurrentNote]] = defaultdict(list)
    for note in split.notes:
        if note.gpu is not None:
            notes[note.gpu].append(note)
    lines = _header(facts, split, notes)
    lines += ["", f"node = {basic_string(facts.node)}"]
    for pool in split.pools:
        lines += _pool(facts, pool)
    if not split.pools:
        lines += ["", _c("No pool: no GPU is in a use a pool can express (see above).")]
        lines += _example(facts, split)
    return "\n".join(lines) + "\n"


def pool_summaries(split: CurrentSplit) -> Iterable[str]:
    """One line per pool, for stderr."""
    for pool in split.pools:
        gpus = ", ".join(a.short for a in pool.gpus)
        guest = "no guest" if pool.vmid is None else pool.vmid
        yield f"pool {pool.name}: {pool.kind} to {guest}: {gpus}"
