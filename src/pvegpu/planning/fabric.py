"""An HGX/DGX board's NVLink fabric: which NVSwitches move with a pool, and which splits
of the board are refused.

The board: sysfs says nothing about which GPU an NVSwitch's NVLinks reach (no link, no
attribute; the topology is Fabric Manager's own table), and on an HGX baseboard every
NVSwitch connects every GPU. So every NVSwitch of the host (`HostFacts.nvswitches`) and
every GPU of an SXM model (`vendors.nvswitch.SXM_GPUS`) is one board. Sharing a PCIe
root complex or NUMA node says nothing: the board spans both sockets.

Fabric Manager programs the NVSwitches from the one OS that has them. In its full
passthrough mode that OS must have every GPU too: either the host keeps the whole board,
or one VM gets all of it, NVSwitches included, and runs Fabric Manager itself. Only its
shared NVSwitch mode (`FABRIC_MODE=1` on the host) hands GPUs of one board to several
guests, in the partitions it defines, while the NVSwitches stay with it. Anything else
(some GPUs in a VM, the rest on the host or in another VM; the GPUs in a VM without the
NVSwitches) leaves CUDA failing to initialize on those GPUs, so plan() refuses it, and
`pvegpu check` applies the same rule (`board_conflict`) to the drivers bound now.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import VFIO_DRIVER
from pvegpu.model.facts import GPU, HostFacts, PciFunction
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.pci import PciAddress
from pvegpu.values import value_class
from pvegpu.vendors import nvswitch
from pvegpu.wording import plural

HOST = "the host"
_SHARED_FIX = (
    f"or run Fabric Manager in shared NVSwitch mode (FABRIC_MODE={nvswitch.MODE_SHARED} in "
    f"/{nvswitch.MANAGER_CONFIG}, then systemctl restart {nvswitch.MANAGER_UNIT}) and give "
    "each VM the GPUs of one of its partitions"
)


def _switches(n: int) -> str:
    return f"{n} NVSwitch{'' if n == 1 else 'es'}"


@value_class
@attrs.frozen(eq=False, repr=False)
class Board:
    """The host's NVSwitches and the GPUs they connect."""

    switches: tuple[PciFunction, ...]
    gpus: tuple[GPU, ...]
    shared: bool
    """The host's Fabric Manager is configured for shared NVSwitch multitenancy."""

    @property
    def addresses(self) -> frozenset[PciAddress]:
        return frozenset(g.address for g in self.gpus)


def board(facts: HostFacts) -> Board | None:
    """The host's board; None on a host without NVSwitches or without an SXM GPU."""
    # Asked once per pool: the last host's answer is kept, by identity (the facts are
    # immutable and held here, so the id cannot be reused), or planning scanned every
    # GPU and PCI function per pool.
    if _LAST_BOARD and _LAST_BOARD[0][0] is facts:
        return _LAST_BOARD[0][1]
    gpus = tuple(g for g in facts.gpus if nvswitch.is_sxm_gpu(g.function))
    switches = facts.nvswitches if gpus else ()
    found = None
    if switches and gpus:
        found = Board(switches, gpus, facts.fabric_manager.mode == nvswitch.MODE_SHARED)
    _LAST_BOARD[:] = [(facts, found)]
    return found


_LAST_BOARD: list[tuple[HostFacts, Board | None]] = []


def board_switches(
    facts: HostFacts, kind: PoolKind, gpus: Sequence[GPU]
) -> tuple[PciFunction, ...]:
    """The NVSwitches that go with a pool: all of them when it is a vfio pool that takes
    every GPU of the board (full passthrough), none otherwise (in shared mode they stay
    with the host's Fabric Manager whatever the pool takes)."""
    found = board(facts)
    if found is None or found.shared or kind is not PoolKind.VFIO:
        return ()
    if not found.addresses <= {g.address for g in gpus}:
        return ()
    return found.switches


