"""What `pvegpu plan` and `pvegpu render` print first: the plan in a few lines, in colour
on a terminal.

The reviewer reads the top of the output: the node, its pools, what moves (GPUs changing
driver, guests gaining or losing GPUs), how many files change, then every warning in full.
Infos are counted and named by code only, with a pointer to where their text is
(SUMMARY.md, `--json`): on a big host they run to dozens of lines, and the three warnings
that matter must not scroll away under them. The diffs (plan) or the files written
(render) follow.

Colour: `--color=always|never` decides; `auto` (the default) colours only a terminal, and
never when NO_COLOR is set to anything (no-color.org) or TERM is `dumb`; FORCE_COLOR set
to anything colours a pipe too (CI logs). The command line wins over both variables, as
no-color.org asks.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TextIO

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import VFIO_DRIVER
from pvegpu.model.artifact import Artifact
from pvegpu.model.plan import Plan
from pvegpu.model.references import Holder
from pvegpu.pci import PciAddress
from pvegpu.rendering.review import ChangeKind, changed_files, layout, moving_functions
from pvegpu.wording import plural

COLOR_CHOICES = ("auto", "always", "never")

_RESET = "\033[0m"
_STYLES = {
    "error": "\033[31m",
    "warning": "\033[33m",
    "info": "\033[2m",
    "added": "\033[32m",
    "removed": "\033[31m",
    "hunk": "\033[36m",
    "heading": "\033[1m",
}

_KIND_WORDS = {
    ChangeKind.PATCHED: "patched",
    ChangeKind.NEW: "new",
    ChangeKind.REPLACED: "replaced whole",
    ChangeKind.UNREAD: "not read",
    ChangeKind.UNCHANGED: "unchanged",
}
_SEVERITY_ORDER = (Severity.ERROR, Severity.WARNING, Severity.INFO)


def colour_wanted(choice: str, stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether output to `stream` gets colour: `choice` is `--color`'s value."""
    env = os.environ if environ is None else environ
    if choice != "auto":
        return choice == "always"
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    if env.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


