"""The SGLang service's environment: every engine's (`engines.common.environment`:
the runtime's visible devices, P2P, the spec's own variables checked), plus SGLang's version
quirks and the variables a release retired."""

from __future__ import annotations

from collections.abc import Collection

from pvegpu.engines.common import environment
from pvegpu.engines.sglang import versions
from pvegpu.engines.sglang.versions import When
from pvegpu.model.decision import P2PDecision
from pvegpu.serving.checks import Checks
from pvegpu.vendors import ComputeRuntime


def service_environment(
    checks: Checks,
    version: str,
    holds: Collection[When],
    runtime: ComputeRuntime,
    p2p: P2PDecision,
    indices: tuple[int, ...],
) -> tuple[tuple[str, str], ...]:
    """The unit's Environment=: what pvegpu derives, then the spec's own variables."""

    def retired(name: str) -> tuple[str, str] | None:
        rule = versions.RULES.retired_in(name, version)
        if rule is None:
            return None
        return rule.code, f"{name} was removed in SGLang {rule.since}; {version} ignores it"

    return environment.service_environment(
        checks,
        runtime,
        p2p,
        indices,
        # Version quirks (SGLANG_ENABLE_SPEC_V2, SGLANG_AUTO_NUMA_BIND) come from the table.
        derived=((r.name, r.value) for r in versions.RULES.environment_for(version, holds)),
        retired=retired,
    )


def retired_variable(name: str, version: str) -> str | None:
    """Why an old unit's variable `name` is deliberately not carried to `version`, or None."""
    why = environment.retired_variable(name)
    if why is not None:
        return why
    retired = versions.RULES.retired_in(name, version)
    if retired is not None:
        return f"removed in SGLang {retired.since}; {version} ignores it"
    return None
