"""What the next boot changes when a kernel or GPU driver is installed but not yet running.

`apt full-upgrade` installs a new kernel (the default next boot, unless pinned) and DKMS
builds the GPU driver for it, or a new driver version for every kernel; the loaded
module stays what it was until the reboot. Reported before that reboot, not discovered
after it (docs/upgrades.md):

- the next boot's kernel (`next-boot-kernel`): its drivers load afresh, number the GPUs
  again and hand out the dynamic majors anew;
- its module of a driver whose userspace is locked to the module's version
  (`next-boot-driver` another version, `next-boot-driver-missing` none, so no driver
  after the reboot, `next-boot-driver-unknown` one whose version is unread);
- each container whose NVIDIA userspace is the loaded module's and not the next one's
  (`container-driver-next-boot`): its CUDA works until the reboot and fails after it;
- each raw-style container that allows a dynamic node by its major
  (`container-uvm-major-next-boot`), which a new kernel or driver may hand out anew.

When the runbook itself reboots (a finding with `reboot_first`), a server's container is
judged against the next boot's module instead of the loaded one (`serving/next_boot.py`,
`userspace_target`). `pvegpu check` reports the same from the host as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.container_files import container_files
from pvegpu.model.decision import ContainerDriver
from pvegpu.model.facts import HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.kernels import MODULES_DIR, ModuleOrigin
from pvegpu.model.paths import CONTAINER_LIBDIRS, lxc_config
from pvegpu.model.plan import Pool
from pvegpu.model.rootfs import rootfs_dirs
from pvegpu.planning.numbering import Renumbering
from pvegpu.pvefiles.lxcconf import DeviceStyle
from pvegpu.serving.container import container_driver_install, container_driver_problems
from pvegpu.serving.next_boot import (
    HOST_USERSPACE,
    NextDriver,
    breaks_at_reboot,
    next_boot_fix,
    next_boot_message,
    next_driver,
)
from pvegpu.vendors import CONTAINER_TOOL, VENDORS, DeviceNodes, Vendor

HEADERS_PACKAGE = "proxmox-headers-{kernel}"
"""What DKMS needs to build a module for a Proxmox kernel (pve-headers before PVE 8)."""


def next_boot_findings(
    facts: HostFacts, pools: Sequence[Pool], numbers: Renumbering, reboots: bool
) -> Iterator[Diagnostic]:
    """Every finding of what the next boot changes, for a plan of `pools`; `reboots`: the
    runbook reboots (its containers start after it)."""
    yield from host_next_boot_findings(facts, numbers, reboots)
    pending = next_driver(facts)
    if pending is not None and pending.changes:
        owners = {p.lxc.vmid: p.name for p in pools if p.lxc is not None}
        for vmid in _gpu_containers(facts, pools, pending.vendor):
            finding = _container_finding(facts, vmid, pending, owners.get(vmid))
            if finding is not None:
                yield finding
    raw_pools = {
        p.lxc.vmid: p.lxc.nodes
        for p in pools
        if p.lxc is not None and p.lxc.devices is DeviceStyle.RAW
    }
    rewritten = frozenset(p.lxc.vmid for p in pools if p.lxc is not None)
    yield from dynamic_major_findings(facts, raw_pools, rewritten)


def host_next_boot_findings(
    facts: HostFacts, numbers: Renumbering, reboots: bool = False
) -> Iterator[Diagnostic]:
    """The kernel and driver findings, which hold for the host whatever a plan does."""
    kernels = facts.boot.kernels
    if kernels.changes_kernel:
        assert kernels.next_boot is not None  # changes_kernel says so
        subject = kernels.decided_by or f"boot/vmlinuz-{kernels.next_boot}"
        yield Diagnostic(
            Severity.INFO,
            "next-boot-kernel",
            subject,
            f"the next boot runs kernel {kernels.next_boot} ({kernels.why_next}); this boot "
            f"runs {kernels.running}. At that boot the GPU drivers load afresh: they number "
            f"the GPUs they hold again in probe order (PCI order){_numbering(numbers)}"
            f"{_dynamic_majors(facts)}",
        )
    elif kernels.running is not None and kernels.next_boot is None and kernels.unknown:
        yield Diagnostic(
            Severity.INFO,
            "next-boot-unknown",
            kernels.decided_by or "boot",
            f"which kernel the next boot runs is unknown ({kernels.unknown}), so what it "
            "changes for the GPU drivers was not judged; `proxmox-boot-tool kernel list` "
            "or GRUB's menu shows it",
        )
    pending = next_driver(facts)
    if pending is None:
        return
    yield from _driver_findings(pending, reboots)


def _dynamic_majors(facts: HostFacts) -> str:
    """The dynamic majors of this host's GPU stacks, handed out anew at every boot."""
    found = [
        f"{d.module} ({major} now)"
        for v in VENDORS
        if v.nodes is not None
        and (d := v.nodes.dynamic) is not None
        and (major := facts.char_major(d.module)) is not None
    ]
    if not found:
        return ""
    majors = "the char major" + ("s" if len(found) > 1 else "")
    return f", and hand out {majors} of {' and '.join(found)} anew"


