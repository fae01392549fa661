"""The host's configuration for its next boot, as discovery reads it. No I/O here.

`/proc/cmdline` is only the boot that is running; what the next boot does comes from
files under /etc: the kernel command line of the boot loader, and the modules that load
before (initramfs) or early in (systemd-modules-load) the boot. `pvegpu.host.boot` reads
them; `pvegpu.planning.boot` judges them against a plan. The kernel the next boot runs and
the GPU driver module it loads are `pvegpu.model.kernels` (`BootConfig.kernels`).
"""

from __future__ import annotations

import re
from enum import StrEnum

import attrs

from pvegpu.model.kernels import Kernels
from pvegpu.values import value_class

KERNEL_CMDLINE = "etc/kernel/cmdline"
"""The command line proxmox-boot-tool writes into systemd-boot's entries."""
BOOT_UUIDS = "etc/kernel/proxmox-boot-uuids"
"""The ESPs proxmox-boot-tool keeps in sync (ZFS root, or any host set up with it)."""
GRUB_DEFAULT = "etc/default/grub"
GRUB_DIR = "etc/default/grub.d"
INITRAMFS_MODULES = "etc/initramfs-tools/modules"
ETC_MODULES = "etc/modules"
MODULES_LOAD_DIR = "etc/modules-load.d"

UPDATE_INITRAMFS = "update-initramfs -u -k all"
BOOT_TOOL_REFRESH = "proxmox-boot-tool refresh"
UPDATE_GRUB = "update-grub"

_VFIO_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{4}(:[0-9a-f]{1,8}){0,4}")


def parse_vfio_ids(value: str) -> tuple[str, ...]:
    """A vfio-pci `ids=` value: its `vendor:device[:...]` ids, lower case; ValueError
    for anything else."""
    ids = tuple(part.strip().lower() for part in value.split(",") if part.strip())
    bad = [i for i in ids if not _VFIO_ID.fullmatch(i)]
    if not ids or bad:
        raise ValueError(f"expected vendor:device ids such as 10de:2bb5, got {value!r}")
    return ids


def cmdline_vfio_ids(raw: str) -> tuple[tuple[str, ...], ...]:
    """Every `vfio-pci.ids=` (or `vfio_pci.ids=`: the kernel treats - and _ alike)."""
    found: list[tuple[str, ...]] = []
    for token in raw.split():
        key, sep, value = token.partition("=")
        if sep and key.replace("_", "-") == "vfio-pci.ids":
            found.append(parse_vfio_ids(value.strip('"')))
    return tuple(found)


def kernel_params(raw: str) -> tuple[tuple[str, str], ...]:
    """A kernel command line as (key, value) pairs in order; `-` in a key is `_`.

    The kernel treats `-` and `_` in parameter names alike and, for the ones pvegpu
    judges, the last occurrence wins, so callers scan the pairs in order.
    """
    params: list[tuple[str, str]] = []
    for token in raw.split():
        key, _, value = token.partition("=")
        params.append((key.replace("-", "_"), value.strip('"')))
    return tuple(params)


class BootLoader(StrEnum):
    """Which file holds the next boot's kernel command line."""

    SYSTEMD_BOOT = "systemd-boot"
    """/etc/kernel/cmdline, copied into the ESPs by `proxmox-boot-tool refresh`."""
    GRUB = "grub"
    """GRUB_CMDLINE_LINUX[_DEFAULT] in /etc/default/grub and grub.d/*.cfg."""


class ModuleStage(StrEnum):
    """When a listed module loads, relative to pvegpu-vfio-split.service."""

    INITRAMFS = "initramfs"
    """Before systemd starts, so before the split unit: the unit cannot be first."""
    MODULES_LOAD = "modules-load"
    """By systemd-modules-load.service, which the split unit is ordered before."""


