"""Deciding one pool's SGLang server from the spec and the facts.

`decide_serving` is the one factory of `SglangServing`; the engine-neutral
`serving.decide.decided_servings` calls it through the engine registry (`pvegpu.engines`)
for every pool whose spec names `engine = "sglang"`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.engines.sglang import versions
from pvegpu.engines.sglang.command import (
    extra_args,
    kv_cache_bits,
    launch_options,
    option_table,
)
from pvegpu.engines.sglang.drops import compare_services, drops_message
from pvegpu.engines.sglang.environment import P2P_ENV, service_environment
from pvegpu.engines.sglang.old_unit import OldUnit, unit_base
from pvegpu.engines.sglang.option_check import parse_command_line
from pvegpu.engines.sglang.options import OptionTable
from pvegpu.engines.sglang.unit import unit_content
from pvegpu.engines.sglang.unit_secrets import (
    default_environment_file,
    secrets_moved_message,
    unit_secrets,
)
from pvegpu.errors import PlanError, PvegpuError, SpecError
from pvegpu.model.decision import DECIDED, P2PDecision, P2PSource, SglangServing
from pvegpu.model.facts import HostFacts
from pvegpu.model.paths import UNIT_DIR
from pvegpu.model.plan import Finding, Pool, Severity
from pvegpu.model.schema import ServingSpec
from pvegpu.serving.checks import Checks
from pvegpu.serving.container import container_driver, container_rootfs, python_finding
from pvegpu.serving.fit import checked_model, memory_fit
from pvegpu.serving.numa import numa_pinning
from pvegpu.serving.p2p import decide_p2p
from pvegpu.serving.visible import container_indices
from pvegpu.spec.rules import rule_problems


def decide_serving(
    facts: HostFacts, pools: Sequence[Pool], pool: Pool, spec: ServingSpec, where: str
) -> tuple[SglangServing, tuple[Finding, ...]] | PvegpuError:
    """Decide and check the server `spec` asks of `pool`: it and its findings, or an error.

    `pools`: every pool of the plan, so the CUDA indices account for every pool that
    gives GPUs to the same container. `where`: the spec path problems point at.
    """
    checks = Checks(facts, pools, pool, spec, where)
    if pool.lxc is None:
        return PlanError.one(
            "serving-needs-lxc",
            checks.where,
            "an inference server runs in the pool's container; this pool has none",
            "serve from a pool with a [pools.lxc] table (vmid = N)",
        )
    # Where the container's files are decides which SGLang release it runs.
    rootfs = container_rootfs(checks, pool.lxc.vmid)
    python_finding(checks, pool.lxc.vmid, rootfs)
    version, table = option_table(checks, rootfs.path)
    _check_scalars(checks)
    gpus = pool.gpus
    for gpu in gpus:
        if not gpu.is_nvidia:
            checks.problem(
                "serving-gpu-not-nvidia",
                f"{gpu.address} ({gpu.vendor_device}) is not an NVIDIA GPU; SGLang's "
                "CUDA build cannot use it",
                "serve from a pool of NVIDIA GPUs",
            )
    tp = len(gpus)
    indices = container_indices(checks, pool.lxc.vmid)
    checks.printable("python", spec.python)
    checks.printable("p2p_reason", spec.p2p_reason or "")
    model = checked_model(checks, tp)
    if spec.mtp and spec.model_config is None:
        checks.problem(
            "mtp-needs-model-config",
            "mtp = true needs model_config: whether the model is hybrid (linear "
            "attention) decides the flags SGLang needs, and whether it has an MTP head "
            "decides if MTP can work at all",
            "set model_config to the model's config.json (path under the root)",
        )
    p2p = decide_p2p(checks)
    numa = numa_pinning(checks)
    extra = extra_args(checks, table)
    kv_bits = kv_cache_bits(table, extra)
    fit = memory_fit(checks, model, tp, kv_bits) if model is not None else None
    driver = container_driver(checks, pool.lxc.vmid, rootfs)
    old_unit = unit_base(checks, pool.lxc.vmid, rootfs)
    base = old_unit.base
    holds = versions.conditions(
        mtp=spec.mtp,
        hybrid=model is not None and model.is_hybrid,
        pinned=numa is not None,
    )
    options = launch_options(checks, table, version, holds, tp, p2p, extra) if table else ()
    environment = service_environment(checks, version, holds, p2p, indices)
    if table is not None and options:
        argv = [w for o in options for w in o]
        # The whole line again: catches what only shows in combination (a repeat, a
        # missing required option) and any generated flag the version lacks. What
        # extra_args alone already showed is not reported twice.
        said = {(p.code, p.message) for p in checks.render_problems}
        subject = f"{checks.where}: sglang {version}"
        problems = parse_command_line(table, argv, subject=subject).problems
        checks.render_problems.extend(p for p in problems if (p.code, p.message) not in said)
        for word in argv:
            checks.printable("command line", word)
    secrets = unit_secrets(base.content) if base is not None else ()
    environment_file = spec.environment_file
    if secrets and environment_file is None:
        environment_file = default_environment_file(spec.unit)
    if secrets and environment_file is not None:
        unit_path = f"{UNIT_DIR}/{spec.unit}.service"
        message = secrets_moved_message(secrets, unit_path, pool.lxc.vmid, environment_file)
        checks.finding(Severity.WARNING, "serving-secrets-moved", message)
    if checks.plan_problems:
        return PlanError([*checks.plan_problems, *checks.render_problems])
    if checks.render_problems:
        # The option tables' problems: the spec's command line is not one the release
        # takes. The spec has to change, as for any spec error (exit 4, docs/cli.md).
        return SpecError(checks.render_problems)
    serving = SglangServing(
        pool=pool.name,
        vmid=pool.lxc.vmid,
        version=version,
        unit=spec.unit,
        python=spec.python,
        model_path=spec.model_path,
        served_model_name=spec.served_model_name,
        host=spec.host,
        port=spec.port,
        cuda_visible_devices=indices,
        gpus=gpus,
        tp_size=tp,
        options=options,
        environment=environment,
        p2p=p2p,
        numa=numa,
        fit=fit,
        model=model,
        container_driver=driver,
        base=base,
        unit_unread=old_unit.unread,
        dropins=old_unit.changes,
        user=spec.user,
        working_directory=spec.working_directory,
        limit_nofile=spec.limit_nofile,
        environment_file=environment_file,
        _key=DECIDED,
    )
    if old_unit.running and table is not None:
        # Compared with the unit text itself, so every setting the template writes
        # counts, and the warning lands with the serving's other findings.
        _report_drops(checks, serving, old_unit, table)
    return serving, (_p2p_finding(pool, p2p), *checks.findings)


def _p2p_finding(pool: Pool, p2p: P2PDecision) -> Finding:
    """The P2P decision, first among the server's findings: the summary leads with it."""
    state = "on" if p2p.enabled else "off"
    effect = "" if p2p.enabled else f": {P2P_ENV}=1 and --disable-custom-all-reduce"
    origin = "spec override" if p2p.source is P2PSource.SPEC else "from the facts"
    return Finding(
        Severity.INFO,
        "serving-p2p",
        f"pool {pool.name}",
        f"GPU peer-to-peer {state} ({origin}: {p2p.reason}){effect}",
    )


