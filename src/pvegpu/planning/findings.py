"""Findings of an accepted plan: what the reviewer should know, none of it a refusal."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import VFIO_DRIVER, host_driver
from pvegpu.model.binder_units import binder_units
from pvegpu.model.facts import HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.modprobe import softdeps
from pvegpu.model.paths import SPLIT_MODPROBE, SPLIT_UNIT
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.planning.acs import acs_findings, multifunction_findings
from pvegpu.planning.driverctl import driverctl_findings
from pvegpu.planning.references import cgroup_key_findings
from pvegpu.vendors import VENDORS


def plan_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """What the reviewer should know about an accepted plan."""
    by_id: dict[str, set[str]] = defaultdict(set)
    # A vGPU pool's VFs are bound by nothing pvegpu writes: they stay where they are.
    for pool in (p for p in pools if p.vgpu_type is None):
        for gpu in pool.gpus:
            by_id[gpu.vendor_device].add(pool.name)
    for vendor_device, names in sorted(by_id.items()):
        if len(names) > 1:
            yield Diagnostic(
                Severity.INFO,
                "identical-device-ids",
                vendor_device,
                f"GPUs with this id serve pools {', '.join(sorted(names))}: they are bound "
                "by PCI address (driver_override), never by vfio-pci ids=, which would take "
                "them all",
            )
    for pool in pools:
        if len(pool.numa_nodes) > 1:
            yield Diagnostic(
                Severity.WARNING,
                "pool-spans-numa-nodes",
                pool.name,
                f"GPUs are on NUMA nodes {', '.join(str(n) for n in pool.numa_nodes)}: "
                "cross-socket traffic for every transfer",
            )
        gpu_addresses = {g.address for g in pool.gpus}
        # A whole board's NVSwitches go because of the fabric (fabric-manager-in-guest).
        gpu_addresses |= {s.address for s in pool.nvswitches}
        extra = [f for f in pool.functions if f.address not in gpu_addresses]
        if pool.kind is PoolKind.VFIO and extra:
            yield Diagnostic(
                Severity.INFO,
                "group-members-move",
                pool.name,
                "these functions share IOMMU groups with the GPUs and move to vfio-pci too: "
                + ", ".join(f"{f.address} ({f.vendor_device})" for f in extra),
            )
    yield from _other_binders(facts)
    yield from driverctl_findings(facts, pools)
    yield from multifunction_findings(facts, pools)
    yield from _shadowing_softdeps(facts, pools)
    if facts.sev_snp:
        yield Diagnostic(
            Severity.INFO,
            "sev-snp",
            "host",
            "SEV-SNP is on: the IOMMU must stay in translated mode (iommu=pt is refused by "
            "SNP), so GPU peer-to-peer DMA is unreliable on this host",
        )
    yield from host_findings(facts, frozenset(p.lxc.vmid for p in pools if p.lxc is not None))


def host_findings(
    facts: HostFacts, rewritten: frozenset[int] = frozenset()
) -> Iterator[Diagnostic]:
    """What is wrong with the host whatever the split: every plan reports it, and
    `pvegpu check` reports it of the host as it is (one rule, not two).

    `rewritten`: the containers whose GPU lines the plan writes anew (their findings
    here are what the plan fixes)."""
    for setting in facts.vfio_ids:
        claimed: dict[str, int] = {}
        for gpu in facts.gpus:
            if setting.claimed(gpu.function):
                claimed[gpu.vendor_device] = claimed.get(gpu.vendor_device, 0) + 1
        for ids, count in claimed.items():
            if count > 1:
                yield Diagnostic(
                    Severity.WARNING,
                    "vfio-ids-identical",
                    setting.source,
                    f"vfio-pci ids={','.join(setting.ids)} takes all {count} GPUs {ids}, "
                    "not only the VM's: bind by address instead (pvegpu's split)",
                )
    yield from _stale_dynamic_majors(facts, rewritten)
    yield from cgroup_key_findings(facts, rewritten)
    yield from acs_findings(facts)


def _stale_dynamic_majors(facts: HostFacts, rewritten: frozenset[int]) -> Iterator[Diagnostic]:
    """Raw-style containers allow a dynamic node (nvidia-uvm, AMD's kfd) by the major the
    kernel handed out when its module loaded: after a driver update it can differ from
    the rendered rule, and the container's GPU userspace fails to open the node."""
    for vendor in VENDORS:
        nodes = vendor.nodes
        dynamic = nodes.dynamic if nodes is not None else None
        if nodes is None or dynamic is None:
            continue
        major = facts.char_major(dynamic.module)
        if major is None:
            continue
        for vmid, file in guests(facts).containers:
            if vmid in rewritten:
                continue
            allowed = guests(facts).config(file).raw_uvm_majors(nodes)
            if allowed is not None and major not in allowed:
                yield Diagnostic(
                    Severity.ERROR,
                    f"container-{dynamic.module.removeprefix('nvidia-')}-major-stale",
                    file.path,
                    f"CT {vmid} bind-mounts {dynamic.node} but allows no `c {major}:` rule: "
                    f"{dynamic.module}'s major is {major} now (/proc/devices), so "
                    f"{dynamic.user} fails in the container. If CT {vmid} is a pool's, "
                    "`pvegpu apply --reconcile --bundle <the applied bundle>` rewrites its "
                    "rules (it moves no GPU); else replace the old major's rules with "
                    f"`c {major}:...` ones, or use devN entries, which need no major",
                )


def _other_binders(facts: HostFacts) -> Iterator[Diagnostic]:
    """Hand-made units that also (re)bind GPUs race the split unit at every boot."""
    for path, marks in binder_units(facts).items():
        if path != SPLIT_UNIT:
            unit = path.rsplit("/", 1)[1]
            yield Diagnostic(
                Severity.WARNING,
                "other-gpu-binder",
                path,
                f"this unit also moves devices between drivers ({', '.join(marks)}); two "
                "binders race at boot and the last one wins: once pvegpu-vfio-split.service "
                f"is installed, run `systemctl disable --now {unit}` and remove it",
            )


def _shadowing_softdeps(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """kmod honours only the first `softdep` line for a module, in file-name order.

    pvegpu-vfio.conf makes each VM function's host driver load vfio-pci first; an
    earlier file with its own softdep for that driver silently wins.
    """
    drivers = {
        d
        for p in pools
        if p.kind is PoolKind.VFIO
        for f in p.functions
        if (d := host_driver(f)) is not None and d != VFIO_DRIVER
    }
    ours = SPLIT_MODPROBE.rsplit("/", 1)[1]
    for dep in softdeps(facts):
        if dep.name >= ours or dep.module not in drivers:
            continue
        if "vfio-pci" in dep.words or "vfio_pci" in dep.words:
            continue
        yield Diagnostic(
            Severity.WARNING,
            "softdep-shadowed",
            dep.path,
            f"`{dep.line}` comes before {ours}, and kmod uses only the first "
            f"softdep of a module, so `softdep {dep.module} pre: vfio-pci` would be "
            f"ignored: add `pre: vfio-pci` to this line",
        )
