"""The testbed's root file system: an uncompressed cpio the kernel unpacks as its root.

Laid out as a merged-/usr Debian host (/bin, /sbin, /lib, /lib64 are links into /usr),
so that a command run with systemd's PATH (/usr/local/sbin:/usr/local/bin:/usr/sbin:
/usr/bin, no /bin) finds what it would find on Proxmox VE. It holds busybox's applets,
dash as /bin/sh, the real kmod (busybox's modprobe ignores `softdep` and `install`
lines, which are what is under test) and the module closure of the drivers the
machine's devices need.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from qemu.kernel import Kernel

MODULES = (
    "vfio-pci",
    "vfio_iommu_type1",
    "bochs",  # bochs-display: the GPU stand-in, a DRM driver that binds every 1234:1111
    "snd-hda-intel",  # ich9-intel-hda: the GPUs' audio functions and the board's own
    "e1000",  # the foreign device in a GPU's group
    "virtio_pci",  # virtio-gpu-pci: the other card in a slot
    "nvme",  # the NVMe with SR-IOV of tests/test_sriov_qemu.py, standing in for a GPU's VFs
)
TOOLS = ("qemu-system-x86_64", "busybox", "dash", "kmod", "depmod", "cpio", "dpkg-deb", "ldd")
# Applets that must not shadow the real thing: busybox itself (a link to itself is ELOOP
# at exec), its sh (dash is /bin/sh, as on Debian) and its module tools (kmod's are real).
_NOT_APPLETS = {"busybox", "sh", "modprobe", "insmod", "rmmod", "depmod", "lsmod", "modinfo"}


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def build(dest: Path, kernel: Kernel, files: dict[str, tuple[str, int]]) -> Path:
    """dest/initrd.cpio holding the base system plus `files` (path -> (text, mode))."""
    tree = dest / "root"
    shutil.rmtree(tree, ignore_errors=True)
    for d in (
        "usr/bin",
        "usr/sbin",
        "usr/lib",
        "usr/lib64",
        "usr/local/sbin",
        "proc",
        "sys",
        "dev",
    ):
        (tree / d).mkdir(parents=True)
    for d in ("tmp", "run", "etc/modprobe.d", "etc/systemd/system"):
        (tree / d).mkdir(parents=True)
    for link in ("bin", "sbin", "lib", "lib64"):
        (tree / link).symlink_to(f"usr/{link}")
    _copy_binary(tree, "busybox", "usr/bin/busybox")
    applets = subprocess.run(
        [tree / "usr/bin/busybox", "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        if applet not in _NOT_APPLETS:
            (tree / "usr/bin" / applet).symlink_to("busybox")
    _copy_binary(tree, "dash", "usr/bin/dash")
    (tree / "usr/bin/sh").symlink_to("dash")
    _copy_binary(tree, "kmod", "usr/bin/kmod")
    for name in ("modprobe", "insmod", "rmmod", "lsmod", "depmod", "modinfo"):
        (tree / "usr/sbin" / name).symlink_to("../bin/kmod")
    _copy_modules(tree, kernel)
    for path, (content, mode) in files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(mode)
    cpio = dest / "initrd.cpio"
    names = subprocess.run(["find", "."], cwd=tree, capture_output=True, check=True).stdout
    with cpio.open("wb") as out:
        subprocess.run(
            ["cpio", "-o", "-H", "newc", "--quiet"], cwd=tree, input=names, stdout=out, check=True
        )
    shutil.rmtree(tree)
    return cpio


def _copy_modules(tree: Path, kernel: Kernel) -> None:
    moddir = f"lib/modules/{kernel.version}"
    shown = "".join(
        subprocess.run(
            ["modprobe", "-d", kernel.root, "-S", kernel.version, "--show-depends", module],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for module in MODULES
    )
    for path in sorted(set(re.findall(r"^insmod (\S+)", shown, re.M))):
        rel = Path(path).relative_to(kernel.root)
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, tree / rel)
    for name in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
        shutil.copy(kernel.root / moddir / name, tree / moddir / name)
    # modules.alias of just these modules: `modprobe <modalias>` (coldplug) finds only them.
    subprocess.run(["depmod", "-b", tree, kernel.version], check=True)


def _copy_binary(tree: Path, name: str, dest: str) -> None:
    """A host binary and the shared libraries ldd names (none for busybox-static)."""
    binary = shutil.which(name)
    assert binary is not None, name
    real = Path(os.path.realpath(binary))
    shutil.copy(real, tree / dest)
    libs = subprocess.run(["ldd", real], capture_output=True, text=True).stdout
    for lib in re.findall(r"(/\S+\.so\S*)", libs):
        target = tree / lib.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copy(os.path.realpath(lib), target)
