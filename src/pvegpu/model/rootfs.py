"""Where a container's root file system is on the host, from its config and storage.cfg.

Pure: the texts of `/etc/pve/lxc/<vmid>.conf` and `/etc/pve/storage.cfg` in, a
root-relative directory (or why there is none) out. A typed fact of the host: its
containers' locations are `guests(facts).rootfs(vmid)` (`model/guests.py`), worked
out once per facts value from the raw files it holds. Discovery uses it to know what to
read, planning and the serving checks to know what was read; all get the same answer
from the same texts. The rules (pve-storage's
plugins, in our words):

- `zfspool` (`pool P`, `mountpoint M`, default `/P`): `subvol-*` volumes (and a linked
  clone's `basevol-*/subvol-*`) are mounted datasets at `M/<name>`; other volumes are
  zvols, block devices.
- `dir`, `btrfs`, `nfs`, `cifs` (`path D`): volumes lie in `D/images/<vmid>/`; a
  `subvol-*` volume (size=0) is a directory there, anything else a disk image.
- any other type (`lvmthin`, `lvm`, `rbd`, `iscsi*`, ...): block devices. Their files are
  readable only in the running container or after `pct mount <vmid>`, which mounts the
  stopped container's root file system (and its mount points) at
  `/var/lib/lxc/<vmid>/rootfs` (`pct_mount_path`). The checks of a pool without a server
  (its render group, its own units) read there too, after the storage's directory
  (`rootfs_dirs`); a serving pool names that path in its spec (`container_rootfs`).

What the config's main section grants the container (`granted_gpus`) is read here too:
it says which containers hold GPUs, so whose units discovery reads and planning judges.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

import attrs

from pvegpu.model.paths import root_relative
from pvegpu.pvefiles import lxcconf
from pvegpu.pvefiles.guestconf import ConfLine, LineKind, split_sections
from pvegpu.pvefiles.storagecfg import parse_storage_cfg
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_NODES, DeviceNodes

STORAGE_CFG = "etc/pve/storage.cfg"
_FILE_STORAGES = ("dir", "btrfs", "nfs", "cifs")
# Where pve-storage mounts a network storage that names no `path`.
_NETWORK_MOUNTS = {"nfs": "/mnt/pve", "cifs": "/mnt/pve"}
_DIRECTORY_VOLUMES = ("subvol-", "basevol-")


@value_class
@attrs.frozen(eq=False, repr=False)
class RootfsLocation:
    """The container's `rootfs:` volume and the host directory holding it, if any."""

    volume: str | None
    """The volume as the config names it (`local-zfs:subvol-129-disk-0`); None: no line."""
    path: str | None
    """Root-relative directory of the root file system; None when it is not one."""
    why: str = ""
    """Why there is no directory (`local-lvm is lvmthin storage: a block device`)."""


def pct_mount_path(vmid: int) -> str:
    """Root-relative: where `pct mount <vmid>` mounts the container's root file system
    (pve-container's `/var/lib/lxc/<vmid>/rootfs`; empty on the host while it runs)."""
    return f"var/lib/lxc/{vmid}/rootfs"


def rootfs_dirs(vmid: int, location: RootfsLocation) -> tuple[str, ...]:
    """Where CT `vmid`'s files may be read, in order: its storage's directory when the
    volume is one, then where `pct mount` puts them. The first that has the file asked
    for wins: an unmounted subvolume or block storage falls back to a `pct mount`."""
    mounted = pct_mount_path(vmid)
    if location.path is None or location.path == mounted:
        return (mounted,)
    return (location.path, mounted)


def granted_gpus(
    main: Iterable[ConfLine], nodes: DeviceNodes = CONTAINER_NODES
) -> tuple[frozenset[int], bool]:
    """The GPU node minors (`/dev/nvidiaN`, or of `nodes`: render nodes) the config's main
    section (its parsed lines) hands the container, and whether a rule there reaches every
    GPU (`c 195:* rwm`)."""
    minors: set[int] = set()
    every = False
    for line in main:
        if (minor := lxcconf.gpu_minor(line, nodes)) is not None:
            minors.add(minor)
        every = every or lxcconf.grants_every_gpu(line, nodes)
    return frozenset(minors), every


def rootfs_volume(config: str | Iterable[ConfLine]) -> str | None:
    """The volume of the main section's `rootfs:` line (`local-zfs:subvol-129-disk-0`);
    `config`: the text, or its main section's lines already parsed."""
    main = split_sections(config)[0].lines if isinstance(config, str) else config
    for line in main:
        if line.kind is LineKind.KEY and line.key == "rootfs":
            for part in line.value.split(","):
                key, eq, value = part.partition("=")
                if not eq:
                    return part.strip() or None
                if key.strip() == "volume":
                    return value.strip() or None
    return None


def locate_rootfs(
    vmid: int, config: str | Iterable[ConfLine] | None, storage_cfg: str | None
) -> RootfsLocation:
    """Where CT `vmid`'s root file system is a directory on the host, or why it is not;
    `config`: its config's text, or its main section's lines already parsed (None: no
    config was read)."""
    volume = rootfs_volume(config) if config is not None else None
    if volume is None:
        why = (
            f"etc/pve/lxc/{vmid}.conf was not read"
            if config is None
            else f"etc/pve/lxc/{vmid}.conf has no rootfs: line"
        )
        return RootfsLocation(None, None, why)
    if volume.startswith("/"):
        # A device or a host path given directly instead of a storage volume.
        if volume.startswith("/dev/"):
            return RootfsLocation(volume, None, f"{volume} is a block device")
        return _directory(volume, volume)
    storage_id, colon, name = volume.partition(":")
    if not colon:
        return RootfsLocation(volume, None, f"{volume} names no storage")
    storage = parse_storage_cfg(storage_cfg or "").get(storage_id)
    if storage is None:
        return RootfsLocation(volume, None, f"storage {storage_id} is not in /{STORAGE_CFG}")
    base = name.rsplit("/", 1)[-1]
    is_directory = base.startswith(_DIRECTORY_VOLUMES)
    if storage.type == "zfspool":
        pool = storage.get("pool")
        mountpoint = storage.get("mountpoint") or (f"/{pool}" if pool else None)
        if mountpoint is None:
            return RootfsLocation(volume, None, f"zfspool {storage_id} names no pool")
        if not is_directory:
            return RootfsLocation(volume, None, f"{name} on {storage_id} is a zvol: a block device")
        return _directory(volume, posixpath.join(mountpoint, base))
    if storage.type in _FILE_STORAGES:
        default = _NETWORK_MOUNTS.get(storage.type)
        path = storage.get("path") or (f"{default}/{storage_id}" if default else None)
        if path is None:
            return RootfsLocation(volume, None, f"{storage.type} {storage_id} names no path")
        if not is_directory:
            return RootfsLocation(
                volume, None, f"{name} on {storage_id} is a disk image: block content"
            )
        # The volume name may carry its owner (`129/subvol-129-disk-0.subvol`).
        owner = name.split("/", 1)[0] if "/" in name else str(vmid)
        return _directory(volume, posixpath.join(path, "images", owner, base))
    return RootfsLocation(
        volume, None, f"{storage_id} is {storage.type} storage: the volume is a block device"
    )


def _directory(volume: str, path: str) -> RootfsLocation:
    try:
        return RootfsLocation(volume, root_relative(path))
    except ValueError:
        return RootfsLocation(volume, None, f"{path} leaves the root")