class Painter:
    """Wraps text in a style's escape codes, or leaves it as it is when colour is off."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self, style: str, text: str) -> str:
        if not self.on or not text:
            return text
        return f"{_STYLES[style]}{text}{_RESET}"

    def diff(self, text: str) -> str:
        """A unified diff with added lines green, removed red, hunk headers cyan."""
        if not self.on:
            return text
        out = []
        for line in text.splitlines(keepends=True):
            body = line.rstrip("\n")
            end = line[len(body) :]
            if line.startswith(("+++", "---")):
                out.append(self("heading", body) + end)
            elif line.startswith("+"):
                out.append(self("added", body) + end)
            elif line.startswith("-"):
                out.append(self("removed", body) + end)
            elif line.startswith("@@"):
                out.append(self("hunk", body) + end)
            else:
                out.append(line)
        return "".join(out)


def _addresses(addresses: Iterable[PciAddress]) -> str:
    return ", ".join(a.short for a in sorted(addresses))


def file_counts(plan: Plan, artifacts: Sequence[Artifact]) -> str:
    """`9 files (2 patched, 7 new)`: the installed files by how each changes."""
    files = changed_files(plan, artifacts)
    kinds = Counter(f.kind for f in files)
    parts = [f"{kinds[k]} {word}" for k, word in _KIND_WORDS.items() if kinds[k]]
    return f"{plural(len(files), 'file')} ({', '.join(parts)})" if parts else "no files"


def _pool_lines(plan: Plan) -> list[str]:
    lines = []
    for pool in plan.pools:
        kind = f"vGPU {pool.vgpu_type}" if pool.vgpu_type is not None else str(pool.kind)
        guests = [f"CT {pool.lxc.vmid}"] if pool.lxc is not None else []
        if pool.vm is not None:
            guests.append(f"VM {pool.vm.vmid}")
        elif pool.lxc is None:
            guests.append("no VM yet")
        gpus = _addresses(g.address for g in pool.gpus)
        lines.append(f"  pool {pool.name}: {kind} on {pool.driver}, {', '.join(guests)}: {gpus}")
    return lines


def _driver_moves(plan: Plan) -> list[str]:
    """`81:00.0, 91:00.0 nvidia -> vfio-pci`, per pair of drivers."""
    moves: dict[tuple[str, str], list[PciAddress]] = {}
    for row in layout(plan):
        if row.driver_changes:
            moves.setdefault((row.driver_before, row.driver_after), []).append(row.address)
    # Only those that change driver: a mate already on vfio-pci (a VM's) stays where it is.
    mates = sum(1 for m in moving_functions(plan) if m.driver_before != VFIO_DRIVER)
    lines = [
        f"  moves: {_addresses(addresses)} {before} -> {after}"
        for (before, after), addresses in moves.items()
    ]
    if lines and mates:
        lines[-1] += f" (and {plural(mates, 'function')} of their IOMMU groups)"
    return lines


def _guest_moves(plan: Plan) -> list[str]:
    """Guests whose GPUs change: what their configs reach now (discovered references in
    the main section) against what the plan leaves them."""
    before: dict[tuple[str, int], set[PciAddress]] = {}
    for ref in plan.facts.references:
        if ref.holder is Holder.HOST or ref.vmid is None or not ref.main_section or ref.inert:
            continue
        kind = "CT" if ref.holder is Holder.CONTAINER else "VM"
        before.setdefault((kind, ref.vmid), set()).update(ref.gpus)
    after: dict[tuple[str, int], set[PciAddress]] = {}
    for pool in plan.pools:
        gpus = {g.address for g in pool.gpus}
        if pool.lxc is not None:
            after.setdefault(("CT", pool.lxc.vmid), set()).update(gpus)
        if pool.vm is not None:
            after.setdefault(("VM", pool.vm.vmid), set()).update(gpus)
    pooled = {g.address for p in plan.pools for g in p.gpus}
    for released in plan.containers_losing_gpus:
        guest = ("CT", released.vmid)
        if guest not in after:
            # Its lines for GPUs the plan gives to a pool go; the rest stay.
            after[guest] = before.get(guest, set()) - pooled
    lines = []
    for guest in sorted(after):
        had, gets = before.get(guest, set()), after[guest]
        if had == gets:
            continue
        parts = []
        if gets - had:
            parts.append(f"gains {_addresses(gets - had)}")
        if had - gets:
            parts.append(f"loses {_addresses(had - gets)}")
        if had & gets:
            parts.append(f"keeps {_addresses(had & gets)}")
        lines.append(f"  {guest[0]} {guest[1]}: {'; '.join(parts)}")
    return lines


def finding_counts(findings: Sequence[Diagnostic]) -> str:
    """`1 warning, 5 info`; `no findings`."""
    counts = Counter(f.severity for f in findings)
    parts = [
        f"{counts[s]} {s}" + ("s" if s is not Severity.INFO and counts[s] != 1 else "")
        for s in _SEVERITY_ORDER
        if counts[s]
    ]
    return ", ".join(parts) if parts else "no findings"


def finding_lines(
    findings: Sequence[Diagnostic], paint: Painter, *, pointer: str, indent: str = "  "
) -> list[str]:
    """Errors and warnings in full, most severe first; infos counted, with their codes
    and `pointer` (where their text is)."""
    lines = []
    for severity in (Severity.ERROR, Severity.WARNING):
        for f in findings:
            if f.severity is severity:
                text = f"{indent}{f.severity}: {f.subject}: {f.message} [{f.code}]"
                lines.append(paint(str(severity), text))
                if f.fix:
                    lines.append(paint(str(severity), f"{indent}  fix: {f.fix}"))
    infos = Counter(f.code for f in findings if f.severity is Severity.INFO)
    if infos:
        codes = ", ".join(code if n == 1 else f"{code} ({n})" for code, n in infos.items())
        total = sum(infos.values())
        lines.append(paint("info", f"{indent}{total} info: {codes} ({pointer})"))
    return lines


def plan_brief(
    plan: Plan, artifacts: Sequence[Artifact], paint: Painter, *, pointer: str
) -> list[str]:
    """The summary's lines: node and file counts, pools, what moves, the findings."""
    head = f"plan for node {plan.facts.node}: {file_counts(plan, artifacts)}"
    lines = [paint("heading", head), *_pool_lines(plan)]
    lines += _driver_moves(plan) + _guest_moves(plan)
    lines.append(paint("heading", f"findings: {finding_counts(plan.findings)}"))
    lines += finding_lines(plan.findings, paint, pointer=pointer)
    return lines
