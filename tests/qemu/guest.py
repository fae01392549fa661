"""What runs inside the guest: /init, its shell helpers, and reading back what it printed.

The guest has no Python. It prints plain lines between two markers on the serial
console and the host side makes sense of them:

    STATE <name>                      then one line per PCI function:
    FN <address> <vendor> <device> <driver or -> <driver_override>
    RC <name> <exit status>
    OUT <name> <a command's output, its lines joined by |>
    CAPTURE <sha256>                  then the base64 of a tar.gz, then CAPTURE-END

A capture is the guest's own sysfs and procfs as pvegpu's discovery reads a host: the
attribute files and links (same link text) of every /sys/bus/pci/devices entry and its
real /sys/devices directory, the IOMMU groups, /sys/class/iommu, the NUMA nodes' cpulists,
/proc/cmdline, /proc/devices and /etc/hostname. The sha256 catches a garbled transfer.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import shlex
import tarfile
from pathlib import Path

import attrs

from qemu.machine import SYSTEMD_PATH

BEGIN, END = "=====PVEGPU-BEGIN=====", "=====PVEGPU-END====="
HOSTNAME = "qemu-split"

INIT = f"""#!/bin/sh
# The testbed's PID 1: mount what a host has, run the scenario named on the kernel
# command line (pvegpu=<name>), print its results between markers, power off.
export PATH=/usr/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
scenario=$(sed -n 's/.*pvegpu=\\([a-z-]*\\).*/\\1/p' /proc/cmdline)
. /lib/pvegpu-testbed.sh
echo {BEGIN}
. "/lib/pvegpu-scenario-$scenario.sh"
echo {END}
poweroff -f
"""

LIB = r"""
# Under TCG every fork costs tens of milliseconds: the helpers use shell builtins where
# they can (read, cd -P + $PWD instead of cat and readlink).
SPLIT=/usr/local/sbin/pvegpu-vfio-split
rc() { echo "RC $1 $2"; }

# Every PCI function: address, ids, driver, driver_override.
state() {
    echo "STATE $1"
    for d in /sys/bus/pci/devices/*; do
        drv=-
        if [ -e "$d/driver" ]; then
            cd -P "$d/driver" && drv=${PWD##*/}
        fi
        read -r v <"$d/vendor"
        read -r p <"$d/device"
        read -r o <"$d/driver_override"
        echo "FN ${d##*/} $v $p $drv $o"
    done
    cd /
}

# udev's coldplug, as far as PCI drivers go: for each device, `kmod load $MODALIAS`,
# i.e. libkmod's modprobe of the modalias with the blacklist applied, in udev's
# environment. kmod by its path: busybox's env runs its own modprobe applet for a bare
# `modprobe`, and that one ignores softdep and install lines.
coldplug() {
    for d in /sys/bus/pci/devices/*; do
        read -r m <"$d/modalias"
        env -i PATH="$SYSTEMD_PATH" /usr/sbin/modprobe -b -q "$m"
    done
}

# Copy sysfs directories: attribute files (read to their end, not by their stat size,
# which is 4096) and links (with their own text), one cp each. Skipped: directories,
# and attributes that touch the device on read (rom, resource<N>, vpd).
copy_dirs() {
    for copy_d in "$@"; do
        set --
        for copy_f in "$copy_d"/*; do
            case ${copy_f##*/} in
            resource[0-9]* | rom | vpd) ;;
            *) set -- "$@" "$copy_f" ;;
            esac
        done
        cp -P "$@" "$C$copy_d/" 2>/dev/null
    done
}