def switch_functions(
    facts: HostFacts, switches: Sequence[PciFunction], where: str, problems: list[Diagnostic]
) -> tuple[PciFunction, ...]:
    """The NVSwitches and their IOMMU groups' other non-bridge members: vfio-pci takes
    groups. A group holding anything but NVSwitches would take a host device along."""
    if not facts.iommu.enabled:
        return tuple(switches)  # no-iommu refuses the pool already
    members: dict[PciAddress, PciFunction] = {}
    for switch in switches:
        group = facts.group(switch.iommu_group) if switch.iommu_group is not None else None
        if group is None:
            problems.append(
                Diagnostic.error(
                    "nvswitch-without-iommu-group",
                    str(switch.address),
                    "this NVSwitch must go to the VM with the board's GPUs, and it has no "
                    "IOMMU group",
                    "enable the IOMMU (VT-d / AMD-Vi) in firmware and on the kernel command "
                    "line, then discover again",
                )
            )
            continue
        for address in group.members:
            function = facts.function(address)
            if function is None or function.is_bridge:
                continue
            if not nvswitch.is_switch(function):
                problems.append(
                    Diagnostic.error(
                        "foreign-device-in-group",
                        str(switch.address),
                        f"IOMMU group {group.id} of this NVSwitch also holds {address} "
                        f"({function.vendor_device}, class {function.pci_class:#08x}); "
                        f"passing the board through to {where} would take it from the host",
                        "check the firmware's ACS setting for the board's PCIe switches",
                    )
                )
            members[address] = function
    return tuple(members[a] for a in sorted(members))


@value_class
@attrs.frozen(eq=False, repr=False)
class Conflict:
    """A split of the board: where each of its GPUs and NVSwitches goes."""

    places: tuple[tuple[str, tuple[PciFunction, ...]], ...]
    """By place (a pool's VM, the host), its functions in address order."""
    board: Board

    def summary(self) -> str:
        parts = []
        for place, functions in self.places:
            gpus = [f for f in functions if not nvswitch.is_switch(f)]
            switches = [f for f in functions if nvswitch.is_switch(f)]
            what = [
                f"{count} ({', '.join(str(f.address) for f in items)})"
                for items, count in (
                    (gpus, plural(len(gpus), "GPU")),
                    (switches, _switches(len(switches))),
                )
                if items
            ]
            parts.append(f"{' and '.join(what)} on {place}")
        return "; ".join(parts)


def board_conflict(facts: HostFacts, place: Callable[[PciFunction], str | None]) -> Conflict | None:
    """The board split across places (`place` of a function: where it goes; None: not
    known, left out), unless Fabric Manager's shared mode allows it. One rule for the
    plan (where the pools put them) and `check` (where the drivers have them now)."""
    found = board(facts)
    if found is None or found.shared:
        return None
    by_place: dict[str, list[PciFunction]] = {}
    for function in sorted((*(g.function for g in found.gpus), *found.switches)):
        where = place(function)
        if where is not None:
            by_place.setdefault(where, []).append(function)
    if len(by_place) < 2:
        return None
    places = tuple((p, tuple(fs)) for p, fs in sorted(by_place.items()))
    return Conflict(places, found)


def fabric_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """The board split between the host and VMs, or between VMs, without shared mode."""
    conflict = board_conflict(facts, _plan_place(pools))
    if conflict is None:
        return
    found = conflict.board
    yield Diagnostic.error(
        "nvswitch-board-split",
        ", ".join(p for p, _ in conflict.places if p != HOST),
        f"splits the NVSwitch board: {conflict.summary()}. Every one of the "
        f"{_switches(len(found.switches))} connects all "
        f"{plural(len(found.gpus), 'GPU')}, and Fabric Manager in full passthrough mode "
        "programs them from the one OS that has them all; GPUs without it fail CUDA "
        "initialization",
        f"give all {plural(len(found.gpus), 'GPU')} of the board to one VM pool (its "
        "NVSwitches go with them), or keep the whole board on the host, " + _SHARED_FIX,
    )


def _plan_place(pools: Iterable[Pool]) -> Callable[[PciFunction], str | None]:
    where: dict[PciAddress, str] = {}
    for pool in pools:
        if pool.kind is not PoolKind.VFIO:
            continue
        name = f"pool {pool.name!r}" + (f" (VM {pool.vm.vmid})" if pool.vm else "")
        for function in pool.functions:
            where[function.address] = name
    return lambda function: where.get(function.address, HOST)


