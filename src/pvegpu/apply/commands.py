"""The host commands a bundle's runbook runs, and the refusal when one is not installed.

Apply checks them all in preflight, before its first change: a node without `pct` is not
a Proxmox VE node, and finding that out at step 3 would leave the host half changed.
Only commands run on the host are checked; those run inside a container (`systemctl`,
`nvidia-smi`, `curl` through `pct exec`) are the container's, seen once it runs. Which
commands an action runs is its row in apply/handlers.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pvegpu.apply.handlers import handlers_of
from pvegpu.apply.not_installed import missing_command
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import ApplyError
from pvegpu.rendering.review.actions import InstallFile

if TYPE_CHECKING:
    from pvegpu.apply.bundle import Bundle
    from pvegpu.apply.host import Host

__all__ = ["commands_needed", "missing_command", "missing_commands", "refuse_off_node"]


def commands_needed(bundle: Bundle) -> dict[str, str]:
    """Each host command apply (preflight, the steps, verification) or revert runs for
    `bundle`, with the first step that runs it. The split script is left out when the
    bundle installs it: it is there by the time it runs."""
    needed: dict[str, str] = {}
    if any(e.target != "host" and e.base_sha256 for e in bundle.entries):
        needed["pct"] = "preflight (reading the container's files)"
    installs = {"/" + a.path for s in bundle.steps for a in s.actions if isinstance(a, InstallFile)}
    for i, step in enumerate(bundle.steps):
        for action in step.actions:
            for command in handlers_of(action).host_commands(action):
                if command not in installs:
                    needed.setdefault(command, f"step {i + 1} ({step.title})")
    if bundle.split_unit is not None:
        needed.setdefault("systemctl", "the verification (`systemctl is-enabled`)")
    if bundle.serving:
        needed.setdefault("pct", "the verification (`pct status`)")
    return needed


def missing_commands(host: Host, bundle: Bundle) -> tuple[Diagnostic, ...]:
    """A `command-missing` problem for each command of `bundle` the host lacks."""
    return tuple(
        missing_command(command, why)
        for command, why in commands_needed(bundle).items()
        if not host.installed(command)
    )


def refuse_off_node(host: Host, command: str = "apply") -> None:
    """Apply and revert change only the running machine: `--root` must be `/`."""
    if not host.live:
        elsewhere = (
            "to see every step and compare every base file"
            if command == "apply"
            else "to see what it would undo"
        )
        raise ApplyError.one(
            "apply-not-live",
            str(host.root),
            "is not the running machine's `/`: pct and systemctl would act on this machine, "
            "not on that tree",
            f"run {command} on the node itself, with --root /; against a snapshot, add "
            f"--dry-run {elsewhere}",
        )
