"""The runbook: the apply steps in order, each with the output that means success.

It is written for the reference situation: the host is live, the container is running
its server on GPUs that are about to move, and nothing may be lost if a step fails.
Every step says what success looks like, so an admin can stop at the first surprise and
use the revert steps instead of improvising.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.engines import health_url
from pvegpu.formats.shell import word as sh
from pvegpu.hardware import VFIO_DRIVER
from pvegpu.model.artifact import HOST, Artifact
from pvegpu.model.facts import GPU, PciFunction
from pvegpu.model.paths import CONTAINER_DRIVER_DIR
from pvegpu.model.plan import Plan, Pool
from pvegpu.model.schema import DeviceStyle
from pvegpu.pci import PciAddress
from pvegpu.rendering.revert import (
    ABSENT_SUFFIX,
    kept_in_container,
    pulled_copy,
    pulled_units,
)
from pvegpu.rendering.review.actions import (
    Action,
    CheckBase,
    CheckDrivers,
    CheckGpus,
    CheckHolders,
    CheckNode,
    CheckNodes,
    ContainerReload,
    EnableUnit,
    HostCommand,
    InstallFile,
    KeepAside,
    MakeContainerDir,
    Manual,
    PullCopy,
    PushFile,
    RunSplit,
    SaveCopies,
    StartContainer,
    StartService,
    StopContainer,
    StopService,
    WaitHealthy,
    WritePveFile,
    lines_of,
)
from pvegpu.rendering.review.boot_steps import boot_units_step
from pvegpu.rendering.review.changes import (
    BACKUP_DIR,
    PVE_DIR,
    ChangedFile,
    ChangeKind,
    change_kind,
    changed_files,
    container_vmid,
    in_bundle,
    in_initramfs,
    is_unit,
)
from pvegpu.rendering.review.commands import (
    HEALTH_TIMEOUT_S,
    SPLIT_SCRIPT,
    SPLIT_UNIT,
    driver_check,
)
from pvegpu.rendering.review.emptied_steps import start_again_steps, stop_steps
from pvegpu.rendering.review.next_boot_steps import reboot_note, userspace_upgrade_step
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_TOOL, nvswitch
from pvegpu.vendors.drm import node_path as drm_node_path
from pvegpu.wording import plural


@value_class
@attrs.frozen(eq=False, repr=False)
class Step:
    """One runbook step: run `commands` in order, then compare with `expect`/`output`.

    Runbook steps are made from `actions` (rendering/review/actions.py), and `commands`
    are their lines: SUMMARY.md prints the lines, `pvegpu apply` runs the actions.
    """

    title: str
    commands: tuple[str, ...]
    expect: str = ""
    """What success looks like, in one or two sentences; empty when exit status 0 says it."""
    output: tuple[str, ...] = ()
    """The exact output to expect, line by line, where pvegpu can know it."""
    actions: tuple[Action, ...] = ()
    """What apply does for this step; empty for the manual revert steps."""

    @classmethod
    def of(
        cls, title: str, actions: Sequence[Action], expect: str = "", output: Sequence[str] = ()
    ) -> Step:
        return cls(title, lines_of(actions), expect, tuple(output), tuple(actions))


def _sha_check(artifact: Artifact) -> CheckBase:
    assert artifact.base is not None
    return CheckBase(artifact.target, artifact.path, artifact.base.sha256)


def container_pools(plan: Plan) -> list[Pool]:
    """LXC pools with a container, one per vmid (the spec refuses two pools per guest)."""
    return [p for p in plan.lxc_pools if p.lxc is not None]


def vfio_functions(plan: Plan) -> list[PciFunction]:
    return sorted(f for p in plan.vfio_pools for f in p.functions)


def _pull_steps(plan: Plan, ct_files: Sequence[Artifact]) -> Iterator[Step]:
    """Copy out each unit pvegpu could not read, so the revert can put it back.

    Its container's root file system is not a directory on the host: whether the unit
    exists is known only inside. The copy (0600: it may hold tokens) or an `.absent`
    marker goes where revert.sh looks for it; an unclear answer stops the runbook.
    """
    pulled = pulled_units(plan)
    for a in ct_files:
        vmid = container_vmid(a.target)
        if vmid is None or (a.target, a.path) not in pulled:
            continue
        yield Step.of(
            f"Copy the current /{a.path} out of CT {vmid} for the revert",
            (PullCopy(vmid, a.path, pulled_copy(a)),),
            f"pvegpu could not read CT {vmid}'s files from the host. The listing shows "
            f"`{posixpath.basename(a.path)}` (the current unit, which revert.sh restores) or "
            f"`{posixpath.basename(a.path)}{ABSENT_SUFFIX}` (there is none: revert.sh removes "
            "the new one). A non-zero exit status: stop; the container must be running.",
        )


def runbook(plan: Plan, artifacts: Sequence[Artifact]) -> tuple[Step, ...]:
    """The apply steps in order, only those this plan needs.

    The order is forced by the host, not by taste:
    - the server stops before its container, and the container before its GPUs move,
      because unbinding from nvidia blocks while anything holds /dev/nvidiaN;
    - the container's new files go in while it still runs (`pct push` refuses a stopped
      container) and before it restarts (an enabled unit starts with the container);
    - the Proxmox configs are written after the bind, so a failed bind leaves the old,
      working configuration in place.
    """
    return tuple(_runbook(plan, changed_files(plan, artifacts)))


@value_class
@attrs.frozen(eq=False, repr=False)
class _Writes:
    """The files the runbook writes (changed ones), by where they go."""

    files: tuple[Artifact, ...]

    @classmethod
    def of(cls, files: tuple[ChangedFile, ...]) -> _Writes:
        return cls(tuple(f.artifact for f in files if f.kind is not ChangeKind.UNCHANGED))

    @property
    def host(self) -> list[Artifact]:
        return [a for a in self.files if a.target == HOST]

    @property
    def pve(self) -> list[Artifact]:
        """Under /etc/pve: pmxcfs, shared with the cluster."""
        return [a for a in self.host if a.path.startswith(PVE_DIR)]

    @property
    def system(self) -> list[Artifact]:
        return [a for a in self.host if not a.path.startswith(PVE_DIR)]

    @property
    def containers(self) -> list[Artifact]:
        return [a for a in self.files if container_vmid(a.target) is not None]


def _runbook(plan: Plan, files: tuple[ChangedFile, ...]) -> Iterator[Step]:
    """The steps in the order they are safe in: checks, then each container's new files
    while it runs, then the host's changes with the containers stopped, then restarts."""
    writes = _Writes.of(files)
    yield from _preparation(plan, writes)
    yield from _container_files(plan, writes.containers)
    yield from _host_changes(plan, writes, tuple(f.artifact for f in files))
    reboot_for = [f for f in plan.findings if f.reboot_first]
    if reboot_for:
        # What the findings say holds only after a reboot: nothing past this point is
        # right until the host is planned again (a container would start on stale lines).
        yield from _reboot_and_plan_again(plan, vfio_functions(plan), reboot_for)
        return
    yield from _restarts(plan)
    yield from (Step.of(*parts) for parts in start_again_steps(plan))
    yield from _afterwards(plan, writes)


