"""The kernels of a host: the one running, the one the next boot runs, and the GPU driver
module that kernel loads. No I/O here: `pvegpu.host.kernels` reads them.

An upgrade is installed long before it runs: `apt full-upgrade` puts a new
proxmox-kernel under /boot and DKMS builds the GPU driver for it, or a new driver version
for every installed kernel, and the loaded module stays what it was until the reboot.
NVIDIA's container userspace must be the module's exact version, so what the next boot
loads decides whether a container's CUDA still starts after it (`planning/next_boot.py`).
"""

from __future__ import annotations

from enum import StrEnum

import attrs

from pvegpu.values import value_class

OSRELEASE = "proc/sys/kernel/osrelease"
"""The running kernel's release (`uname -r`): `6.14.8-2-pve`."""
BOOT_DIR = "boot"
KERNEL_IMAGE = "vmlinuz-"
"""An installed kernel is `boot/vmlinuz-<release>`: what proxmox-boot-tool copies to the
ESPs and grub-mkconfig makes a menu entry of."""
MODULES_DIR = "lib/modules"
DKMS_TREE = "var/lib/dkms"
"""DKMS's records: `<module>/<version>/<kernel>/<arch>/module/<name>.ko[.xz|.zst]` for
each build, and the link `<module>/kernel-<kernel>-<arch>` -> `<version>/<kernel>/<arch>`
for the one installed (copied to `lib/modules/<kernel>/updates/dkms/`)."""
BOOT_PIN = "etc/kernel/proxmox-boot-pin"
"""`proxmox-boot-tool kernel pin <release>`: its first line is the default kernel."""
NEXT_BOOT_PIN = "etc/kernel/next-boot-pin"
"""`proxmox-boot-tool kernel pin <release> --next-boot`: the next boot only."""
GRUB_CFG = "boot/grub/grub.cfg"
GRUB_ENV = "boot/grub/grubenv"
"""grub-reboot's `next_entry` and GRUB_DEFAULT=saved's `saved_entry`."""


class KernelChoice(StrEnum):
    """What decides which installed kernel the next boot runs."""

    NEXT_BOOT_PIN = "next-boot-pin"
    """`proxmox-boot-tool kernel pin <release> --next-boot` (etc/kernel/next-boot-pin)."""
    PIN = "pin"
    """`proxmox-boot-tool kernel pin <release>` (etc/kernel/proxmox-boot-pin)."""
    GRUB_NEXT_ENTRY = "grub-next-entry"
    """`grub-reboot` (next_entry in boot/grub/grubenv): GRUB's next boot only."""
    GRUB_DEFAULT = "grub-default"
    """The default of boot/grub/grub.cfg (GRUB_DEFAULT, or saved_entry for `saved`)."""
    NEWEST = "newest"
    """No pin: systemd-boot's `default proxmox-*` and GRUB's first entry are the newest
    installed kernel."""

    @property
    def phrase(self) -> str:
        """How messages say why that kernel: `pinned with proxmox-boot-tool`."""
        return _PHRASES[self]


_PHRASES = {
    KernelChoice.NEXT_BOOT_PIN: (
        "pinned for the next boot by `proxmox-boot-tool kernel pin --next-boot`"
    ),
    KernelChoice.PIN: "pinned by `proxmox-boot-tool kernel pin`",
    KernelChoice.GRUB_NEXT_ENTRY: "GRUB's next entry, set by grub-reboot",
    KernelChoice.GRUB_DEFAULT: "GRUB's default entry",
    KernelChoice.NEWEST: "the newest installed kernel, which boots by default",
}


class ModuleOrigin(StrEnum):
    """Where the next boot's kernel gets a GPU driver module from."""

    DKMS = "dkms"
    """Built and installed by DKMS for that kernel: its version is the DKMS record's."""
    OTHER = "other"
    """A module file DKMS did not install (a `.run` installed without DKMS, a package):
    its version is only in the file's `.modinfo`, which pvegpu does not read."""
    NONE = "none"
    """No module of the driver for that kernel: after the boot the driver does not load."""


@value_class
@attrs.frozen(eq=False, repr=False)
class NextModule:
    """A version-locked GPU driver's module as the next boot's kernel has it."""

    driver: str
    """The vendor's host driver (`Vendor.host_driver`): `nvidia`."""
    origin: ModuleOrigin
    version: str | None = None
    """Known for a DKMS build (the version of its record); None otherwise."""
    path: str | None = None
    """The module file, relative to the root (`lib/modules/<kernel>/updates/dkms/nvidia.ko`);
    None with no module."""
    dkms: str | None = None
    """The DKMS record the version comes from (`var/lib/dkms/nvidia/590.48.01/<kernel>`)."""

    @property
    def where(self) -> str:
        """The file a message names: the DKMS record, else the module file."""
        return self.dkms or self.path or ""


@value_class
@attrs.frozen(eq=False, repr=False)
class Kernels:
    """The running kernel, the installed ones and the next boot's; empty when the root
    shows none (a snapshot or fixture without /boot and osrelease)."""

    running: str | None = None
    """proc/sys/kernel/osrelease."""
    installed: tuple[str, ...] = ()
    """The releases of boot/vmlinuz-*, oldest first (version order)."""
    next_boot: str | None = None
    """The release the next boot runs; None while unknown (`unknown` says why)."""
    choice: KernelChoice | None = None
    """What picked `next_boot`."""
    decided_by: str | None = None
    """The file that says so, relative to the root (a pin file, grub.cfg, grubenv); None
    for the newest kernel, which no file names."""
    unknown: str = ""
    """Why `next_boot` is None, when kernels were read."""
    modules: tuple[NextModule, ...] = ()
    """The next boot's module of each GPU driver whose userspace is locked to its version
    and that this host uses (`Vendor.module_files`)."""

    def module(self, driver: str | None) -> NextModule | None:
        return next((m for m in self.modules if m.driver == driver), None)

    @property
    def changes_kernel(self) -> bool:
        """The next boot runs another kernel than this one."""
        return None not in (self.next_boot, self.running) and self.next_boot != self.running

    @property
    def why_next(self) -> str:
        """Why the next boot runs `next_boot`, in a phrase with its file."""
        if self.choice is None:
            return ""
        where = f": /{self.decided_by}" if self.decided_by else ""
        return f"{self.choice.phrase}{where}"
