"""What renderers return: a file's target path, content and mode, never written here."""

from __future__ import annotations

import hashlib

import attrs

from pvegpu.host.facts import ConfigFile

HOST = "host"
REVIEW = "review"
"""Target of files for the reviewer only (SUMMARY.md, topology.svg); installed nowhere."""

APPLY_BUNDLE = "apply"
REVERT_BUNDLE = "revert"


def container_target(vmid: int) -> str:
    """Artifacts that live inside a container's filesystem, not on the host."""
    return f"ct:{vmid}"


@attrs.frozen
class Artifact:
    path: str
    """Target path relative to the root of `target` (`etc/pve/lxc/129.conf`)."""
    content: str
    reason: str
    """One line for the reviewer: why this file changes."""
    mode: int = 0o644
    target: str = HOST
    base: ConfigFile | None = None
    """For patches: the file as it was when the patch was made."""
    bundle: str = APPLY_BUNDLE
    """`apply` (the change) or `revert` (what undoes it)."""
    delete: bool = False
    """Revert entries only: the target file did not exist before and is removed."""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()

    @property
    def is_patch(self) -> bool:
        return self.base is not None