def _preparation(plan: Plan, writes: _Writes) -> Iterator[Step]:
    node = plan.facts.node
    yield Step.of(
        f"Work on {node}, as root, in this rendered directory",
        (CheckNode(node),),
        f"Prints `ready`. Every path below is relative to this directory "
        f"(copy it over with `scp -r <out> root@{node}:`).",
    )

    checks = [_sha_check(a) for a in writes.files if a.base is not None]
    if checks:
        yield Step.of(
            "Check that the files are still as discovered",
            checks,
            "Every line ends in `OK`. `FAILED` means the file changed since discovery: "
            "stop, discover again and re-render (the patches and revert/ were made from "
            "the old copy).",
        )

    replaced = [
        a
        for a in writes.files
        if a.target == HOST and a.base is None and change_kind(plan.facts, a) is ChangeKind.REPLACED
    ]
    if replaced:
        yield Step.of(
            f"Save the files that revert/ cannot restore to {BACKUP_DIR}",
            (SaveCopies(tuple(a.path for a in replaced)),),
            "These exist on the host but are written whole; the revert restores them from here.",
        )


def _container_files(plan: Plan, ct_files: list[Artifact]) -> Iterator[Step]:
    """Each server stopped, then its container's new files pushed while it still runs."""
    for pool in container_pools(plan):
        if pool.lxc is not None and pool.serving is not None:
            yield Step.of(
                f"Stop the server in CT {pool.lxc.vmid}",
                (StopService(pool.lxc.vmid, pool.serving.unit),),
                "Frees the GPUs; the container keeps running for the next step.",
            )

    yield from _pull_steps(plan, ct_files)

    for vmid in sorted({v for a in ct_files if (v := container_vmid(a.target)) is not None}):
        mine = [a for a in ct_files if container_vmid(a.target) == vmid]
        # A drop-in directory the container may lack (a copy hiding a /usr/lib drop-in).
        actions: list[Action] = [
            MakeContainerDir(vmid, d)
            for d in dict.fromkeys(posixpath.dirname(a.path) for a in mine if a.base is None)
            if d.endswith(".service.d")
        ]
        # An old file holding secrets stays in the container (revert/ has it redacted):
        # copied aside first, moved back by the revert.
        actions += [KeepAside(vmid, a.path) for a in mine if kept_in_container(a)]
        actions += [PushFile(vmid, in_bundle(a), a.path, a.mode) for a in mine]
        if any(is_unit(a.path) for a in mine):
            actions.append(ContainerReload(vmid))
        yield Step.of(
            f"Install the new files in CT {vmid} while it still runs",
            actions,
            "`pct push` needs a running container, and the new unit must be in place before "
            "the container restarts: an enabled unit starts with it.",
        )


