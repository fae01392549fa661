"""A Debian 13 system that gets a kernel upgrade, for the QEMU kernel test.

The system is a chroot of a real Debian 13 (trixie) root: the minbase debootstrap that
`make test-deb` keeps (tools/debian_package.py), with the testbed's Debian kernel (A)
installed from its .deb by apt, which brings initramfs-tools, udev and kmod with it.
That much is made once and cached beside the kernel. Each run works in a copy of it:

1. pvegpu's rendered files go in (script, unit, modprobe.d file, initramfs-tools hook)
   and the runbook's `update-initramfs -u -k all` rebuilds A's initramfs.
2. The upgrade: `apt-get install linux-image-amd64` installs Debian 13's kernel (B).
   Its postinst runs /etc/kernel/postinst.d/initramfs-tools, that is
   `update-initramfs -c -k B`, with the system's hooks and pvegpu's in place; nothing
   of the test touches B's initramfs.
3. The root becomes an ext4 image (mke2fs -d, no loop mount) that Debian's initramfs
   mounts from the machine's built-in AHCI disk (q35's 00:1f.2, so no PCI function is
   added), with the testbed's PID 1 as `init=`.

One more hook stands in for a GPU driver package's (nvidia's, a DKMS module's,
plymouth's DRM drivers): it puts the VM functions' host driver into the initramfs,
where udev loads it by modalias, the case pvegpu's hook exists for. That driver is
snd_hda_intel, the audio functions' driver, whose softdep pvegpu writes; bochs, the GPU
stand-in, has none (pvegpu knows no module name for bochs-drm), so it is not put there:
in the initramfs udev loads drivers in parallel, and a driver without a softdep could
bind a VM GPU before the script ran. A real nvidia or amdgpu has its softdep line.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import attrs

from qemu.guest import BEGIN, END
from qemu.kernel import unpack_image
from qemu.machine import Machine

REPO = Path(__file__).resolve().parents[2]


def _load_tool(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# tools/ is no package: mypy knows debian_package by the files `mypy src tests tools` names.
if TYPE_CHECKING:
    import debian_package
else:
    debian_package = _load_tool("debian_package")

UnavailableError = debian_package.UnavailableError
TOOLS = ("mke2fs", "zstd", "unshare", "chroot")
APT = "apt-get install e2fsprogs zstd util-linux coreutils"
KERNEL_META = "linux-image-amd64"
"""What the upgrade installs: Debian 13's kernel, as `apt full-upgrade` from 12 does."""
DRIVER_HOOK = "etc/initramfs-tools/hooks/testbed-host-driver"
DRIVER_HOOK_TEXT = """#!/bin/sh
# The testbed's stand-in for a GPU driver package's initramfs hook: the VM functions'
# host driver goes into the initramfs, where udev loads it by modalias.
PREREQ=""
case "${1:-}" in
prereqs)
	echo "$PREREQ"
	exit 0
	;;
esac
. /usr/share/initramfs-tools/hook-functions
manual_add_modules snd-hda-intel
"""
ROOT_INIT_PATH = "usr/lib/pvegpu-testbed-init"
ROOT_INIT = f"""#!/bin/sh
# The testbed's PID 1 on the system's root, started by Debian's initramfs (init= on the
# command line), which leaves /proc, /sys, /dev and /run mounted and the root read-only.
# It runs the scenario named on the command line (pvegpu=<name>), prints its results
# between markers and powers off by sysrq: the root has no poweroff without systemd.
export PATH=/usr/sbin:/usr/bin
mount -t tmpfs tmp /tmp
# The console carries the markers: kernel messages would land in the middle of a line.
dmesg -n 1
scenario=$(sed -n 's/.*pvegpu=\\([a-z-]*\\).*/\\1/p' /proc/cmdline)
. /lib/pvegpu-testbed.sh
echo {BEGIN}
. "/lib/pvegpu-scenario-$scenario.sh"
echo {END}
echo o >/proc/sysrq-trigger
sleep 60
"""
_PRUNE = ("boot", "var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/locale")
"""Left out of the boot image: the kernels and initramfs images boot from the host side,
and nothing at boot reads apt's caches or the documentation."""


@attrs.frozen
class Installed:
    """One kernel of the system, copied out of it to boot."""

    version: str
    """As `uname -r` prints it, the name of its /lib/modules directory."""
    package: str
    package_version: str
    vmlinux: Path
    initrd: Path


@attrs.frozen
class Initramfs:
    """What an initramfs image holds: every path, and the bytes of the files asked for."""

    names: frozenset[str]
    files: dict[str, bytes]
    modes: dict[str, int]


def cache_dir() -> Path:
    return Path(os.environ.get("PVEGPU_KERNEL_CACHE", Path.home() / ".cache/pvegpu-kernel"))


