"""Deciding one pool's vLLM server from the spec and the facts.

`decide_serving` is the one factory of `VllmServing`; the planner calls it through the
engine registry (`pvegpu.engines`) for every pool whose spec names `engine = "vllm"`, with
the engine-neutral decisions already made (`serving.context.ServingContext`: the GPUs and
their CUDA ordinals, P2P, NUMA pinning, the model's heads against TP, the container's
NVIDIA userspace against the host's). What is vLLM's own is decided here: its release and
option table, the pipeline stages, the MTP method, the command line checked against the
table, the unit, and what the container's current unit loses.
"""

from __future__ import annotations

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.engines.common.config_file import extra_args_config
from pvegpu.engines.common.drops import drops_message
from pvegpu.engines.common.environment import P2P_ENV, service_environment
from pvegpu.engines.common.old_unit import OldUnit, unit_base
from pvegpu.engines.common.server import (
    check_rules,
    check_whole_line,
    environment_file,
    p2p_finding,
    refusal,
)
from pvegpu.engines.vllm.command import (
    extra_args,
    kv_cache_bits,
    mtp_config,
    serve_options,
)
from pvegpu.engines.vllm.decision import VllmServing
from pvegpu.engines.vllm.drops import compare_services
from pvegpu.engines.vllm.installed import serving_release
from pvegpu.engines.vllm.option_check import parse_command_line
from pvegpu.engines.vllm.options import OptionTable
from pvegpu.engines.vllm.parallel import SIZE_OPTIONS, check_config_sizes, parallel_layout
from pvegpu.engines.vllm.unit import unit_content
from pvegpu.errors import PvegpuError, SpecError
from pvegpu.model.decision import DECIDED
from pvegpu.model.schema import ServingSpec
from pvegpu.serving.checks import Checks
from pvegpu.serving.context import ServingContext
from pvegpu.serving.fit import memory_fit

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's --gpu-memory-utilization when the spec sets no mem_fraction_static (every
release): the fit estimate uses it, the unit does not write it."""


def decide_serving(
    context: ServingContext, spec: ServingSpec
) -> tuple[VllmServing, tuple[Diagnostic, ...]] | PvegpuError:
    """Decide and check the vLLM server `spec` asks of the pool: it and its findings, or
    an error listing every problem (the context's first)."""
    checks = context.checks(spec)
    pool = context.pool
    release = serving_release(checks, context.rootfs.path)
    table = release.table if release is not None else None
    version = release.version if release is not None else ""
    _check_scalars(checks)
    gpus = len(context.gpus)
    layout = parallel_layout(checks, gpus, version)
    pp = layout.pp
    model = context.model
    if model is not None and pp > 1 and model.num_hidden_layers < pp:
        checks.problem(
            "vllm-pipeline-exceeds-layers",
            f"pipeline_parallel_size {pp} is more than the {model.num_hidden_layers} "
            f"layers of {model.path}: vLLM gives each stage at least one",
            f"set pipeline_parallel_size to at most {model.num_hidden_layers}",
            subject=f"{checks.where}.pipeline_parallel_size",
        )
    mtp = mtp_config(checks, version, table, model.model_type if model else None)
    p2p = context.p2p
    extra = extra_args(checks, table)
    if table is not None:
        # A --config file in extra_args: the sizes it sets that the line does not.
        config = extra_args_config(checks, context.rootfs.path, SIZE_OPTIONS)
        check_config_sizes(checks, table, layout, config)
    # The fit is neutral; the KV cache's element size is vLLM's --kv-cache-dtype. Each GPU
    # holds 1/(TP x PP) of the weights: every prefill context-parallel rank holds them all.
    kv_bits = kv_cache_bits(table, extra)
    fit = (
        memory_fit(
            checks,
            context.runtime,
            model,
            layout.tp * layout.pp,
            kv_bits,
            default_fraction=DEFAULT_GPU_MEMORY_UTILIZATION,
        )
        if model is not None
        else None
    )
    old_unit = unit_base(checks, context.vmid, context.rootfs)
    base = old_unit.base
    options = serve_options(checks, table, layout, p2p, mtp, extra) if table else ()
    environment = service_environment(checks, context.runtime, p2p, context.visible_devices)
    if table is not None and options:
        check_whole_line(
            checks,
            [w for o in options for w in o],
            f"{checks.where}: vllm {version}",
            lambda argv, subject: parse_command_line(table, argv, subject=subject).problems,
        )
    unit_environment_file = environment_file(checks, context.vmid, old_unit.base_unit)
    error = refusal(checks)
    if error is not None:
        return error
    if release is None:
        # Not reached: no release comes with the problem saying why, which refusal
        # returned; the type checker does not know that.
        return SpecError(checks.spec_errors)
    serving = VllmServing(
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
        visible_devices=context.visible_devices,
        gpus=context.gpus,
        tp_size=layout.tp,
        options=options,
        environment=environment,
        p2p=p2p,
        numa=context.numa,
        fit=fit,
        model=model,
        container_driver=context.container_driver,
        base=base,
        unit_unread=old_unit.unread,
        dropins=old_unit.changes,
        user=spec.user,
        working_directory=spec.working_directory,
        limit_nofile=spec.limit_nofile,
        environment_file=unit_environment_file,
        _key=DECIDED,
        pp_size=pp,
        executable=release.executable,
        mtp_config=mtp,
        pcp_size=layout.pcp,
        dcp_size=layout.dcp,
    )
    if old_unit.running and table is not None:
        _report_drops(checks, serving, old_unit, table)
    off = f"{P2P_ENV}=1 and --disable-custom-all-reduce"
    return serving, (p2p_finding(pool, p2p, off), *checks.findings)


def _report_drops(checks: Checks, serving: VllmServing, old: OldUnit, table: OptionTable) -> None:
    """Warn about what the service runs with now and will not after the change, both
    sides as systemd sees them (the unit plus its drop-ins, switched off as the bundle does)."""
    switched = {c.source: c.content for c in serving.dropins}
    after = (unit_content(serving), *(switched.get(d.path, d.text) for d in old.dropins))
    message = drops_message(compare_services(old.running, after, table), serving.unit_path)
    if message is not None:
        checks.finding(Severity.WARNING, "serving-drops-settings", message)


def _check_scalars(checks: Checks) -> None:
    """The spec's value rules (its engine keys' are the planner's: planning/decide.py)."""
    spec = checks.spec
    check_rules(checks)
    if spec.working_directory is not None:
        checks.printable("working_directory", spec.working_directory)