def _host_changes(plan: Plan, writes: _Writes, installed: tuple[Artifact, ...]) -> Iterator[Step]:
    """With the containers stopped: the host's files, the split, the boot units that ready
    the containers' GPUs, the Proxmox config."""
    system_files = writes.system
    pve_files = writes.pve
    for pool in container_pools(plan):
        assert pool.lxc is not None
        vmid = pool.lxc.vmid
        yield Step.of(
            f"Stop CT {vmid}", (StopContainer(vmid),), f"`pct status {vmid}` says stopped."
        )
    # Other containers that lose every GPU: they hold their nodes open too.
    yield from (Step.of(*parts) for parts in stop_steps(plan))

    if plan.host_changes.stops_fabric_manager:
        # It holds the NVSwitches open: unbinding them from the driver would block.
        yield Step.of(
            "Stop Fabric Manager on the host: the NVSwitches go to the VM",
            (HostCommand(f"systemctl disable --now {nvswitch.MANAGER_UNIT}"),),
            "The guest runs Fabric Manager from now on. A revert does not start it again on "
            f"the host: systemctl enable --now {nvswitch.MANAGER_UNIT} after it.",
        )

    # A GPU's node is held only while its vendor's driver has it (one on vfio-pci has none).
    moving = [
        g
        for p in plan.split_pools
        for g in p.gpus
        if g.node_path is not None and g.vendor and g.driver == g.vendor.host_driver
    ]
    holders = [path for g in moving for path in _held_nodes(g)]
    if holders:
        drivers = " and ".join(dict.fromkeys(g.driver or "" for g in moving))
        hints = [h for h in dict.fromkeys(g.vendor.holders for g in moving if g.vendor) if h]
        yield Step.of(
            "Check that nothing holds the GPUs that move",
            (CheckHolders(tuple(holders)),),
            f"Prints nothing. Unbinding from {drivers} blocks while a process holds the "
            "device: stop whatever is listed first (another container"
            + "".join(f", {h}" for h in hints)
            + ").",
        )

    if system_files:
        installs: list[Action] = [InstallFile(in_bundle(a), a.path, a.mode) for a in system_files]
        boot = plan.facts.boot
        initramfs = any(in_initramfs(a.path) for a in system_files)
        if initramfs:
            installs.extend(HostCommand(c, rerun_on_revert=True) for c in boot.initramfs_apply)
        if any(a.path in plan.host_changes.udev_rules for a in system_files):
            # The rule must be live before a PF's driver creates VFs: udevd is told to
            # read it now, and again after a revert removes it.
            installs.append(HostCommand("udevadm control --reload", rerun_on_revert=True))
        known = initramfs and (boot.loader is not None or boot.boot_tool)
        yield Step.of(
            "Install the host files",
            installs,
            "Nothing changes on the running system yet"
            + ("; rebuilding the initramfs takes a minute." if initramfs else ".")
            + (f" This host boots with {boot.description}." if known else ""),
        )

    functions = vfio_functions(plan)
    if plan.split_pools:
        yield Step.of(
            "Move the VM GPUs to vfio-pci, now and at every boot",
            (
                HostCommand("systemctl daemon-reload", rerun_on_revert=True),
                EnableUnit(SPLIT_UNIT),
                RunSplit("bind"),
                RunSplit("status"),
                CheckDrivers(tuple(str(f.address) for f in functions), VFIO_DRIVER),
            ),
            "`status` shows every VM GPU and its companion functions on vfio-pci; the last "
            "command, which reads sysfs directly, prints exactly:",
            tuple(f"{f.address} {VFIO_DRIVER}" for f in functions),
        )

    yield from _vgpu_check(plan)

    readying = boot_units_step(plan, installed)
    if readying is not None:
        yield Step.of(readying.title, readying.actions, readying.expect, readying.output)

    if pve_files:
        yield Step.of(
            "Write the Proxmox configuration",
            # cp, not install: /etc/pve is pmxcfs, which sets modes and owners itself.
            tuple(WritePveFile(in_bundle(a), a.path) for a in pve_files),
            "pmxcfs shares /etc/pve with the whole cluster at once.",
        )