def _numbering(numbers: Renumbering) -> str:
    if not numbers:
        return ", which gives every GPU that stays on its driver the number it has now"
    moved = ", ".join(f"{c.gpu.short}: {c.before} -> {c.after}" for c in numbers.changes)
    return f", which moves these node numbers ({moved}; the plan's lines hold the new ones)"


def _driver_findings(pending: NextDriver, reboots: bool) -> Iterator[Diagnostic]:
    module = pending.module
    kernel = pending.kernel
    kernels = pending.kernels
    driver = pending.driver
    if pending.changes:
        judged = (
            "this plan's runbook reboots before its containers start again, so they are "
            f"judged against {pending.next_version}"
            if reboots
            else f"until then they run on {pending.loaded}"
        )
        yield Diagnostic(
            Severity.WARNING,
            "next-boot-driver",
            module.where,
            f"the next boot loads {pending.describe}; {pending.loaded} is loaded now. A "
            f"container's {pending.vendor.name} userspace must be the module's exact version: "
            "after that "
            f"reboot every container's must be {pending.next_version} ({judged}). Upgrade "
            "each container's right after the reboot (container-driver-next-boot names "
            f"them), or give its pool {HOST_USERSPACE} to run the host's libraries; "
            "`pvegpu check` after the reboot reports any left behind",
        )
    elif module.origin is ModuleOrigin.NONE:
        headers = HEADERS_PACKAGE.format(kernel=kernel)
        fix = (
            f"Build it before rebooting: with DKMS, `apt install {headers}` and `dkms "
            f"autoinstall -k {kernel}` (`dkms status` shows what is built for which kernel); "
            "a driver installed without DKMS, by installing it again for that kernel"
        )
        if kernels.running is not None and kernel != kernels.running:
            pin = f"proxmox-boot-tool kernel pin {kernels.running}"
            fix += f". Or keep booting this kernel: `{pin}`"
        yield Diagnostic(
            Severity.WARNING,
            "next-boot-driver-missing",
            f"{MODULES_DIR}/{kernel}",
            f"the next boot runs kernel {kernel} ({kernels.why_next}), which has no {driver} "
            f"module: DKMS installed no build of it for that kernel and none is under "
            f"/{MODULES_DIR}/{kernel}. After that reboot the GPUs have no {driver} driver "
            f"({pending.loaded} is loaded now): no container gets them and every CUDA "
            f"server fails. {fix}",
        )
    elif module.origin is ModuleOrigin.OTHER and kernels.changes_kernel:
        yield Diagnostic(
            Severity.INFO,
            "next-boot-driver-unknown",
            module.path or f"{MODULES_DIR}/{kernel}",
            f"the next boot runs kernel {kernel} ({kernels.why_next}), whose {driver} module "
            f"/{module.path} DKMS did not install, so its version was not read (only its "
            f".modinfo says it). Check that `modinfo -F version /{module.path}` prints "
            f"{pending.loaded}, the loaded one: if not, every container's "
            f"{pending.vendor.name} userspace "
            "must follow it after the reboot",
        )


