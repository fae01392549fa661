"""What every file under /etc/pve shares, for the renderers of guest configs and pci.cfg."""

from __future__ import annotations

PVE_MODE = 0o640
"""pmxcfs shows every file under /etc/pve as 0640 root:www-data, whatever is written."""
