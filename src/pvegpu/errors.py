"""Errors are values: a stable code, the exact file/device/spec path, and a fix line.

Every failure pvegpu reports is a `Diagnostic` of severity error (pvegpu/diagnostic.py).
Exceptions carry one or more of them (`problems`) so a plan can report everything wrong
with a spec at once instead of the first thing only.
"""

from __future__ import annotations

from collections.abc import Iterable

from pvegpu.diagnostic import Diagnostic, Severity


class PvegpuError(Exception):
    """Base of every error pvegpu raises on purpose. `exit_code` is what the CLI returns."""

    exit_code = 1
    partial = False
    """True when some output was already written before the failure."""

    def __init__(self, problems: Iterable[Diagnostic]) -> None:
        self.problems = tuple(problems)
        """What is wrong: errors only (a warning does not stop anything)."""
        if not self.problems:
            raise ValueError("an error needs at least one problem")
        if any(p.severity is not Severity.ERROR for p in self.problems):
            raise ValueError("an error holds only diagnostics of severity error")
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def one(cls, code: str, subject: str, message: str, fix: str = "") -> PvegpuError:
        return cls([Diagnostic.error(code, subject, message, fix)])


class DiscoveryError(PvegpuError):
    """The sysfs/procfs/etc tree under the root is broken or not what the kernel writes."""

    exit_code = 3


class SpecError(PvegpuError):
    """The split spec is malformed; subjects are spec paths like `pools[1].gpus[0]`."""

    exit_code = 4


class BundleError(PvegpuError):
    """The bundle given with `--bundle` cannot be used: missing, not a pvegpu bundle with
    apply steps, or changed after it was rendered. Like a malformed spec, it is input the
    user fixes (render again), so it shares the spec's exit code."""

    exit_code = 4


class PlanError(PvegpuError):
    """The spec is well formed but cannot be carried out on this host."""

    exit_code = 5


class RenderError(PvegpuError):
    """An artifact cannot be produced (missing base file, flag unknown to a version)."""

    exit_code = 6


class ApplyError(PvegpuError):
    """Writing, binding or rolling back on the host failed."""

    exit_code = 7
