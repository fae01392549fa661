"""A container's files and services, through `pct` on the host seam.

`pct push` maps ids for unprivileged containers (a file written into the rootfs from the
host would be owned by `nobody` inside) and reaches any storage, zvols included; it
needs the container running. A push lands beside the target and is renamed over it
inside the container, so a kill leaves the old unit or the new one, never half of one.
A tree that is not the running machine (a snapshot) has no container to ask: `read`
takes the file from the container's root file system directory in the tree.
"""

from __future__ import annotations

from pvegpu.apply.host import Completed, Host, sha256_of
from pvegpu.errors import ApplyError
from pvegpu.host.reader import RootReader
from pvegpu.model.paths import lxc_config
from pvegpu.model.rootfs import STORAGE_CFG, locate_rootfs

NEW_SUFFIX = ".pvegpu-new"


def checked(host: Host, argv: list[str], what: str) -> Completed:
    done = host.run(argv)
    if done.rc != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise ApplyError.one(
            "command-failed",
            " ".join(argv),
            f"{what} failed (exit status {done.rc})" + (f": {detail[-1]}" if detail else ""),
            "fix the cause, then run pvegpu apply again (it resumes) or pvegpu revert",
        )
    return done


def pct_exec(vmid: int, *argv: str) -> list[str]:
    return ["pct", "exec", str(vmid), "--", *argv]


def running(host: Host, vmid: int) -> bool:
    return host.run(["pct", "status", str(vmid)]).stdout.split() == ["status:", "running"]


def active(host: Host, vmid: int, unit: str) -> bool:
    out = host.run(pct_exec(vmid, "systemctl", "is-active", unit)).stdout.strip()
    return out == "active"


def exists(host: Host, vmid: int, path: str) -> bool:
    return host.run(pct_exec(vmid, "test", "-e", "/" + path)).rc == 0


def read(host: Host, vmid: int, path: str) -> bytes | None:
    """The file inside the running container, None when it does not exist."""
    if not host.live:
        return _read_in_tree(host, vmid, path)
    if not exists(host, vmid, path):
        return None
    done = checked(host, pct_exec(vmid, "cat", "/" + path), f"reading CT {vmid}:/{path}")
    return done.stdout.encode()


def _read_in_tree(host: Host, vmid: int, path: str) -> bytes | None:
    """The file as discovery read it: under the root file system's directory in the tree."""
    conf, storage = host.read(lxc_config(vmid)), host.read(STORAGE_CFG)
    location = locate_rootfs(
        vmid,
        None if conf is None else conf.decode(errors="replace"),
        None if storage is None else storage.decode(errors="replace"),
    )
    if location.path is None or not RootReader(host.root).is_dir(location.path):
        where = location.path or location.why or "no rootfs line"
        raise ApplyError.one(
            "not-in-tree",
            f"CT {vmid}:/{path}",
            f"cannot be compared: the container's root file system ({where}) is not in "
            f"the tree under {host.root}",
            "take the snapshot on the node with `pvegpu snapshot --spec SPEC`, which keeps "
            "the container files the spec reads, and dry-run against that",
        )
    return host.read(f"{location.path}/{path}")


def write(
    host: Host,
    vmid: int,
    path: str,
    content: bytes,
    mode: int,
    *,
    staging: str,
    before: frozenset[str],
) -> None:
    """Replace CT vmid:/path if it is one of `before` (sha256s); staged on the host."""
    now = sha256_of(read(host, vmid, path))
    if now not in before:
        raise ApplyError.one(
            "file-changed",
            f"CT {vmid}:/{path}",
            "changed since the bundle was rendered; nothing was written to it",
            "discover and render again, review, then apply the new bundle",
        )
    host.write(staging, content, 0o600, before=None)
    new = f"/{path}{NEW_SUFFIX}"
    checked(
        host,
        ["pct", "push", str(vmid), host.path(staging), new, "--perms", f"{mode:04o}"],
        f"pushing /{path} into CT {vmid}",
    )
    checked(host, pct_exec(vmid, "mv", "-f", new, "/" + path), f"renaming /{path} in CT {vmid}")
    host.remove(staging, before=None)


def remove(host: Host, vmid: int, path: str) -> None:
    checked(host, pct_exec(vmid, "rm", "-f", "/" + path), f"removing /{path} in CT {vmid}")
