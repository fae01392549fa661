"""IOMMU groups that lie: a split judged by the ports' ACS while `pcie_acs_override` is on.

The override makes the kernel put devices into groups of their own that the hardware does
not keep apart: below a root or switch downstream port without ACS, a device's requests
to a peer go straight to it, past the IOMMU. So while it is on (this boot or the next,
`HostFacts.acs_overrides`), every plan says that the groups are not the
isolation, and a split that sends devices below one such port to different places (the
host and a VM, or two VMs) is refused: the guest could read and write the other side's
memory. The isolation domains are the groups the kernel would make without the override:
everything below the topmost port on a device's path that does not isolate.

`pvegpu check` runs the same rule on the host as it is (`check_findings`): devices on
vfio-pci and devices on a host driver in one domain.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import VFIO_DRIVER
from pvegpu.model.facts import HostFacts, PciFunction
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.model.ports import PortAcs, PortType, upstream_bridges
from pvegpu.pci import PciAddress
from pvegpu.values import value_class

HOST = "the host"
OTHER_GUEST = "a guest it is passed to now (vfio-pci)"


def _fix(domain: Domain) -> str:
    return (
        f"keep the devices below {domain.top_name} together (all in one VM's pool, or all "
        "on the host), or move the GPU to a slot behind a port with ACS"
    )


@value_class
@attrs.frozen(eq=False, repr=False)
class Domain:
    """Devices that can reach each other below ports without ACS: the subtree of `top`."""

    top: PciAddress
    """A root port (its subtree), or a switch's upstream port: a downstream port without
    ACS forwards its devices' requests to every other port of its switch."""
    top_name: str
    """`switch upstream port 0000:01:00.0`, for messages."""
    ports: tuple[PortAcs, ...]
    """The ports without ACS that make it one domain."""
    members: tuple[PciFunction, ...]
    """Its non-bridge functions, in address order."""

    @property
    def cause(self) -> str:
        return ", ".join(p.describe for p in self.ports)


@value_class
@attrs.frozen(eq=False, repr=False)
class Conflict:
    """A domain whose devices go to different places."""

    domain: Domain
    places: tuple[tuple[PciFunction, str], ...]
    """Each device of the domain that has a place, and that place, in address order."""

    def summary(self) -> str:
        return "; ".join(f"{f.address} ({f.vendor_device}) -> {place}" for f, place in self.places)


def isolation_domains(facts: HostFacts) -> tuple[Domain, ...]:
    """The domains of the non-bridge functions below ports that do not isolate: each
    function in the one of the topmost such port on its path (the group the hardware
    makes, which the override splits)."""
    ports = {p.address: p for p in facts.acs_ports}
    if not ports:
        return ()
    # Where a port without ACS lets its devices reach: its switch for a downstream port
    # (the upstream port above it), else its own subtree.
    reach: dict[PciAddress, PciAddress] = {}
    for port in ports.values():
        if port.isolates is not False:
            continue
        reach[port.address] = port.address
        bridge = facts.function(port.address)
        above = upstream_bridges(bridge) if bridge is not None else ()
        if port.port_type is PortType.DOWNSTREAM and above:
            reach[port.address] = above[-1]
    causes: dict[PciAddress, set[PciAddress]] = defaultdict(set)
    for culprit, top in reach.items():
        causes[top].add(culprit)
    members: dict[PciAddress, list[PciFunction]] = defaultdict(list)
    for function in facts.functions:
        if function.is_bridge:
            continue
        # The topmost domain on its path: a device below a port without ACS inside a
        # switch whose downstream port has none either is the switch's.
        found = next((a for a in upstream_bridges(function) if a in causes), None)
        if found is not None:
            members[found].append(function)
    return tuple(
        Domain(
            top,
            ports[top].name if top in ports else f"bridge {top}",
            tuple(ports[a] for a in sorted(causes[top])),
            tuple(sorted(found)),
        )
        for top, found in sorted(members.items())
    )


def conflicts(facts: HostFacts, place: Callable[[PciFunction], str | None]) -> Iterator[Conflict]:
    """Each domain whose devices have more than one place (`place`: None for a device
    that goes nowhere that matters, such as one with no driver the plan leaves alone)."""
    for domain in isolation_domains(facts):
        placed = tuple((f, where) for f in domain.members if (where := place(f)) is not None)
        if len({where for _, where in placed}) > 1:
            yield Conflict(domain, placed)


def _pool_places(pools: Sequence[Pool]) -> dict[PciAddress, str]:
    places: dict[PciAddress, str] = {}
    for pool in pools:
        if pool.kind is not PoolKind.VFIO:
            continue
        guest = f"VM {pool.vm.vmid}" if pool.vm is not None else "a VM"
        for function in pool.functions:
            places[function.address] = f"{guest} (pool {pool.name!r})"
    return places


