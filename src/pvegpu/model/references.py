"""Every place on the host that reaches a GPU, as discovery found it (`host/references.py`).

A GPU is reached in many ways besides the lines pvegpu writes: a container's `devN`
entry by number or by its stable `/dev/dri/by-path` name, a raw cgroup rule (one minor,
or every minor of a major), a bind mount of one node or of all of `/dev/dri`, LXC's nvidia
hook with the GPUs its `NVIDIA_VISIBLE_DEVICES` names, a VM's `hostpciN` by address or
mapping, its `args:` or its hookscript, and on the host udev rules, systemd units,
driverctl, modprobe.d, the kernel command line's module blacklists, sysfs.conf and CDI
specs. Each is one `GpuReference`: where it is
(file, line, section, guest), how it names what it reaches (`node`, `addresses`,
`mapping`, `selector`, `ids`), the GPUs that means on this host now (`gpus`), and, when
pvegpu cannot tell which GPUs it reaches, why (`unresolved`). The planner judges every
reference to a GPU its plan moves, renumbers or gives to another guest
(`planning/references.py`); a reference it cannot resolve is a finding, never silence.
"""

from __future__ import annotations

from enum import StrEnum

import attrs

from pvegpu.pci import PciAddress
from pvegpu.values import value_class


class Holder(StrEnum):
    """Who a reference gives the GPU to."""

    CONTAINER = "container"
    VM = "vm"
    HOST = "host"


class ReferenceKind(StrEnum):
    """How the reference is written; its value is how messages name it."""

    DEV_ENTRY = "devN entry"
    CGROUP2_RULE = "lxc.cgroup2.devices.allow"
    CGROUP1_RULE = "lxc.cgroup.devices.allow"
    MOUNT_ENTRY = "lxc.mount.entry"
    GPU_HOOK = "LXC GPU hook"
    LXC_HOOK = "lxc.hook"
    HOSTPCI = "hostpci"
    QEMU_ARGS = "args"
    HOOKSCRIPT = "hookscript"
    UDEV_RULE = "udev rule"
    SYSTEMD_UNIT = "systemd unit"
    DRIVERCTL = "driverctl override"
    MODPROBE = "modprobe.d"
    CMDLINE = "kernel command line"
    SYSFS_CONF = "sysfs.conf"
    CDI = "CDI spec"

    @property
    def cgroup_rule(self) -> bool:
        return self in (ReferenceKind.CGROUP1_RULE, ReferenceKind.CGROUP2_RULE)


class CgroupVersion(StrEnum):
    """Which cgroup hierarchy holds the devices controller the host boots with: the one
    whose `lxc.cgroup*.devices.allow` key LXC applies (the other key does nothing)."""

    V2 = "v2"
    """The unified hierarchy: `lxc.cgroup2.*` (every PVE since 7.0 by default; only this
    one since PVE 9.0)."""
    V1 = "v1"
    """The legacy (or hybrid) hierarchy: `systemd.unified_cgroup_hierarchy=0` on PVE 7/8."""

    @property
    def allow_key(self) -> str:
        """The raw LXC key whose device rules take effect."""
        return (
            "lxc.cgroup2.devices.allow" if self is CgroupVersion.V2 else "lxc.cgroup.devices.allow"
        )

    @property
    def rule_kind(self) -> ReferenceKind:
        if self is CgroupVersion.V2:
            return ReferenceKind.CGROUP2_RULE
        return ReferenceKind.CGROUP1_RULE


@value_class
@attrs.frozen(eq=False, repr=False)
class NodeRef:
    """A device node by number: `c 195:4`, `/dev/nvidia4`, `/dev/dri/renderD129`."""

    major: int | None
    """None: every major (`c *:*`, `a`)."""
    minor: int | None
    """None: every minor of `major` (`c 195:*`)."""

    def __str__(self) -> str:
        major = "*" if self.major is None else str(self.major)
        minor = "*" if self.minor is None else str(self.minor)
        return f"{major}:{minor}"


@value_class
@attrs.frozen(eq=False, repr=False)
class GpuReference:
    """One place that reaches (or may reach) a GPU of this host."""

    kind: ReferenceKind
    path: str
    """The file it is in, relative to the root."""
    line: int | None
    """Its line number in that file (from 1); None for a whole file (a driverctl override)."""
    text: str
    """The line (or the part of the file) as written, without its newline."""
    holder: Holder
    vmid: int | None = None
    """The guest whose config or hookscript it is; None on the host."""
    section: str | None = None
    """The config section: None for the main one, else `pve:pending`/`PENDING` or a
    snapshot's name."""
    node: NodeRef | None = None
    """Named by device number (or every number of a major)."""
    node_path: str | None = None
    """Named by a device path: `/dev/nvidia4`, `/dev/dri/by-path/pci-0000:03:00.0-render`."""
    addresses: tuple[PciAddress, ...] = ()
    """Named by PCI address (a hostpci line, a by-path name, a driverctl override)."""
    mapping: str | None = None
    """Named by a cluster PCI mapping (`hostpciN: mapping=<id>`)."""
    selector: str | None = None
    """Named by a vendor's own selector: `NVIDIA_VISIBLE_DEVICES`'s value, a CDI name."""
    ids: tuple[str, ...] = ()
    """Named by `vendor:device` ids (a udev match, a modprobe alias)."""
    every: str | None = None
    """It reaches every GPU of a kind, whichever guest they are meant for: what kind
    (`every GPU nvidia holds`, `every DRM node`, `every device`)."""
    binds: str | None = None
    """It binds or moves devices between drivers (`driver_override = vfio-pci`, a
    hookscript's `unbind`): what it does, as the file says it."""
    gpus: tuple[PciAddress, ...] = ()
    """The GPUs it reaches on this host now, in address order."""
    unresolved: str | None = None
    """Why pvegpu cannot tell (all of) the GPUs it reaches; None when `gpus` is all."""
    inert: str | None = None
    """Why it has no effect on this host (a cgroup key of the other hierarchy); None
    while it does."""

    @property
    def where(self) -> str:
        """`etc/pve/lxc/129.conf line 12` (`[snap]` for a snapshot's line)."""
        place = self.path if self.line is None else f"{self.path} line {self.line}"
        return place if self.section is None else f"{place} [{self.section}]"

    @property
    def guest(self) -> str:
        """`CT 129`, `VM 200` or `the host`."""
        if self.holder is Holder.CONTAINER:
            return f"CT {self.vmid}"
        if self.holder is Holder.VM:
            return f"VM {self.vmid}"
        return "the host"

    @property
    def main_section(self) -> bool:
        return self.section is None

    @property
    def pending(self) -> bool:
        """In a pending section: applied at the guest's next start."""
        return (self.section or "").lower() in ("pve:pending", "pending")
