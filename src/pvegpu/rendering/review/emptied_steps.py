"""The runbook's steps for another container that loses every GPU it has.

The plan removes that container's GPU lines (planning/host_guests.py, the
`container-loses-gpus` warning), but a running container still holds the device nodes
it opened: the unbind of a GPU that moves to vfio-pci blocks on it, and a GPU handed to
another pool's container would be shared with whatever runs there. So the runbook stops
it before the split moves its GPUs, with the pool's own containers.

**Decision: `pct shutdown <id> --timeout 120 --forceStop 1`, not `pct stop`.** pvegpu
stopped no service of this container first (it knows only that the container had GPUs),
so it is shut down the way Proxmox shuts a guest down for a node's shutdown: its init
stops its services (a database flushes, a job writes its checkpoint). `--forceStop 1`
kills it after two minutes, so the split cannot hang on a container that ignores the
request. The pool's own container keeps `pct stop`: its server was stopped just before.

Whether it runs is known only on the host, at apply time (discovery reads files, not
processes): apply stops it only if it runs and journals that (`was_running`), and the
revert starts it again only then. After the split the runbook leaves it stopped: the
step at the end says how to start it again without its GPUs, which the admin does if
it ran before (what it still runs was checked: `container-unit-needs-gpus`).
"""

from __future__ import annotations

from collections.abc import Iterator

from pvegpu.model.plan import Plan
from pvegpu.rendering.review.actions import Manual, StopContainer

SHUTDOWN_TIMEOUT_S = 120
"""How long its services get to stop before `--forceStop` kills them."""


def emptied_containers(plan: Plan) -> tuple[int, ...]:
    """The containers other than the pools' that keep no GPU after the plan, by id."""
    own = {p.lxc.vmid for p in plan.pools if p.lxc is not None}
    return tuple(
        sorted(
            {
                c.vmid
                for c in plan.containers_losing_gpus
                if c.shared_majors is not None and c.vmid not in own
            }
        )
    )


def stop_steps(plan: Plan) -> Iterator[tuple[str, tuple[StopContainer], str]]:
    """(title, actions, what success looks like) of each stop, before the GPUs move."""
    for vmid in emptied_containers(plan):
        yield (
            f"Shut down CT {vmid}: the plan takes every GPU it has",
            (StopContainer(vmid, SHUTDOWN_TIMEOUT_S),),
            f"`pct status {vmid}` says stopped. Its services get {SHUTDOWN_TIMEOUT_S} s to "
            "stop before it is killed; apply skips a container that is not running and "
            "its revert starts it again only if it was.",
        )


def start_again_steps(plan: Plan) -> Iterator[tuple[str, tuple[Manual], str]]:
    """The admin's step at the end: start each such container again, without GPUs."""
    for vmid in emptied_containers(plan):
        yield (
            f"Start CT {vmid} again if it ran before, now without GPUs",
            (Manual(f"pct start {vmid}"),),
            f"`pct status {vmid}` says running. Its GPU lines are gone from "
            f"/etc/pve/lxc/{vmid}.conf; apply leaves it stopped, since only you know whether "
            "it should run.",
        )


def revert_start_steps(plan: Plan) -> Iterator[tuple[str, tuple[str, ...], str]]:
    """The manual revert's step: each such container started again with its GPUs."""
    for vmid in emptied_containers(plan):
        yield (
            f"Start CT {vmid} again if it ran before the change",
            (f"pct start {vmid}",),
            f"It gets its GPUs back with the restored /etc/pve/lxc/{vmid}.conf; leave it "
            "stopped if it was stopped before.",
        )
