"""The host's own systemd units that move PCI devices between drivers, as the facts'
files say, worked out once per facts value.

Discovery keeps each unit of `/etc/systemd/system` whole (`HostFacts.files`). A unit that
writes one of the marks below (a driver's sysfs files, vfio-pci's ids) binds devices
itself and races pvegpu's split unit at boot: the planner warns about it once
(`other-gpu-binder`, planning/findings.py), and leaves its GPU references to that
warning (planning/references.py). Both ask here, so neither looks a file up by path or
scans file texts. No I/O here.
"""

from __future__ import annotations

from pvegpu.model.facts import HostFacts

BINDER_MARKS = ("vfio-pci", "driver_override", "drivers_probe", "/unbind", "new_id")
"""What a unit that moves PCI devices between drivers has to write somewhere."""
UNIT_DIR = "etc/systemd/system/"


def binder_units(facts: HostFacts) -> dict[str, tuple[str, ...]]:
    """By path, in the facts' order, each host unit the facts hold that writes a binder
    mark, with the marks it writes (in `BINDER_MARKS`' order). Kept per facts value
    (`HostFacts.derived`): read it, never change it."""
    return facts.derived(_binder_units)


def _binder_units(facts: HostFacts) -> dict[str, tuple[str, ...]]:
    found: dict[str, tuple[str, ...]] = {}
    for file in facts.files:
        if file.path.startswith(UNIT_DIR):
            marks = tuple(m for m in BINDER_MARKS if m in file.content)
            if marks:
                found[file.path] = marks
    return found
