"""The problems and findings of one pool's server, collected before any is raised."""

from __future__ import annotations

import re

from pvegpu.errors import Problem
from pvegpu.host.facts import HostFacts
from pvegpu.host.paths import root_relative
from pvegpu.planning.plan import Finding, Plan, Pool, Severity
from pvegpu.spec.schema import ServingSpec

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


class Checks:
    """Collects every problem of one pool's server before raising, like plan() does."""

    def __init__(self, plan_or_facts: Plan | HostFacts, pool: Pool) -> None:
        if pool.serving is None:
            raise ValueError(f"pool {pool.name} has no serving spec")
        self.pool = pool
        self.spec: ServingSpec = pool.serving
        if isinstance(plan_or_facts, Plan):
            self.facts = plan_or_facts.facts
            self.pools = plan_or_facts.pools
            names = [p.name for p in plan_or_facts.spec.pools]
            index = names.index(pool.name) if pool.name in names else None
        else:
            self.facts, self.pools, index = plan_or_facts, (pool,), None
        self.where = (
            f"pools[{index}].lxc.serving" if index is not None else f"pool {pool.name} serving"
        )
        self.plan_problems: list[Problem] = []
        self.render_problems: list[Problem] = []
        self.findings: list[Finding] = []

    def problem(self, code: str, message: str, fix: str = "", subject: str | None = None) -> None:
        self.plan_problems.append(Problem(code, subject or self.where, message, fix))

    def finding(self, severity: Severity, code: str, message: str) -> None:
        self.findings.append(Finding(severity, code, f"pool {self.pool.name}", message))

    def path(self, field: str, value: str) -> str | None:
        try:
            return root_relative(value)
        except ValueError as err:
            self.problem("serving-invalid-path", f"{field}: {err}", "give a path under the root")
            return None

    def printable(self, what: str, value: str) -> None:
        if _UNPRINTABLE.search(value):
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
