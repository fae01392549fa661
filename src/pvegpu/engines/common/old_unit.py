"""A server's unit as systemd runs it in the container now: the patch base of the rendered
unit, its other copies, and the drop-ins that set what the rendered unit decides.

Every engine's: the unit is the spec's `unit` whatever runs in it, and the drop-in lines
the bundle switches off are those that set what any rendered unit decides (`dropins`)."""

from __future__ import annotations

import posixpath

import attrs

from pvegpu.diagnostic import Severity
from pvegpu.engines.common.dropins import Dropin, effective_dropins, judge_dropins
from pvegpu.model.decision import DropinChange
from pvegpu.model.facts import ConfigFile
from pvegpu.model.paths import SYSTEM_UNIT_PATH, UNIT_DIR
from pvegpu.serving.checks import Checks
from pvegpu.serving.container import ContainerRootfs
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


def unit_base(checks: Checks, vmid: int, rootfs: ContainerRootfs) -> OldUnit:
    """The unit as systemd sees it in the container now; other copies and drop-ins."""
    name = f"{checks.spec.unit}.service"
    if rootfs.path is None:
        return OldUnit(None, (), (), (), unread=True)
    path = rootfs.path
    authoritative = f"{path}/{UNIT_DIR}/{name}"
    base = checks.facts.file(authoritative)
    loaded = next(
        (f for d in SYSTEM_UNIT_PATH if (f := checks.facts.file(f"{path}/{d}/{name}"))), None
    )
    inside = {
        f.path[len(path) + 1 :]: f for f in checks.facts.files if f.path.startswith(path + "/")
    }
    dropins = effective_dropins(checks.facts.files, path, checks.spec.unit)
    changes, problems = judge_dropins(dropins, inside, checks.spec.unit, vmid, f"ct:{vmid}")
    checks.add(problems)
    copies = []
    dropin_paths = {f"{path}/{d.path}" for d in dropins}
    for file in checks.facts.files:
        if not file.path.startswith(path + "/") or file.path == authoritative:
            continue
        if file.path not in dropin_paths and posixpath.basename(file.path) == name:
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
    running = (loaded.content, *(d.text for d in dropins)) if loaded is not None else ()
    return OldUnit(base, running, dropins, changes, unread=False)


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
