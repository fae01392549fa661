"""The runbook: the apply steps in order, each with the output that means success.

It is written for the reference situation: the host is live, the container is running
its server on GPUs that are about to move, and nothing may be lost if a step fails.
Every step says what success looks like, so an admin can stop at the first surprise and
use the revert steps instead of improvising.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence

import attrs

from pvegpu.hardware import VFIO_DRIVER
from pvegpu.host.facts import PciFunction
from pvegpu.planning.plan import Plan, Pool
from pvegpu.rendering.artifact import HOST, Artifact
from pvegpu.rendering.bundle import MANIFEST
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
    health_url,
    nvidia_smi_bus_id,
)
from pvegpu.wording import plural


@attrs.frozen
class Step:
    """One runbook step: run `commands` in order, then compare with `expect`/`output`."""

    title: str
    commands: tuple[str, ...]
    expect: str = ""
    """What success looks like, in one or two sentences; empty when exit status 0 says it."""
    output: tuple[str, ...] = ()
    """The exact output to expect, line by line, where pvegpu can know it."""


def _sha_check(artifact: Artifact) -> str:
    assert artifact.base is not None
    line = f"{artifact.base.sha256}  /{artifact.path}"
    vmid = container_vmid(artifact.target)
    # pct exec passes stdin through, so the same check runs inside the container.
    where = "" if vmid is None else f"pct exec {vmid} -- "
    return f"echo {shlex.quote(line)} | {where}sha256sum -c -"


def container_pools(plan: Plan) -> list[Pool]:
    """LXC pools with a container, one per vmid (the spec refuses two pools per guest)."""
    return [p for p in plan.lxc_pools if p.lxc is not None]


def vfio_functions(plan: Plan) -> list[PciFunction]:
    return sorted(f for p in plan.vfio_pools for f in p.functions)


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


def _runbook(plan: Plan, files: tuple[ChangedFile, ...]) -> Iterator[Step]:
    node = plan.facts.node
    to_write = [f.artifact for f in files if f.kind is not ChangeKind.UNCHANGED]
    host_files = [a for a in to_write if a.target == HOST]
    pve_files = [a for a in host_files if a.path.startswith(PVE_DIR)]
    system_files = [a for a in host_files if not a.path.startswith(PVE_DIR)]
    ct_files = [a for a in to_write if container_vmid(a.target) is not None]
    containers = container_pools(plan)

    yield Step(
        f"Work on {node}, as root, in this rendered directory",
        (f'test "$(hostname)" = {node} && test -f {MANIFEST} && echo ready',),
        f"Prints `ready`. Every path below is relative to this directory "
        f"(copy it over with `scp -r <out> root@{node}:`).",
    )

    checks = [_sha_check(a) for a in to_write if a.base is not None]
    if checks:
        yield Step(
            "Check that the files are still as discovered",
            tuple(checks),
            "Every line ends in `OK`. `FAILED` means the file changed since discovery: "
            "stop, discover again and re-render (the patches and revert/ were made from "
            "the old copy).",
        )

    replaced = [
        a
        for a in to_write
        if a.target == HOST and a.base is None and change_kind(plan.facts, a) is ChangeKind.REPLACED
    ]
    if replaced:
        yield Step(
            f"Save the files that revert/ cannot restore to {BACKUP_DIR}",
            (
                f"mkdir -p {BACKUP_DIR}",
                f"cp --parents {' '.join('/' + a.path for a in replaced)} {BACKUP_DIR}/",
            ),
            "These exist on the host but are written whole; the revert restores them from here.",
        )

    for pool in containers:
        if pool.lxc is not None and pool.serving is not None:
            yield Step(
                f"Stop the server in CT {pool.lxc.vmid}",
                (f"pct exec {pool.lxc.vmid} -- systemctl stop {pool.serving.unit}",),
                "Frees the GPUs; the container keeps running for the next step.",
            )

    for vmid in sorted({v for a in ct_files if (v := container_vmid(a.target)) is not None}):
        mine = [a for a in ct_files if container_vmid(a.target) == vmid]
        commands = [f"pct push {vmid} {in_bundle(a)} /{a.path} --perms {a.mode:04o}" for a in mine]
        if any(is_unit(a.path) for a in mine):
            commands.append(f"pct exec {vmid} -- systemctl daemon-reload")
        yield Step(
            f"Install the new files in CT {vmid} while it still runs",
            tuple(commands),
            "`pct push` needs a running container, and the new unit must be in place before "
            "the container restarts: an enabled unit starts with it.",
        )

    for pool in containers:
        assert pool.lxc is not None
        vmid = pool.lxc.vmid
        yield Step(f"Stop CT {vmid}", (f"pct stop {vmid}",), f"`pct status {vmid}` says stopped.")

    holders = [
        f"/dev/nvidia{g.nvidia_minor}"
        for p in plan.vfio_pools
        for g in p.gpus
        if g.driver == "nvidia" and g.nvidia_minor is not None
    ]
    if holders:
        yield Step(
            "Check that nothing holds the GPUs that move",
            (f"fuser -v {' '.join(holders)}",),
            "Prints nothing. Unbinding from nvidia blocks while a process holds the device: "
            "stop whatever is listed first (another container, dcgm-exporter; for "
            "nvidia-persistenced `systemctl stop nvidia-persistenced`, and start it again "
            "after the bind).",
        )

    if system_files:
        commands = [f"install -D -m {a.mode:04o} {in_bundle(a)} /{a.path}" for a in system_files]
        if any(in_initramfs(a.path) for a in system_files):
            commands.append("update-initramfs -u -k all")
        yield Step(
            "Install the host files",
            tuple(commands),
            "Nothing changes on the running system yet"
            + (
                "; rebuilding the initramfs takes a minute."
                if any(in_initramfs(a.path) for a in system_files)
                else "."
            ),
        )

    functions = vfio_functions(plan)
    if plan.vfio_pools:
        yield Step(
            "Move the VM GPUs to vfio-pci, now and at every boot",
            (
                "systemctl daemon-reload",
                f"systemctl enable {SPLIT_UNIT}",
                f"{SPLIT_SCRIPT} bind",
                f"{SPLIT_SCRIPT} status",
                driver_check([f.address for f in functions]),
            ),
            "`status` shows every VM GPU and its companion functions on vfio-pci; the last "
            "command, which reads sysfs directly, prints exactly:",
            tuple(f"{f.address} {VFIO_DRIVER}" for f in functions),
        )

    if pve_files:
        yield Step(
            "Write the Proxmox configuration",
            # cp, not install: /etc/pve is pmxcfs, which sets modes and owners itself.
            tuple(f"cp {in_bundle(a)} /{a.path}" for a in pve_files),
            "pmxcfs shares /etc/pve with the whole cluster at once.",
        )

    for pool in containers:
        assert pool.lxc is not None
        vmid = pool.lxc.vmid
        yield Step(f"Start CT {vmid}", (f"pct start {vmid}",), f"`pct status {vmid}` says running.")
        yield Step(
            f"Check the GPUs CT {vmid} sees",
            (
                f"pct exec {vmid} -- nvidia-smi -L",
                f"pct exec {vmid} -- nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader",
            ),
            f"`nvidia-smi -L` lists exactly {plural(pool.size, 'GPU')} (GPU 0 .. GPU "
            f"{pool.size - 1}); the query prints exactly:",
            tuple(f"{i}, {nvidia_smi_bus_id(g.address)}" for i, g in enumerate(pool.gpus)),
        )
        if pool.serving is None:
            continue
        unit = pool.serving.unit
        yield Step(
            f"Start the server in CT {vmid}",
            (f"pct exec {vmid} -- systemctl start {unit}",),
            f"Returns at once; loading the model over TP={pool.size} takes minutes.",
        )
        yield Step(
            f"Wait until the server in CT {vmid} is healthy",
            (
                f"timeout {HEALTH_TIMEOUT_S} sh -c 'until pct exec {vmid} -- curl -fsS "
                f"{health_url(pool.serving)}; do sleep 10; done' && echo healthy",
            ),
            f"Prints `healthy` within {HEALTH_TIMEOUT_S // 60} minutes. Exit status 124 means "
            f"it never answered: read `pct exec {vmid} -- journalctl -u {unit} -n 200 "
            "--no-pager`, and revert if it cannot be fixed.",
        )

    for pool in plan.vfio_pools:
        if pool.vm is not None and pool.vm.config is not None:
            vmid = pool.vm.vmid
            yield Step(
                f"Start VM {vmid} when you are ready",
                (f"qm start {vmid}",),
                f"`qm status {vmid}` says running. Proxmox checks every map line of the "
                "mapping against sysfs at start and refuses the start on a stale one.",
            )
