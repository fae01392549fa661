"""The diagnostics of one pool's server, collected before any is raised.

`Checks` keeps one list of `Diagnostic`s in the order found: the errors refuse the plan,
the rest are the server's findings. An error also belongs to one of two refusals, and
that is not the diagnostic's to say (the same code and words could come from either): the
CLI's exit codes are its contract (docs/cli.md), and they tell the admin what to change.
An error the host or the spec's fit to it raises refuses the plan (`PlanError`, exit 5);
one of the installed release's option tables (the spec's command line is not one the
release takes) is a malformed spec (`SpecError`, exit 4), whatever the host. So `Checks`
records where each error came from next to the list (`add_spec_errors`), and
`refusal_of` makes the one refusal: a plan error holding every error, the plan's first,
when any refuses the plan, else a spec error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.errors import PlanError, PvegpuError, SpecError
from pvegpu.model.facts import HostFacts
from pvegpu.model.paths import root_relative
from pvegpu.model.plan import Pool
from pvegpu.model.schema import ServingSpec
from pvegpu.spec.rules import CONTROL


class Checks:
    """Collects every diagnostic of one pool's server before raising, like plan() does."""

    def __init__(
        self,
        facts: HostFacts,
        pools: Sequence[Pool],
        pool: Pool,
        spec: ServingSpec,
        where: str,
        *,
        engine_label: str,
        after_reboot: bool = False,
    ) -> None:
        self.facts = facts
        self.pools = tuple(pools)
        """Every pool of the plan: the container's CUDA indices count all that feed it."""
        self.pool = pool
        self.spec = spec
        self.where = where
        """Where in the spec the problems point: `pools[0].lxc.serving`."""
        self.after_reboot = after_reboot
        """The runbook reboots before the server starts again (a finding with
        `reboot_first`): the container meets the next boot's driver module."""
        self.engine_label = engine_label
        """`SGLang`, `vLLM`: the server as the neutral checks' messages name it (the
        engine's own `label`, which the planner hands in)."""
        self.diagnostics: list[Diagnostic] = []
        """Everything found, in order: errors refuse, the rest are the server's findings."""
        self._spec_errors_at: set[int] = set()
        """The positions in `diagnostics` of the option tables' errors (a spec error)."""

    def add(self, diagnostics: Iterable[Diagnostic]) -> None:
        """Findings, and errors that refuse the plan."""
        self.diagnostics.extend(diagnostics)

    def add_spec_errors(self, errors: Iterable[Diagnostic]) -> None:
        """Errors of the release's option tables: refused as a malformed spec."""
        for error in errors:
            self._spec_errors_at.add(len(self.diagnostics))
            self.diagnostics.append(error)

    def problem(self, code: str, message: str, fix: str = "", subject: str | None = None) -> None:
        self.add([Diagnostic.error(code, subject or self.where, message, fix)])

    def finding(self, severity: Severity, code: str, message: str, fix: str = "") -> None:
        self.add([Diagnostic(severity, code, f"pool {self.pool.name}", message, fix)])

    @property
    def findings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is not Severity.ERROR]

    @property
    def plan_errors(self) -> list[Diagnostic]:
        return [
            d
            for i, d in enumerate(self.diagnostics)
            if d.severity is Severity.ERROR and i not in self._spec_errors_at
        ]

    @property
    def spec_errors(self) -> list[Diagnostic]:
        return [d for i, d in enumerate(self.diagnostics) if i in self._spec_errors_at]

    def path(self, field: str, value: str) -> str | None:
        try:
            return root_relative(value)
        except ValueError as err:
            self.problem("serving-invalid-path", f"{field}: {err}", "give a path under the root")
            return None

    def printable(self, what: str, value: str) -> None:
        if CONTROL.search(value):
            self.problem(
                "serving-unprintable",
                f"{what} {value!r} holds a control character; systemd cannot carry it",
                "remove it",
            )
        if value == ";":
            self.problem(
                "serving-unprintable",
                f"{what}: a lone `;` separates commands in ExecStart=",
                "remove it",
            )


def refusal_of(
    plan_errors: Sequence[Diagnostic], spec_errors: Sequence[Diagnostic]
) -> PvegpuError | None:
    """The one refusal of these errors, if any: a plan error holding all of them, the
    plan's first, when the spec does not fit the host; else a spec error for the option
    tables' errors (the spec has to change, as for any spec error: exit 4, docs/cli.md)."""
    if plan_errors:
        return PlanError([*plan_errors, *spec_errors])
    if spec_errors:
        return SpecError(spec_errors)
    return None