def _gpu_containers(facts: HostFacts, pools: Sequence[Pool], vendor: Vendor) -> list[int]:
    """The containers of the pools with the vendor's GPUs and every other container whose
    config reaches one of its GPUs or nodes."""
    owned = {p.lxc.vmid for p in pools if p.lxc is not None and _of(p, vendor)}
    return sorted(owned | set(guests(facts).vendor_containers(vendor)))


def _of(pool: Pool, vendor: Vendor) -> bool:
    return any(g.vendor is vendor for g in pool.gpus)


class Userspace(NamedTuple):
    """A container's NVIDIA userspace as discovery read it, or why it was not."""

    rootfs: str | None
    state: ContainerDriver | None
    """None: not read (`why`), or no library of its own (LXC's nvidia hook mounts the
    host's at start: `why` is empty)."""
    why: str = ""


def container_userspace(facts: HostFacts, vmid: int) -> Userspace:
    """The NVIDIA userspace of CT `vmid` from the files discovery read of it: in its
    storage's directory, else where `pct mount` puts them (`rootfs_dirs`)."""
    location = guests(facts).rootfs(vmid)
    for rootfs in rootfs_dirs(vmid, location):
        tree = container_files(facts).at(rootfs)
        if not tree.libraries and not tree.dpkg_read:
            continue
        state = tree.driver
        return Userspace(rootfs, state if state.libraries else None)
    why = location.why or f"nothing was read from /{location.path}"
    return Userspace(None, None, why)


def _container_finding(
    facts: HostFacts, vmid: int, pending: NextDriver, pool: str | None
) -> Diagnostic | None:
    found = container_userspace(facts, vmid)
    if found.rootfs is None:
        return unchecked_finding(vmid, found.why, pending)
    if found.state is None or not breaks_at_reboot(found.state, pending):
        return None
    return breaks_finding(f"{found.rootfs}/{CONTAINER_LIBDIRS[0]}", vmid, found, pending, pool)


def breaks_finding(
    subject: str, vmid: int, found: Userspace, pending: NextDriver, pool: str | None
) -> Diagnostic:
    """`container-driver-next-boot` of a container whose userspace `breaks_at_reboot`."""
    assert found.state is not None and found.rootfs is not None
    install = next_install(found.state, pending, found.rootfs, vmid)
    return Diagnostic(
        Severity.WARNING,
        "container-driver-next-boot",
        subject,
        f"{next_boot_message(vmid, found.state, pending)}. Fix: "
        f"{next_boot_fix(vmid, install, pending, pool)}",
    )


def unchecked_finding(vmid: int, why: str, pending: NextDriver) -> Diagnostic:
    """A container holding GPU nodes whose files were not read, with a driver change due."""
    return Diagnostic(
        Severity.INFO,
        "container-driver-next-boot-unchecked",
        lxc_config(vmid),
        f"CT {vmid} holds GPU nodes, but its files were not read ({why}), so its "
        f"{pending.vendor.name} userspace was not compared with the next boot's "
        f"{pending.describe}. After the reboot `pct exec {vmid} -- {CONTAINER_TOOL.name}` "
        f"must show driver version {pending.next_version}; to have it checked now, plan "
        f"(or check) with the container mounted (`pct mount {vmid}`)",
    )


