"""NVIDIA vGPU on SR-IOV virtual functions: a vfio pool that names them is handed to its
VMs as Proxmox does it, and nothing of it moves to vfio-pci.

On Ampere and later with NVIDIA's vGPU manager (kernel 6.8+, PVE 8.2+), the manager
creates the GPU's VFs and they stay bound to nvidia: each shows `nvidia/
creatable_vgpu_types` and `nvidia/current_vgpu_type` (`Vendor.vgpu`). A VM gets one
with `hostpciN: <VF or mapping=...>,mdev=nvidia-<id>`: at its start qemu-server writes
<id> to the VF's current_vgpu_type (refusing a type the VF does not offer) and hands the
VF to QEMU as it is, neither bound to vfio-pci nor reset; at its stop it writes 0. A VF
on vfio-pci has no `nvidia/` directory, hence no vGPU type, and a PF off nvidia has no
such VFs at all.

So a vfio pool that names such a VF (`is_vgpu_vf`) is a vGPU pool (`Pool.vgpu_type`):

- nothing of it moves: no split data, no unbind, its PF untouched (planner.py);
- its mapping says `mdev 1` (Proxmox compares that flag with the `nvidia/` directory at
  VM start) and names each VF by its function (planning/mapping.py);
- its VM's hostpci lines carry `mdev=<vgpu_type>` (planning/guests.py);
- it is refused without a type, with a type the VF does not offer now, with the VF or
  its PF off the vendor's host driver, or with a whole GPU (`vgpu_problems`);
- another VM's hostpci line that would get one of its VFs must say its type
  (`vm_line_problem`, asked by planning/host_guests.py): without `mdev=` Proxmox would
  bind the VF to vfio-pci at start.

An Intel i915/xe VF has no vendor vGPU types: it goes to vfio-pci alone (planning/
sriov.py). `pvegpu check` reports a vGPU VF held by vfio-pci (`check_findings`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import VFIO_DRIVER
from pvegpu.model.facts import GPU, HostFacts, MdevType, PciFunction
from pvegpu.model.plan import Pool
from pvegpu.pci import PciAddress
from pvegpu.pvefiles import hostpci
from pvegpu.pvefiles.guestconf import ConfLine
from pvegpu.vendors import vendor_of
from pvegpu.vendors.partitions import VgpuSource
from pvegpu.vendors.vendor import Vendor


def vgpu_vendor(function: PciFunction) -> Vendor | None:
    """The vendor whose vGPU types this SR-IOV virtual function carries; None for any
    other function (a PF, a whole GPU, an Intel VF)."""
    if function.physfn is None:
        return None
    vendor = vendor_of(function)
    return vendor if vendor is not None and vendor.vgpu is not None else None


def vgpu_source(gpus: Iterable[GPU]) -> VgpuSource | None:
    """Where a vGPU pool's virtual functions show their types: their vendor's vGPU files."""
    vendors = (vgpu_vendor(g.function) for g in gpus)
    return next((v.vgpu for v in vendors if v is not None), None)


def is_vgpu_vf(function: PciFunction) -> bool:
    """An SR-IOV virtual function of a vendor that runs vGPUs on its VFs (NVIDIA's exist
    for nothing else): it is handed to a VM as a vGPU, never moved to vfio-pci."""
    return vgpu_vendor(function) is not None


def offered_types(facts: HostFacts, address: PciAddress) -> list[MdevType]:
    """The vGPU types a VF can take now (its creatable_vgpu_types)."""
    return [t for t in facts.mdev_types if t.parent == address]


def current_type(facts: HostFacts, address: PciAddress) -> str | None:
    """The vGPU type a VF has now (its current_vgpu_type; None for 0)."""
    return next(
        (i.type_id for i in facts.mdev_instances if i.parent == address and i.uuid is None), None
    )


def _listed(types: Sequence[MdevType]) -> str:
    return ", ".join(f'"{t.type_id}"' + (f" ({t.name})" if t.name else "") for t in types)


def vgpu_problems(
    facts: HostFacts, gpus: Sequence[GPU], vgpu_type: str | None, where: str
) -> list[Diagnostic]:
    """The refusals of a vfio pool's vGPU VFs and its `vgpu_type` (`where`: the pool's spec
    path). A pool with neither has none."""
    vfs = [(g, v) for g in gpus if (v := vgpu_vendor(g.function)) is not None]
    problems: list[Diagnostic] = []
    if vgpu_type is not None:
        named = {g.address for g, _ in vfs}
        problems += [_not_a_vgpu_vf(g, vgpu_type, where) for g in gpus if g.address not in named]
    ready: list[tuple[GPU, Vendor]] = []
    bad_pfs: set[PciAddress] = set()
    for vf, vendor in vfs:
        pf = facts.function(vf.function.physfn) if vf.function.physfn else None
        if pf is not None and pf.driver != vendor.host_driver:
            if pf.address not in bad_pfs:
                bad_pfs.add(pf.address)
                problems.append(_pf_off_driver(pf, vendor, vf))
            continue
        if vf.driver != vendor.host_driver:
            problems.append(_vf_off_driver(vf, vendor))
            continue
        ready.append((vf, vendor))
    if not ready:
        return problems
    if vgpu_type is None:
        problems.append(_type_missing(facts, ready, where))
        return problems
    for vf, vendor in ready:
        offered = offered_types(facts, vf.address)
        # The type it has now is not listed as creatable, and Proxmox keeps it as it is.
        takes = {t.type_id for t in offered} | {current_type(facts, vf.address)}
        if vgpu_type not in takes:
            problems.append(_type_not_offered(facts, vf, vendor, vgpu_type, offered, where))
    return problems


def _source(vendor: Vendor) -> VgpuSource:
    assert vendor.vgpu is not None  # vgpu_vendor() returns only such vendors
    return vendor.vgpu


def _not_a_vgpu_vf(gpu: GPU, vgpu_type: str, where: str) -> Diagnostic:
    what = (
        "a virtual function without vendor vGPU types"
        if gpu.function.physfn is not None
        else "a whole GPU"
    )
    return Diagnostic.error(
        "vgpu-type-not-vgpu",
        str(gpu.address),
        f"{where}.vfio.vgpu_type is {vgpu_type!r}, but {gpu.address} ({gpu.vendor_device}, "
        f"{gpu.driver or 'no driver'}) is {what}: a vGPU type is set on a vGPU virtual "
        "function, and this device would go to vfio-pci whole",
        "remove vgpu_type to pass the device through, or name the GPU's vGPU virtual "
        "functions in gpus instead (pvegpu discover lists them under their GPU)",
    )


def _pf_off_driver(pf: PciFunction, vendor: Vendor, vf: GPU) -> Diagnostic:
    driver = vendor.host_driver
    return Diagnostic.error(
        "vgpu-pf-not-on-host-driver",
        str(pf.address),
        f"is the physical function of vGPU virtual function {vf.address} and is on "
        f"{pf.driver or 'no driver'}, not {driver}: its vGPU manager creates the VFs and "
        "their vGPU types, so without it a VM's mdev= line on them fails to start",
        f"give it back to {driver} (pvegpu-vfio-split revert if a split moved it), create "
        f"its VFs (on Proxmox: systemctl enable --now {_source(vendor).unit(str(pf.address))}), "
        "discover again, then plan",
    )


def _vf_off_driver(vf: GPU, vendor: Vendor) -> Diagnostic:
    driver = vendor.host_driver
    sysfs = f"/sys/bus/pci/devices/{vf.address}"
    fix = f"give it back to {driver}: echo > {sysfs}/driver_override"
    if vf.driver is not None:
        fix += f"; echo {vf.address} > {sysfs}/driver/unbind"
    fix += f"; echo {vf.address} > /sys/bus/pci/drivers_probe; then discover again and plan"
    return Diagnostic.error(
        "vgpu-vf-not-on-host-driver",
        str(vf.address),
        f"is a {vendor.name} vGPU virtual function on {vf.driver or 'no driver'}, not "
        f"{driver}: only {driver} gives it vGPU types, and Proxmox hands it to the VM as it "
        "is (no driver change), so the VM does not start",
        fix,
    )


def _type_missing(facts: HostFacts, vfs: Sequence[tuple[GPU, Vendor]], where: str) -> Diagnostic:
    names = ", ".join(str(v.address) for v, _ in vfs)
    many = len(vfs) > 1
    vendor = vfs[0][1]
    creatable = _source(vendor).file(_source(vendor).creatable)
    common = [
        t
        for t in offered_types(facts, vfs[0][0].address)
        if all(t.type_id in {o.type_id for o in offered_types(facts, v.address)} for v, _ in vfs)
    ]
    if common:
        fix = (
            "set vgpu_type in the pool's [pools.vfio] table to one of the types "
            f"{names} {'offer' if many else 'offers'} now: {_listed(common)}"
        )
    else:
        fix = (
            f"{names} {'have no type in common' if many else 'offers no type'} now "
            f"({creatable}): stop the VMs on the GPU's other VFs, or name VFs of one GPU; "
            "then discover again and set vgpu_type in the pool's [pools.vfio] table"
        )
    return Diagnostic.error(
        "vgpu-type-missing",
        f"{where}.vfio.vgpu_type",
        f"the pool names {vendor.name} vGPU virtual function{'s' if many else ''} {names}, "
        "which stay on the host driver and reach a VM only with a vGPU type (mdev= on its "
        "hostpci line); the pool says none",
        fix,
    )


def _type_not_offered(
    facts: HostFacts,
    vf: GPU,
    vendor: Vendor,
    vgpu_type: str,
    offered: Sequence[MdevType],
    where: str,
) -> Diagnostic:
    current = current_type(facts, vf.address)
    now = f"; it has {current} now" if current else ""
    if offered:
        fix = f"set {where}.vfio.vgpu_type to one it offers: {_listed(offered)}"
    else:
        fix = (
            "it offers no type now: its GPU's other VFs hold types of another size (the "
            "vGPU manager's default, homogeneous mode), or every slot is taken; stop the VMs "
            "on them or name a VF of another GPU, then discover again"
        )
    return Diagnostic.error(
        "vgpu-type-not-offered",
        str(vf.address),
        f"{where}.vfio.vgpu_type {vgpu_type!r} is not a vGPU type this virtual function "
        f"offers now ({_source(vendor).file(_source(vendor).creatable)}){now}: Proxmox "
        "refuses it at the VM's start",
        fix,
    )


def vm_line_problem(
    where: str, vmid: int, line: ConfLine, own_main: bool, pools: Iterable[Pool]
) -> Diagnostic | None:
    """A VM's hostpci line that the plan lets hand it a vGPU pool's VF (`pools`: those
    whose devices it names) without that pool's type: Proxmox would bind the VF to
    vfio-pci at start (no `mdev=`), where it has no vGPU, or set another type than the
    spec says. `own_main`: the line is the pool VM's own, which guests.py rewrites."""
    mdev = next((v for k, v in hostpci.options(line.value) if k == "mdev"), None)
    for pool in dict.fromkeys(p for p in pools if p.vgpu_type is not None):
        if (own_main and pool.vm is not None and pool.vm.vmid == vmid) or mdev == pool.vgpu_type:
            continue
        vfs = ", ".join(str(g.address) for g in pool.gpus)
        harm = (
            "without mdev=: at its start Proxmox would bind the VF to vfio-pci, where it has "
            "no vGPU type"
            if mdev is None
            else f"with mdev={mdev}, not the pool's {pool.vgpu_type}: every VM of the pool "
            "gets the type the spec says"
        )
        kept = [f"{k}={v}" if k else v for k, v in hostpci.options(line.value) if k != "mdev"]
        value = ",".join([*kept, f"mdev={pool.vgpu_type}"])
        return Diagnostic.error(
            "vgpu-vm-line-type",
            where,
            f"`{line.raw.strip()}` gives VM {vmid} a vGPU virtual function of pool "
            f"{pool.name!r} ({vfs}) {harm}",
            f"qm set {vmid} --{line.key} {value}, or change the pool's vgpu_type; then run "
            "pvegpu again",
        )
    return None


