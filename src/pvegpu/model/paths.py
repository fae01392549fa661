"""Where things are on a host, relative to the root: pvegpu's own files, a container's layout.

One place for every path pvegpu installs or looks at, so discovery, planning, the
renderers and the runbook agree on them.
"""

from __future__ import annotations

import posixpath

from pvegpu.pvefiles.lxcconf import DRIVER_MOUNT_POINT, STAGED_USERSPACE

# pvegpu's own files on the host.
SPLIT_SCRIPT = "usr/local/sbin/pvegpu-vfio-split"
SPLIT_UNIT_NAME = "pvegpu-vfio-split.service"
SPLIT_UNIT = f"etc/systemd/system/{SPLIT_UNIT_NAME}"
SPLIT_MODPROBE = "etc/modprobe.d/pvegpu-vfio.conf"
SPLIT_INITRAMFS_HOOK = "etc/initramfs-tools/hooks/pvegpu-vfio-split"
"""Copies the split script into the initramfs, where the modprobe.d hook needs it."""
SPLIT_UDEV_RULE = "etc/udev/rules.d/70-pvegpu-vfio-split.rules"
"""Runs the split script for each SR-IOV VF the kernel creates (only with VFs to pin)."""

# The boot units that ready the containers' GPUs before guests start (docs/upgrades.md).
NODES_SCRIPT = "usr/local/sbin/pvegpu-device-nodes"
NODES_UNIT_NAME = "pvegpu-device-nodes.service"
NODES_UNIT = f"etc/systemd/system/{NODES_UNIT_NAME}"
"""Makes the device nodes the plan's containers are given (nvidia-modprobe, ...)."""
USERSPACE_SCRIPT = "usr/local/sbin/pvegpu-driver-userspace"
USERSPACE_UNIT_NAME = "pvegpu-driver-userspace.service"
USERSPACE_UNIT = f"etc/systemd/system/{USERSPACE_UNIT_NAME}"
"""Stages the host's driver userspace of the loaded module's version for the containers."""
USERSPACE_DIR = STAGED_USERSPACE.lstrip("/").removesuffix("/current")
"""Where it stages each version (`<version>/lib`, `<version>/bin`) and the `current` link."""
USERSPACE_CURRENT = STAGED_USERSPACE.lstrip("/")
CONTAINER_DRIVER_DIR = DRIVER_MOUNT_POINT
"""Where a container sees `current` (read-only): its server's unit finds `lib/`, `bin/`."""
OWN_SCRIPTS = (SPLIT_SCRIPT, NODES_SCRIPT, USERSPACE_SCRIPT)
"""pvegpu's scripts on the host: discovery reads them, so a render patches them."""
OWN_UNITS = (SPLIT_UNIT, NODES_UNIT, USERSPACE_UNIT)
"""pvegpu's own host units: they name the pools' GPUs by design, never as a reference."""

# pmxcfs (/etc/pve): every file there reads back as 0640 root:www-data, whatever mode was
# written, so the guest configs and pci.cfg are rendered with it.
PVE_MODE = 0o640

# Inside a container's root filesystem.
CONTAINER_LIBDIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
DPKG_STATUS = "var/lib/dpkg/status"
GROUP_FILE = "etc/group"
"""A container's group database, relative to its root file system."""
PASSWD_FILE = "etc/passwd"
"""Its user database: a user's primary group is there, not in the group's member list."""
UNIT_DIR = "etc/systemd/system"
# Where else a copy of the unit tends to live: other unit directories (systemd would
# load these if /etc's copy went away) and admins' homes (the "local copy" that drifts).
OTHER_UNIT_DIRS = (
    "lib/systemd/system",
    "usr/lib/systemd/system",
    "usr/local/lib/systemd/system",
    "etc/systemd/user",
    "usr/lib/systemd/user",
)
SYSTEM_UNIT_PATH = (
    UNIT_DIR,
    "run/systemd/system",
    "usr/local/lib/systemd/system",
    "usr/lib/systemd/system",
    "lib/systemd/system",
)
"""systemd's search path for system units, highest priority first (systemd.unit(5)).
/run is a tmpfs of the running container: read from the host it is usually empty."""
HOME_DIRS = ("root", "home", "opt", "srv")
HOME_DEPTH = 3
ENABLING_DIRS = (".wants", ".requires")
"""`systemctl enable` links a unit into `<target>.wants/` (WantedBy=) or `.requires/`."""

