"""One value for everything pvegpu says is wrong or worth knowing: a `Diagnostic`.

A refusal (the spec cannot be read, the plan cannot be carried out) and a finding (the
reviewer should know this; `pvegpu check` found this on the live host) say the same
things: how much it matters, a stable code, the exact file, device or spec path, what is
wrong and what happens if it is ignored, and a line the admin can act on. So they are one
type, told apart by `severity`: a refusal is an error (`PvegpuError` holds errors only),
a plan's finding is info or a warning, and `pvegpu check` reports errors as findings of
the live host. This module sits at the bottom of the layers so that every stage, the
errors included, can make one.
"""

from __future__ import annotations

from enum import StrEnum

import attrs

from pvegpu.values import value_class


class Severity(StrEnum):
    """How much a diagnostic matters; its value is what every output prints."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    """A refusal (an error pvegpu raises holds these only), or what `pvegpu check` found
    broken on the live host. A plan's findings never hold one, since what would stop a
    plan refuses it (`PlanError`) instead."""


@value_class
@attrs.frozen(eq=False, repr=False)
class Diagnostic:
    """One thing that is wrong or worth knowing, said so that the user can act on it
    without reading code."""

    severity: Severity
    code: str
    """Stable, kebab-case identifier (`gpu-in-two-pools`); tests and automation key on it."""
    subject: str
    """The exact file, device, pool or spec path it is about."""
    message: str
    """What is wrong and what happens if it is ignored."""
    fix: str = ""
    """A line the user can act on or paste; empty when there is nothing to suggest."""
    line: int | None = None
    """The spec file's line that sets `subject` (a spec path), where the loader found it
    (spec/lines.py); None for every other subject."""
    reboot_first: bool = False
    """A plan's finding: the plan holds only until the next boot, so the runbook reboots
    after the split and plans again there, and starts no container before
    (rendering/review/apply_steps)."""

    @classmethod
    def error(
        cls, code: str, subject: str, message: str, fix: str = "", line: int | None = None
    ) -> Diagnostic:
        """A refusal's diagnostic (what a `PvegpuError` holds)."""
        return cls(Severity.ERROR, code, subject, message, fix, line)

    def __str__(self) -> str:
        """How the CLI prints it: `subject (line N): message [code]`, then the fix."""
        where = self.subject if self.line is None else f"{self.subject} (line {self.line})"
        text = f"{where}: {self.message} [{self.code}]"
        return f"{text}\n  fix: {self.fix}" if self.fix else text

    def document(self) -> dict[str, str]:
        """Its JSON form as a finding, in `plan --json` (one node or a cluster), `check
        --json` and MANIFEST.json. The fix appears only when there is one, so a finding
        without one reads as it always has. (A refusal's JSON is the CLI's own document,
        with the line: cli/__init__.py's `refusal_document`.)"""
        document = {
            "severity": str(self.severity),
            "code": self.code,
            "subject": self.subject,
            "message": self.message,
        }
        if self.fix:
            document["fix"] = self.fix
        return document
