"""PCI addresses and CPU lists: the two small value types everything else is keyed by,
and `PciIds`, what vendors/ tells a PCI function by."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

import attrs

from pvegpu.values import value_class, value_repr

# The kernel names a function "%04x:%02x:%02x.%d": the domain has four hex digits or
# more. Domains above ffff are real: Intel VMD puts the devices behind it in 10000 and
# up, SPDK's VMD driver in 6-digit ones. pci_domain_nr() is an int, so at most 8 digits.
_FULL = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_SHORT = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


_LIMITS = {"domain": 0xFFFFFFFF, "bus": 0xFF, "device": 0x1F, "function": 0x7}


def _check_address(inst: PciAddress, attribute: attrs.Attribute[int], value: int) -> None:
    if not 0 <= value <= _LIMITS[attribute.name]:
        raise ValueError(f"PCI {attribute.name} {value:#x} out of range")


@value_repr
@attrs.frozen(order=True, repr=False)
class PciAddress:
    """A PCI function address, `dddd:bb:dd.f`, always printed lowercase like the kernel."""

    domain: int = attrs.field(validator=_check_address)
    bus: int = attrs.field(validator=_check_address)
    device: int = attrs.field(validator=_check_address)
    function: int = attrs.field(validator=_check_address)

    @classmethod
    def parse(cls, text: str) -> PciAddress:
        """Parse the kernel's full form `0000:81:00.0`; anything else is a ValueError."""
        match = _FULL.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not a PCI address (expected dddd:bb:dd.f)")
        return cls._from_groups(match.groups())

    @classmethod
    def parse_lenient(cls, text: str) -> PciAddress:
        """Also accept `81:00.0` (domain 0000), the form lspci and humans write.

        On a host with several domains `81:00.0` may name a function of each: a caller
        resolving it against a host checks `names_domain` and looks in every domain."""
        match = _SHORT.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not a PCI address (expected dddd:bb:dd.f or bb:dd.f)")
        domain, *rest = match.groups()
        return cls._from_groups((domain or "0000", *rest))

    @staticmethod
    def names_domain(text: str) -> bool:
        """Whether an address `parse_lenient` accepts says its domain (`0000:81:00.0`)."""
        return text.count(":") == 2

    @classmethod
    def _from_groups(cls, groups: Iterable[str | None]) -> PciAddress:
        domain, bus, device, function = (int(g or "0", 16) for g in groups)
        if device > 0x1F:
            raise ValueError(f"PCI device {device:#x} out of range (max 1f)")
        return cls(domain, bus, device, function)

    @property
    def slot(self) -> str:
        """The function-less form Proxmox uses for "all functions of this slot"."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}"

    @property
    def short(self) -> str:
        """`81:00.0` on domain 0000, as lspci prints it; the full address elsewhere."""
        return str(self)[5:] if self.domain == 0 else str(self)

    @property
    def bus_device_function(self) -> tuple[int, int, int]:
        """What a short address (`81:00.0`) names: the same in every domain."""
        return (self.bus, self.device, self.function)

    def with_function(self, function: int) -> PciAddress:
        return attrs.evolve(self, function=function)

    def __str__(self) -> str:
        # One format, not `slot` + function: printed for every function of a host.
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function:x}"


MAX_CPUS = 8192
"""The kernel's largest NR_CPUS: no cpulist names a CPU at or above it."""
# ASCII digits only: str.isdigit() also accepts '²' and other Unicode digits.
_CPU_RANGE = re.compile(r"([0-9]{1,5})(?:-([0-9]{1,5}))?")


def _sorted_cpus(cpus: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(cpus)))


@value_class
@attrs.frozen(eq=False, repr=False)
class CpuList:
    """A kernel cpulist (`0-31,64-95`) as a sorted tuple of CPU ids."""

    cpus: tuple[int, ...] = attrs.field(converter=_sorted_cpus)

    @classmethod
    def parse(cls, text: str) -> CpuList:
        cpus: list[int] = []
        text = text.strip()
        if not text:
            return cls(())
        for part in text.split(","):
            match = _CPU_RANGE.fullmatch(part)
            if match is None:
                raise ValueError(f"{text!r} is not a CPU list (expected e.g. 0-31,64-95)")
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) is not None else first
            if last < first:
                raise ValueError(f"{text!r} is not a CPU list: range {part} runs backwards")
            if last >= MAX_CPUS:
                # The list's numbers set the loop's length: cap them at what a kernel has.
                raise ValueError(f"{text!r} names CPU {last}; kernels have fewer than {MAX_CPUS}")
            cpus.extend(range(first, last + 1))
        return cls(cpus)

    def __str__(self) -> str:
        ranges: list[str] = []
        start = prev = None
        for cpu in (*self.cpus, None):
            if start is not None and prev is not None and (cpu is None or cpu != prev + 1):
                ranges.append(str(start) if start == prev else f"{start}-{prev}")
                start = None
            if start is None:
                start = cpu
            prev = cpu
        return ",".join(ranges)

    def __len__(self) -> int:
        return len(self.cpus)

    def __bool__(self) -> bool:
        return bool(self.cpus)


class PciIds(Protocol):
    """The ids a PCI function's config space gives, all that `vendors/` reads to tell what
    a function is (`vendor_of`, `is_switch`). Discovery's `model.facts.PciFunction` is
    one; vendors/ sits below the facts, so it names this and not that."""

    @property
    def vendor(self) -> int: ...

    @property
    def device(self) -> int: ...

    @property
    def pci_class(self) -> int: ...
