"""The files a plan writes, where the admin finds them, and how each one changes.

Also where each file lies in the rendered directory (the runbook runs from there) and
what writing it sets off on the host: a systemd reload, an initramfs rebuild.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

import attrs

from pvegpu.model.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.rendering.bundle_layout import bundle_path
from pvegpu.rendering.revert import pulled_units
from pvegpu.values import value_class

BACKUP_DIR = "/root/pvegpu-backup"
"""Where the runbook saves files that exist but have no copy in revert/ (see REPLACED)."""
PVE_DIR = "etc/pve/"


class ChangeKind(StrEnum):
    NEW = "new"
    """The file does not exist yet (as far as discovery saw)."""
    PATCHED = "patched"
    """Edited from the copy discovery read; the rest of the file is kept byte for byte."""
    REPLACED = "replaced"
    """Exists on the host but is written whole, with no base: revert/ cannot restore it,
    so the runbook saves it to BACKUP_DIR first."""
    UNREAD = "unread"
    """In a container whose files pvegpu could not read (block storage): it may exist, so
    the runbook pulls the current copy into revert/ first (rendering.revert.pulled_units)."""
    UNCHANGED = "unchanged"
    """Already as planned; listed so that a no-op is never silent."""


@value_class
@attrs.frozen(eq=False, repr=False)
class ChangedFile:
    artifact: Artifact
    kind: ChangeKind

    @property
    def where(self) -> str:
        """The file as the admin names it: `/etc/pve/lxc/129.conf`, `CT 129:/etc/...`."""
        vmid = container_vmid(self.artifact.target)
        path = "/" + self.artifact.path
        return path if vmid is None else f"CT {vmid}:{path}"


def container_vmid(target: str) -> int | None:
    """The vmid of a `ct:<vmid>` target, None for any other target."""
    prefix, sep, vmid = target.partition(":")
    return int(vmid) if prefix == "ct" and sep and vmid.isdigit() else None


def is_revert(artifact: Artifact) -> bool:
    return artifact.bundle == REVERT_BUNDLE


def in_bundle(artifact: Artifact) -> str:
    """Where the file lies in the rendered directory, which the runbook runs from."""
    path = str(bundle_path(artifact))
    return f"{REVERT_BUNDLE}/{path}" if is_revert(artifact) else path


def installed(artifacts: Iterable[Artifact]) -> list[Artifact]:
    """Artifacts that end up on the host or in a container (not review, not revert)."""
    return [a for a in artifacts if a.target != REVIEW and not is_revert(a)]


def review_only(artifacts: Iterable[Artifact]) -> tuple[Artifact, ...]:
    """Files rendered for the reviewer and installed nowhere (e.g. lines for a future VM)."""
    return tuple(
        sorted((a for a in artifacts if a.target == REVIEW and not is_revert(a)), key=_order)
    )


def _order(artifact: Artifact) -> tuple[int, int, str]:
    """Host files first, Proxmox's own before system files; then containers by vmid."""
    vmid = container_vmid(artifact.target)
    if artifact.target == HOST:
        return (0, 0 if artifact.path.startswith(PVE_DIR) else 1, artifact.path)
    if vmid is not None:
        return (1, vmid, artifact.path)
    return (2, 0, f"{artifact.target}/{artifact.path}")


def change_kind(facts: HostFacts, artifact: Artifact) -> ChangeKind:
    if artifact.base is not None:
        if artifact.base.content == artifact.content:
            return ChangeKind.UNCHANGED
        return ChangeKind.PATCHED
    existing = facts.file(artifact.path) if artifact.target == HOST else None
    if existing is None:
        return ChangeKind.NEW
    return ChangeKind.UNCHANGED if existing.content == artifact.content else ChangeKind.REPLACED


def changed_files(plan: Plan, artifacts: Iterable[Artifact]) -> tuple[ChangedFile, ...]:
    """Installed files in a stable order: host first, then containers by vmid, by path."""
    pulled = pulled_units(plan)
    return tuple(
        ChangedFile(
            a,
            ChangeKind.UNREAD if (a.target, a.path) in pulled else change_kind(plan.facts, a),
        )
        for a in sorted(installed(artifacts), key=_order)
    )


def revert_script(artifacts: Iterable[Artifact]) -> Artifact | None:
    """The revert bundle's runner (`revert/revert.sh`), if one was rendered."""
    return next(
        (a for a in artifacts if is_revert(a) and a.target == REVIEW and a.path.endswith(".sh")),
        None,
    )


def is_unit(path: str) -> bool:
    return path.startswith(("etc/systemd/", "usr/lib/systemd/", "lib/systemd/"))


def in_initramfs(path: str) -> bool:
    # Debian copies modprobe.d into the initramfs: a driver loaded from there never sees
    # new options (or a removed hook) until the initramfs is rebuilt.
    return path.startswith(("etc/modprobe.d/", "etc/initramfs-tools/"))