def vgpu_functions(plan: Plan) -> dict[str, list[PciAddress]]:
    """The vGPU pools' virtual functions by the driver they stay on, in address order."""
    found: dict[str, list[PciAddress]] = {}
    for pool in plan.vfio_pools:
        if pool.vgpu_type is not None:
            # On their host driver: plan() refuses a vGPU VF on any other.
            for gpu in pool.gpus:
                if gpu.driver is not None:
                    found.setdefault(gpu.driver, []).append(gpu.address)
    return {driver: sorted(addresses) for driver, addresses in found.items()}


def _vgpu_check(plan: Plan) -> Iterator[Step]:
    """The vGPU VFs stay on their driver: nothing binds them, this shows they are there."""
    for driver, addresses in vgpu_functions(plan).items():
        yield Step.of(
            f"Check that the vGPU virtual functions are on {driver}",
            (CheckDrivers(tuple(str(a) for a in addresses), driver),),
            "Nothing moves them: there is no bind step for vGPU pools. Proxmox sets each "
            "VM's vGPU type on a free one of them when the VM starts. The command prints "
            "exactly:",
            tuple(f"{a} {driver}" for a in addresses),
        )


def _gpu_check(plan: Plan, pool: Pool, vmid: int) -> Step:
    """What shows the container has the pool's GPUs: the listing tool (`CheckGpus` runs
    `CONTAINER_TOOL`, nvidia-smi) for its vendor's GPUs, or, for a vendor without one
    (AMD, Intel), the device nodes themselves."""
    vendor = pool.gpus[0].vendor if pool.gpus else None
    if vendor is None or vendor.tool is CONTAINER_TOOL:
        tool = CONTAINER_TOOL
        # With the host's userspace staged, its tool and libraries are what the server runs.
        staged = f"/{CONTAINER_DRIVER_DIR}" if pool.lxc and pool.lxc.host_userspace else ""
        return Step.of(
            f"Check the GPUs CT {vmid} sees",
            (CheckGpus(vmid, tuple(tool.bus_id(g.address) for g in pool.gpus), staged),),
            f"`{' '.join(tool.list_gpus)}` lists exactly {plural(pool.size, 'GPU')} "
            f"(GPU 0 .. GPU {pool.size - 1}); the query prints exactly:",
            tuple(f"{i}, {tool.bus_id(g.address)}" for i, g in enumerate(pool.gpus)),
        )
    check = CheckNodes(vmid, *container_nodes(plan, pool), owner=_node_owner(pool))
    owned = "," if check.owner is None else ", then its group id and mode,"
    return Step.of(
        f"Check the device nodes CT {vmid} has",
        (check,),
        f"The {vendor.name if vendor else 'GPU'} userspace opens these nodes; stat prints "
        f"each with its major:minor in hex{owned} exactly:",
        check.expected(),
    )


