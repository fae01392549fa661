"""Read which kernel the next boot runs and which GPU driver module that kernel loads.

The kernel: proxmox-boot-tool's pins when it keeps the ESPs (`etc/kernel/next-boot-pin`
for one boot, then `etc/kernel/proxmox-boot-pin`), else the default of GRUB's grub.cfg
(grubenv's `next_entry` first), else the newest installed `boot/vmlinuz-*`, which is
what systemd-boot's `default proxmox-*` and GRUB's first entry boot. The ESP itself is
not read (proxmox-boot-tool mounts it only while it writes it): a pin not yet copied there
by `proxmox-boot-tool refresh` is read as if it were.

The module, for each driver whose userspace is locked to its version
(`Vendor.module_files`): the one DKMS installed for that kernel (the link
`var/lib/dkms/<module>/kernel-<release>-<arch>` names its version), else a module file
installed otherwise (its version unread: only its `.modinfo` has it), else none.
Every file looked at is read, listed or stat'ed through the reader, so a snapshot
carries it (`.ko` files and kernel images as empty files: only their names count).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from pvegpu.host.grubcfg import chosen_kernel, grubenv, parse_grub_cfg
from pvegpu.host.reader import RootReader, fail
from pvegpu.model.bootconfig import BootConfig
from pvegpu.model.facts import GPU, GpuDriver
from pvegpu.model.kernels import (
    BOOT_DIR,
    BOOT_PIN,
    DKMS_TREE,
    GRUB_CFG,
    GRUB_ENV,
    KERNEL_IMAGE,
    MODULES_DIR,
    NEXT_BOOT_PIN,
    OSRELEASE,
    KernelChoice,
    Kernels,
    ModuleOrigin,
    NextModule,
)
from pvegpu.vendors import LOCKED_MODULE_VENDORS, Vendor

_RELEASE = re.compile(r"[0-9][0-9A-Za-z._+~-]*")
"""A kernel release as `uname -r` prints it (`6.14.8-2-pve`): no `/`, no space."""
_ARCH = re.compile(r"[A-Za-z0-9_]+")
_DRIVER_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)+")
_MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")
PVE_SUFFIX = "-pve"
"""proxmox-boot-tool keeps only Proxmox kernels on the ESPs (its kernel_keep_versions)."""


def read_kernels(
    reader: RootReader, boot: BootConfig, gpus: Sequence[GPU], drivers: Sequence[GpuDriver]
) -> Kernels:
    """The kernels of the root, and the next boot's module of each version-locked driver
    this host uses (a GPU of its vendor, or the driver loaded)."""
    vendors = [
        v
        for v in LOCKED_MODULE_VENDORS
        if any(g.vendor is v for g in gpus) or any(d.driver == v.host_driver for d in drivers)
    ]
    running = _running(reader)
    installed = _installed(reader)
    if running is None and not installed:
        return Kernels()
    chosen = _next_kernel(reader, boot, installed)
    release = chosen.release
    return Kernels(
        running=running,
        installed=installed,
        next_boot=release,
        choice=chosen.choice,
        decided_by=chosen.decided_by,
        unknown=chosen.unknown,
        modules=() if release is None else tuple(_module(reader, v, release) for v in vendors),
    )


def version_key(release: str) -> tuple[tuple[int, int | str], ...]:
    """Order releases as `sort -V` does: runs of digits by value, other runs as text."""
    return tuple(
        (0, int(run)) if run.isdigit() else (1, run)
        for run in re.findall(r"[0-9]+|[^0-9]+", release)
    )


def _release(path: str, text: str) -> str:
    release = text.strip()
    if not _RELEASE.fullmatch(release):
        fail("bad-value", path, f"expected a kernel release such as 6.14.8-2-pve, got {release!r}")
    return release


def _running(reader: RootReader) -> str | None:
    text = reader.read(OSRELEASE)
    return None if text is None else _release(OSRELEASE, text)


def _installed(reader: RootReader) -> tuple[str, ...]:
    releases = []
    for name in reader.listdir(BOOT_DIR, lambda n: n.startswith(KERNEL_IMAGE)):
        release = name.removeprefix(KERNEL_IMAGE)
        # Not a kernel image: grub's `vmlinuz-<release>.old` backups, dpkg's leftovers.
        if not _RELEASE.fullmatch(release) or release.endswith((".old", ".dpkg-tmp")):
            continue
        path = f"{BOOT_DIR}/{name}"
        # Stat'ed, not read (megabytes): a snapshot carries the name as an empty file.
        if reader.size(path) is not None:
            releases.append(release)
    return tuple(sorted(releases, key=version_key))


def _first_line(reader: RootReader, path: str) -> str | None:
    text = reader.read(path)
    if text is None or not text.strip():
        return None
    return _release(path, text.splitlines()[0])


class _Choice(NamedTuple):
    release: str | None
    choice: KernelChoice | None = None
    decided_by: str | None = None
    unknown: str = ""


def _next_kernel(reader: RootReader, boot: BootConfig, installed: tuple[str, ...]) -> _Choice:
    if not installed:
        return _Choice(None, unknown=f"no kernel image under /{BOOT_DIR} (vmlinuz-<release>)")
    if boot.boot_tool:
        # proxmox-boot-tool writes the ESPs' default from these (its zz-proxmox-boot hook).
        pins = ((NEXT_BOOT_PIN, KernelChoice.NEXT_BOOT_PIN), (BOOT_PIN, KernelChoice.PIN))
        for path, choice in pins:
            pinned = _first_line(reader, path)
            if pinned is not None and pinned in installed:
                return _Choice(pinned, choice, path)
        ours = [r for r in installed if r.endswith(PVE_SUFFIX)] or list(installed)
        return _Choice(ours[-1], KernelChoice.NEWEST)
    cfg = reader.read(GRUB_CFG)
    if cfg is None:
        return _Choice(installed[-1], KernelChoice.NEWEST)
    return _grub_choice(reader, cfg, installed)


def _grub_choice(reader: RootReader, cfg: str, installed: tuple[str, ...]) -> _Choice:
    """The kernel of the entry GRUB boots next: grubenv's next_entry, else the default."""
    try:
        menu = parse_grub_cfg(cfg)
    except ValueError as err:
        fail("bad-value", GRUB_CFG, str(err), "GRUB cannot read it either: run update-grub")
    env_text = reader.read(GRUB_ENV)
    env = grubenv(env_text) if env_text is not None else {}
    if env.get("next_entry"):
        default, choice, path = env["next_entry"], KernelChoice.GRUB_NEXT_ENTRY, GRUB_ENV
    elif menu.default == "${saved_entry}":
        default = env.get("saved_entry") or "0"
        choice, path = KernelChoice.GRUB_DEFAULT, GRUB_ENV
    else:
        default, choice, path = menu.default, KernelChoice.GRUB_DEFAULT, GRUB_CFG
    release = chosen_kernel(menu, default)
    if release is None:
        return _Choice(
            None, decided_by=path, unknown=f"GRUB's default entry ({default}) boots no kernel"
        )
    if release not in installed:
        return _Choice(
            None,
            decided_by=path,
            unknown=f"GRUB's default entry boots {release}, which has no /{BOOT_DIR}/vmlinuz-"
            f"{release}: grub.cfg is older than the installed kernels (run update-grub)",
        )
    return _Choice(release, choice, path)


