"""The display controller of a server's baseboard management controller (BMC).

Every server board with a BMC shows its video as a PCI display controller (class 0x0300):
the console the BMC's remote KVM and the firmware draw on. It is no GPU anyone pools: a
VM given it takes the host's console, a container gets nothing it can compute on. So it
is never taken by `count` or `numa_node`, and naming it is refused. Known by the driver
that binds it (the kernel's BMC display drivers) or, unbound or on vfio-pci, by its ids:
ASPEED makes only BMCs; Matrox's G200 server variants and HiSilicon's Hi171x are the
BMC displays of Dell, HPE, Lenovo and Huawei boards (the ids the `mgag200` and `hibmc`
drivers match).
"""

from __future__ import annotations

BMC_DISPLAY_DRIVERS = frozenset({"ast", "mgag200", "hibmc-drm"})
"""The kernel drivers of BMC displays (a sysfs `driver` link's name)."""

ASPEED = 0x1A03
MATROX = 0x102B
HISILICON = 0x19E5
BMC_DISPLAY_IDS: dict[int, frozenset[int] | None] = {
    # Every ASPEED display (AST2400/2500/2600: 1a03:2000) is a BMC's.
    ASPEED: None,
    # G200 SE A/B, EV, eW, EH, eR, eW3, eH3.
    MATROX: frozenset({0x0522, 0x0524, 0x0530, 0x0532, 0x0533, 0x0534, 0x0536, 0x0538}),
    HISILICON: frozenset({0x1711}),
}
"""PCI vendor -> the device ids of its BMC displays (None: all of its displays)."""


def is_bmc_display(vendor: int, device: int, driver: str | None) -> bool:
    """Whether a display controller of these ids, bound to `driver`, is a BMC's."""
    if driver in BMC_DISPLAY_DRIVERS:
        return True
    if vendor not in BMC_DISPLAY_IDS:
        return False
    devices = BMC_DISPLAY_IDS[vendor]
    return devices is None or device in devices
