"""Read the next boot's configuration: kernel command lines and early module lists.

Every file is optional: a host (or a fixture, or a snapshot) without them has an empty
`BootConfig`. What the files mean for a plan is judged in `pvegpu.planning.boot`.
"""

from __future__ import annotations

from pvegpu.host import sysfs
from pvegpu.host.reader import RootReader, fail
from pvegpu.model.bootconfig import (
    BOOT_UUIDS,
    ETC_MODULES,
    GRUB_DEFAULT,
    GRUB_DIR,
    INITRAMFS_MODULES,
    KERNEL_CMDLINE,
    MODULES_LOAD_DIR,
    BootConfig,
    BootLoader,
    BootModule,
    KernelCmdline,
)

GRUB_VARIABLES = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
"""grub-mkconfig puts both on the normal entry's `linux` line."""


def read_boot(reader: RootReader) -> BootConfig:
    """The next boot's command lines, module lists and boot path, as far as /etc says."""
    kernel = reader.read(KERNEL_CMDLINE)
    cmdlines = [] if kernel is None else [KernelCmdline(KERNEL_CMDLINE, " ".join(kernel.split()))]
    grub = _grub_cmdlines(reader)
    cmdlines += grub
    has_grub = bool(grub) or reader.exists(GRUB_DEFAULT)
    loader = (
        BootLoader.SYSTEMD_BOOT if kernel is not None else BootLoader.GRUB if has_grub else None
    )
    return BootConfig(
        loader=loader,
        # Read, not only looked at, so that a snapshot carries it (the trace holds reads).
        boot_tool=reader.read(BOOT_UUIDS) is not None,
        cmdlines=tuple(cmdlines),
        modules=_boot_modules(reader),
    )


def _grub_cmdlines(reader: RootReader) -> list[KernelCmdline]:
    # The order grub-mkconfig sources them in: the defaults, then grub.d/*.cfg by name.
    paths = [GRUB_DEFAULT] if reader.exists(GRUB_DEFAULT) else []
    paths += [f"{GRUB_DIR}/{n}" for n in reader.listdir(GRUB_DIR, lambda n: n.endswith(".cfg"))]
    env: dict[str, str] = {}
    last: dict[str, str] = {}
    for path in paths:
        text = reader.need(path, "a shell file of GRUB settings")
        try:
            made = sysfs.shell_assignments(text, env)
        except ValueError as err:
            fail("bad-value", path, str(err), "grub-mkconfig cannot source it either: fix it")
        env |= made
        last |= {name: path for name in made}
    return [KernelCmdline(last[v], env[v], v) for v in GRUB_VARIABLES if v in last]


def _boot_modules(reader: RootReader) -> tuple[BootModule, ...]:
    lists = [INITRAMFS_MODULES, ETC_MODULES]
    lists += [f"{MODULES_LOAD_DIR}/{n}" for n in reader.listdir(MODULES_LOAD_DIR, _is_conf)]
    seen: set[str] = set()
    modules: list[BootModule] = []
    for path in lists:
        # Debian links etc/modules-load.d/modules.conf to ../modules: one list, read once.
        real = reader.resolve(path)
        if real is None or real in seen:
            continue
        seen.add(real)
        text = reader.need(path, "a list of modules")
        modules += [BootModule(path, name) for name in sysfs.module_names(text)]
    return tuple(modules)


def _is_conf(name: str) -> bool:
    return name.endswith(".conf")
