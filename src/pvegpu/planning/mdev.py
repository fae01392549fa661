"""Virtual GPUs (mediated devices, vendor vGPU on virtual functions) on the GPUs a plan
sends to vfio-pci: refused, naming the VMs and instances that would lose them.

A GPU that carries vGPUs stays on its vendor's host driver (the vGPU manager); bound to
vfio-pci it has no vGPU types, its mediated devices go, and its virtual functions with
them. Every VM whose `hostpciN` line has `mdev=` on one of the GPU's functions (by host
address, or by a mapping that hands one over on this node) holds that GPU, whichever
VM the plan meant it for: a line of the pool's own VM is not rewritten into
`mapping=...,mdev=...` on a device that no longer offers the type. `pvegpu check` asks
the same function (planning/host_checks.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import VFIO_DRIVER
from pvegpu.model.facts import GPU, HostFacts, MdevInstance
from pvegpu.model.guests import guests
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.plan import Pool
from pvegpu.pci import PciAddress
from pvegpu.pvefiles import hostpci
from pvegpu.pvefiles.guestconf import is_pending
from pvegpu.pvefiles.hostpci import HostId
from pvegpu.values import value_class
from pvegpu.vendors import vendor_of


@value_class
@attrs.frozen(eq=False, repr=False)
class MdevUse:
    """A VM config line that gives the VM a virtual GPU of a host device."""

    vmid: int
    key: str
    """`hostpci0`; a pending one is `hostpci0 (pending)`."""
    mdev_type: str
    hosts: tuple[HostId, ...]
    """What the line names on this node: its raw host ids, or its mapping's devices."""
    mapping: str | None = None


def mdev_uses(facts: HostFacts) -> tuple[MdevUse, ...]:
    """Every `hostpciN` line with `mdev=` in a VM's main or pending section, with the
    devices it names on this node (a mapping's by pci.cfg)."""
    maps = _mapping_hosts(facts)
    uses: list[MdevUse] = []
    for vmid, file in guests(facts).vms:
        for section, lines in guests(facts).config(file).sections:
            pending = is_pending(section)
            if section.name is not None and not pending:
                continue  # snapshots and [special:...] hand over nothing at the next start
            for line in lines:
                use = hostpci.hostpci_use(line)
                if use is None:
                    continue
                mdev = next((v for k, v in hostpci.options(line.value) if k == "mdev"), None)
                if not mdev:
                    continue
                hosts = use.hosts if use.mapping is None else maps.get(use.mapping, ())
                key = use.key + (" (pending)" if pending else "")
                uses.append(MdevUse(vmid, key, mdev, hosts, use.mapping))
    return tuple(uses)


def _mapping_hosts(facts: HostFacts) -> dict[str, tuple[HostId, ...]]:
    # A broken pci.cfg has no sections here: it is refused on its own (pci_cfg_problems).
    return pci_cfg(facts).node_hosts(facts.node)


def parents_of(
    facts: HostFacts, gpu: GPU, vfs_of: dict[PciAddress, list[PciAddress]] | None = None
) -> tuple[PciAddress, ...]:
    """The functions a GPU's virtual GPUs hang on: its own, and its SR-IOV virtual
    functions (they go when the physical function leaves its driver). `vfs_of`: the
    functions by their `physfn` (`_vfs_by_physfn`), for a caller asking per GPU; a scan
    of every function per GPU made planning a 2,048-GPU host quadratic."""
    if vfs_of is None:
        vfs_of = _vfs_by_physfn(facts)
    own = {f.address for f in gpu.functions}
    vfs = {vf for a in own for vf in vfs_of.get(a, ())}
    return tuple(sorted(own | vfs))


def _vfs_by_physfn(facts: HostFacts) -> dict[PciAddress, list[PciAddress]]:
    found: dict[PciAddress, list[PciAddress]] = {}
    for f in facts.functions:
        if f.physfn is not None:
            found.setdefault(f.physfn, []).append(f.address)
    return found


def _host_id(address: PciAddress) -> HostId:
    return HostId(address.domain, address.bus, address.device, address.function)


