"""What renderers return: a file's target path, content and mode, never written here."""

from __future__ import annotations

import hashlib
from enum import StrEnum

import attrs

from pvegpu.model.facts import ConfigFile
from pvegpu.values import value_class

HOST = "host"
REVIEW = "review"
"""Target of files for the reviewer only (SUMMARY.md, topology.svg); installed nowhere."""

APPLY_BUNDLE = "apply"
REVERT_BUNDLE = "revert"


class ArtifactRole(StrEnum):
    """What one artifact of `render()` is. A file the change writes and the copy that
    puts it back share their target and path: the role tells them apart."""

    INSTALL = "install"
    """A file the change writes or patches on the host or in a container (OUT/)."""
    REVERT = "revert"
    """What restores that file, or removes it when it did not exist (OUT/revert/)."""
    REVIEW = "review"
    """For the reviewer only (SUMMARY.md, topology.svg); installed nowhere."""


def container_target(vmid: int) -> str:
    """Artifacts that live inside a container's filesystem, not on the host."""
    return f"ct:{vmid}"


@value_class
@attrs.frozen(eq=False, repr=False)
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
    def role(self) -> ArtifactRole:
        """Install, revert or review: from `bundle` and `target`, spelled out."""
        if self.bundle == REVERT_BUNDLE:
            return ArtifactRole.REVERT
        return ArtifactRole.REVIEW if self.target == REVIEW else ArtifactRole.INSTALL

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()

    @property
    def is_patch(self) -> bool:
        return self.base is not None
