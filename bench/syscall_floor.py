"""What discovery's reads cost in Python with nothing else: the floor under `discover`.

    python bench/syscall_floor.py ROOT

Makes the system calls `pvegpu discover` makes on a tree, in the same order, in a bare
loop: list the IOMMU groups and the devices; per device, read its sys/bus/pci/devices
link, list its directory and read the attribute files discovery reads (where present),
read its `driver` and `iommu_group` links; per group, list its devices and read its type;
the NUMA nodes' CPU lists. No checks, no parsing, no objects, no output; the start-up is
Python's own (`-S`-like: only os and sys). `make bench` runs it next to `discover` and
lspci, so the table shows how much of discover is Python reading files at all, and how
much is pvegpu.
"""

# os, not pathlib: the floor is the system calls alone, not Path objects around them.
# ruff: noqa: PTH112, PTH115, PTH118, PTH208

from __future__ import annotations

import os
import sys

ATTRIBUTES = (
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "uevent",
    "numa_node",
    "driver_override",
    "local_cpulist",
)
LINKS = ("iommu_group", "driver")
FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


def read(path: str) -> bytes:
    """Open, fstat, read, close: what pvegpu's reader does for one file."""
    fd = os.open(path, FLAGS)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, 65536)
        if len(data) != size:
            data += os.read(fd, 65536)
        return data
    finally:
        os.close(fd)


def main(root: str) -> None:
    groups = f"{root}/sys/kernel/iommu_groups"
    group_names = sorted(os.listdir(groups)) if os.path.isdir(groups) else []
    devices = f"{root}/sys/bus/pci/devices"
    for name in sorted(os.listdir(devices)):
        link = f"{devices}/{name}"
        real = os.path.normpath(os.path.join(devices, os.readlink(link)))
        with os.scandir(real) as listing:
            entries = {entry.name: entry for entry in listing}
        for attribute in ATTRIBUTES:
            if attribute in entries:
                read(f"{real}/{attribute}")
        for link_name in LINKS:
            if link_name in entries:
                os.readlink(f"{real}/{link_name}")
    for group in group_names:
        sorted(os.listdir(f"{groups}/{group}/devices"))
        read(f"{groups}/{group}/type")
    nodes = f"{root}/sys/devices/system/node"
    for node in sorted(n for n in os.listdir(nodes) if n.startswith("node")):
        read(f"{nodes}/{node}/cpulist")


if __name__ == "__main__":
    main(sys.argv[1])
