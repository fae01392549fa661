"""What `pvegpu check` reads of a host beyond its facts, read once by discovery
(`host/observed.py`) and judged by the planner's rules (`planning/host_checks.py`).

The containers' GPU lines, their root file systems' NVIDIA libraries, dpkg database,
render group and server units, the device nodes under /dev and the staged host
userspace: the state a driver upgrade, a reboot or an image update moves under a plan.
"""

from __future__ import annotations

import attrs

from pvegpu.model.facts import ConfigFile
from pvegpu.pvefiles.guestconf import ConfLine
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class ObservedUnit:
    """A unit in a container as systemd loads it: the first file of its search path and
    every drop-in file of its drop-in directories (the engine picks those it applies)."""

    name: str
    """Without `.service`."""
    text: str
    dropins: tuple[ConfigFile, ...]


@value_class
@attrs.frozen(eq=False, repr=False)
class ObservedContainer:
    vmid: int
    config: str
    """Its config's root-relative path (`etc/pve/lxc/129.conf`)."""
    lines: tuple[ConfLine, ...]
    """The lines of its config's main section (snapshots left out)."""
    unprivileged: bool
    host_userspace: bool
    """Its config bind-mounts the host's staged driver userspace (`userspace = "host"`)."""
    gpu: bool
    """Its config hands it GPU nodes (a vendor's own or DRM render nodes)."""
    vendors: tuple[str, ...]
    """The vendors (by name) whose GPUs or shared nodes its config reaches."""
    rootfs: str | None
    """Its root file system, root-relative, when that is a directory under the root."""
    unread: str
    """Why `rootfs` is None (block storage, no rootfs: line, not mounted)."""
    groups: tuple[tuple[str, int], ...] | None
    """Its /etc/group as (name, gid), the first of a name, where its rootfs: line names a
    directory that has one."""
    libraries: tuple[str, ...]
    """The NVIDIA userspace libraries in its library directories (names only)."""
    dpkg_status: str | None
    units: tuple[str, ...]
    """The `.service` units in its /etc/systemd/system, without `.service`, sorted."""
    loaded: tuple[ObservedUnit, ...]
    """Each of `units` (and of the units asked for) systemd would load, as read."""
    present_nodes: frozenset[str]
    """The nodes its GPU lines name that exist under the root's /dev."""

    def unit(self, name: str) -> ObservedUnit | None:
        return next((u for u in self.loaded if u.name == name), None)


@value_class
@attrs.frozen(eq=False, repr=False)
class ObservedHost:
    containers: tuple[ObservedContainer, ...]
    """Every container with a config on this node, by vmid."""
    has_dev: bool
    """The root has a /dev (a live host): a snapshot or fixture tree has no nodes to see."""
    staged_link: str | None
    """Where the staged host userspace's `current` link points (a version), if anywhere."""
    staged_is_dir: bool
    """That link leads to a directory."""

    def container(self, vmid: int) -> ObservedContainer | None:
        return next((c for c in self.containers if c.vmid == vmid), None)
