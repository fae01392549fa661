"""CDI specs against the plan: one finding per spec whose device nodes the split takes
away or the next boot renumbers (`cdi-spec-stale`).

A CDI spec (`nvidia-ctk cdi generate`, /etc/cdi or /var/run/cdi) is a snapshot: each
named device (`nvidia.com/gpu=1`, `=GPU-<uuid>`, `=all`) is a list of device nodes by
number. Nothing regenerates it when a GPU changes driver, so after the split a device
whose node is gone fails the container that asks for it, and one whose node is
renumbered at the reboot hands over another GPU. Names by index shift too once the spec
is regenerated: the index counts only the GPUs the driver still holds. The spec is named
once, with every device and line it concerns, and the fix is to regenerate it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import HostFacts, driver_order
from pvegpu.model.plan import Pool
from pvegpu.model.references import GpuReference
from pvegpu.pci import PciAddress
from pvegpu.planning.claims import by_destination
from pvegpu.planning.numbering import Renumbering
from pvegpu.vendors.drm import node_path as drm_node_path


def cdi_findings(
    facts: HostFacts,
    refs: Sequence[GpuReference],
    owners: dict[PciAddress, Pool],
    leaving: frozenset[PciAddress],
    numbers: Renumbering,
) -> Iterator[Diagnostic]:
    """A `cdi-spec-stale` warning per spec among `refs` (the CDI references of the host)
    that names a node the split removes or the reboot renumbers."""
    by_file: dict[str, list[GpuReference]] = {}
    for ref in refs:
        by_file.setdefault(ref.path, []).append(ref)
    after = [a for a in driver_order(facts.gpus) if a not in leaving]
    for path, found in by_file.items():
        gone = [r for r in found if r.gpus and r.gpus[0] in leaving]
        moved = [r for r in found if r.gpus and r.gpus[0] not in leaving and _change(r, numbers)]
        if not gone and not moved:
            continue
        parts = []
        if gone:
            named = by_destination(
                (r.gpus[0].short, owners[r.gpus[0]]) for r in gone if r.gpus[0] in owners
            )
            parts.append(
                f"{_devices(gone)} {_verb(gone, 'hands', 'hand')} over {_nodes(gone)} of "
                f"{named} ({_lines(gone)}): after "
                "the split those nodes are gone, and a container that asks for one of these "
                "devices does not start"
            )
        if moved:
            changes = ", ".join(
                dict.fromkeys(
                    f"{r.node_path} ({r.gpus[0].short}) becomes {_after_path(r, numbers)}"
                    for r in moved
                )
            )
            parts.append(
                f"{_devices(moved)} {_verb(moved, 'names', 'name')} GPUs the split keeps by "
                "today's numbers "
                f"({_lines(moved)}), which the reboot with the split changes: {changes}; "
                "then they hand over another GPU's node, or none"
            )
        shifts = _index_shifts(found, after)
        kept = {g for r in found for g in r.gpus if g not in leaving}
        regenerate = (
            f"regenerate {path} after the split with the tool that wrote it (nothing "
            "regenerates it when a GPU changes driver)"
            + (", and again after the reboot" if any(numbers.of(g) for g in kept) else "")
        )
        if shifts:
            regenerate += (
                ". Its names by index then count only the GPUs the driver still holds: "
                f"{shifts}; change what asks for them"
            )
        yield Diagnostic(
            Severity.WARNING,
            "cdi-spec-stale",
            path,
            f"this CDI spec names GPUs by device node: {'; '.join(parts)}. Fix: {regenerate}",
        )


def _change(ref: GpuReference, numbers: Renumbering) -> bool:
    node = ref.node
    return node is not None and (node.major, node.minor) in numbers.by_node


def _after_path(ref: GpuReference, numbers: Renumbering) -> str:
    node = ref.node
    assert node is not None and node.major is not None and node.minor is not None  # _change
    after = numbers.by_node[(node.major, node.minor)].after
    path = ref.node_path or ""
    if path.startswith("/dev/dri/"):
        return drm_node_path(after)
    return path.rstrip("0123456789") + str(after)


def _devices(refs: Iterable[GpuReference]) -> str:
    names = list(dict.fromkeys(r.selector or "the spec's own edits" for r in refs))
    return f"device{'s' if len(names) > 1 else ''} {', '.join(names)}"


def _verb(refs: Iterable[GpuReference], one: str, more: str) -> str:
    return more if len({r.selector for r in refs}) > 1 else one


def _nodes(refs: Iterable[GpuReference]) -> str:
    return ", ".join(dict.fromkeys(r.node_path or str(r.node) for r in refs))


def _lines(refs: Sequence[GpuReference]) -> str:
    numbers = [r.line for r in refs if r.line is not None]
    spans: list[str] = []
    start = previous = None
    for number in sorted(set(numbers)):
        if previous is not None and number == previous + 1:
            previous = number
            continue
        if start is not None:
            spans.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = number
    if start is not None:
        spans.append(str(start) if start == previous else f"{start}-{previous}")
    return f"line{'s' if len(set(numbers)) > 1 else ''} {', '.join(spans)}"


def _index_shifts(refs: Sequence[GpuReference], after: Sequence[PciAddress]) -> str:
    """`nvidia.com/gpu=1 names 47:00.0 (today 0f:00.0)` for each device named by an index
    whose GPU changes once the spec is regenerated after the split."""
    today: dict[str, set[PciAddress]] = {}
    for ref in refs:
        name = (ref.selector or "").rpartition("=")[2]
        if name.isascii() and name.isdigit():
            today.setdefault(ref.selector or name, set()).update(ref.gpus)
    shifts = []
    for selector, gpus in today.items():
        index = int(selector.rpartition("=")[2])
        then = {after[index]} if index < len(after) else set()
        if then != gpus:
            shown = ", ".join(g.short for g in sorted(then)) or "no GPU"
            now = ", ".join(g.short for g in sorted(gpus)) or "no GPU"
            shifts.append(f"{selector} names {shown} (today {now})")
    return ", ".join(shifts)
