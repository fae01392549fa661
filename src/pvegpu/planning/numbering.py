"""The device numbers GPUs get at the next boot with the split, decided once.

Drivers number the GPUs they hold at probe time, in the order they probe them: NVIDIA's
driver from 0 (`/dev/nvidiaN`), the DRM core every DRM device of the host (a BMC's
display too) from 0 for card nodes and from 128 for render nodes. That order is often
PCI order, but not always: root buses probed in firmware order (an A100 board whose
first GPU in PCI order is minor 2), drivers loaded one after another (an iGPU on i915
numbered after a dGPU on amdgpu), a firmware framebuffer that keeps card0. Today's
numbers show this host's order, and a boot with the same hardware probes in it again,
so the next boot numbers the GPUs that stay in today's order. It numbers them from the
family's first number, except that card nodes start where something that is no GPU
(simpledrm, efifb) keeps the first ones: a gap below the lowest card node that the
render nodes do not share (a GPU moved away since the boot frees both). A GPU coming
back to its driver (on vfio-pci now, so without a number) is put in PCI order among the
others. Right after a runtime split the GPUs that stay keep their numbers; after the
next boot a driver numbers only the GPUs it still gets, so a line naming `/dev/nvidia4`
(or `renderD130`) can point at nothing, or at another guest's GPU. Every reference by
number is judged against this (`planning/references.py`), a pool's container is given
the numbers its GPUs will have (`planning/guests.py`), and another container's lines are
rewritten to them (`planning/host_guests.py`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.plan import Pool, PoolKind
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
    # Lookups by node and by GPU, built once: a plan asks per pool and per GPU, and a scan
    # of every change each time made it quadratic on a host of many GPUs.
    _by_node: dict[tuple[int, int], NodeChange] = attrs.field(
        init=False, eq=False, repr=False, factory=dict
    )
    _by_gpu: dict[PciAddress, tuple[NodeChange, ...]] = attrs.field(
        init=False, eq=False, repr=False, factory=dict
    )

    def __attrs_post_init__(self) -> None:
        by_gpu: dict[PciAddress, list[NodeChange]] = defaultdict(list)
        for change in self.changes:
            self._by_node[(change.major, change.before)] = change
            by_gpu[change.gpu].append(change)
        self._by_gpu.update((gpu, tuple(found)) for gpu, found in by_gpu.items())

    @property
    def by_node(self) -> dict[tuple[int, int], NodeChange]:
        return self._by_node

    def minors(self, major: int) -> dict[int, int]:
        """Minor now -> minor after the boot, for the nodes on `major` that change."""
        return {c.before: c.after for c in self.changes if c.major == major}

    def of(self, gpu: PciAddress) -> tuple[NodeChange, ...]:
        return self._by_gpu.get(gpu, ())

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
        first = _first_number(facts, kind)
        for number, gpu in enumerate(_probe_order(gpus, kind, major), start=first):
            before = _number(gpu, kind, major)
            if before is not None and before != number:
                changes.append(NodeChange(major, before, number, gpu.address))
    return Renumbering(tuple(sorted(changes, key=lambda c: (c.major, c.before))))


def _first_number(facts: HostFacts, kind: str) -> int:
    """The number the family's first GPU gets at the next boot (module docstring)."""
    if kind == "render":
        return RENDER_BASE
    if kind != "card":
        return 0
    cards = [g.drm_card for g in facts.gpus if g.drm_card is not None]
    renders = [g.drm_render for g in facts.gpus if g.drm_render is not None]
    if not cards:
        return 0
    freed = min(renders) - RENDER_BASE if renders else 0
    return max(0, min(cards) - freed)


def _probe_order(gpus: list[GPU], kind: str, major: int) -> list[GPU]:
    """The GPUs in the order the driver will probe them: today's numbers' order, each GPU
    without a number today (coming back from vfio-pci) placed by PCI address before the
    first numbered GPU at a higher address."""
    numbered = sorted(
        (g for g in gpus if _number(g, kind, major) is not None),
        key=lambda g: (_number(g, kind, major), g.address),
    )
    order: list[GPU] = []
    for gpu in sorted(
        (g for g in gpus if _number(g, kind, major) is None), key=lambda g: g.address
    ):
        while numbered and numbered[0].address < gpu.address:
            order.append(numbered.pop(0))
        order.append(gpu)
    return order + numbered


def _number(gpu: GPU, kind: str, major: int) -> int | None:
    """The GPU's number today in the family (`kind` on `major`); None without one."""
    if kind == "render":
        return gpu.drm_render
    if kind == "card":
        return gpu.drm_card
    vendor = gpu.vendor
    nodes = vendor.nodes if vendor is not None else None
    return gpu.node_minor if nodes is not None and nodes.major == major else None


def renumbered(minors: Iterable[int], change: Mapping[int, int]) -> tuple[int, ...]:
    """Minors as they will be: each changed one replaced, the others kept."""
    return tuple(change.get(m, m) for m in minors)


def renumbering_findings(pools: Sequence[Pool], numbers: Renumbering) -> Iterator[Diagnostic]:
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
            yield Diagnostic(
                Severity.WARNING,
                "minors-change-at-reboot",
                pool.name,
                f"after a reboot with the split {_numberer(pool)} numbers the GPUs it keeps "
                "afresh (in the order it probes them, today's), so the "
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
