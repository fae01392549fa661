"""SR-IOV: a pool's virtual functions, and physical functions whose VFs are in use.

A VF (an Intel iGPU's, an NVIDIA vGPU card's) is a slice of its PF's GPU, not a GPU:
discovery leaves it out of `HostFacts.gpus`, so `count` and `numa_node` never select
one. A pool's `gpus` may name one by address, and then it stands in the pool as a device
of its own (`vf_device`): a vfio pool takes the VF's IOMMU group and nothing of its PF or
sibling VFs. An NVIDIA vGPU VF moves nowhere: it stays on nvidia and its VM gets it as a
vGPU (planning/vgpu.py). These are the decisions about them, made here once:

- a container pool cannot take a VF (`sriov-vf-in-container`);
- a PF may not go to vfio-pci while any of its VFs is in use: bound to a driver, in a
  pool, or named by a VM's hostpci line or a pci.cfg map line of this node (unbinding
  the PF's driver destroys every VF) (`sriov-pf-vfs-in-use`);
- the split pins VFs created after boot: `late_vf_pfs` lists the PFs whose VFs it must
  catch (autoprobe off before the VFs exist), with the driver their other VFs get.

`pvegpu check` repeats the PF rule on the live host, and warns where a VF is pinned to
vfio-pci while its PF would let the host driver take it when VFs are created again
(`check_findings`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import VFIO_DRIVER, host_driver
from pvegpu.model.facts import GPU, HostFacts, PciFunction
from pvegpu.model.guests import guests
from pvegpu.model.host_changes import LateVfPf, MovedFunction
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.pci import PciAddress
from pvegpu.planning.split import revert_driver
from pvegpu.planning.vgpu import is_vgpu_vf
from pvegpu.pvefiles import hostpci
from pvegpu.pvefiles.hostpci import HostId
from pvegpu.wording import plural


def vf_device(facts: HostFacts, function: PciFunction) -> GPU | None:
    """A VF of a GPU as a pool's device, None for any other function. It has no
    companions: a VF is one function, and its PF and siblings stay where they are."""
    if function.physfn is None:
        return None
    pf = facts.function(function.physfn)
    if pf is None or facts.gpu(pf.address) is None:
        return None
    return GPU(function)


def late_vf_pfs(facts: HostFacts, pools: Iterable[Pool]) -> tuple[LateVfPf, ...]:
    """The PFs of every VF that a vfio pool moves, in address order."""
    moved: dict[PciAddress, list[PciFunction]] = {}
    for pool in pools:
        if pool.kind is not PoolKind.VFIO:
            continue
        for function in pool.functions:
            if function.physfn is not None:
                moved.setdefault(function.physfn, []).append(function)
    found = []
    for address in sorted(moved):
        pf = facts.function(address)
        if pf is None:
            continue  # a document without its PF: nothing to switch off autoprobe on
        vfs = tuple(sorted(moved[address]))
        own = {f.address for f in vfs}
        movers = tuple(MovedFunction(f, host_driver(f), revert_driver(facts, f)) for f in vfs)
        siblings = [
            f.driver
            for f in facts.virtual_functions(address)
            if f.address not in own and f.driver not in (None, VFIO_DRIVER)
        ]
        found.append(
            LateVfPf(
                function=pf,
                vfs=movers,
                sibling_driver=siblings[0] if siblings else host_driver(pf),
                autoprobe=pf.sriov.drivers_autoprobe if pf.sriov is not None else True,
            )
        )
    return tuple(found)


def sriov_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """VFs in container pools, and PFs that go to vfio-pci while their VFs are in use."""
    for pool in pools:
        if pool.kind is PoolKind.VFIO:
            continue
        for gpu in pool.gpus:
            if gpu.function.physfn is not None:
                yield Diagnostic.error(
                    "sriov-vf-in-container",
                    str(gpu.address),
                    f"pool {pool.name!r} is a container pool, and {gpu.address} is a virtual "
                    f"function of {gpu.function.physfn}: pvegpu gives a container whole GPUs "
                    "(their device nodes), and a VF is for a VM",
                    f"give the container the PF ({gpu.function.physfn.short}) or move "
                    f"{gpu.address.short} to a vfio pool",
                )
    named = _named_by_guests(facts)
    # A vGPU pool's VFs are in no pool's functions (they stay on their driver): its GPUs.
    in_pools = {a: p.name for p in pools for a in _addresses(p)}
    for pool in pools:
        if pool.kind is not PoolKind.VFIO:
            continue
        for function in pool.functions:
            vfs = facts.virtual_functions(function.address)
            busy = [u for u in (_vf_use(vf, in_pools, named) for vf in vfs) if u]
            if busy:
                yield Diagnostic.error(
                    "sriov-pf-vfs-in-use",
                    str(function.address),
                    f"pool {pool.name!r} moves this SR-IOV physical function to vfio-pci, "
                    "and unbinding its driver destroys every VF while " + "; ".join(busy),
                    "free the VFs first (stop and change the VMs and pools that use them, "
                    f"then echo 0 > /sys/bus/pci/devices/{function.address}/sriov_numvfs), "
                    "or leave the PF on the host and give the VM a VF",
                )


def _addresses(pool: Pool) -> Iterator[PciAddress]:
    yield from (f.address for f in pool.functions)
    yield from (g.address for g in pool.gpus)


def sriov_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """A PF that goes to vfio-pci with unused VFs: they disappear with its driver."""
    for pool in pools:
        if pool.kind is not PoolKind.VFIO:
            continue
        for function in pool.functions:
            vfs = facts.virtual_functions(function.address)
            if vfs:
                yield Diagnostic(
                    Severity.WARNING,
                    "sriov-vfs-removed",
                    str(function.address),
                    f"its {plural(len(vfs), 'virtual function')} "
                    f"({', '.join(str(v.address) for v in vfs)}) go away when its driver lets "
                    "go of it for vfio-pci; whatever creates them at boot (sysfs.conf, "
                    "sriov-manage) fails on vfio-pci: remove that setting",
                )


def _vf_use(vf: PciFunction, in_pools: dict[PciAddress, str], named: set[HostId]) -> str:
    """What uses this VF, for a message; "" when nothing does."""
    uses = []
    if vf.driver is not None:
        uses.append(f"bound to {vf.driver}")
    if vf.address in in_pools:
        uses.append(f"in pool {in_pools[vf.address]!r}")
    me = HostId(vf.address.domain, vf.address.bus, vf.address.device, vf.address.function)
    if any(h.overlaps(me) for h in named):
        uses.append("named by a VM's hostpci line or a pci.cfg mapping")
    return f"{vf.address} is {' and '.join(uses)}" if uses else ""


def _named_by_guests(facts: HostFacts) -> set[HostId]:
    """Every host device a VM config's raw hostpci line or this node's pci.cfg names."""
    found: set[HostId] = set()
    for _, file in guests(facts).vms:
        # Every section: a snapshot or pending change that names a VF uses it too.
        for _, lines in guests(facts).config(file).sections:
            for line in lines:
                use = hostpci.hostpci_use(line)
                if use is not None:
                    found.update(use.hosts)
    # A broken pci.cfg has no mapping: refused on its own by pci_cfg_problems.
    for hosts in pci_cfg(facts).node_hosts(facts.node).values():
        found.update(hosts)
    return found


def check_findings(facts: HostFacts) -> Iterator[Diagnostic]:
    """`pvegpu check`: the plan's SR-IOV rules on the live host. A PF on vfio-pci with
    VFs in use (`sriov-pf-vfs-in-use`), and a VF pinned to vfio-pci whose PF probes new
    VFs (`sriov-autoprobe-on`): once its VFs are created again (a reboot, sriov_numvfs
    written), the host driver takes this one before anything can pin it."""
    named = _named_by_guests(facts)
    for function in facts.functions:
        if function.driver != VFIO_DRIVER:
            continue
        busy = [
            u
            for u in (_vf_use(vf, {}, named) for vf in facts.virtual_functions(function.address))
            if u
        ]
        if busy:
            yield Diagnostic(
                Severity.ERROR,
                "sriov-pf-vfs-in-use",
                str(function.address),
                f"is on {VFIO_DRIVER} and its VFs are in use: "
                + "; ".join(busy)
                + "; they go away with the next unbind; give the PF back to its host "
                "driver (pvegpu-vfio-split revert)",
            )
    # A vGPU VF pinned to vfio-pci is wrong in itself (vgpu-vf-on-vfio, planning/vgpu.py):
    # switching its PF's autoprobe off would not make it right.
    pinned = {
        f.physfn
        for f in facts.functions
        if f.physfn is not None and f.driver_override == VFIO_DRIVER and not is_vgpu_vf(f)
    }
    for address in sorted(a for a in pinned if a is not None):
        pf = facts.function(address)
        if pf is not None and pf.sriov is not None and pf.sriov.drivers_autoprobe:
            yield Diagnostic(
                Severity.WARNING,
                "sriov-autoprobe-on",
                str(address),
                "a VF of it is pinned to vfio-pci, but sriov_drivers_autoprobe is 1: when its "
                "VFs are created again, its driver takes that VF first; run "
                "pvegpu-vfio-split bind (it writes 0) and check that "
                "pvegpu-vfio-split.service is enabled",
            )
