"""The kernels of a fake host as the packages and tools lay them out: kernel images under
/boot, their module trees, DKMS's builds and records, proxmox-boot-tool's pins and GRUB's
grub.cfg and grubenv.

A host without `HostSpec.kernels` writes none of it, the same bytes as before these
existed. Kernel images and modules are short placeholders (discovery only looks at their
names); a module's placeholder carries the `version=` its `.modinfo` would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from pvegpu.values import value_class

if TYPE_CHECKING:
    from pvegpu.testing.tree_files import TreeFiles

ARCH = "x86_64"
NVIDIA_MODULES = ("nvidia", "nvidia-modeset", "nvidia-drm", "nvidia-uvm", "nvidia-peermem")
"""What NVIDIA's dkms.conf builds (BUILT_MODULE_NAME[0..4])."""
GRUB_ROOT_ID = "3f1c2b7a-6d0e-4c1a-9b3f-5e2d8c4a7b10"
"""The root file system's id grub-mkconfig puts into its entry ids."""
GRUBENV_SIZE = 1024
"""grub-editenv keeps the environment block at exactly 1 KiB, padded with `#`."""


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class DkmsBuild:
    """One DKMS module version built for one kernel, as `dkms install` leaves it."""

    version: str
    """PACKAGE_VERSION: NVIDIA's packagings use the driver's version."""
    module: str = "nvidia"
    """PACKAGE_NAME: `nvidia` (.run, Ubuntu), `nvidia-current` (Debian)."""
    files: tuple[str, ...] = NVIDIA_MODULES
    """The module files it builds, without suffix."""
    installed: bool = True
    """`dkms install`ed: the `kernel-<release>-<arch>` link and the copies in
    lib/modules/<release>/updates/dkms/; False: built only (`dkms build`)."""
    suffix: str = ".ko"
    """`.ko.zst` or `.ko.xz` when the kernel compresses its modules (DKMS follows it)."""


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class KernelSpec:
    """One installed kernel (a proxmox-kernel-<release> package)."""

    release: str
    dkms: tuple[DkmsBuild, ...] = ()
    other_modules: tuple[str, ...] = ()
    """Module files installed without DKMS, relative to lib/modules/<release>/ (a `.run`
    without DKMS: `kernel/drivers/video/nvidia.ko`)."""


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class GrubSpec:
    """A host that boots through GRUB without proxmox-boot-tool: /etc/default/grub,
    grub.cfg as update-grub writes it for the installed kernels (the newest as the first
    entry, every one under "Advanced options") and grubenv."""

    default: str = "0"
    """GRUB_DEFAULT: an index, a `>` path, an entry's id or title, or `saved`."""
    saved_entry: str | None = None
    next_entry: str | None = None
    """grub-reboot's entry for the next boot only."""
    cmdline: str = "quiet"
    """GRUB_CMDLINE_LINUX_DEFAULT."""


@value_class
@attrs.frozen(eq=False, kw_only=True, repr=False)
class KernelsSpec:
    """The host's kernels: the one running, the installed ones and what picks the next."""

    running: str
    """proc/sys/kernel/osrelease; one of `installed` on a real host."""
    installed: tuple[KernelSpec, ...]
    pin: str | None = None
    """etc/kernel/proxmox-boot-pin (`proxmox-boot-tool kernel pin`)."""
    next_boot_pin: str | None = None
    """etc/kernel/next-boot-pin (`... kernel pin --next-boot`)."""
    grub: GrubSpec | None = None


def write_kernels(writer: TreeFiles, spec: KernelsSpec) -> None:
    """/boot, lib/modules, the DKMS tree, the pins and GRUB's files of a host's `spec`."""
    writer.file("proc/sys/kernel/osrelease", spec.running + "\n")
    sources: set[tuple[str, str]] = set()
    for kernel in spec.installed:
        release = kernel.release
        writer.put(f"boot/vmlinuz-{release}", f"vmlinuz {release}\n".encode())
        writer.put(f"boot/initrd.img-{release}", f"initrd {release}\n".encode())
        writer.put(f"boot/config-{release}", f"# Linux/x86 {release} Kernel\n".encode())
        dep: list[str] = []
        for build in kernel.dkms:
            dep += _write_dkms(writer, release, build, sources)
        for path in kernel.other_modules:
            writer.put(f"lib/modules/{release}/{path}", _module_bytes(path, "", release))
            dep.append(f"{path}:")
        dep_text = "".join(f"{line}\n" for line in sorted(dep))
        writer.put(f"lib/modules/{release}/modules.dep", dep_text.encode())
    if spec.pin is not None:
        writer.file("etc/kernel/proxmox-boot-pin", spec.pin + "\n")
    if spec.next_boot_pin is not None:
        writer.file("etc/kernel/next-boot-pin", spec.next_boot_pin + "\n")
    if spec.grub is not None:
        releases = [k.release for k in spec.installed]
        writer.file("etc/default/grub", _grub_defaults(spec.grub))
        writer.file("boot/grub/grub.cfg", grub_cfg(releases, spec.grub))
        writer.file("boot/grub/grubenv", _grubenv(spec.grub))


