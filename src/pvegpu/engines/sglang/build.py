"""Deciding one pool's SGLang server from the spec and the facts.

`decide_serving` is the one factory of `SglangServing`; the planner's
`planning.decide.decided_servings` calls it through the engine registry (`pvegpu.engines`)
for every pool whose spec names `engine = "sglang"`, with the engine-neutral decisions
already made (`serving.context.ServingContext`).
"""

from __future__ import annotations

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.engines.common.config_file import extra_args_config
from pvegpu.engines.common.deprecations import CODE as DEPRECATED_CODE
from pvegpu.engines.common.drops import drops_message
from pvegpu.engines.common.environment import P2P_ENV
from pvegpu.engines.common.old_unit import OldUnit, unit_base
from pvegpu.engines.common.server import (
    check_rules,
    check_whole_line,
    environment_file,
    p2p_finding,
    refusal,
)
from pvegpu.engines.sglang import versions
from pvegpu.engines.sglang.balance import check_memory_balance
from pvegpu.engines.sglang.command import (
    extra_args,
    kv_cache_bits,
    launch_options,
    option_table,
)
from pvegpu.engines.sglang.decision import SglangServing
from pvegpu.engines.sglang.drops import compare_services, deprecated_flags
from pvegpu.engines.sglang.environment import service_environment
from pvegpu.engines.sglang.option_check import parse_command_line
from pvegpu.engines.sglang.options import OptionTable
from pvegpu.engines.sglang.parallel import SIZE_OPTIONS, check_parallel_sizes
from pvegpu.engines.sglang.unit import unit_content
from pvegpu.errors import PvegpuError
from pvegpu.model.decision import DECIDED
from pvegpu.model.schema import ServingSpec
from pvegpu.serving.checks import Checks
from pvegpu.serving.context import ServingContext
from pvegpu.serving.fit import memory_fit


def decide_serving(
    context: ServingContext, spec: ServingSpec
) -> tuple[SglangServing, tuple[Diagnostic, ...]] | PvegpuError:
    """Decide and check the server `spec` asks of the pool: it and its findings, or an error.

    `context`: the engine-neutral decisions (`serving.context.serving_context`), made
    before this runs; what is SGLang's own (its release, flags, unit) is decided here.
    """
    checks = context.checks(spec)
    pool = context.pool
    # Where the container's files are decides which SGLang release it runs.
    version, table = option_table(checks, context.rootfs.path)
    _check_scalars(checks)
    gpus = context.gpus
    tp = context.tp
    indices = context.visible_devices
    model = context.model
    if spec.mtp and spec.model_config is None:
        checks.problem(
            "mtp-needs-model-config",
            "mtp = true needs model_config: whether the model is hybrid (linear "
            "attention) decides the flags SGLang needs, and whether it has an MTP head "
            "decides if MTP can work at all",
            "set model_config to the model's config.json (path under the root)",
        )
    p2p = context.p2p
    numa = context.numa
    extra = extra_args(checks, table)
    if table is not None:
        # What extra_args (and a --config file they pass) add to TP, counted as SGLang
        # counts the GPUs it opens.
        config = extra_args_config(checks, context.rootfs.path, SIZE_OPTIONS)
        check_parallel_sizes(checks, table, tp, extra, config)
    # The fit is neutral; the KV cache's element size is SGLang's --kv-cache-dtype.
    kv_bits = kv_cache_bits(table, extra)
    fit = memory_fit(checks, context.runtime, model, tp, kv_bits) if model is not None else None
    driver = context.container_driver
    old_unit = unit_base(checks, context.vmid, context.rootfs)
    base = old_unit.base
    holds = versions.conditions(
        mtp=spec.mtp,
        hybrid=model is not None and model.is_hybrid,
        pinned=numa is not None,
    )
    options = launch_options(checks, table, version, holds, tp, p2p, extra) if table else ()
    environment = service_environment(checks, version, holds, context.runtime, p2p, indices)
    # GPUs of unequal memory: SGLang's own refusal, and the variable that lifts it.
    check_memory_balance(checks, version, gpus)
    if table is not None and options:
        check_whole_line(
            checks,
            [w for o in options for w in o],
            f"{checks.where}: sglang {version}",
            lambda argv, subject: parse_command_line(table, argv, subject=subject).problems,
        )
    unit_environment_file = environment_file(checks, context.vmid, old_unit.base_unit)
    error = refusal(checks)
    if error is not None:
        return error
    serving = SglangServing(
        pool=pool.name,
        vmid=context.vmid,
        version=version,
        unit=spec.unit,
        python=spec.python,
        model_path=spec.model_path,
        served_model_name=spec.served_model_name,
        host=spec.host,
        port=spec.port,
        runtime=context.runtime,
        visible_devices=indices,
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
        environment_file=unit_environment_file,
        _key=DECIDED,
    )
    if old_unit.running and table is not None:
        # Compared with the unit text itself, so every setting the template writes
        # counts, and the warning lands with the serving's other findings.
        _report_drops(checks, serving, old_unit, table)
    off = f"{P2P_ENV}=1 and --disable-custom-all-reduce"
    return serving, (p2p_finding(pool, p2p, off), *checks.findings)


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
    for written, gone in deprecated_flags(old.running, table):
        where = f"the container's current unit (/{serving.unit_path.lstrip('/')})"
        checks.finding(
            Severity.WARNING,
            DEPRECATED_CODE,
            gone.message("SGLang", written, where)
            + "; the rendered unit does not carry it over: set "
            f"`{gone.replacement}` in serving.extra_args instead (pvegpu refuses the "
            "deprecated flag there)",
        )


def _check_scalars(checks: Checks) -> None:
    """The spec's value rules, then what SGLang reads into a value."""
    spec = checks.spec
    check_rules(checks)
    if spec.served_model_name is not None and ":" in spec.served_model_name:
        checks.problem(
            "served-model-name-colon",
            f"served_model_name {spec.served_model_name!r} contains `:`, which SGLang "
            "reads as a model:adapter separator",
            f'e.g. served_model_name = "{spec.served_model_name.replace(":", "-")}"',
        )
    if spec.working_directory is not None:
        checks.printable("working_directory", spec.working_directory)