def gpu_mdev_problems(
    facts: HostFacts, gpus: Iterable[GPU], uses: Sequence[MdevUse] | None = None
) -> Iterator[Diagnostic]:
    """`gpu-has-mdev-guests` for each GPU going to vfio-pci that carries virtual GPUs:
    VM lines with `mdev=` on it, mediated devices or vendor vGPUs that exist now."""
    if uses is None:
        uses = mdev_uses(facts)
    vfs_of = _vfs_by_physfn(facts)
    for gpu in gpus:
        parents = parents_of(facts, gpu, vfs_of)
        ids = [_host_id(a) for a in parents]
        lines = [u for u in uses if any(h.overlaps(i) for h in u.hosts for i in ids)]
        live = [i for i in facts.mdev_instances if i.parent in parents]
        if lines or live:
            yield _problem(facts, gpu, lines, live)


def _problem(
    facts: HostFacts, gpu: GPU, lines: Sequence[MdevUse], live: Sequence[MdevInstance]
) -> Diagnostic:
    parts = [
        f"VM {u.vmid} ({u.key}: mdev={u.mdev_type}"
        + (f" on mapping {u.mapping}" if u.mapping else "")
        + ")"
        for u in lines
    ]
    parts += [
        (f"mediated device {i.uuid}" if i.uuid else f"the vGPU on {i.parent}")
        + (f" ({i.type_id})" if i.type_id else "")
        for i in live
    ]
    vms = sorted({u.vmid for u in lines})
    stop = ""
    if vms:
        stop = f" and VM{'s' if len(vms) > 1 else ''} {', '.join(map(str, vms))} no longer "
        stop += "start" if len(vms) > 1 else "starts"
    fixes = [
        f"qm set {u.vmid} --revert {u.key.split()[0]}"
        if u.key.endswith("(pending)")
        else f"qm set {u.vmid} --delete {u.key}"
        for u in lines
    ]
    fixes += [_remove(facts, i) for i in live]
    return Diagnostic.error(
        "gpu-has-mdev-guests",
        str(gpu.address),
        f"carries virtual GPUs: {'; '.join(parts)}. Bound to vfio-pci it offers no vGPU "
        "types, so its vGPUs go" + stop,
        "keep this GPU on its host driver (leave it out of the vfio pool), or take its "
        "vGPUs off it first (stop the VMs; " + "; ".join(fixes) + "), then run pvegpu again",
    )


def _remove(facts: HostFacts, instance: MdevInstance) -> str:
    """The command that removes a virtual GPU that exists now."""
    if instance.uuid is not None:
        return f"echo 1 > /sys/bus/mdev/devices/{instance.uuid}/remove"
    function = facts.function(instance.parent)
    vendor = vendor_of(function) if function is not None else None
    vgpu = vendor.vgpu if vendor is not None else None
    if vgpu is None:
        return f"remove the vGPU on {instance.parent}"
    return f"echo 0 > /sys/bus/pci/devices/{instance.parent}/{vgpu.directory}/{vgpu.current}"


def mdev_problems(facts: HostFacts, pools: Sequence[Pool]) -> list[Diagnostic]:
    """The refusals of the GPUs the pools move to vfio-pci (plan() calls this once). A
    vGPU pool's virtual functions stay on their driver, vGPUs and all (planning/vgpu.py)."""
    gpus = [g for p in pools if p.moves_to_vfio for g in p.gpus]
    if not gpus:
        return []
    return list(gpu_mdev_problems(facts, gpus))


def check_findings(facts: HostFacts) -> Iterator[Diagnostic]:
    """`pvegpu check`: the refusal's rule on the GPUs vfio-pci holds now (a VM with an
    `mdev=` line on one of them does not start)."""
    held = [g for g in facts.gpus if g.driver == VFIO_DRIVER]
    for problem in gpu_mdev_problems(facts, held):
        yield Diagnostic(
            Severity.ERROR,
            problem.code,
            problem.subject,
            f"is on {VFIO_DRIVER} now and {problem.message[0].lower()}{problem.message[1:]}; "
            "return it to its host driver (pvegpu-vfio-split revert) or change those VMs",
        )