def _now(function: PciFunction) -> str:
    """Where a function the plan leaves alone is: on vfio-pci for some guest, or the host's."""
    return OTHER_GUEST if function.driver == VFIO_DRIVER else HOST


def acs_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """The plan's refusals: a split across a port without ACS while the override is on."""
    settings = facts.acs_overrides
    places = _pool_places(pools)
    if not settings or not places:
        return
    where = " and ".join(s.where for s in settings)
    for conflict in conflicts(facts, lambda f: places.get(f.address) or _now(f)):
        if not any(f.address in places for f, _ in conflict.places):
            continue  # the plan moves none of them: nothing it could be refused for
        yield Diagnostic.error(
            "acs-override-split",
            str(conflict.domain.top),
            f"pcie_acs_override is on ({where}) and the devices below "
            f"{conflict.domain.top_name} can reach each other's memory whatever their "
            f"IOMMU groups say ({conflict.domain.cause}); the plan sends them to different "
            "places: "
            f"{conflict.summary()}",
            _fix(conflict.domain),
        )


def multifunction_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """Functions of one device the plan sends to different places while the override is
    on: its `multifunction` part splits them into groups, and only the device's own ACS,
    which discovery does not read, keeps them apart. SR-IOV virtual functions are
    excluded: they are isolated by design, which is what SR-IOV is for."""
    settings = facts.acs_overrides
    places = _pool_places(pools)
    if not settings or not places:
        return
    said: set[str] = set()
    for address in sorted(places):
        slot = address.slot
        if slot in said:
            continue
        mates = [
            f
            for f in facts.slot_functions(address)
            if not f.is_bridge and not f.is_virtual_function
        ]
        apart = {f.address: places.get(f.address, HOST) for f in mates}
        if len(set(apart.values())) > 1:
            said.add(slot)
            where = "; ".join(f"{a} -> {p}" for a, p in sorted(apart.items()))
            yield Diagnostic(
                Severity.WARNING,
                "acs-override-multifunction",
                slot,
                "pcie_acs_override is on and the plan splits the functions of one device "
                f"({where}): nothing but the device's own ACS, which pvegpu does not read, "
                "keeps them apart; unless its vendor documents them as isolated, drop the "
                "override's `multifunction` so they share a group and move together",
            )


def acs_findings(facts: HostFacts) -> Iterator[Diagnostic]:
    """What every plan and `pvegpu check` says while the override is on."""
    for setting in facts.acs_overrides:
        yield Diagnostic(
            Severity.WARNING,
            "acs-override",
            setting.source,
            f"pcie_acs_override={setting.value} is on in {setting.where}: the kernel "
            "splits IOMMU groups the hardware does not isolate, so a group is not proof "
            "that a guest cannot reach another device's memory; pvegpu judges splits by the "
            "ACS of the ports above the GPUs instead (" + _ports_summary(facts.acs_ports) + ")",
        )
    for port in facts.acs_ports:
        if port.isolates is None:
            yield Diagnostic(
                Severity.WARNING,
                "acs-unknown",
                str(port.address),
                f"cannot tell whether {port.describe} isolates the devices below it, so "
                "splits below it are not checked: run `pvegpu` as root on the host (or "
                "snapshot it as root) so the 4 KiB configuration space can be read",
            )


def _ports_summary(ports: tuple[PortAcs, ...]) -> str:
    if not ports:
        return "no bridge above a GPU was read"
    without = [str(p.address) for p in ports if p.isolates is False]
    unknown = [str(p.address) for p in ports if p.isolates is None]
    parts = [f"ports above the GPUs without ACS: {', '.join(without) or 'none'}"]
    if unknown:
        parts.append(f"not readable: {', '.join(unknown)}")
    return "; ".join(parts)


def check_findings(facts: HostFacts) -> Iterator[Diagnostic]:
    """`pvegpu check`: the refusal's rule on the drivers the devices have now."""
    settings = facts.acs_overrides
    if not settings:
        return

    def place(function: PciFunction) -> str | None:
        if function.driver is None:
            return None
        return "a VM (vfio-pci)" if function.driver == VFIO_DRIVER else HOST

    for conflict in conflicts(facts, place):
        yield Diagnostic(
            Severity.ERROR,
            "acs-override-split",
            str(conflict.domain.top),
            f"pcie_acs_override is on and the devices below {conflict.domain.top_name} "
            f"can reach each other's memory ({conflict.domain.cause}), yet they are split now: "
            f"{conflict.summary()}; {_fix(conflict.domain)}",
        )
