"""What an apply or a revert would change on a host, read only, without running either.

A configuration tool asks this before it acts (Ansible's `changed`, check mode and
`--diff`, ansible_collections/pvegpu/proxmox): each installed file of the bundle whose
content on the host differs from the bundle's, and each planned function not on the
driver the plan puts it on. Nothing pending means an apply would change nothing, so a
second run of the same plan reports no change. For a revert: the files the last apply
replaced, against the backups it keeps in its state directory.
"""

from __future__ import annotations

import attrs

from pvegpu.apply import container
from pvegpu.apply.bundle import Bundle
from pvegpu.apply.host import Host
from pvegpu.apply.state import State, last_apply
from pvegpu.apply.undo import load_last
from pvegpu.rendering.review.changes import container_vmid
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class FileChange:
    target: str
    """`host`, or `ct/<vmid>` for a file inside a container."""
    path: str
    before: bytes | None
    """The file now; None when it does not exist, or cannot be read now (`known`)."""
    after: bytes | None
    """The file once changed; None when the change removes it."""
    known: bool = True
    """False for a stopped container's file on a live host: only `pct` reads it, and
    only while the container runs (apply compares it when it pushes it)."""

    @property
    def where(self) -> str:
        return f"/{self.path}" if self.target == "host" else f"CT {self.target[3:]}:/{self.path}"


@value_class
@attrs.frozen(eq=False, repr=False)
class Rebind:
    address: str
    now: str | None
    after: str


@value_class
@attrs.frozen(eq=False, repr=False)
class Pending:
    files: tuple[FileChange, ...]
    rebinds: tuple[Rebind, ...]

    @property
    def changed(self) -> bool:
        return bool(self.files or self.rebinds)


def _now(host: Host, target: str, path: str) -> tuple[bytes | None, bool]:
    vmid = container_vmid(target)
    if vmid is None:
        return host.read(path), True
    if not host.live or container.running(host, vmid):
        # A tree (a snapshot, a fixture copy) holds the container's files either way.
        return container.read(host, vmid, path), True
    return None, False


def pending(host: Host, bundle: Bundle) -> Pending:
    """What applying `bundle` would change on `host` now (ApplyError when a container's
    file cannot be read: a tree without the container's root file system)."""
    files = []
    for entry in bundle.entries:
        before, known = _now(host, entry.target, entry.path)
        if not known or before != entry.content:
            files.append(FileChange(entry.target, entry.path, before, entry.content, known))
    rebinds = []
    for function in bundle.functions:
        address, after = str(function["address"]), str(function["driver_after"])
        now = host.driver(address)
        if now != after:
            rebinds.append(Rebind(address, now, after))
    return Pending(tuple(files), tuple(rebinds))


def revert_pending(host: Host) -> tuple[str, tuple[FileChange, ...]] | None:
    """The last apply's bundle id and the files its revert would put back (each now,
    and as its backup holds it); None when there is nothing to revert."""
    bundle_id = last_apply(host)
    if bundle_id is None or State(host, bundle_id).reverted:
        return None
    bundle, state = load_last(host)
    files = []
    for entry in bundle.entries:
        backup = state.backed_up(entry.target, entry.path)
        if backup is None:
            continue  # apply never replaced it: revert leaves it
        before, known = _now(host, entry.target, entry.path)
        if not known or before != backup[0]:
            files.append(FileChange(entry.target, entry.path, before, backup[0], known))
    return bundle.id, tuple(files)
