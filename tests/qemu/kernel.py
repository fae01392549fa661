"""Debian's kernel for the QEMU testbed: chosen by Debian version order, fetched once.

The package is `apt-get download`ed into a cache folder and unpacked there; it is never
committed. Which one: the newest by dpkg's version order, never by text order: as text
`linux-image-6.1.0-9-amd64` sorts after `-57-`, and version `6.1.38-4` after `6.1.192-3`.
"""

from __future__ import annotations

import functools
import lzma
import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import attrs

META_PACKAGE = "linux-image-amd64"
DEB_GLOB = "linux-image-*-amd64_*_amd64.deb"


def _order(char: str) -> int:
    # dpkg's lexical order: `~` before everything, even the end of the string; letters
    # before everything else.
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a: str, b: str) -> int:
    """dpkg's verrevcmp: alternating non-digit runs (by _order) and digit runs (as numbers)."""
    while a or b:
        a_text = re.match(r"[^0-9]*", a).group()  # type: ignore[union-attr]
        b_text = re.match(r"[^0-9]*", b).group()  # type: ignore[union-attr]
        for i in range(max(len(a_text), len(b_text))):
            ca = _order(a_text[i]) if i < len(a_text) else 0
            cb = _order(b_text[i]) if i < len(b_text) else 0
            if ca != cb:
                return -1 if ca < cb else 1
        a, b = a[len(a_text) :], b[len(b_text) :]
        a_num = re.match(r"[0-9]*", a).group()  # type: ignore[union-attr]
        b_num = re.match(r"[0-9]*", b).group()  # type: ignore[union-attr]
        if int(a_num or 0) != int(b_num or 0):
            return -1 if int(a_num or 0) < int(b_num or 0) else 1
        a, b = a[len(a_num) :], b[len(b_num) :]
    return 0


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1, as `dpkg --compare-versions a lt/eq/gt b` says."""

    def split(version: str) -> tuple[int, str, str]:
        epoch, _, rest = version.partition(":") if ":" in version else ("0", "", version)
        upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
        return int(epoch or 0), upstream, revision

    ea, ua, ra = split(a)
    eb, ub, rb = split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


version_key = functools.cmp_to_key(compare_versions)


@attrs.frozen
class Kernel:
    vmlinux: Path
    """The uncompressed image, booted through its PVH entry: under TCG, unpacking the
    xz-compressed bzImage takes longer (about 10 s) than the kernel's own boot."""
    root: Path
    """The unpacked package: lib/modules/<version>/ with a modules.dep of our own."""
    version: str
    """The kernel release, as `uname -r` prints it (6.1.0-57-amd64)."""


def deb_version(deb: Path) -> str:
    """The package version from a .deb's file name (`name_version_arch.deb`)."""
    return urllib.parse.unquote(deb.name.split("_")[1])  # apt writes an epoch's `:` as %3a


def newest_deb(debs: list[Path]) -> Path | None:
    return max(debs, key=lambda d: version_key(deb_version(d)), default=None)


def newest_image_package(apt_cache_show: str) -> str:
    """The image package the newest `linux-image-amd64` version depends on.

    `apt-cache show` prints one record per version apt knows (stable, security, backports
    alike), in no promised order: the newest is picked by version, not by position."""
    records = []
    for record in apt_cache_show.split("\n\n"):
        version = re.search(r"^Version: (\S+)", record, re.M)
        image = re.search(r"^Depends:.*?\b(linux-image-[0-9][^\s,]*-amd64)\b", record, re.M)
        if version and image:
            records.append((version.group(1), image.group(1)))
    if not records:
        raise LookupError(f"no {META_PACKAGE} record with an image dependency in apt-cache")
    return max(records, key=lambda r: version_key(r[0]))[1]


def fetch(cache: Path) -> Kernel:
    """The newest kernel package in `cache`, downloading the newest apt offers if none."""
    cache.mkdir(parents=True, exist_ok=True)
    deb = newest_deb(sorted(cache.glob(DEB_GLOB)))
    if deb is None:
        listed = subprocess.run(
            ["apt-cache", "show", META_PACKAGE], check=False, capture_output=True, text=True
        )
        if listed.returncode != 0:
            raise LookupError(f"apt knows no {META_PACKAGE} (run apt-get update): {listed.stderr}")
        shown = listed.stdout
        package = newest_image_package(shown)
        subprocess.run(["apt-get", "download", package], cwd=cache, check=True, capture_output=True)
        deb = newest_deb(sorted(cache.glob(f"{package}_*_amd64.deb")))
        if deb is None:
            raise LookupError(f"apt-get download {package} left no .deb in {cache}")
    root = cache / deb.name.removesuffix(".deb")
    if not root.is_dir():
        tmp = root.with_name(root.name + ".tmp")  # a killed unpack never looks complete
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", deb, tmp], check=True)
        tmp.rename(root)
    (version,) = (p.name for p in (root / "lib/modules").iterdir())
    if not (root / f"lib/modules/{version}/modules.dep").exists():
        # The package ships no modules.dep: the postinst runs depmod on a real system.
        subprocess.run(["depmod", "-b", root, version], check=True)
    vmlinux = root / f"boot/vmlinux-{version}"
    if not vmlinux.exists():
        unpack_image(root / f"boot/vmlinuz-{version}", vmlinux)
    return Kernel(vmlinux, root, version)


def unpack_image(vmlinuz: Path, vmlinux: Path) -> None:
    """The ELF inside a bzImage, as the kernel's scripts/extract-vmlinux finds it.

    Debian 12 builds with CONFIG_KERNEL_XZ, Debian 13 with CONFIG_KERNEL_ZSTD; Python
    3.11 has no zstd module, so that stream goes through the zstd tool, which writes the
    frame out and then complains about the bzImage's bytes after it (exit status 1)."""
    data = vmlinuz.read_bytes()
    xz, zstd = data.find(b"\xfd7zXZ\x00"), data.find(b"\x28\xb5\x2f\xfd")
    if xz >= 0:
        elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[xz:])
    elif zstd >= 0:
        elf = subprocess.run(["zstd", "-dcq"], input=data[zstd:], capture_output=True).stdout
    else:
        raise LookupError(f"{vmlinuz}: no xz or zstd stream in the image")
    if not elf.startswith(b"\x7fELF"):
        raise LookupError(f"{vmlinuz}: the compressed stream is not an ELF image")
    tmp = vmlinux.with_name(vmlinux.name + ".tmp")
    tmp.write_bytes(elf)
    tmp.rename(vmlinux)
