"""Deciding every serving pool's server: the planner's last step, for any engine.

`decided_servings(plan)` decides each serving pool's engine-neutral context once
(`pvegpu.serving.context`), then asks the engine registry (`pvegpu.engines.engine_for`) for
the engine each pool's spec names and puts the server it decides on `Pool.serving` and its
findings on the plan, or raises listing every pool's problems; renderers only read what
it decided. What no engine may decide differently (two servers in one unit) is checked
here, across pools.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.engines import ENGINE_NAMES, engine_for, spec_engines
from pvegpu.errors import PlanError, PvegpuError, SpecError
from pvegpu.model.decision import DecidedServer
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan, Pool
from pvegpu.model.schema import DEFAULT_ENGINE, ServingSpec
from pvegpu.serving.checks import refusal_of
from pvegpu.serving.context import serving_context
from pvegpu.spec.engine_keys import engine_key_problems


def decide_serving(
    facts: HostFacts,
    pools: Sequence[Pool],
    pool: Pool,
    spec: ServingSpec,
    where: str,
    *,
    after_reboot: bool = False,
) -> tuple[DecidedServer, tuple[Diagnostic, ...]] | PvegpuError:
    """The server `spec` asks of `pool`, decided by the engine it names, or an error.
    `after_reboot`: the runbook reboots before the server starts again."""
    engine = engine_for(spec.engine)
    if engine is None:
        # The loader accepts only known engines (spec/engine_keys.py); a spec built in code
        # may name any, and nothing else about its server can be judged without one.
        return PlanError.one(
            "serving-engine-unknown",
            where,
            f"engine {spec.engine!r}: pvegpu renders "
            + ", ".join(f'"{name}"' for name in ENGINE_NAMES)
            + " servers only",
            f'set engine = "{DEFAULT_ENGINE}"',
        )
    # A spec built in code, which the loader never saw, may hold engine keys of the wrong
    # type or range: the engine decides without them (it reads its keys as they are, and
    # a negative size would reach the decided server), and their refusals join its own.
    keys = _engine_key_problems(spec, where)
    if keys:
        refused = {p.subject.rpartition(".")[2] for p in keys}
        kept = tuple((name, value) for name, value in spec.engine_keys if name not in refused)
        spec = attrs.evolve(spec, engine_keys=kept)
    # The neutral decisions first, the same for any engine; the engine adds its own.
    context = serving_context(
        facts,
        pools,
        pool,
        spec,
        where,
        engine_label=engine.label,
        stages=engine.tp_groups(spec, len(pool.gpus)),
        after_reboot=after_reboot,
    )
    if isinstance(context, PvegpuError):
        return context
    decided = engine.decide(context, spec)
    if not keys:
        return decided
    # As the engine's own value checks once held them: after the context's and the rules'
    # problems, plan errors before an option table's (a SpecError's).
    if isinstance(decided, SpecError):
        return PlanError([*keys, *decided.problems])
    return PlanError([*(decided.problems if isinstance(decided, PvegpuError) else ()), *keys])


def _engine_key_problems(spec: ServingSpec, where: str) -> list[Diagnostic]:
    """The loader's judgement of the engine keys (spec/engine_keys.py), again for a spec
    built in code, which the loader never saw: each named by its key, like the schema
    keys' rules an engine checks (`check_rules`)."""
    if not spec.engine_keys:
        return []
    return [
        attrs.evolve(
            problem,
            code=problem.code if problem.code in _KEPT else "serving-invalid-value",
            message=f"{problem.subject.rpartition('.')[2]}: {problem.message}",
        )
        for problem in engine_key_problems(spec, where, spec_engines())
    ]


_KEPT = ("spec-engine-key", "spec-unknown-key")
"""What a key of the wrong engine, or of none, is called wherever the spec was made."""


def decided_servings(plan: Plan) -> Plan:
    """`plan` with every serving pool's server on `Pool.serving` and their findings added.

    The planner's last step. Raises PlanError listing every pool's problems (SpecError
    when only an engine's option tables object), like plan() itself.
    """
    pools, findings, refusals = _servings(plan, None)
    refused = _refusal(refusals)
    if refused is not None:
        raise refused
    return attrs.evolve(plan, pools=tuple(pools), findings=(*plan.findings, *findings))


def serving_problems(plan: Plan, judged: Collection[str]) -> list[Diagnostic]:
    """The problems of the servers of the pools named in `judged`, for a plan already
    refused for others: the refusal then holds them too, instead of a later run finding
    them (a pool's server whose GPUs or container were refused is not judged: its TP,
    memory and container checks would only repeat that refusal)."""
    refused = _refusal(_servings(plan, frozenset(judged))[2])
    return [] if refused is None else list(refused.problems)


def _servings(
    plan: Plan, judged: frozenset[str] | None
) -> tuple[list[Pool], list[Diagnostic], list[PvegpuError]]:
    """Every serving pool's server decided (those named in `judged`; None: all): the
    pools, the servers' findings and the refusals (each refused pool's, then the units'
    clash), which `_refusal` makes one."""
    specs = {p.name: (i, p) for i, p in enumerate(plan.spec.pools)}
    pools: list[Pool] = []
    findings: list[Diagnostic] = []
    built: list[DecidedServer] = []
    refusals: list[PvegpuError] = []
    # The runbook then stops at the reboot: the servers start on the next boot's driver.
    after_reboot = any(f.reboot_first for f in plan.findings)
    for pool in plan.pools:
        index, pool_spec = specs[pool.name]
        spec = pool_spec.lxc.serving if pool_spec.lxc is not None else None
        if spec is None or (judged is not None and pool.name not in judged):
            pools.append(pool)
            continue
        where = f"pools[{index}].lxc.serving"
        result = decide_serving(
            plan.facts, plan.pools, pool, spec, where, after_reboot=after_reboot
        )
        if isinstance(result, PvegpuError):
            refusals.append(result)
        else:
            serving, found = result
            built.append(serving)
            findings.extend(found)
            pools.append(attrs.evolve(pool, serving=serving))
    clashes = _unit_clashes(built)
    if clashes:
        refusals.append(PlanError(clashes))
    return pools, findings, refusals


def _refusal(refusals: Sequence[PvegpuError]) -> PvegpuError | None:
    """The pools' refusals as one: a plan error holding every pool's errors when any
    pool's server does not fit the host, else a spec error (serving/checks.py says why)."""
    plan_errors = [p for r in refusals if isinstance(r, PlanError) for p in r.problems]
    spec_errors = [p for r in refusals if not isinstance(r, PlanError) for p in r.problems]
    return refusal_of(plan_errors, spec_errors)


def _unit_clashes(built: Sequence[DecidedServer]) -> list[Diagnostic]:
    clashes: list[Diagnostic] = []
    seen: dict[tuple[int, str], str] = {}
    for serving in built:
        key = (serving.vmid, serving.unit)
        if key in seen:
            clashes.append(
                Diagnostic.error(
                    "serving-unit-clash",
                    f"ct:{serving.vmid}/{serving.unit_path}",
                    f"pools {seen[key]} and {serving.pool} both render this unit",
                    "give each server its own unit name",
                )
            )
        seen[key] = serving.pool
    return clashes
