"""Whether the PCIe ports above a device isolate it: Access Control Services (ACS).

IOMMU groups are the kernel's view of isolation. With `pcie_acs_override` on the kernel
command line the kernel splits groups the hardware does not isolate, so the groups no
longer say which devices can reach each other's memory; the ports' own ACS capability
does. Discovery reads it from each port's configuration space (`pvegpu.host.acs`); the
planner judges a split against it (`pvegpu.planning.acs`). Whether the override is on,
this boot or the next, is `HostFacts.acs_overrides` (`override_settings`). No I/O here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

import attrs

from pvegpu.model.bootconfig import BootConfig, kernel_params
from pvegpu.pci import PciAddress
from pvegpu.values import value_class, value_repr


class PortType(StrEnum):
    """What kind of PCI Express function a bridge is (its PCIe capability says)."""

    ROOT_PORT = "root-port"
    UPSTREAM = "upstream-port"
    DOWNSTREAM = "downstream-port"
    PCIE_TO_PCI = "pcie-to-pci-bridge"
    PCI_TO_PCIE = "pci-to-pcie-bridge"
    OTHER = "other"
    """An endpoint or root complex function with a bridge class: no port of a link."""

    @property
    def label(self) -> str:
        return _LABELS[self]


PORT_TYPES = {
    0x4: PortType.ROOT_PORT,
    0x5: PortType.UPSTREAM,
    0x6: PortType.DOWNSTREAM,
    0x7: PortType.PCIE_TO_PCI,
    0x8: PortType.PCI_TO_PCIE,
}
"""The Device/Port Type field of the PCI Express capability (bits 7:4 of its flags) of
each port kind; any other value is `PortType.OTHER`."""

_LABELS = {
    PortType.ROOT_PORT: "root port",
    PortType.UPSTREAM: "switch upstream port",
    PortType.DOWNSTREAM: "switch downstream port",
    PortType.PCIE_TO_PCI: "PCIe-to-PCI bridge",
    PortType.PCI_TO_PCIE: "PCI-to-PCIe bridge",
    PortType.OTHER: "PCIe function of a bridge class",
}


class AcsState(StrEnum):
    """What a port's configuration space says about its ACS."""

    ENABLED = "enabled"
    """The ACS capability, with source validation, request and completion redirect and
    upstream forwarding on wherever the port has them: what the kernel sets up, and
    what it asks of a port to keep the groups below it apart."""
    DISABLED = "disabled"
    """The ACS capability, with one of those controls off: peer requests below the port
    are not redirected up to the IOMMU."""
    ABSENT = "absent"
    """The extended capability list was read and holds no ACS capability."""
    NO_EXTENDED_SPACE = "no-extended-space"
    """`config` is 256 bytes: the port has no readable extended configuration space."""
    HEADER_ONLY = "header-only"
    """`config` is 64 bytes: what a read without root gives."""


ACS_CAPABILITY = 0x000D
"""The PCIe extended capability id of Access Control Services."""


@value_repr
@attrs.frozen(order=True, repr=False)
class PortAcs:
    """A bridge above a GPU (root port, switch port) and its ACS as discovery read it."""

    address: PciAddress
    acs: AcsState
    port_type: PortType | None = None
    """From its PCI Express capability; None: not PCIe, or not readable (64 bytes)."""

    @property
    def isolates(self) -> bool | None:
        """Does the port keep the devices below it from reaching each other directly?
        None: its configuration space does not say (read without root, or no extended
        space where a PCIe port should have one).

        As the kernel judges a path: a switch upstream port forwards everything up to its
        own downstream ports and is not asked for ACS; a bridge to or from conventional
        PCI never isolates (a shared bus has no ACS); root and downstream ports need it."""
        if self.port_type is PortType.UPSTREAM:
            return True
        if self.port_type in (PortType.PCIE_TO_PCI, PortType.PCI_TO_PCIE):
            return False
        if self.acs is AcsState.ENABLED:
            return True
        if self.acs in (AcsState.DISABLED, AcsState.ABSENT):
            return False
        return None

    @property
    def name(self) -> str:
        """`switch downstream port 0000:82:08.0`, for messages."""
        kind = self.port_type.label if self.port_type is not None else "bridge"
        return f"{kind} {self.address}"

    @property
    def describe(self) -> str:
        """`switch downstream port 0000:82:08.0 (no ACS capability)`, for messages."""
        return f"{self.name} ({_STATE_WORDS[self.acs]})"


_STATE_WORDS = {
    AcsState.ENABLED: "ACS on",
    AcsState.DISABLED: "ACS present but its redirect controls are off",
    AcsState.ABSENT: "no ACS capability",
    AcsState.NO_EXTENDED_SPACE: "its config is 256 bytes: no extended configuration space",
    AcsState.HEADER_ONLY: "its config read gave 64 bytes: discovery did not run as root",
}


OVERRIDE_PARAM = "pcie_acs_override"


@value_class
@attrs.frozen(eq=False, repr=False)
class OverrideSetting:
    """A kernel command line that turns `pcie_acs_override` on."""

    source: str
    """The file, relative to the root: proc/cmdline, etc/kernel/cmdline, etc/default/grub."""
    where: str
    """For messages: `this boot's /proc/cmdline`, `the next boot's /etc/kernel/cmdline`."""
    value: str


def override_settings(cmdline: str, boot: BootConfig) -> tuple[OverrideSetting, ...]:
    """Where `pcie_acs_override` is on: this boot's command line, then each of the next
    boot's; empty when none sets it."""
    lines = [("proc/cmdline", "this boot's /proc/cmdline", cmdline)]
    lines += [(c.source, f"the next boot's {c.where}", c.value) for c in boot.cmdlines]
    found = []
    for source, where, text in lines:
        values = [v for k, v in kernel_params(text) if k == OVERRIDE_PARAM]
        if values:
            found.append(OverrideSetting(source, where, values[-1]))  # the last one wins
    return tuple(found)


class InSysfs(Protocol):
    """A device with a directory under sys/devices (`model.facts.PciFunction`)."""

    @property
    def sysfs_path(self) -> str: ...


def upstream_bridges(function: InSysfs) -> tuple[PciAddress, ...]:
    """The bridges between the root bus and `function`, top first, from its real path
    (`sys/devices/pci0000:80/0000:80:01.1/0000:81:00.0/0000:82:00.0` -> 80:01.1, 81:00.0)."""
    names = function.sysfs_path.split("/")[3:-1]
    found = []
    for name in names:
        try:
            found.append(PciAddress.parse(name))
        except ValueError:
            continue  # not a function directory (none on a real tree; kept out, not guessed)
    return tuple(found)