def _write_dkms(
    writer: TreeFiles, release: str, build: DkmsBuild, sources: set[tuple[str, str]]
) -> list[str]:
    """One build in the DKMS tree (and installed under updates/dkms): its modules.dep lines."""
    tree = f"var/lib/dkms/{build.module}"
    if (build.module, build.version) not in sources:
        sources.add((build.module, build.version))
        source = f"usr/src/{build.module}-{build.version}"
        writer.file(f"{source}/dkms.conf", _dkms_conf(build))
        writer.link(f"{tree}/{build.version}/source", f"/{source}")
    at = f"{tree}/{build.version}/{release}/{ARCH}"
    writer.file(f"{at}/log/make.log", f"DKMS make.log for {build.module}-{build.version}\n")
    for name in build.files:
        writer.put(f"{at}/module/{name}{build.suffix}", _module_bytes(name, build.version, release))
    if not build.installed:
        return []
    writer.link(f"{tree}/kernel-{release}-{ARCH}", f"{build.version}/{release}/{ARCH}")
    lines = []
    for name in build.files:
        path = f"updates/dkms/{name}{build.suffix}"
        writer.put(f"lib/modules/{release}/{path}", _module_bytes(name, build.version, release))
        lines.append(f"{path}:")
    return lines


def _dkms_conf(build: DkmsBuild) -> str:
    lines = [f'PACKAGE_NAME="{build.module}"', f'PACKAGE_VERSION="{build.version}"']
    for index, name in enumerate(build.files):
        lines.append(f'BUILT_MODULE_NAME[{index}]="{name}"')
        lines.append(f'DEST_MODULE_LOCATION[{index}]="/kernel/drivers/video"')
    lines += ['AUTOINSTALL="yes"']
    return "\n".join(lines) + "\n"


def _module_bytes(name: str, version: str, release: str) -> bytes:
    """A placeholder module: an ELF magic and the strings its `.modinfo` would hold."""
    base = name.rsplit("/", 1)[-1].split(".", 1)[0]
    info = [f"name={base}", f"vermagic={release} SMP preempt mod_unload modversions "]
    if version:
        info.insert(0, f"version={version}")
    return b"\x7fELF\x02\x01\x01\x00" + b"".join(f"{i}\0".encode() for i in info)


def _entry_id(release: str) -> str:
    return f"gnulinux-{release}-advanced-{GRUB_ROOT_ID}"


def grub_cfg(releases: list[str], grub: GrubSpec) -> str:
    """The parts of update-grub's grub.cfg that pick the entry: 00_header's default, then
    10_linux's entries, newest kernel first (`releases` oldest first)."""
    default = "${saved_entry}" if grub.default == "saved" else grub.default
    newest_first = list(reversed(releases))
    lines = [
        "#",
        "# DO NOT EDIT THIS FILE",
        "#",
        "# It is automatically generated by grub-mkconfig using templates",
        "# from /etc/grub.d and settings from /etc/default/grub",
        "#",
        "",
        "### BEGIN /etc/grub.d/00_header ###",
        "if [ -s $prefix/grubenv ]; then",
        "  set have_grubenv=true",
        "  load_env",
        "fi",
        'if [ "${next_entry}" ] ; then',
        '   set default="${next_entry}"',
        "   set next_entry=",
        "   save_env next_entry",
        "   set boot_once=true",
        "else",
        f'   set default="{default}"',
        "fi",
        "",
        'if [ x"${feature_menuentry_id}" = xy ]; then',
        '  menuentry_id_option="--id"',
        "else",
        '  menuentry_id_option=""',
        "fi",
        "",
        "export menuentry_id_option",
        "",
        "function load_video {",
        "  insmod all_video",
        "}",
        "",
        "### END /etc/grub.d/00_header ###",
        "",
        "### BEGIN /etc/grub.d/10_linux ###",
    ]
    if newest_first:
        lines += _menuentry(
            "Proxmox VE GNU/Linux", f"gnulinux-simple-{GRUB_ROOT_ID}", newest_first[0], ""
        )
        lines.append(
            "submenu 'Advanced options for Proxmox VE GNU/Linux' $menuentry_id_option "
            f"'gnulinux-advanced-{GRUB_ROOT_ID}' {{"
        )
        for release in newest_first:
            lines += _menuentry(
                f"Proxmox VE GNU/Linux, with Linux {release}", _entry_id(release), release, "\t"
            )
        lines.append("}")
    lines += ["", "### END /etc/grub.d/10_linux ###", ""]
    return "\n".join(lines) + "\n"


def _menuentry(title: str, entry_id: str, release: str, indent: str) -> list[str]:
    return [
        f"{indent}menuentry '{title}' --class proxmox --class gnu-linux --class gnu --class os "
        f"$menuentry_id_option '{entry_id}' {{",
        f"{indent}\tload_video",
        f"{indent}\tinsmod gzio",
        f"{indent}\techo\t'Loading Linux {release} ...'",
        f"{indent}\tlinux\t/boot/vmlinuz-{release} root=/dev/mapper/pve-root ro quiet",
        f"{indent}\techo\t'Loading initial ramdisk ...'",
        f"{indent}\tinitrd\t/boot/initrd.img-{release}",
        f"{indent}}}",
    ]


def _grub_defaults(grub: GrubSpec) -> str:
    """/etc/default/grub as the Proxmox installer writes it, with the spec's default."""
    default = grub.default
    if not (default.isdigit() or default == "saved"):
        default = f'"{default}"'
    return (
        f"GRUB_DEFAULT={default}\n"
        "GRUB_TIMEOUT=5\n"
        'GRUB_DISTRIBUTOR="Proxmox VE"\n'
        f'GRUB_CMDLINE_LINUX_DEFAULT="{grub.cmdline}"\n'
        'GRUB_CMDLINE_LINUX=""\n'
    )


def _grubenv(grub: GrubSpec) -> str:
    text = "# GRUB Environment Block\n"
    # grub-editenv writes saved_entry before next_entry (the order grub-reboot sets them).
    if grub.saved_entry is not None:
        text += f"saved_entry={grub.saved_entry}\n"
    if grub.next_entry is not None:
        text += f"next_entry={grub.next_entry}\n"
    return text + "#" * (GRUBENV_SIZE - len(text))
