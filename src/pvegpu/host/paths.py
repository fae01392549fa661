"""Where things are on a host, relative to the root: pvegpu's own files, a container's layout.

One place for every path pvegpu installs or looks at, so discovery, planning, the
renderers and the runbook agree on them.
"""

from __future__ import annotations

import posixpath
import re

# pvegpu's own files on the host.
SPLIT_SCRIPT = "usr/local/sbin/pvegpu-vfio-split"
SPLIT_UNIT_NAME = "pvegpu-vfio-split.service"
SPLIT_UNIT = f"etc/systemd/system/{SPLIT_UNIT_NAME}"
SPLIT_MODPROBE = "etc/modprobe.d/pvegpu-vfio.conf"

# Inside a container's root filesystem.
CONTAINER_LIBDIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
DPKG_STATUS = "var/lib/dpkg/status"
UNIT_DIR = "etc/systemd/system"
# Where else a copy of the unit tends to live: other unit directories (systemd would
# load these if /etc's copy went away) and admins' homes (the "local copy" that drifts).
OTHER_UNIT_DIRS = (
    "lib/systemd/system",
    "usr/lib/systemd/system",
    "usr/local/lib/systemd/system",
    "etc/systemd/user",
    "usr/lib/systemd/user",
)
HOME_DIRS = ("root", "home", "opt", "srv")
HOME_DEPTH = 3

NVIDIA_LIBRARY = re.compile(r"^(?P<lib>libcuda|libnvidia-ml)\.so\.(?P<version>\d+\.\d+(?:\.\d+)?)$")
"""libcuda.so.<driver version> / libnvidia-ml.so.<driver version>: a userspace library."""


def root_relative(path: str) -> str:
    """A spec path as a root-relative POSIX path (a leading / is tolerated)."""
    norm = posixpath.normpath(path.lstrip("/"))
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"{path!r} leaves the root")
    return norm