def userspace_upgrades(facts: HostFacts, pools: Sequence[Pool]) -> tuple[tuple[int, str], ...]:
    """(vmid, the command that upgrades its userspace) of each container whose CUDA the
    next boot's driver breaks (`container-driver-next-boot`), for the runbook."""
    pending = next_driver(facts)
    if pending is None or not pending.changes:
        return ()
    found = []
    for vmid in _gpu_containers(facts, pools, pending.vendor):
        userspace = container_userspace(facts, vmid)
        state, rootfs = userspace.state, userspace.rootfs
        if state is not None and rootfs is not None and breaks_at_reboot(state, pending):
            found.append((vmid, next_install(state, pending, rootfs, vmid)))
    return tuple(found)


def next_install(state: ContainerDriver, pending: NextDriver, rootfs: str, vmid: int) -> str:
    """The command that puts the next boot's version into the container: the fix
    `container_driver_problems` gives for that version."""
    assert pending.next_version is not None
    if not container_driver_problems(state, pending.next_version, rootfs=rootfs, vmid=vmid):
        return ""
    return container_driver_install(state, pending.next_version, vmid)


def dynamic_major_findings(
    facts: HostFacts,
    raw_pools: Mapping[int, DeviceNodes] | None = None,
    rewritten: frozenset[int] = frozenset(),
) -> Iterator[Diagnostic]:
    """Raw-style containers that allow a dynamic node by its major, when the next boot
    runs another kernel or driver: the major may come out different. `raw_pools`: the
    plan's raw-style pool containers (vmid -> their nodes), whose rules it writes anew;
    `rewritten`: every pool container (their config now is not the one they keep)."""
    kernels = facts.boot.kernels
    pending = next_driver(facts)
    if not kernels.changes_kernel and not (pending is not None and pending.changes):
        return
    raw_pools = raw_pools or {}
    for vendor in VENDORS:
        nodes = vendor.nodes
        dynamic = nodes.dynamic if nodes is not None else None
        major = facts.char_major(dynamic.module) if dynamic is not None else None
        if nodes is None or dynamic is None or major is None:
            continue
        # `container-uvm-major-...` as findings.py's stale rule names it: the node's own part.
        code = f"container-{dynamic.module.rsplit('-', 1)[-1]}-major"
        for vmid, path in _raw_containers(facts, nodes, raw_pools, rewritten):
            yield Diagnostic(
                Severity.WARNING,
                f"{code}-next-boot",
                path,
                f"CT {vmid} bind-mounts {dynamic.node} and allows it by char major in a raw "
                f"cgroup rule ({dynamic.module}'s major is {major} now, from /proc/devices). "
                "That major is handed out when the module loads, and the next boot "
                f"{_what_changes(facts, pending)}: if it comes out different, the rule no "
                f"longer matches and {dynamic.user} fails in CT {vmid}. After the reboot run "
                f"`pvegpu check` ({code}-stale), or hand the node over as a devN entry "
                '(devices = "dev"), made with the current major at every start',
            )


def _raw_containers(
    facts: HostFacts,
    nodes: DeviceNodes,
    raw_pools: Mapping[int, DeviceNodes],
    rewritten: frozenset[int],
) -> list[tuple[int, str]]:
    """(vmid, config path) of every container whose config allows `nodes`' dynamic node
    by major: the plan's raw-style pools of those nodes, the others by their config now."""
    found = {v: lxc_config(v) for v, n in raw_pools.items() if n is nodes}
    for vmid, file in guests(facts).containers:
        if vmid not in rewritten and guests(facts).config(file).raw_uvm_majors(nodes) is not None:
            found[vmid] = file.path
    return sorted(found.items())


def _what_changes(facts: HostFacts, pending: NextDriver | None) -> str:
    kernels = facts.boot.kernels
    parts = []
    if kernels.changes_kernel:
        parts.append(f"runs kernel {kernels.next_boot} (this boot: {kernels.running})")
    if pending is not None and pending.changes:
        parts.append(f"loads {pending.driver} {pending.next_version} ({pending.loaded} now)")
    return " and ".join(parts)