PVE_DIR = "etc/pve"
"""pmxcfs, the cluster file system: guest configs, storage.cfg, mapping/pci.cfg."""
LXC_DIR = f"{PVE_DIR}/lxc"
"""This node's container configs, `<vmid>.conf` (pmxcfs: `nodes/<this node>/lxc`)."""
QEMU_DIR = f"{PVE_DIR}/qemu-server"
"""This node's VM configs, `<vmid>.conf`."""
NODES_DIR = f"{PVE_DIR}/nodes"
"""Every node's guest configs: `<node>/{lxc,qemu-server}/<vmid>.conf` (pmxcfs)."""


def lxc_config(vmid: int) -> str:
    """CT `vmid`'s config on this node, relative to the root."""
    return f"{LXC_DIR}/{vmid}.conf"


def vm_config(vmid: int) -> str:
    """VM `vmid`'s config on this node, relative to the root."""
    return f"{QEMU_DIR}/{vmid}.conf"


def root_relative(path: str) -> str:
    """A spec path as a root-relative POSIX path (a leading / is tolerated)."""
    norm = posixpath.normpath(path.lstrip("/"))
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"{path!r} leaves the root")
    return norm


def dropin_dirs(unit: str) -> tuple[str, ...]:
    """The drop-in directories of `<unit>.service`, in the order systemd collects them.

    For each directory of SYSTEM_UNIT_PATH: `<unit>.service.d`, then the dash prefixes
    (`sglang-qwen` -> `sglang-.service.d`); after all of those, the top-level
    `service.d` of each. A drop-in file name met again later is shadowed by the first.
    """
    names = [f"{unit}.service.d"]
    parts = unit.split("-")
    names += [f"{'-'.join(parts[:i])}-.service.d" for i in range(len(parts) - 1, 0, -1)]
    specific = [f"{d}/{n}" for d in SYSTEM_UNIT_PATH for n in names]
    return (*specific, *(f"{d}/service.d" for d in SYSTEM_UNIT_PATH))


def engine_config_path(path: str, working_directory: str | None) -> str | None:
    """Where a server's `--config FILE` is inside its container: absolute, or relative to
    the unit's WorkingDirectory= (systemd starts a system service in `/`). None when it
    cannot be one of the engines' config files (they take `.yaml`/`.yml` only) or holds
    a variable the unit would expand."""
    if not path.endswith((".yaml", ".yml")) or "$" in path or "%" in path:
        return None
    directory = (working_directory or "").lstrip("-")  # `-/srv`: the directory may be absent
    directory = directory if directory.startswith("/") else "/"
    return "/" + posixpath.normpath(posixpath.join(directory, path)).lstrip("/")


def template_of(name: str) -> str | None:
    """`a@.service` for the instance `a@b.service`; None for a plain unit."""
    stem, at, instance = name.partition("@")
    if not at or not instance.endswith(".service") or instance == ".service":
        return None
    return f"{stem}@.service"


def unit_dropin_dirs(name: str) -> tuple[str, ...]:
    """The drop-in directories of unit `name` (`x.service`) under etc/systemd/system, in
    the order systemd takes them: the unit's own, its template's, dash prefixes, service.d."""
    stems = [name.removesuffix(".service")]
    if (template := template_of(name)) is not None:
        stems.append(template.removesuffix(".service"))
    prefix = f"{UNIT_DIR}/"
    return tuple(
        dict.fromkeys(d for stem in stems for d in dropin_dirs(stem) if d.startswith(prefix))
    )
