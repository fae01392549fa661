"""The service's environment: the CUDA ordinals of the pool's GPUs, P2P, version quirks."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from pvegpu.host.facts import GPU
from pvegpu.planning.plan import Severity
from pvegpu.serving import versions
from pvegpu.serving.checks import Checks
from pvegpu.serving.decision import P2PDecision
from pvegpu.serving.versions import When
from pvegpu.spec.rules import ENV_NAME

P2P_ENV = "NCCL_P2P_DISABLE"
FORBIDDEN_ENV = {
    "NCCL_SHM_DISABLE": "with P2P off NCCL needs shared memory; without both it falls "
    "back to sockets between GPUs of one host",
}

# `$NAME` / `${NAME}`: what a shell would expand and Environment= does not.
_VARIABLE_REFERENCE = re.compile(r"\$\{?[A-Za-z_]")


def visible_indices(container_gpus: Iterable[GPU], pool_gpus: Iterable[GPU]) -> tuple[int, ...]:
    """CUDA ordinals of `pool_gpus` with CUDA_DEVICE_ORDER=PCI_BUS_ID in the container.

    CUDA numbers the GPUs a process can open in PCI bus order, so an ordinal is a GPU's
    position among the container's GPUs sorted by address.
    """
    order = sorted({g.address for g in container_gpus})
    missing = [g.address for g in pool_gpus if g.address not in order]
    if missing:
        raise ValueError(f"{', '.join(map(str, missing))} not among the container's GPUs")
    return tuple(order.index(g.address) for g in sorted(pool_gpus, key=lambda g: g.address))


def container_indices(checks: Checks, vmid: int) -> tuple[int, ...]:
    """`visible_indices` of the pool's GPUs among all the GPUs container `vmid` gets."""
    # What the container gets: the GPUs of every pool that hands GPUs to this vmid.
    container = [
        g for p in checks.pools if p.lxc is not None and p.lxc.vmid == vmid for g in p.gpus
    ]
    return visible_indices([*container, *checks.pool.gpus], checks.pool.gpus)


def service_environment(
    checks: Checks,
    version: str,
    holds: Collection[When],
    p2p: P2PDecision,
    indices: tuple[int, ...],
) -> tuple[tuple[str, str], ...]:
    """The unit's Environment=: what pvegpu derives, then the spec's own variables."""
    spec = checks.spec
    env: list[tuple[str, str]] = [
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ("CUDA_VISIBLE_DEVICES", ",".join(map(str, indices))),
    ]
    if not p2p.enabled:
        env.append((P2P_ENV, "1"))
    # Version quirks (SGLANG_ENABLE_SPEC_V2, SGLANG_AUTO_NUMA_BIND) come from the table.
    env.extend((rule.name, rule.value) for rule in versions.RULES.environment_for(version, holds))
    ours = dict(env)
    for name, value in spec.environment:
        where = f"{checks.where}.environment.{name}"
        if not ENV_NAME.fullmatch(name):
            checks.problem(
                "serving-env-invalid-name",
                f"{name!r} is not an environment variable name",
                "use letters, digits and '_', not starting with a digit",
                subject=where,
            )
            continue
        checks.printable(f"environment {name}", value)
        if _VARIABLE_REFERENCE.search(value):
            # A PATH copied from a shell profile (`...:$PATH`) reaches SGLang as literal
            # text, not as the directories it names in a shell.
            checks.finding(
                Severity.WARNING,
                "serving-env-unexpanded",
                f"environment {name}={value}: systemd's Environment= does not expand "
                "`$VAR`, so the server gets these characters as written; spell the value out",
            )
        if name in FORBIDDEN_ENV:
            checks.problem(
                "serving-env-forbidden",
                f"{name} must not be set: {FORBIDDEN_ENV[name]}",
                f"remove {name}",
                subject=where,
            )
            continue
        retired = versions.RULES.retired_in(name, version)
        if retired is not None:
            checks.finding(
                Severity.WARNING,
                retired.code,
                f"{name} was removed in SGLang {retired.since}; {version} ignores it",
            )
        if name in ours:
            if ours[name] != value:
                checks.problem(
                    "serving-env-conflict",
                    f"{name}={value} contradicts {name}={ours[name]}, which pvegpu derives "
                    "from the facts and the spec",
                    "remove it" + (" and use p2p / p2p_reason" if name == P2P_ENV else ""),
                    subject=where,
                )
            continue
        env.append((name, value))
    return tuple(env)


def retired_variable(name: str, version: str) -> str | None:
    """Why an old unit's variable `name` is deliberately not carried to `version`, or None."""
    if name in FORBIDDEN_ENV:
        return f"pvegpu refuses it: {FORBIDDEN_ENV[name]}"
    if name == P2P_ENV:
        return "pvegpu decides P2P from the facts (p2p / p2p_reason override it)"
    retired = versions.RULES.retired_in(name, version)
    if retired is not None:
        return f"removed in SGLang {retired.since}; {version} ignores it"
    return None
