"""The refusal when a command apply runs is not installed: this is not a Proxmox VE node.

Its own module, below the host seam (apply/host.py raises it when a command is not found)
and below the action table (apply/commands.py lists what a bundle needs from it).
"""

from __future__ import annotations

from pvegpu.diagnostic import Diagnostic

PROVIDED_BY = {
    "pct": "pve-container",
    "qm": "qemu-server",
    "systemctl": "systemd",
    "update-initramfs": "initramfs-tools",
    "proxmox-boot-tool": "proxmox-kernel-helper",
    "update-grub": "grub2-common",
}
"""The Debian package that installs each command apply runs, on a Proxmox VE 8 node."""


def missing_command(command: str, needed_for: str = "") -> Diagnostic:
    """`command` is not installed, which on a Proxmox VE node it always is."""
    package = PROVIDED_BY.get(command)
    where = f" (the {package} package installs it on every one)" if package else ""
    return Diagnostic.error(
        "command-missing",
        command,
        f"is not installed (not found on PATH): this is not a Proxmox VE node{where}"
        + (f"; {needed_for} runs it" if needed_for else ""),
        "run pvegpu apply on the node the bundle was rendered for; to review it elsewhere, "
        "`pvegpu apply --root SNAPSHOT --bundle OUT --dry-run` runs no command",
    )