def _report_drops(checks: Checks, serving: SglangServing, old: OldUnit, table: OptionTable) -> None:
    """Warn about what the service runs with now and will not after the change.

    Both sides as systemd sees them: the unit it loads plus its drop-ins, and the
    rendered unit plus the same drop-ins with the bundle's lines switched off.
    """
    switched = {c.source: c.content for c in serving.dropins}
    after = (unit_content(serving), *(switched.get(d.path, d.text) for d in old.dropins))
    comparison = compare_services(old.running, after, table)
    message = drops_message(comparison, serving.unit_path)
    if message is not None:
        checks.finding(Severity.WARNING, "serving-drops-settings", message)


_RULE_CODES = {"unit": "serving-invalid-unit", "python": "serving-invalid-python"}


def _check_scalars(checks: Checks) -> None:
    """The spec's value rules (spec/rules.py) for a ServingSpec that may have been built
    in code: the loader applies the same table to every spec it reads."""
    spec = checks.spec
    for problem in rule_problems(spec, checks.where):
        field = problem.subject.rpartition(".")[2]
        code = _RULE_CODES.get(field, "serving-invalid-value")
        checks.problem(code, f"{field}: {problem.message}", problem.fix, subject=problem.subject)
    if spec.served_model_name is not None and ":" in spec.served_model_name:
        checks.problem(
            "served-model-name-colon",
            f"served_model_name {spec.served_model_name!r} contains `:`, which SGLang "
            "reads as a model:adapter separator",
            f'e.g. served_model_name = "{spec.served_model_name.replace(":", "-")}"',
        )
    if spec.working_directory is not None:
        checks.printable("working_directory", spec.working_directory)
