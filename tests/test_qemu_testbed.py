"""The QEMU testbed's own logic, fast: kernel choice, ExecStart, the capture's transfer.

These run in the main suite: a wrong version order or ExecStart reading would make the
kernel test (tests/test_split_qemu.py, `make test-kernel`) prove the wrong thing.
"""

from __future__ import annotations

import base64
import hashlib
import io
import lzma
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from pvegpu.model.plan import Plan
from pvegpu.rendering.split import SCRIPT_PATH, UNIT_PATH, render_split
from qemu import guest, kernel

PAIRS = [
    ("6.1.192-3", "6.1.38-4"),  # as text, 38 sorts after 192
    ("6.1.0-57", "6.1.0-9"),
    ("1:5.10-1", "6.1-1"),  # the epoch wins
    ("6.1.76-1", "6.1.76-1~bpo11+1"),  # ~ sorts before everything, the end included
    ("6.1.76-1+b1", "6.1.76-1"),
    ("6.12.9-1", "6.12.9-1~exp1"),
    ("6.1a-1", "6.1-1"),  # the end sorts before any character but ~
    ("6.1+-1", "6.1a-1"),  # letters sort before all other characters
]


@pytest.mark.parametrize(("newer", "older"), PAIRS)
def test_versions_in_dpkg_order(newer: str, older: str) -> None:
    assert kernel.compare_versions(newer, older) == 1
    assert kernel.compare_versions(older, newer) == -1
    assert kernel.compare_versions(newer, newer) == 0


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not installed")
@pytest.mark.parametrize(("newer", "older"), PAIRS)
def test_versions_agree_with_dpkg(newer: str, older: str) -> None:
    command = ["dpkg", "--compare-versions", newer, "gt", older]
    assert subprocess.run(command, check=False).returncode == 0


def test_newest_deb_by_version_not_by_name(tmp_path: Path) -> None:
    debs = [
        tmp_path / "linux-image-6.1.0-9-amd64_6.1.27-1_amd64.deb",
        tmp_path / "linux-image-6.1.0-57-amd64_6.1.192-3_amd64.deb",
        tmp_path / "linux-image-6.1.0-21-amd64_6.1.90-1_amd64.deb",
    ]
    assert max(debs) == debs[0]  # what text order picked
    assert kernel.newest_deb(debs) == debs[1]
    assert kernel.newest_deb([]) is None


def test_newest_image_package_from_apt_cache_show() -> None:
    shown = "\n\n".join(
        f"Package: linux-image-amd64\nVersion: {version}\nDepends: {image} (= {version})\n"
        for version, image in [
            ("6.1.38-4", "linux-image-6.1.0-10-amd64"),
            ("6.1.192-3", "linux-image-6.1.0-57-amd64"),
            ("6.1.90-1", "linux-image-6.1.0-21-amd64"),
        ]
    )
    assert kernel.newest_image_package(shown) == "linux-image-6.1.0-57-amd64"
    with pytest.raises(LookupError):
        kernel.newest_image_package("Package: linux-image-amd64\nVersion: 1\n")


ELF = b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 64


def _bzimage(tmp_path: Path, stream: bytes) -> Path:
    """A stand-in bzImage: setup code, the compressed kernel, the bytes after it."""
    image = tmp_path / "vmlinuz"
    image.write_bytes(b"MZ" + bytes(4000) + stream + b"\x00trailer" * 100)
    return image


def test_unpack_image_xz(tmp_path: Path) -> None:
    """Debian 12's kernels are xz-compressed."""
    image = _bzimage(tmp_path, lzma.compress(ELF, format=lzma.FORMAT_XZ))
    kernel.unpack_image(image, tmp_path / "vmlinux")
    assert (tmp_path / "vmlinux").read_bytes() == ELF


@pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd is not installed")
def test_unpack_image_zstd(tmp_path: Path) -> None:
    """Debian 13's kernels are zstd-compressed; the bytes after the frame are no error."""
    stream = subprocess.run(["zstd", "-cq"], input=ELF, capture_output=True, check=True).stdout
    kernel.unpack_image(_bzimage(tmp_path, stream), tmp_path / "vmlinux")
    assert (tmp_path / "vmlinux").read_bytes() == ELF


def test_unpack_image_refuses_what_is_no_kernel(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="no xz or zstd"):
        kernel.unpack_image(_bzimage(tmp_path, b"plain"), tmp_path / "vmlinux")
    not_elf = lzma.compress(b"text, not ELF", format=lzma.FORMAT_XZ)
    with pytest.raises(LookupError, match="not an ELF"):
        kernel.unpack_image(_bzimage(tmp_path, not_elf), tmp_path / "vmlinux")
    assert not (tmp_path / "vmlinux").exists()


def test_exec_start_of_the_rendered_unit(kpro6_plan: Plan) -> None:
    unit = {a.path: a.content for a in render_split(kpro6_plan)}[UNIT_PATH]
    assert guest.exec_start(unit) == ["/" + SCRIPT_PATH, "override"]


@pytest.mark.parametrize(
    "line",
    [
        'ExecStart=/bin/sh -c "echo $X"',  # quoting and $: systemd's own rules
        "ExecStart=/usr/local/sbin/x %n",
        "ExecStart=x override",  # not an absolute path
    ],
)
def test_exec_start_refuses_what_it_cannot_read(line: str) -> None:
    with pytest.raises(ValueError, match="ExecStart"):
        guest.exec_start(f"[Unit]\nDescription=x\n[Service]\nType=oneshot\n{line}\n")


def test_exec_start_reads_only_the_service_section() -> None:
    unit = "[Unit]\nExecStart=/wrong\n[Service]\n# ExecStart=/commented\nExecStart=-/right a\n"
    assert guest.exec_start(unit) == ["/right", "a"]


def _capture(members: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in members.items():
            info = tarfile.TarInfo(name)
            if text.startswith("->"):
                info.type, info.linkname = tarfile.SYMTYPE, text[2:]
                tar.addfile(info)
            else:
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text.encode()))
    return out.getvalue()


def test_read_run_decodes_a_capture_among_console_noise(tmp_path: Path) -> None:
    data = _capture(
        {
            "sys/devices/pci0000:00/0000:00:1b.0/vendor": "0x8086\n",
            "sys/bus/pci/devices/0000:00:1b.0": "->../../../devices/pci0000:00/0000:00:1b.0",
        }
    )
    text = base64.encodebytes(data).decode()
    lines = text.splitlines()
    noisy = "\n".join([*lines[:1], "[   12.3] snd_hda_intel: no codecs found!", *lines[1:]])
    log = (
        f"boot noise\n{guest.BEGIN}\nSTATE s\nFN 0000:00:1b.0 0x8086 0x293e snd_hda_intel (null)\n"
        f"RC unit 3\nOUT say a|b\nCAPTURE {hashlib.sha256(data).hexdigest()}\n{noisy}\n"
        f"CAPTURE-END\n{guest.END}\n"
    )
    run = guest.read_run(log)
    assert run.states == {
        "s": {"0000:00:1b.0": guest.Function("0x8086", "0x293e", "snd_hda_intel", None)}
    }
    assert (run.rcs, run.outs) == ({"unit": 3}, {"say": "a|b"})
    root = guest.unpack_capture(*run.captures[0], tmp_path / "root")
    assert (root / "sys/bus/pci/devices/0000:00:1b.0/vendor").read_text() == "0x8086\n"
    with pytest.raises(AssertionError, match="garbled"):
        guest.unpack_capture("0" * 64, run.captures[0][1], tmp_path / "other")


def test_read_run_without_markers_shows_the_log_tail() -> None:
    with pytest.raises(AssertionError, match="Kernel panic"):
        guest.read_run("...\nKernel panic - not syncing\n")
