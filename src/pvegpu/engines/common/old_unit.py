"""A server's unit as systemd runs it in the container now: the patch base of the rendered
unit, its other copies, and the drop-ins that set what the rendered unit decides.

Every engine's: the unit is the spec's `unit` whatever runs in it, and the drop-in lines
the bundle switches off are those that set what any rendered unit decides (`dropins`)."""

from __future__ import annotations

import attrs

from pvegpu.diagnostic import Severity
from pvegpu.engines.common.dropins import Dropin, effective_dropins, judge_dropins
from pvegpu.model.container_files import container_files
from pvegpu.model.decision import DropinChange
from pvegpu.model.facts import ConfigFile
from pvegpu.model.paths import UNIT_DIR
from pvegpu.serving.checks import Checks
from pvegpu.serving.container import ContainerRootfs
from pvegpu.serving.container_units import container_units
from pvegpu.serving.unitfile import UnitFile
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class OldUnit:
    """The server's unit as systemd runs it now, and the drop-ins the bundle switches off."""

    base: ConfigFile | None
    """/etc/systemd/system/<unit>.service as read: the patch base of the rendered unit."""
    running: tuple[str, ...]
    """The unit file systemd loads (first in its search path) and its drop-ins, in order."""
    dropins: tuple[Dropin, ...]
    """Every drop-in systemd applies, as read."""
    changes: tuple[DropinChange, ...]
    unread: bool
    """Nothing of the container was read: the unit may exist; it is never taken as new."""
    base_unit: UnitFile | None = None
    """`base` as systemd reads it (its settings: the secrets it holds)."""


def unit_base(checks: Checks, vmid: int, rootfs: ContainerRootfs) -> OldUnit:
    """The unit as systemd sees it in the container now; other copies and drop-ins."""
    name = f"{checks.spec.unit}.service"
    if rootfs.path is None:
        return OldUnit(None, (), (), (), unread=True)
    path = rootfs.path
    tree = container_files(checks.facts).at(path)
    unit = container_units(checks.facts, path).named(name)
    base = unit.base
    dropins = effective_dropins(tree.files.values(), path, checks.spec.unit)
    changes, problems = judge_dropins(
        dropins, dict(tree.files), checks.spec.unit, vmid, f"ct:{vmid}"
    )
    checks.add(problems)
    copies = []
    dropin_paths = {f"{path}/{d.path}" for d in dropins}
    for file in unit.copies:
        if file.path not in dropin_paths:
            same = base is not None and file.content == base.content
            copies.append(f"/{file.path[len(path) + 1 :]}" + (" (same)" if same else ""))
    if copies:
        checks.finding(
            Severity.WARNING,
            "serving-unit-copies",
            f"other copies of {name} in container {vmid}: "
            f"{', '.join(copies)}. /{UNIT_DIR}/{name} is the one systemd runs and the one "
            "pvegpu writes; delete the others so no one edits a copy that drifts",
        )
    _report_dropins(checks, vmid, dropins, changes)
    loaded = unit.loaded
    running = (loaded.content, *(d.text for d in dropins)) if loaded is not None else ()
    units = container_units(checks.facts, path)
    parsed = units.parsed(base) if base is not None else None
    return OldUnit(base, running, dropins, changes, unread=False, base_unit=parsed)


def _report_dropins(
    checks: Checks, vmid: int, dropins: tuple[Dropin, ...], changes: tuple[DropinChange, ...]
) -> None:
    switched = {c.source for c in changes}
    for change in changes:
        where = (
            "the bundle comments those lines out (the rest of it stays) and the revert restores it"
            if change.base is not None
            else f"the bundle hides it with a copy at /{change.path} without those lines (the "
            "rest stays) and the revert removes that copy"
        )
        checks.finding(
            Severity.WARNING,
            "serving-dropin-neutralized",
            f"drop-in /{change.source} in CT {vmid} overrides what the rendered unit decides: "
            f"{', '.join(change.settings)}; {where}. Put anything of it you need in the spec "
            "(serving.extra_args, serving.environment)",
        )
    others = [d for d in dropins if d.path not in switched and d.text.strip()]
    if others:
        checks.finding(
            Severity.WARNING,
            "serving-unit-dropins",
            "drop-ins still apply on top of the rendered unit: "
            + ", ".join(f"/{d.path}" for d in others)
            + "; move what they set into the spec (environment, extra_args) and delete them",
        )
