"""Can the server's user open the GPU nodes the container gets?

A `devN:` entry creates the node inside the container with the entry's mode and gid (the
container's own render group for a DRM pool in an unprivileged container, else root's).
With a mode that lets everyone read and write (`0666`, the default) any user opens it;
with `0660` only root and the members of that group do, and a server started as another
user fails at its first GPU call. A raw bind mount keeps the host node's owner and mode,
which the plan cannot see from the host's sysfs: not judged here.
"""

from __future__ import annotations

from pvegpu.model.container_files import container_files
from pvegpu.model.paths import PASSWD_FILE
from pvegpu.model.schema import DeviceStyle
from pvegpu.serving.checks import Checks
from pvegpu.serving.container import ContainerRootfs

OTHERS_READ_WRITE = 0o006


def node_access(checks: Checks, vmid: int, rootfs: ContainerRootfs) -> None:
    """Refuse a server whose `user` cannot open the devN nodes the plan gives its container."""
    lxc = checks.pool.lxc
    user = checks.spec.user
    if lxc is None or lxc.devices is not DeviceStyle.DEV or user in (None, "root"):
        return
    if int(lxc.mode, 8) & OTHERS_READ_WRITE == OTHERS_READ_WRITE:
        return
    gid = lxc.node_gid
    where = f"{checks.where}.user"
    if rootfs.path is None:
        checks.problem(
            "serving-user-groups-unread",
            f"the GPU nodes get mode {lxc.mode} and gid {gid}, and CT {vmid}'s files were not "
            f"read, so whether {user} is in that group is unknown",
            'mount the container\'s root file system and plan again, or set mode = "0666"',
            subject=where,
        )
        return
    accounts = container_files(checks.facts).at(rootfs.path).accounts
    gids = accounts.user_gids(user)
    found = accounts.group_name(gid)
    name = found if found is not None else str(gid)
    if gids is None:
        checks.problem(
            "serving-user-unknown",
            f"user {user!r} is not in CT {vmid}'s /{PASSWD_FILE}: systemd cannot start the "
            "server as that user",
            f"create it (pct exec {vmid} -- useradd --system -G {name} {user}) or set user",
            subject=where,
        )
    elif gid not in gids:
        checks.problem(
            "serving-user-cannot-open-gpus",
            f"the GPU nodes in CT {vmid} get mode {lxc.mode} and group {name} ({gid}), and "
            f"{user} is not in that group: the server cannot open its GPUs",
            f'pct exec {vmid} -- usermod -aG {name} {user}, or set mode = "0666"',
            subject=where,
        )