@value_class
@attrs.frozen(eq=False, repr=False)
class KernelCmdline:
    """One kernel command line the next boot may use, and where it is set."""

    source: str
    """The file, relative to the root; for GRUB the last one that assigns `variable`."""
    value: str
    variable: str = ""
    """`GRUB_CMDLINE_LINUX` or `GRUB_CMDLINE_LINUX_DEFAULT`; empty for /etc/kernel/cmdline."""

    @property
    def params(self) -> tuple[tuple[str, str], ...]:
        """Its parameters as (key, value) pairs in order (`kernel_params`)."""
        return kernel_params(self.value)

    @property
    def vfio_ids(self) -> tuple[tuple[str, ...], ...]:
        """The ids of each `vfio-pci.ids=` it sets (`cmdline_vfio_ids`)."""
        return cmdline_vfio_ids(self.value)

    @property
    def where(self) -> str:
        """Where to edit it: `/etc/kernel/cmdline`, `GRUB_CMDLINE_LINUX in /etc/default/grub`."""
        return f"{self.variable} in /{self.source}" if self.variable else f"/{self.source}"


@value_class
@attrs.frozen(eq=False, repr=False)
class BootModule:
    """A module named in a list that loads it at boot."""

    source: str
    """The list, relative to the root: etc/initramfs-tools/modules, etc/modules, ..."""
    name: str
    """As written; kmod treats `-` and `_` alike, see `module`."""

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    @property
    def stage(self) -> ModuleStage:
        return (
            ModuleStage.INITRAMFS if self.source == INITRAMFS_MODULES else ModuleStage.MODULES_LOAD
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class BootConfig:
    """What the next boot runs with; empty when the root holds none of these files."""

    loader: BootLoader | None = None
    """From the files present: /etc/kernel/cmdline means systemd-boot, else GRUB's
    defaults mean GRUB; None when neither is there."""
    boot_tool: bool = False
    """proxmox-boot-tool keeps the ESPs (etc/kernel/proxmox-boot-uuids exists): a new
    initramfs or command line reaches the boot loader only through its `refresh`."""
    cmdlines: tuple[KernelCmdline, ...] = ()
    """Every command line the files set, the unused boot loader's included."""
    modules: tuple[BootModule, ...] = ()
    kernels: Kernels = attrs.field(factory=Kernels)
    """The running kernel, the one the next boot runs and its GPU driver modules
    (`pvegpu.host.kernels`); empty, and left out of the facts JSON, when none was read."""

    @property
    def cmdline_apply(self) -> str:
        """The command that puts a changed kernel command line into the next boot."""
        if self.loader is BootLoader.SYSTEMD_BOOT or self.boot_tool:
            return BOOT_TOOL_REFRESH
        if self.loader is BootLoader.GRUB:
            return UPDATE_GRUB
        return f"{BOOT_TOOL_REFRESH} (systemd-boot) or {UPDATE_GRUB} (GRUB)"

    @property
    def initramfs_apply(self) -> tuple[str, ...]:
        """The commands that put a changed /etc/modprobe.d or module list into the next boot."""
        if self.boot_tool or self.loader is BootLoader.SYSTEMD_BOOT:
            # The initrds the ESPs boot are copies: rebuilt under /boot, then copied over.
            return (UPDATE_INITRAMFS, BOOT_TOOL_REFRESH)
        return (UPDATE_INITRAMFS,)

    @property
    def description(self) -> str:
        """Which boot path applies, in one phrase."""
        if self.loader is BootLoader.SYSTEMD_BOOT:
            return "systemd-boot through proxmox-boot-tool (/etc/kernel/cmdline)"
        if self.loader is BootLoader.GRUB:
            through = " through proxmox-boot-tool" if self.boot_tool else ""
            return f"GRUB{through} (/etc/default/grub)"
        if self.boot_tool:
            return "proxmox-boot-tool, with no /etc/kernel/cmdline or /etc/default/grub"
        return "an unknown boot loader (no /etc/kernel/cmdline or /etc/default/grub)"
