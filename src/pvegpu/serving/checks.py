"""The problems and findings of one pool's server, collected before any is raised."""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import HostFacts
from pvegpu.model.paths import root_relative
from pvegpu.model.plan import Pool
from pvegpu.model.schema import ServingSpec
from pvegpu.spec.rules import CONTROL


class Checks:
    """Collects every problem of one pool's server before raising, like plan() does."""

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
        self.plan_problems: list[Diagnostic] = []
        self.render_problems: list[Diagnostic] = []
        self.findings: list[Diagnostic] = []

    def problem(self, code: str, message: str, fix: str = "", subject: str | None = None) -> None:
        self.plan_problems.append(Diagnostic.error(code, subject or self.where, message, fix))

    def finding(self, severity: Severity, code: str, message: str) -> None:
        self.findings.append(Diagnostic(severity, code, f"pool {self.pool.name}", message))

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