def check_findings(facts: HostFacts) -> Iterator[Diagnostic]:
    """`pvegpu check`: a vGPU virtual function held by vfio-pci (bound, or pinned by
    driver_override) has no vGPU type; a VM given it with `mdev=` does not start."""
    for function in facts.functions:
        vendor = vgpu_vendor(function)
        if vendor is None:
            continue
        bound = function.driver == VFIO_DRIVER
        if not bound and function.driver_override != VFIO_DRIVER:
            continue
        address = function.address
        steps = [f"echo > /sys/bus/pci/devices/{address}/driver_override"]
        if bound:
            steps.append(f"echo {address} > /sys/bus/pci/drivers/{VFIO_DRIVER}/unbind")
        steps.append(f"echo {address} > /sys/bus/pci/drivers_probe")
        mdev = _source(vendor).type_name.format(id="<id>")
        yield Diagnostic(
            Severity.ERROR,
            "vgpu-vf-on-vfio",
            str(address),
            f"{'is on' if bound else 'is pinned to'} {VFIO_DRIVER}, but it is a "
            f"{vendor.name} vGPU virtual function: there it has no vGPU type, and a VM given "
            f"it with mdev={mdev} does not start; give it back to {vendor.host_driver}: "
            + "; ".join(steps)
            + " (or pvegpu-vfio-split revert, where a split of an older pvegpu moved it)",
        )
