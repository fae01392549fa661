"""pvegpu's own files on the host as discovery found them: the base of each one's diff.

The split script and its unit, modprobe.d file, initramfs hook and udev rule, and the boot
units that ready the containers' GPUs (`model/paths.py`) are written whole, from the plan;
a host that has them from an earlier run shows what changes against those copies, and the
revert bundle restores them. Each is looked up here once per facts value
(`HostFacts.derived`), so the renderers take the base of their artifact by name and look
no file up by path. No I/O here.
"""

from __future__ import annotations

from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.paths import (
    NODES_SCRIPT,
    NODES_UNIT,
    SPLIT_INITRAMFS_HOOK,
    SPLIT_MODPROBE,
    SPLIT_SCRIPT,
    SPLIT_UDEV_RULE,
    SPLIT_UNIT,
    USERSPACE_SCRIPT,
    USERSPACE_UNIT,
)


def own_files(facts: HostFacts) -> OwnFiles:
    """pvegpu's own host files in `facts`, looked up once per facts value."""
    return facts.derived(OwnFiles)


class OwnFiles:
    """Each of pvegpu's own host files as the host has it now; None: it has none. A plain
    class, not a value: it is never compared or shown (as `HostFacts`' lookups)."""

    __slots__ = (
        "nodes_script",
        "nodes_unit",
        "split_initramfs_hook",
        "split_modprobe",
        "split_script",
        "split_udev_rule",
        "split_unit",
        "userspace_script",
        "userspace_unit",
    )

    def __init__(self, facts: HostFacts) -> None:
        self.split_script: ConfigFile | None = facts.file(SPLIT_SCRIPT)
        self.split_unit: ConfigFile | None = facts.file(SPLIT_UNIT)
        self.split_modprobe: ConfigFile | None = facts.file(SPLIT_MODPROBE)
        self.split_initramfs_hook: ConfigFile | None = facts.file(SPLIT_INITRAMFS_HOOK)
        self.split_udev_rule: ConfigFile | None = facts.file(SPLIT_UDEV_RULE)
        """Only with SR-IOV VFs to pin."""
        self.nodes_script: ConfigFile | None = facts.file(NODES_SCRIPT)
        self.nodes_unit: ConfigFile | None = facts.file(NODES_UNIT)
        self.userspace_script: ConfigFile | None = facts.file(USERSPACE_SCRIPT)
        self.userspace_unit: ConfigFile | None = facts.file(USERSPACE_UNIT)
