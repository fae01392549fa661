"""The steps of deciding a server that every engine takes the same way.

An engine's `decide_serving` decides what is its own (its release, flags, environment,
unit) and calls these for what is not: the spec's value rules, the whole command line
checked again against the release's table, the secrets the unit stops holding, the
errors it returns, the P2P finding the summary leads with, and where the runbook waits
for the server to answer.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.engines.common.unit_secrets import (
    default_environment_file,
    secrets_moved_message,
    unit_secrets,
)
from pvegpu.errors import PvegpuError
from pvegpu.model.decision import DecidedServer, P2PDecision, P2PSource
from pvegpu.model.paths import UNIT_DIR
from pvegpu.model.plan import Pool
from pvegpu.serving.checks import Checks, refusal_of
from pvegpu.serving.unitfile import UnitFile
from pvegpu.spec.rules import rule_problems

_RULE_CODES = {"unit": "serving-invalid-unit", "python": "serving-invalid-python"}


def check_rules(checks: Checks, *, kept: Collection[str] = ()) -> None:
    """The spec's value rules (spec/rules.py) for a ServingSpec that may have been built
    in code: the loader applies the same table to every spec it reads.

    A rule's problem takes the serving code of its field; `kept`: rule codes the engine
    reports as they are.
    """
    spec = checks.spec
    for problem in rule_problems(spec, checks.where):
        field = problem.subject.rpartition(".")[2]
        code = _RULE_CODES.get(field, problem.code if problem.code in kept else "")
        checks.problem(
            code or "serving-invalid-value",
            f"{field}: {problem.message}",
            problem.fix,
            subject=problem.subject,
        )


def check_whole_line(
    checks: Checks,
    argv: Sequence[str],
    subject: str,
    line_problems: Callable[[Sequence[str], str], Sequence[Diagnostic]],
) -> None:
    """Check the whole command line again (`line_problems`: the engine's checker against
    its release's table, for `subject`): catches what only shows in combination (a
    repeat, a missing required option) and any generated flag the release lacks. What
    extra_args alone already showed is not reported twice."""
    said = {(p.code, p.message) for p in checks.spec_errors}
    problems = line_problems(argv, subject)
    checks.add_spec_errors(p for p in problems if (p.code, p.message) not in said)
    for word in argv:
        checks.printable("command line", word)


def environment_file(checks: Checks, vmid: int, base: UnitFile | None) -> str | None:
    """The unit's EnvironmentFile: the spec's, else where the current unit's secrets move
    to when it holds any (warned as `serving-secrets-moved`, names only)."""
    spec = checks.spec
    secrets = unit_secrets(base) if base is not None else ()
    path = spec.environment_file
    if secrets and path is None:
        path = default_environment_file(spec.unit)
    if secrets and path is not None:
        unit_path = f"{UNIT_DIR}/{spec.unit}.service"
        message = secrets_moved_message(secrets, unit_path, vmid, path)
        checks.finding(Severity.WARNING, "serving-secrets-moved", message)
    return path


def refusal(checks: Checks) -> PvegpuError | None:
    """The error the server's problems make, if any: a plan error when the spec does not
    fit the host, else a spec error for the option tables' problems."""
    return refusal_of(checks.plan_errors, checks.spec_errors)


def p2p_finding(pool: Pool, p2p: P2PDecision, switched_off: str) -> Diagnostic:
    """The P2P decision, first among the server's findings: the summary leads with it.
    `switched_off`: what the unit sets when P2P is off."""
    state = "on" if p2p.enabled else "off"
    effect = "" if p2p.enabled else f": {switched_off}"
    origin = "spec override" if p2p.source is P2PSource.SPEC else "from the facts"
    return Diagnostic(
        Severity.INFO,
        "serving-p2p",
        f"pool {pool.name}",
        f"GPU peer-to-peer {state} ({origin}: {p2p.reason}){effect}",
    )


def health_url(serving: DecidedServer) -> str:
    """Where the runbook waits for the server: both engines' HTTP servers answer GET
    /health with 200 once the model is loaded. A wildcard listen address is reachable on
    loopback; a specific one only on itself."""
    host = serving.host
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{serving.port}/health"
