"""driverctl's persisted driver overrides: `/etc/driverctl.d/pci-<ADDR>`.

`driverctl set-override ADDR DRIVER` writes the override now and saves it as a file whose
content is the driver's name; its udev rule and `driverctl@.service` write it into the
device's `driver_override` again at every boot. Only `pci-` files are PCI devices (the
prefix is driverctl's bus); each is read whole and must hold one driver name.
"""

from __future__ import annotations

import re

from pvegpu.host.reader import RootReader, fail
from pvegpu.model.facts import DriverctlOverride
from pvegpu.pci import PciAddress

DRIVERCTL_DIR = "etc/driverctl.d"
_PREFIX = "pci-"
_DRIVER = re.compile(r"[A-Za-z0-9_.-]+")
_FIX = (
    "driverctl writes the driver's name alone: `driverctl set-override ADDR DRIVER` "
    "rewrites it, `driverctl unset-override ADDR` removes it"
)


def _is_pci(name: str) -> bool:
    return name.startswith(_PREFIX)


def read_driverctl(reader: RootReader) -> tuple[DriverctlOverride, ...]:
    """Every persisted PCI override, in address order."""
    found = []
    for name in reader.listdir(DRIVERCTL_DIR, _is_pci):
        path = f"{DRIVERCTL_DIR}/{name}"
        text = name.removeprefix(_PREFIX)
        try:
            address = PciAddress.parse(text)
        except ValueError as err:
            fail("bad-value", path, f"names no PCI address: {err}", _FIX)
        if str(address) != text:
            fail("bad-value", path, f"expected the kernel's form pci-{address}", _FIX)
        driver = reader.need(path, "a driver name").strip()
        if not _DRIVER.fullmatch(driver):
            fail("bad-value", path, f"holds {driver!r}, not one driver name", _FIX)
        found.append(DriverctlOverride(address, driver))
    return tuple(sorted(found))
