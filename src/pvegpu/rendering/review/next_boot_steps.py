"""The runbook's step for a driver upgrade installed and not yet running.

The next boot loads another version of the NVIDIA module (planning/next_boot.py); each
container whose userspace is the loaded version's needs the new one right after that
reboot, not before it (the new libraries fail against the module loaded until then). The
step is the admin's (`Manual`): apply has no reboot to wait for. When the runbook itself
reboots, the step comes right after that reboot; otherwise at the end, for whenever the
admin reboots.
"""

from __future__ import annotations

from pvegpu.model.plan import Plan
from pvegpu.rendering.review.actions import Action, Manual
from pvegpu.serving.next_boot import HOST_USERSPACE, next_driver
from pvegpu.vendors import CONTAINER_TOOL

StepParts = tuple[str, tuple[Action, ...], str]
"""A step's title, actions and what success looks like (`Step.of`'s arguments)."""


def userspace_upgrade_step(plan: Plan, *, rebooted: bool) -> StepParts | None:
    """(title, actions, what success looks like) of the step, or None when no container
    needs it. `rebooted`: the runbook's reboot step comes just before it."""
    pending = next_driver(plan.facts)
    upgrades = [(u.vmid, u.command) for u in plan.host_changes.userspace_upgrades]
    if pending is None or not upgrades:
        return None
    version = pending.next_version
    vmids = ", ".join(f"CT {vmid}" for vmid, _ in upgrades)
    when = "Right after that reboot" if rebooted else f"After the next reboot of {plan.facts.node}"
    actions = tuple(Manual(command) for _, command in upgrades)
    tool = CONTAINER_TOOL.name
    actions += tuple(Manual(f"pct exec {vmid} -- {tool}") for vmid, _ in upgrades)
    servers = [
        f"`pct exec {p.lxc.vmid} -- systemctl restart {p.serving.unit}`"
        for p in plan.pools
        if p.lxc is not None and p.serving is not None and p.lxc.vmid in dict(upgrades)
    ]
    restart = f" Then restart the servers that failed at boot: {', '.join(servers)}."
    restart = restart if servers else ""
    return (
        f"{when}, which loads {pending.driver} {version}: put {version} into the "
        f"{pending.vendor.name} userspace of {vmids}",
        actions,
        f"Not before the reboot: {version}'s libraries fail against the loaded "
        f"{pending.loaded}. Containers with `onboot: 1` start by themselves and their CUDA "
        f"fails until this runs. Each install exits 0 and {tool} prints `Driver "
        f"Version: {version}`.{restart} A pool with {HOST_USERSPACE} needs none of this.",
    )


def reboot_note(plan: Plan) -> str:
    """What the runbook's own reboot also changes: the driver it loads."""
    pending = next_driver(plan.facts)
    if pending is None or not pending.changes:
        return ""
    return (
        f" This reboot also loads {pending.driver} {pending.next_version} "
        f"({pending.loaded} now): a container whose {pending.vendor.name} userspace is not "
        f"{pending.next_version} fails its CUDA after it (next-boot-driver)."
    )
