"""Building a pool's server from the spec and the facts, and the servers of a whole plan."""

from __future__ import annotations

import re

import attrs

from pvegpu.errors import PlanError, Problem, PvegpuError, RenderError
from pvegpu.host.facts import HostFacts
from pvegpu.planning.plan import Finding, Plan, Pool, Severity
from pvegpu.serving.checks import Checks
from pvegpu.serving.command import extra_args, launch_options, option_table
from pvegpu.serving.container import container_driver, unit_base
from pvegpu.serving.decision import _FROM_POOL, P2PSource, SglangServing
from pvegpu.serving.drops import compare_units, drops_message
from pvegpu.serving.environment import P2P_ENV, container_indices, service_environment
from pvegpu.serving.fit import checked_model, kv_cache_bits, memory_fit
from pvegpu.serving.numa import numa_pinning
from pvegpu.serving.options import OptionTable
from pvegpu.serving.p2p import decide_p2p
from pvegpu.serving.unit import unit_content

_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\-]+$")
# A user name or numeric UID as systemd's User= takes it (no specifiers, no spaces).
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def build(plan_or_facts: Plan | HostFacts, pool: Pool) -> SglangServing | PvegpuError:
    """Decide and check the server of `pool`: the serving, or an error listing every problem."""
    checks = Checks(plan_or_facts, pool)
    spec = checks.spec
    if pool.lxc is None:
        return PlanError.one(
            "serving-needs-lxc",
            checks.where,
            "an inference server runs in the pool's container; this pool has none",
        )
    table = option_table(checks)
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
    driver = container_driver(checks, pool.lxc.vmid)
    base = unit_base(checks, pool.lxc.vmid)
    options = launch_options(checks, table, model, tp, p2p, extra) if table else ()
    environment = service_environment(checks, model, p2p, numa, indices)
    if table is not None and options:
        argv = [w for o in options for w in o]
        # The whole line again: catches what only shows in combination (a repeat, a
        # missing required option) and any generated flag the version lacks. What
        # extra_args alone already showed is not reported twice.
        said = {(p.code, p.message) for p in checks.render_problems}
        problems = table.parse(argv, subject=f"{checks.where}: sglang {spec.version}").problems
        checks.render_problems.extend(p for p in problems if (p.code, p.message) not in said)
        for word in argv:
            checks.printable("command line", word)
    if checks.plan_problems:
        return PlanError([*checks.plan_problems, *checks.render_problems])
    if checks.render_problems:
        return RenderError(checks.render_problems)
    serving = SglangServing(
        pool=pool.name,
        vmid=pool.lxc.vmid,
        version=spec.version,
        unit=spec.unit,
        python=spec.python,
        model_path=spec.model_path,
        served_model_name=spec.served_model_name,
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
        user=spec.user,
        working_directory=spec.working_directory,
        limit_nofile=spec.limit_nofile,
        findings=tuple(checks.findings),
        _key=_FROM_POOL,
    )
    if base is not None and table is not None:
        # Compared with the unit text itself, so every setting the template writes
        # counts, and the warning lands with the serving's other findings.
        _report_drops(checks, serving, table)
        serving = attrs.evolve(serving, findings=tuple(checks.findings))
    return serving


def _report_drops(checks: Checks, serving: SglangServing, table: OptionTable) -> None:
    """Warn about what the container's current unit sets and the new one does not."""
    assert serving.base is not None
    comparison = compare_units(serving.base.content, unit_content(serving), table)
    message = drops_message(comparison, serving.unit_path)
    if message is not None:
        checks.finding(Severity.WARNING, "serving-drops-settings", message)


def _check_scalars(checks: Checks) -> None:
    spec = checks.spec
    if not _UNIT_NAME.match(spec.unit) or spec.unit.endswith(".service"):
        checks.problem(
            "serving-invalid-unit",
            f"unit {spec.unit!r} is not a unit name (letters, digits, `:_.-\\`, no suffix)",
            'e.g. unit = "sglang-qwen" for sglang-qwen.service',
        )
    if not spec.python.startswith("/"):
        checks.problem(
            "serving-invalid-python",
            f"python {spec.python!r} is not an absolute path; ExecStart= needs one",
            'e.g. python = "/root/ml-env/bin/python3"',
        )
    if spec.served_model_name is not None and ":" in spec.served_model_name:
        checks.problem(
            "served-model-name-colon",
            f"served_model_name {spec.served_model_name!r} contains `:`, which SGLang "
            "reads as a model:adapter separator",
            f'e.g. served_model_name = "{spec.served_model_name.replace(":", "-")}"',
        )
    if spec.context_length is not None and spec.context_length < 1:
        checks.problem("serving-invalid-value", f"context_length {spec.context_length} < 1")
    if spec.mem_fraction_static is not None and not 0 < spec.mem_fraction_static < 1:
        checks.problem(
            "serving-invalid-value",
            f"mem_fraction_static {spec.mem_fraction_static} is not between 0 and 1",
        )
    if not 0 < spec.port < 65536:
        checks.problem("serving-invalid-value", f"port {spec.port} is not a TCP port")
    if spec.user is not None and not _USER.match(spec.user):
        checks.problem(
            "serving-invalid-value",
            f"user {spec.user!r} is not a user name or UID",
            'e.g. user = "root"',
        )
    if spec.working_directory is not None:
        checks.printable("working_directory", spec.working_directory)
        if not spec.working_directory.startswith("/"):
            checks.problem(
                "serving-invalid-value",
                f"working_directory {spec.working_directory!r} is not an absolute path",
                'e.g. working_directory = "/root"',
            )
    if spec.limit_nofile is not None and spec.limit_nofile < 1:
        checks.problem("serving-invalid-value", f"limit_nofile {spec.limit_nofile} < 1")


def servings(plan: Plan) -> tuple[SglangServing, ...]:
    """The server of every pool that has one; one error listing every pool's problems."""
    built: list[SglangServing] = []
    plan_problems: list[Problem] = []
    render_problems: list[Problem] = []
    for pool in plan.pools:
        if pool.serving is None:
            continue
        result = build(plan, pool)
        if isinstance(result, PlanError):
            plan_problems.extend(result.problems)
        elif isinstance(result, PvegpuError):
            render_problems.extend(result.problems)
        else:
            built.append(result)
    seen: dict[tuple[int, str], str] = {}
    for serving in built:
        key = (serving.vmid, serving.unit)
        if key in seen:
            plan_problems.append(
                Problem(
                    "serving-unit-clash",
                    f"ct:{serving.vmid}/{serving.unit_path}",
                    f"pools {seen[key]} and {serving.pool} both render this unit",
                    "give each server its own unit name",
                )
            )
        seen[key] = serving.pool
    if plan_problems:
        raise PlanError([*plan_problems, *render_problems])
    if render_problems:
        raise RenderError(render_problems)
    return tuple(built)


def serving_findings(plan: Plan) -> tuple[Finding, ...]:
    """What the planner adds to the plan for its servers (raises like `servings`)."""
    out: list[Finding] = []
    for serving in servings(plan):
        p2p = serving.p2p
        state = "on" if p2p.enabled else "off"
        effect = "" if p2p.enabled else f": {P2P_ENV}=1 and --disable-custom-all-reduce"
        origin = "spec override" if p2p.source is P2PSource.SPEC else "from the facts"
        out.append(
            Finding(
                Severity.INFO,
                "serving-p2p",
                f"pool {serving.pool}",
                f"GPU peer-to-peer {state} ({origin}: {p2p.reason}){effect}",
            )
        )
        out.extend(serving.findings)
    return tuple(out)
