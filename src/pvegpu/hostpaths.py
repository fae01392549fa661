"""Where pvegpu's own files live on a host, relative to the root (one place for all)."""

from __future__ import annotations

SPLIT_SCRIPT = "usr/local/sbin/pvegpu-vfio-split"
SPLIT_UNIT_NAME = "pvegpu-vfio-split.service"
SPLIT_UNIT = f"etc/systemd/system/{SPLIT_UNIT_NAME}"
SPLIT_MODPROBE = "etc/modprobe.d/pvegpu-vfio.conf"