def _node_owner(pool: Pool) -> str | None:
    """`<gid> <mode>` of the nodes devN entries create (pve-container gives them the entry's
    gid, root's without one, and its mode); None for bind mounts, which keep the host's."""
    lxc = pool.lxc
    if lxc is None or lxc.devices is not DeviceStyle.DEV:
        return None
    return f"{lxc.node_gid} {int(lxc.mode, 8):o}"


def _held_nodes(gpu: GPU) -> tuple[str, ...]:
    """The GPU's nodes a process can hold: its own node, then its DRM render and card
    nodes (a display server's, a media server's), which an NVIDIA GPU has too with
    nvidia-drm loaded; each once."""
    drm = (
        *(() if gpu.drm_render is None else (drm_node_path(gpu.drm_render),)),
        *(() if gpu.drm_card is None else (drm_node_path(gpu.drm_card),)),
    )
    path = gpu.node_path
    return tuple(dict.fromkeys((*(() if path is None else (path,)), *drm)))


def container_nodes(plan: Plan, pool: Pool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The nodes the pool's container config hands over and their (major, minor): each
    GPU's node (and card node, when the lines have it), then the shared ones."""
    assert pool.lxc is not None
    nodes = pool.lxc.nodes
    written = " ".join((*pool.lxc.gpu_lines.devices, *(v for _, v in pool.lxc.gpu_lines.raw)))
    found: list[tuple[str, tuple[int, int]]] = []
    for gpu in pool.gpus:
        if (minor := gpu.container_minor) is not None:
            found.append((nodes.path(minor), (nodes.major, minor)))
        card = gpu.drm_card
        if nodes.display_path is not None and card is not None:
            path = nodes.display_path.format(minor=card)
            if path in written:
                found.append((path, (nodes.major, card)))
    dynamic = nodes.dynamic
    for path in nodes.shared:
        if dynamic is not None and path == dynamic.node:
            major = plan.facts.char_major(dynamic.module)
            if major is not None:
                found.append((path, (major, dynamic.minors[0])))
        elif nodes.control_minor is not None:
            found.append((path, (nodes.major, nodes.control_minor)))
    return tuple(p for p, _ in found), tuple(f"{major}:{minor}" for _, (major, minor) in found)


def _restarts(plan: Plan) -> Iterator[Step]:
    """Each container started, its GPUs checked, its server started and waited for."""
    for pool in container_pools(plan):
        assert pool.lxc is not None
        vmid = pool.lxc.vmid
        yield Step.of(
            f"Start CT {vmid}", (StartContainer(vmid),), f"`pct status {vmid}` says running."
        )
        yield _gpu_check(plan, pool, vmid)
        if pool.serving is None:
            continue
        unit = sh(pool.serving.unit)
        yield Step.of(
            f"Start the server in CT {vmid}",
            (StartService(vmid, pool.serving.unit),),
            f"Returns at once; loading the model over TP={pool.size} takes minutes.",
        )
        yield Step.of(
            f"Wait until the server in CT {vmid} is healthy",
            (WaitHealthy(vmid, health_url(pool.serving), HEALTH_TIMEOUT_S),),
            f"Prints `healthy` within {HEALTH_TIMEOUT_S // 60} minutes. Exit status 124 means "
            f"it never answered: read `pct exec {vmid} -- journalctl -u {unit} -n 200 "
            "--no-pager`, and revert if it cannot be fixed.",
        )


def _afterwards(plan: Plan, writes: _Writes) -> Iterator[Step]:
    """What the admin does later: start the VMs, check the split after the next reboot."""
    node = plan.facts.node
    functions = vfio_functions(plan)
    for pool in plan.vfio_pools:
        if pool.vm is not None and pool.vm.config is not None:
            vmid = pool.vm.vmid
            vgpu = ""
            source = pool.vgpu_source
            if pool.vgpu_type is not None and source is not None:
                vgpu = (
                    f" It then writes the id of {pool.vgpu_type} to a free VF's "
                    f"{source.file(source.current)} and refuses the start if none offers it."
                )
            yield Step.of(
                f"Start VM {vmid} when you are ready",
                (Manual(f"qm start {vmid}"),),
                f"`qm status {vmid}` says running. Proxmox checks every map line of the "
                "mapping against sysfs at start and refuses the start on a stale one." + vgpu,
            )

    upgrade = userspace_upgrade_step(plan, rebooted=False)
    if upgrade is not None:
        yield Step.of(*upgrade)
    if plan.split_pools and writes.system:
        yield Step.of(
            f"At the next reboot of {node}, check that the split comes back by itself",
            _split_checks(functions),
            "Reboot in a maintenance window: this checks that the split unit, not the runtime "
            "bind above, moves the GPUs at boot. `is-active` prints `active`, `status` exits 0, "
            "and the last command prints exactly:",
            tuple(f"{f.address} {VFIO_DRIVER}" for f in functions),
        )


def _split_checks(functions: Sequence[PciFunction]) -> tuple[Action, ...]:
    """Checks for after a reboot: the admin's (apply has no reboot to wait for)."""
    if not functions:
        return ()
    return (
        Manual(f"systemctl is-active {SPLIT_UNIT}"),
        Manual(f"{SPLIT_SCRIPT} status"),
        Manual(driver_check([f.address for f in functions])),
    )


def _reboot_and_plan_again(
    plan: Plan, functions: Sequence[PciFunction], reasons: Sequence[Diagnostic]
) -> Iterator[Step]:
    """The runbook's last steps when a finding says the plan holds only until a reboot."""
    ids = [p.lxc.vmid for p in container_pools(plan) if p.lxc is not None]
    # Other containers whose lines were moved to the numbers of the next boot.
    ids += [c.vmid for c in plan.containers_losing_gpus if c.renumber]
    vmids = [f"CT {v}" for v in dict.fromkeys(ids)]
    why = "; ".join(f"{f.subject}: {f.code}" for f in reasons)
    yield Step.of(
        f"Reboot {plan.facts.node} before starting {', '.join(vmids) or 'anything'}",
        (Manual("systemctl reboot"),),
        f"A finding says the plan changes at the next boot ({why}). The device lines written "
        "above hold the numbers the GPUs get at that boot, so a container with `onboot: 1` "
        "starts right by itself; started before the reboot, it would open other GPUs."
        + reboot_note(plan),
    )
    upgrade = userspace_upgrade_step(plan, rebooted=True)
    if upgrade is not None:
        yield Step.of(*upgrade)
    yield Step.of(
        "After the reboot, check the split and plan again",
        (
            *_split_checks(functions),
            Manual("pvegpu render --root / --spec <spec.toml> --out <new directory>"),
        ),
        "`is-active` prints `active`, `status` exits 0, and the sysfs readout prints exactly "
        "the lines below. Render with the spec named in MANIFEST.json, then follow the new "
        "SUMMARY.md from its first step: this runbook ends here."
        if functions
        else "Render with the spec named in MANIFEST.json, then follow the new SUMMARY.md "
        "from its first step: this runbook ends here.",
        tuple(f"{f.address} {VFIO_DRIVER}" for f in functions),
    )