def fabric_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """What the reviewer must do about Fabric Manager for the plan's pools."""
    found = board(facts)
    yield from _unknown_models(facts, pools)
    if found is None:
        return
    manager = facts.fabric_manager
    unit = nvswitch.MANAGER_UNIT
    for pool in pools:
        on_board = [g for g in pool.gpus if g.address in found.addresses]
        if not on_board:
            continue
        subject = pool.name
        if pool.nvswitches:
            guest = f"VM {pool.vm.vmid}" if pool.vm is not None else "the VM"
            host = (
                f"; on the host the runbook stops and disables it before the split ({unit} "
                "holds the NVSwitches and would fail at every boot without them): after a "
                f"revert, systemctl enable --now {unit}"
                if manager.installed or manager.enabled
                else ""
            )
            yield Diagnostic(
                Severity.WARNING,
                "fabric-manager-in-guest",
                subject,
                f"{guest} gets the whole NVSwitch board ({plural(len(on_board), 'GPU')} and "
                f"{_switches(len(pool.nvswitches))}, full passthrough): install "
                f"{nvswitch.MANAGER_PACKAGE} of the guest driver's exact version in it and "
                "enable "
                f"{unit} there, or CUDA in the guest fails with 'system not yet "
                f"initialized'{host}",
            )
        elif found.shared and pool.kind is PoolKind.VFIO:
            yield Diagnostic(
                Severity.WARNING,
                "fabric-shared-partition",
                subject,
                f"Fabric Manager on the host runs in shared NVSwitch mode and keeps the "
                f"NVSwitches: the pool's GPUs ({', '.join(str(g.address) for g in on_board)}) "
                "must be exactly one of its partitions, activated before the VM starts"
                + ("" if manager.enabled else f"; enable it: systemctl enable --now {unit}"),
            )
        elif pool.kind is PoolKind.LXC and not manager.enabled:
            yield Diagnostic(
                Severity.WARNING,
                "fabric-manager-not-enabled",
                subject,
                f"the pool's GPUs are on an NVSwitch board and {unit} is not enabled on the "
                "host: CUDA fails with 'system not yet initialized' until it runs; install "
                f"{nvswitch.MANAGER_PACKAGE} of the host driver's exact version and "
                f"systemctl enable --now {unit}",
            )


def _unknown_models(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """A GPU of the board's vendor that pvegpu does not know as an SXM model, on a host
    with NVSwitches: it is taken to be off the board, which only the admin can confirm."""
    if not facts.nvswitches:
        return
    for pool in pools:
        for gpu in pool.gpus:
            if gpu.function.vendor == nvswitch.PCI_VENDOR and not nvswitch.is_sxm_gpu(gpu.function):
                yield Diagnostic(
                    Severity.WARNING,
                    "nvswitch-unknown-gpu-model",
                    str(gpu.address),
                    f"this host has NVSwitches and {gpu.vendor_device} is not a GPU model "
                    "pvegpu knows on an NVSwitch board, so the plan treats it as off the "
                    "board; if it is an SXM module of the board, give the whole board to one "
                    "VM or keep it on the host",
                )


def check_findings(facts: HostFacts) -> Iterator[Diagnostic]:
    """`pvegpu check`: the board's rule on the drivers bound now."""

    def place(function: PciFunction) -> str | None:
        if function.driver is None:
            return None
        return "a VM (vfio-pci)" if function.driver == VFIO_DRIVER else HOST

    found = board(facts)
    if (
        found is not None
        and facts.fabric_manager.enabled
        and all(s.driver == VFIO_DRIVER for s in found.switches)
    ):
        yield Diagnostic(
            Severity.ERROR,
            "fabric-manager-without-nvswitches",
            nvswitch.MANAGER_UNIT,
            "is enabled on the host while every NVSwitch is on vfio-pci: it fails at every "
            f"boot; systemctl disable --now {nvswitch.MANAGER_UNIT}",
        )
    conflict = board_conflict(facts, place)
    if conflict is not None:
        yield Diagnostic(
            Severity.ERROR,
            "nvswitch-board-split",
            ", ".join(str(s.address) for s in conflict.board.switches),
            f"the NVSwitch board is split now: {conflict.summary()}; Fabric Manager cannot "
            "program a board that is not in one OS: give it whole to one VM or to the host, "
            + _SHARED_FIX,
        )