def base(kernel_deb: Path) -> Path:
    """Debian 13 with kernel A installed by apt from its .deb: made once (a minute or two,
    deb.debian.org needed), then reused. apt's downloads stay in the cache's archives/."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    root = cache / f"trixie-{kernel_deb.name.removesuffix('.deb')}"
    with (cache / "upgrade.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if root.is_dir():  # renamed into place only once complete
            return root
        trixie = debian_package.base_chroot()
        partial = root.with_name(root.name + ".partial")
        _remove_tree(partial)
        subprocess.run(["cp", "-a", "--reflink=auto", trixie, partial], check=True)
        chroot = debian_package.Chroot(partial, _archives())
        shutil.copy2(kernel_deb, partial / "tmp" / kernel_deb.name)
        try:
            chroot.run("apt-get", "update", "-qq")
            chroot.run("apt-get", "install", "-y", "-q", f"/tmp/{kernel_deb.name}")
        except AssertionError as err:
            _remove_tree(partial)
            raise UnavailableError(f"installing {kernel_deb.name} in Debian 13: {err}") from err
        (partial / "tmp" / kernel_deb.name).unlink()
        partial.rename(root)
    return root


def _remove_tree(path: Path) -> None:
    """rm within one file system: never into a mount a killed chroot command left."""
    if path.exists() or path.is_symlink():
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=True)


def _archives() -> Path:
    # Our own apt cache: test-deb's chroots lock theirs while they install.
    archives = cache_dir() / "archives"
    (archives / "partial").mkdir(parents=True, exist_ok=True)
    return archives


class System:
    """A copy of the cached system for one run."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.chroot = debian_package.Chroot(root, _archives())

    def run(self, *argv: str) -> str:
        result = self.chroot.run(*argv)
        return result.stdout + result.stderr

    def install(self, files: dict[str, tuple[str, int]]) -> None:
        """Files (path -> (content, mode)) at their paths in the system, owned by root."""
        for path, (content, mode) in files.items():
            target = self.root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(mode)

    def upgrade(self) -> str:
        """`apt-get install linux-image-amd64`, with apt's lists as the base was made;
        once more after `apt-get update` if the mirror no longer has that version."""
        argv = ("apt-get", "install", "-y", "-q", KERNEL_META)
        first = self.chroot.run(*argv, check=False)
        if first.returncode == 0:
            return first.stdout + first.stderr
        self.run("apt-get", "update", "-qq")
        return self.run(*argv)

    def kernels(self, work: Path) -> dict[str, Installed]:
        """Every installed kernel by `uname -r`, its image unpacked and its initrd copied."""
        listed = self.run("dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\\n")
        found = {}
        for line in listed.splitlines():
            words = line.split()
            package = re.fullmatch(r"linux-image-(\d\S*)", words[0])
            if package is None or words[2:] != ["install", "ok", "installed"]:
                continue
            version = package.group(1)
            boot = self.root / "boot"
            vmlinux, initrd = work / f"vmlinux-{version}", work / f"initrd.img-{version}"
            unpack_image(boot / f"vmlinuz-{version}", vmlinux)
            shutil.copy(boot / f"initrd.img-{version}", initrd)
            found[version] = Installed(version, words[0], words[1], vmlinux, initrd)
        return found

    def initramfs(self, version: str, wanted: Sequence[str]) -> Initramfs:
        """A kernel's initramfs as Debian's unmkinitramfs unpacks it: its names, and the
        bytes and modes of the `wanted` paths it has."""
        inside = f"/tmp/initramfs-{version}"
        self.run("unmkinitramfs", f"/boot/initrd.img-{version}", inside)
        tree = self.root / inside.lstrip("/")
        # An early (microcode) archive puts the main one under main/.
        if (tree / "main").is_dir():
            tree = tree / "main"
        names = frozenset(str(p.relative_to(tree)) for p in tree.rglob("*"))
        files, modes = {}, {}
        for path in wanted:
            found = tree / path
            if found.is_file() and not found.is_symlink():
                files[path], modes[path] = found.read_bytes(), found.stat().st_mode & 0o7777
        _remove_tree(self.root / inside.lstrip("/"))
        return Initramfs(names, files, modes)

    def image(self, dest: Path) -> Path:
        """The root as an ext4 image, made by mke2fs from the tree (no mount needed)."""
        for path in _PRUNE:
            _remove_tree(self.root / path)
        used = subprocess.run(
            ["du", "-sk", "--one-file-system", self.root], capture_output=True, text=True,
            check=True,
        ).stdout.split()[0]  # fmt: skip
        size_kib = int(used) * 5 // 4 + 128 * 1024  # room for ext4's own metadata
        subprocess.run(
            ["mke2fs", "-q", "-t", "ext4", "-L", "pvegpu-root", "-d", self.root, dest,
             f"{size_kib}k"],
            check=True, capture_output=True,
        )  # fmt: skip
        return dest


@contextlib.contextmanager
def fresh_system(base_root: Path) -> Iterator[tuple[System, Path]]:
    """A copy of the cached system and a work folder beside it (the copy, the image and
    the kernels take about 2 GB: on disk, not tmpfs), both deleted afterwards."""
    work = Path(tempfile.mkdtemp(prefix="upgrade-", dir=cache_dir()))
    try:
        subprocess.run(["cp", "-a", "--reflink=auto", base_root, work / "root"], check=True)
        yield System(work / "root"), work
    finally:
        _remove_tree(work)


def boot(
    machine: Machine, kernel: Installed, image: Path, *, scenario: str, timeout: float = 420
) -> str:
    """Boot kernel and initramfs with the image as root=/dev/sda; the serial console log."""
    disk = [
        "-drive", f"file={image},format=raw,if=none,id=root,snapshot=on",
        "-device", "ide-hd,drive=root,bus=ide.0",
    ]  # fmt: skip
    cmdline = f"{machine.cmdline()} root=/dev/sda ro init=/{ROOT_INIT_PATH} pvegpu={scenario}"
    argv = ["qemu-system-x86_64", *machine.args(), *disk, "-kernel", str(kernel.vmlinux),
            "-initrd", str(kernel.initrd), "-append", cmdline]  # fmt: skip
    try:
        result = subprocess.run(
            argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as expired:
        # What the console printed up to the timeout: read_run shows its tail.
        out = expired.stdout or b""
        return out.decode(errors="replace").replace("\r", "") + f"\nTIMEOUT after {timeout} s\n"
    log = result.stdout + result.stderr
    return log.decode(errors="replace").replace("\r", "")
