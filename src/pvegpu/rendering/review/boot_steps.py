"""The runbook's steps for the boot units that ready the containers' GPUs
(rendering/boot_units.py): enable them and run them once now, and their undoing.

Run now, as they will run at every boot: the containers start a few steps later, and a
unit that fails here (nvidia-modprobe missing, the host's userspace not installed) stops
the runbook before any container is started on a host that would not boot it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from pvegpu.model.artifact import HOST, Artifact
from pvegpu.model.paths import (
    NODES_SCRIPT,
    NODES_UNIT_NAME,
    USERSPACE_DIR,
    USERSPACE_SCRIPT,
    USERSPACE_UNIT_NAME,
)
from pvegpu.model.plan import Plan
from pvegpu.rendering.boot_units import boot_nodes, userspace_vendor
from pvegpu.rendering.review.actions import Action, EnableUnit, HostCommand, RestartUnit


class BootStep(NamedTuple):
    """A runbook step's parts (apply_steps and manual_revert make the `Step`)."""

    title: str
    actions: tuple[Action, ...]
    expect: str
    output: tuple[str, ...] = ()


def installed_boot_units(artifacts: Sequence[Artifact]) -> tuple[str, ...]:
    """The boot units the bundle installs, by unit name, in the order they run."""
    paths = {a.path for a in artifacts if a.target == HOST}
    units = ((NODES_SCRIPT, NODES_UNIT_NAME), (USERSPACE_SCRIPT, USERSPACE_UNIT_NAME))
    return tuple(unit for script, unit in units if script in paths)


def boot_units_step(plan: Plan, artifacts: Sequence[Artifact]) -> BootStep | None:
    """Enable the boot units and run them now; None when the bundle has none."""
    units = installed_boot_units(artifacts)
    if not units:
        return None
    # The split's step reloads systemd before this one; without a split, this does.
    actions: list[Action] = (
        [] if plan.split_pools else [HostCommand("systemctl daemon-reload", rerun_on_revert=True)]
    )
    output: list[str] = []
    said: list[str] = []
    statuses = 0
    if NODES_UNIT_NAME in units:
        actions += [
            EnableUnit(NODES_UNIT_NAME),
            RestartUnit(NODES_UNIT_NAME),
            HostCommand(f"/{NODES_SCRIPT} status"),
        ]
        output += [f"{n.path} present" for n in boot_nodes(plan)]
        statuses += 1
        said.append("every node the containers are given `present`")
    if USERSPACE_UNIT_NAME in units:
        actions += [
            EnableUnit(USERSPACE_UNIT_NAME),
            RestartUnit(USERSPACE_UNIT_NAME, (f"/{USERSPACE_SCRIPT}", "remove")),
            HostCommand(f"/{USERSPACE_SCRIPT} status"),
        ]
        vendor = userspace_vendor(plan)
        loaded = plan.facts.gpu_driver(vendor.host_driver) if vendor is not None else None
        if loaded is not None:
            output += [f"loaded: {loaded.version}", f"staged: {loaded.version}"]
        statuses += 1
        said.append(f"the host's userspace of the loaded module staged in /{USERSPACE_DIR}/current")
    return BootStep(
        "Ready the containers' GPUs, now and at every boot",
        tuple(actions),
        "Each unit runs now as it will at every boot before guests start; `systemctl "
        "restart` exits non-zero when it fails (`journalctl -u <unit>` says why: stop "
        "there, the containers would not start). "
        + ("The status commands print " if statuses > 1 else "`status` prints ")
        + " and ".join(said)
        + ", exactly:",
        tuple(output),
    )


def boot_units_revert(artifacts: Sequence[Artifact]) -> BootStep | None:
    """The manual revert's step: disable the units and remove what they made, before
    their files go back (the userspace script removes its staged files)."""
    units = installed_boot_units(artifacts)
    if not units:
        return None
    commands: list[Action] = [HostCommand(f"systemctl disable {unit}") for unit in units]
    if USERSPACE_UNIT_NAME in units:
        commands.append(HostCommand(f"/{USERSPACE_SCRIPT} remove"))
    return BootStep(
        "Stop readying the containers' GPUs at boot",
        tuple(commands),
        "The containers are stopped, and get their previous lines back below"
        + (
            f"; the staged userspace in /{USERSPACE_DIR} goes, which no restored "
            "container bind-mounts"
            if USERSPACE_UNIT_NAME in units
            else ""
        )
        + ". The nodes already made stay until the next reboot.",
    )
