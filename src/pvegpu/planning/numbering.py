"""The device numbers GPUs get at the next boot with the split, decided once.

Drivers number the GPUs they hold at probe time, normally in PCI order: NVIDIA's driver
from 0 (`/dev/nvidiaN`), the DRM core every DRM device of the host (a BMC's display
too) from 0 for card nodes and from 128 for render nodes. Right after a runtime split
the GPUs that stay keep their numbers; after the next boot a driver numbers only the
GPUs it still gets, so a line naming `/dev/nvidia4` (or `renderD130`) can point at
nothing, or at another guest's GPU. Every reference by number is judged against this
(`planning/references.py`), a pool's container is given the numbers its GPUs will have
(`planning/guests.py`), and another container's lines are rewritten to them
(`planning/host_guests.py`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence

import attrs

from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.plan import Finding, Pool, PoolKind, Severity
from pvegpu.pci import PciAddress
from pvegpu.values import value_class
from pvegpu.vendors.drm import DRM_MAJOR, RENDER_BASE


@value_class
@attrs.frozen(eq=False, repr=False)
class NodeChange:
    """One GPU node whose number changes at the next boot."""

    major: int
    before: int
    after: int
    gpu: PciAddress


@value_class
@attrs.frozen(eq=False, repr=False)
class Renumbering:
    """Every GPU node of the host whose number the next boot with the split changes."""

    changes: tuple[NodeChange, ...] = ()

    @property
    def by_node(self) -> dict[tuple[int, int], NodeChange]:
        return {(c.major, c.before): c for c in self.changes}

    def minors(self, major: int) -> dict[int, int]:
        """Minor now -> minor after the boot, for the nodes on `major` that change."""
        return {c.before: c.after for c in self.changes if c.major == major}

    def of(self, gpu: PciAddress) -> tuple[NodeChange, ...]:
        return tuple(c for c in self.changes if c.gpu == gpu)

    def __bool__(self) -> bool:
        return bool(self.changes)


def next_boot_numbers(
    facts: HostFacts, leaving: Iterable[PciAddress], returning: Iterable[PciAddress] = ()
) -> Renumbering:
    """The numbers after the next boot: `leaving` GPUs go to vfio-pci (their drivers no
    longer number them), `returning` ones (a container pool's) are the host driver's."""
    leaving = frozenset(leaving)
    returning = frozenset(returning)
    families: dict[tuple[int, str], list[GPU]] = defaultdict(list)
    for gpu in facts.gpus:
        if gpu.address in leaving:
            continue
        vendor = gpu.vendor
        own = vendor.nodes if vendor is not None else None
        # The vendor's own numbering: the GPUs its driver holds now, or gets back.
        on_driver = vendor is not None and (
            gpu.driver in vendor.drivers or gpu.driver == vendor.host_driver
        )
        numbered_by_vendor = own is not None and not own.drm and vendor is not None
        if numbered_by_vendor and (on_driver or gpu.address in returning):
            assert own is not None  # for mypy: numbered_by_vendor says so
            families[(own.major, "node")].append(gpu)
        # A DRM vendor's GPU given back to its driver gets DRM nodes too.
        drm_back = gpu.address in returning and own is not None and own.drm
        if gpu.drm_render is not None or drm_back:
            families[(DRM_MAJOR, "render")].append(gpu)
        if gpu.drm_card is not None or drm_back:
            families[(DRM_MAJOR, "card")].append(gpu)
    changes = []
    for (major, kind), gpus in families.items():
        first = RENDER_BASE if kind == "render" else 0
        for number, gpu in enumerate(sorted(gpus, key=lambda g: g.address), start=first):
            before = _number(gpu, kind)
            if before is not None and before != number:
                changes.append(NodeChange(major, before, number, gpu.address))
    return Renumbering(tuple(sorted(changes, key=lambda c: (c.major, c.before))))


def _number(gpu: GPU, kind: str) -> int | None:
    if kind == "render":
        return gpu.drm_render
    if kind == "card":
        return gpu.drm_card
    return gpu.node_minor


def renumbered(minors: Iterable[int], change: Mapping[int, int]) -> tuple[int, ...]:
    """Minors as they will be: each changed one replaced, the others kept."""
    return tuple(change.get(m, m) for m in minors)


def renumbering_findings(pools: Sequence[Pool], numbers: Renumbering) -> Iterator[Finding]:
    """A container pool whose GPUs' numbers change at the next boot: its config gets the
    new ones, so nothing may start it before that boot (the runbook reboots first)."""
    for pool in pools:
        if pool.kind is not PoolKind.LXC or pool.lxc is None:
            continue
        nodes = pool.lxc.nodes
        moved = [
            f"{g.address.short}: {c.before} -> {c.after}"
            for g in pool.gpus
            for c in numbers.of(g.address)
            if c.major == nodes.major and c.before in (g.container_minor, g.drm_card)
        ]
        if moved:
            yield Finding(
                Severity.WARNING,
                "minors-change-at-reboot",
                pool.name,
                f"after a reboot with the split {_numberer(pool)} numbers the GPUs it keeps "
                "afresh (probe order, normally PCI order), so the "
                f"{nodes.gpu_path.format(minor='N')} numbers of CT {pool.lxc.vmid}'s GPUs "
                f"change: {', '.join(moved)}. Its config "
                "gets the new numbers, which are right only after that reboot: the runbook "
                "reboots before starting it and then plans again, which should change nothing",
                reboot_first=True,
            )


def _numberer(pool: Pool) -> str:
    """Who numbers the pool's nodes: its vendor's driver, or the DRM core."""
    vendor = pool.gpus[0].vendor if pool.gpus else None
    if vendor is None or vendor.nodes is None or vendor.nodes.drm:
        return "the DRM core"
    return vendor.host_driver