capture() {
    C=/tmp/capture
    dirs=
    for l in /sys/bus/pci/devices/*; do
        cd -P "$l" && dirs="$dirs $PWD"
        if [ -e "$l/driver" ]; then
            cd -P "$l/driver" && dirs="$dirs $PWD"
        fi
    done
    for g in /sys/kernel/iommu_groups/*; do
        [ -d "$g" ] && dirs="$dirs $g $g/devices"
    done
    for u in /sys/class/iommu/*; do
        [ -e "$u" ] && cd -P "$u" && dirs="$dirs $PWD"
    done
    for n in /sys/devices/system/node/node*; do dirs="$dirs $n"; done
    cd /
    for d in $dirs /sys/bus/pci/devices /sys/class/iommu /proc /etc; do set -- "$@" "$C$d"; done
    mkdir -p "$@"
    copy_dirs $dirs /sys/bus/pci/devices /sys/class/iommu
    cp /proc/cmdline /proc/devices "$C/proc/"
    cp /etc/hostname "$C/etc/"
    tar -czf /tmp/capture.tgz -C $C .
    # Kernel messages would land in the middle of the base64 text.
    dmesg -n 1
    echo "CAPTURE $(sha256sum /tmp/capture.tgz | cut -d' ' -f1)"
    base64 /tmp/capture.tgz
    echo CAPTURE-END
    dmesg -n 4
}
"""


def exec_start(unit: str) -> list[str]:
    """The argv PID 1 runs for the unit's one `ExecStart=`, by systemd's rules.

    What this covers: prefix characters, splitting at whitespace, an absolute path.
    Quotes, `\\`, `$` and `%` would need systemd's own unquoting and expansion, so such a
    line is refused rather than guessed at."""
    section, found = "", []
    for raw in unit.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line.partition("=")[0].strip() == "ExecStart":
            found.append(line.partition("=")[2].strip())
    if len(found) != 1:
        raise ValueError(f"expected one ExecStart= in [Service], found {found}")
    command = found[0].lstrip("-@:+!")
    if any(char in command for char in "\"'\\$%"):
        raise ValueError(f"ExecStart= needs systemd's unquoting or expansion: {command}")
    argv = command.split()
    if not argv or not argv[0].startswith("/"):
        raise ValueError(f"ExecStart= does not name an absolute path: {command}")
    return argv


def lib(argv: list[str]) -> str:
    """The helpers, with `run_unit`: argv as PID 1 runs it (no shell, its PATH, stdin null)."""
    return (
        f"SYSTEMD_PATH={SYSTEMD_PATH}\n"
        + LIB
        + f'run_unit() {{ (cd / && exec env -i PATH="$SYSTEMD_PATH" {shlex.join(argv)}) '
        "</dev/null; }\n"
    )


@attrs.frozen
class Function:
    vendor: str
    device: str
    driver: str | None
    override: str | None


Table = dict[str, Function]


@attrs.frozen
class Run:
    """What one boot printed between the markers."""

    text: str
    states: dict[str, Table]
    rcs: dict[str, int]
    outs: dict[str, str]
    """What `say` printed, lines joined by `|`."""
    captures: tuple[tuple[str, bytes], ...]
    """(sha256 the guest printed, the bytes the host decoded), in order."""


def read_run(log: str) -> Run:
    start, end = log.find(BEGIN), log.find(END)
    if not 0 <= start < end:
        raise AssertionError(f"no result markers in the guest log:\n{log[-4000:]}")
    text = log[start + len(BEGIN) : end]
    states: dict[str, Table] = {}
    rcs: dict[str, int] = {}
    outs: dict[str, str] = {}
    captures: list[tuple[str, bytes]] = []
    table: Table = {}
    lines = iter(text.splitlines())
    for line in lines:
        words = line.split()
        if line.startswith("STATE "):
            table = states.setdefault(words[1], {})
        elif line.startswith("FN ") and len(words) == 6:
            driver, override = words[4], words[5]
            table[words[1]] = Function(
                words[2], words[3], None if driver == "-" else driver,
                None if override == "(null)" else override,
            )  # fmt: skip
        elif line.startswith("RC "):
            rcs[words[1]] = int(words[2])
        elif line.startswith("OUT "):
            outs[words[1]] = line.split(" ", 2)[2] if len(words) > 2 else ""
        elif line.startswith("CAPTURE "):
            chunks = []
            for part in lines:
                if part == "CAPTURE-END":
                    break
                if re.fullmatch(r"[A-Za-z0-9+/=]+", part):  # stray console text is not base64
                    chunks.append(part)
            captures.append((words[1], base64.b64decode("".join(chunks))))
    return Run(text, states, rcs, outs, tuple(captures))


def unpack_capture(sha256: str, data: bytes, dest: Path) -> Path:
    """Unpack a capture under dest after checking its sha256; dest, the host's root."""
    if hashlib.sha256(data).hexdigest() != sha256:
        raise AssertionError(f"capture garbled in transfer: sha256 {sha256} expected")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")  # every sysfs link is relative and stays inside
    return dest
