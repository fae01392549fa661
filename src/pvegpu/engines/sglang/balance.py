"""SGLang's own rule for a pool whose GPUs differ in memory: refused unless told otherwise.

At start every SGLang rank compares the least free memory of any rank with its own and
stops when it is less than 90% of it ("The memory capacity is unbalanced"): a 48 GB card
beside a 24 GB one never starts. The variable that makes it only log this is the
release's (`versions.RULES.balance`); the spec sets it in `environment`. pvegpu judges
the GPUs' total memory (hardware.py), the most their free memory can be: unequal totals
fail the same test at start. With the variable set the pool is served, and the warning
says what it costs: the smallest GPU bounds every GPU's KV cache (`serving/pool_gpus.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.diagnostic import Severity
from pvegpu.engines.sglang import versions
from pvegpu.engines.sglang.versions import MemoryBalance
from pvegpu.model.facts import GPU
from pvegpu.serving.checks import Checks
from pvegpu.serving.pool_gpus import GIB, largest, pool_models, smallest

DEFAULT_RATIO = 0.9
"""The ratio of a release the table has no row for (a version that is not a number)."""


def check_memory_balance(checks: Checks, version: str, gpus: Sequence[GPU]) -> None:
    """Refuse the pool (`sglang-memory-unbalanced`) when its GPUs' memory differs more
    than `version` tolerates and the spec does not set the release's variable; warn
    (`sglang-memory-unbalanced-allowed`) when it does."""
    models = pool_models(gpus)
    low, high = smallest(models), largest(models)
    if len(gpus) < 2 or low is None or high is None or low.memory is None:
        return  # one GPU, one size, or a size pvegpu does not know (serving-gpus-mixed)
    rules = versions.RULES
    rule = rules.balance_for(version)
    ratio = rule.ratio if rule is not None else DEFAULT_RATIO
    if high.memory is None or low.memory >= high.memory * ratio:
        return
    environment = dict(checks.spec.environment)
    sizes = " and ".join(f"{m.name} ({(m.memory or 0) / GIB:.1f} GiB)" for m in models)
    if rule is not None and environment.get(rule.variable, "").lower() in rule.off:
        checks.finding(
            Severity.WARNING,
            "sglang-memory-unbalanced-allowed",
            f"SGLang {version} refuses to start one tensor-parallel group over {sizes}; "
            f"{rule.variable}={environment[rule.variable]} makes it start and only log it. "
            f"It sizes every GPU's KV cache by the least free memory of any, so {low.name} "
            f"bounds the server and {(high.memory - low.memory) / GIB:.1f} GiB of each "
            f"{high.name} stays unused",
        )
        return
    checks.problem(
        "sglang-memory-unbalanced",
        f"pool {checks.pool.name} puts {sizes} in one tensor-parallel group: SGLang "
        f"{version} stops at start when a GPU's free memory is less than {ratio:.0%} of "
        'another\'s ("The memory capacity is unbalanced")' + _said(environment, rule, version),
        _fix(rule, rules.balance),
    )


def _said(environment: dict[str, str], rule: MemoryBalance | None, version: str) -> str:
    """What the spec's environment sets that does not let this release start: the
    release's own variable with a value that keeps the check, or another release's."""
    if rule is not None and rule.variable in environment:
        return f"; the spec's {rule.variable}={environment[rule.variable]} keeps it on ({rule.why})"
    others = [r for r in versions.RULES.balance if r is not rule and r.variable in environment]
    if others:
        read = f"{version} reads {rule.variable}" if rule is not None else "this release"
        return (
            f"; the spec sets {others[0].variable}, which SGLang {others[0].versions} reads, "
            f"not {read}"
        )
    return ""


def _fix(rule: MemoryBalance | None, rows: Sequence[MemoryBalance]) -> str:
    if rule is not None:
        settings = f'environment = {{ {rule.variable} = "{rule.value}" }}'
    else:
        settings = " or ".join(
            f'environment = {{ {r.variable} = "{r.value}" }} (SGLang {r.versions})' for r in rows
        )
    return (
        "serve from GPUs of one memory size (a pool per model), or let SGLang start anyway "
        f"with {settings} in the serving table; the smallest GPU then bounds every GPU's "
        "KV cache"
    )