def _module(reader: RootReader, vendor: Vendor, release: str) -> NextModule:
    """The vendor's driver module the kernel `release` loads."""
    files = vendor.module_files
    assert files is not None  # read_kernels asks only vendors with module files
    for module in reader.listdir(DKMS_TREE):
        found = _dkms_build(reader, vendor, module, release)
        if found is not None:
            return found
    for directory in files.directories:
        rel = f"{MODULES_DIR}/{release}/{directory}"
        name = _module_file(reader, vendor, rel)
        if name is not None:
            return NextModule(vendor.host_driver, ModuleOrigin.OTHER, path=f"{rel}/{name}")
    return NextModule(vendor.host_driver, ModuleOrigin.NONE)


def _dkms_build(reader: RootReader, vendor: Vendor, module: str, release: str) -> NextModule | None:
    """The build of DKMS module `module` installed for `release`, if it is the vendor's
    driver: `kernel-<release>-<arch>` -> `<version>/<release>/<arch>`, whose `module/`
    holds the driver's file."""
    base = f"{DKMS_TREE}/{module}"
    prefix = f"kernel-{release}-"
    links = reader.listdir(
        base, lambda n: n.startswith(prefix) and bool(_ARCH.fullmatch(n[len(prefix) :]))
    )
    for link in links:
        target = reader.readlink(f"{base}/{link}")
        parts = (target or "").strip("/").split("/")
        if target is None or len(parts) != 3 or parts[1] != release:
            continue  # not DKMS's `<version>/<release>/<arch>`
        version, _, arch = parts
        built = f"{base}/{version}/{release}/{arch}/module"
        name = _module_file(reader, vendor, built)
        if name is None:
            continue
        installed = f"{MODULES_DIR}/{release}/updates/dkms/{name}"
        path = installed if reader.size(installed) is not None else f"{built}/{name}"
        return NextModule(
            vendor.host_driver,
            ModuleOrigin.DKMS if _DRIVER_VERSION.fullmatch(version) else ModuleOrigin.OTHER,
            version=version if _DRIVER_VERSION.fullmatch(version) else None,
            path=path,
            dkms=f"{base}/{version}/{release}",
        )
    return None


def _module_file(reader: RootReader, vendor: Vendor, directory: str) -> str | None:
    """The name of the vendor's driver module file in `directory`, stat'ed (so a snapshot
    carries it, empty), or None."""
    files = vendor.module_files
    assert files is not None
    names = {f"{n}{s}" for n in files.names for s in _MODULE_SUFFIXES}
    for name in reader.listdir(directory, lambda n: n in names):
        if reader.size(f"{directory}/{name}") is not None:
            return name
    return None
