"""Fabric Manager on a host with NVSwitches: installed, enabled at boot, its mode.

The NVSwitches themselves are PCI functions discovery already reads (`HostFacts.nvswitches`);
this reads the service that programs them, through the reader like everything else, and
only on a host that has one, so no other host's discovery reads (or snapshots) more.
"""

from __future__ import annotations

from pvegpu.host.reader import RootReader, fail
from pvegpu.model.facts import FabricManager, PciFunction
from pvegpu.vendors import nvswitch

UNITS = "etc/systemd/system"
_MASKED = "/dev/null"


def read_fabric_manager(reader: RootReader, functions: tuple[PciFunction, ...]) -> FabricManager:
    """The host's Fabric Manager; the default (not installed) on a host without NVSwitches."""
    if not any(nvswitch.is_switch(f) for f in functions):
        return FabricManager()
    unit = nvswitch.MANAGER_UNIT
    # `systemctl mask` links the unit in etc/systemd/system to /dev/null: it never starts.
    masked = reader.readlink(f"{UNITS}/{unit}") == _MASKED
    installed = not masked and any(
        reader.read(f"{directory}/{unit}") is not None for directory in nvswitch.MANAGER_UNIT_DIRS
    )
    # `systemctl enable` links it into the *.wants directory of its WantedBy= target.
    wants = reader.listdir(UNITS, _is_wants)
    enabled = not masked and any(
        reader.listdir(f"{UNITS}/{w}", lambda name: name == unit) for w in wants
    )
    return FabricManager(installed=installed, enabled=enabled, mode=_mode(reader))


def _is_wants(name: str) -> bool:
    return name.endswith(".wants")


def _mode(reader: RootReader) -> int | None:
    path = nvswitch.MANAGER_CONFIG
    text = reader.read(path)
    if text is None:
        return None
    try:
        return nvswitch.parse_config(text).mode
    except ValueError as err:
        fail(
            "bad-value",
            path,
            str(err),
            "set FABRIC_MODE to 0 (full passthrough), 1 (shared NVSwitch) or 2 (vGPU), "
            "then discover again",
        )
