"""`apply_bundle`: preflight, the steps, then what a person would check at the end."""

from __future__ import annotations

from pvegpu.apply import container
from pvegpu.apply.bundle import Bundle
from pvegpu.apply.commands import refuse_off_node
from pvegpu.apply.container import checked, pct_exec
from pvegpu.apply.doing import Applying, wait_healthy
from pvegpu.apply.execute import Executor, Say, Told, ignore
from pvegpu.apply.host import Host
from pvegpu.apply.preflight import not_this_node, preflight
from pvegpu.apply.state import LOCK, State
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import ApplyError
from pvegpu.rendering.review.actions import CheckGpus, StartService, WaitHealthy
from pvegpu.rendering.review.commands import HEALTH_TIMEOUT_S, SPLIT_SCRIPT
from pvegpu.vendors import CONTAINER_TOOL


def apply_bundle(
    host: Host, bundle: Bundle, say: Say, *, dry_run: bool = False, told: Told = ignore
) -> None:
    """Apply `bundle` to `host`; with dry_run, check and print everything, change nothing.

    Raises ApplyError with every preflight problem before any change, or with the first
    failed action after; either way apply can be run again. Only one apply or revert runs
    on a node at a time (`LOCK`); a dry run takes no lock, since it writes nothing.
    `told` gets each action's outcome as it is known (`--json`).
    """
    if dry_run:
        _dry_run(host, bundle, say, told)
        return
    refuse_off_node(host)
    not_node = not_this_node(host, bundle)
    if not_node:
        raise ApplyError(not_node)
    with host.exclusive(LOCK):
        _apply(host, bundle, say, told)


def _state(host: Host, bundle: Bundle) -> State:
    state = State(host, bundle.id)
    if state.reverted:
        # Applied again after a revert: a new start (in memory until its first event), so
        # the old journal's `done` events count for nothing, not even in a dry run.
        state = State.fresh(host, bundle.id)
    return state


def _dry_run(host: Host, bundle: Bundle, say: Say, told: Told) -> None:
    state = _state(host, bundle)
    if not host.live:
        say(
            f"dry run against the tree under {host.root}: no command runs; what only a "
            "command could tell (a container running, a unit active or enabled) is not in "
            "a tree, so those steps read `would run`"
        )
    resuming = state.exists
    compared: list[str] = []
    problems = preflight(host, bundle, resuming=resuming, compared=compared)
    if problems:
        raise ApplyError(problems)
    if host.live:
        say("preflight passed: node, devices and drivers, GPU holders, guest locks")
    else:
        say(
            f"preflight passed on {host.root}: node, devices and drivers, guest locks (which "
            "process holds a GPU is not in a snapshot: the step that checks it runs on the node)"
        )
    for line in compared:
        say(f"  base file {line}")
    if resuming:
        say(f"an apply of {bundle.id} was begun here (journal /{state.dir}/journal.json)")
    Executor(host, bundle, state, say, told).run(dry_run=True)
    say("dry run: nothing was changed")


def _apply(host: Host, bundle: Bundle, say: Say, told: Told) -> None:
    state = _state(host, bundle)
    resuming = state.exists
    problems = preflight(host, bundle, resuming=resuming)
    if problems:
        raise ApplyError(problems)
    if resuming:
        say(f"resuming apply {bundle.id} (journal /{state.dir}/journal.json)")
    state.save_bundle(bundle)
    Executor(host, bundle, state, say, told).run(dry_run=False)
    verify(host, bundle, say)
    state.set_flag("finished", True)
    say(f"applied {bundle.id}; `pvegpu revert` undoes it")


def verify(host: Host, bundle: Bundle, say: Say) -> None:
    """The split's status, each started container and its server, its GPUs, its health."""
    problems: list[Diagnostic] = []
    if bundle.split_unit is not None:
        if host.run([SPLIT_SCRIPT, "status"]).rc != 0:
            problems.append(_problem(SPLIT_SCRIPT, "`status` reports functions not as planned"))
        enabled = host.run(["systemctl", "is-enabled", bundle.split_unit]).stdout.strip()
        if enabled != "enabled":
            problems.append(_problem(bundle.split_unit, f"is {enabled or 'not enabled'}"))
    started = {a.vmid for s in bundle.steps for a in s.actions if isinstance(a, StartService)}
    waits = {a.vmid: a for s in bundle.steps for a in s.actions if isinstance(a, WaitHealthy)}
    for serving in bundle.serving:
        vmid, unit = int(serving["vmid"]), str(serving["unit"])
        if vmid not in started:
            continue  # the runbook ends before the server starts (a reboot comes first)
        where = f"CT {vmid}"
        if not container.running(host, vmid):
            problems.append(_problem(where, "is not running"))
            continue
        if not container.active(host, vmid, unit):
            problems.append(_problem(f"{where}: {unit}", "is not active"))
        # As the runbook's GPU check runs it: from the staged host userspace, if the pool has it.
        check = next(
            (
                a
                for s in bundle.steps
                for a in s.actions
                if isinstance(a, CheckGpus) and a.vmid == vmid
            ),
            None,
        )
        argv = check.command(CONTAINER_TOOL.list_gpus) if check else CONTAINER_TOOL.list_gpus
        command = " ".join(argv)
        listed = checked(host, pct_exec(vmid, *argv), command).stdout
        gpus = [ln for ln in listed.splitlines() if ln.startswith(CONTAINER_TOOL.listed_prefix)]
        want = server_gpus(serving)
        if len(gpus) != want:
            problems.append(
                _problem(where, f"{command} lists {len(gpus)} GPUs, the server runs on {want}")
            )
        wait = waits.get(vmid)
        url = str(serving["health_url"])
        timeout = wait.timeout_s if wait else HEALTH_TIMEOUT_S
        try:
            wait_healthy(
                Applying(host, bundle, State(host, bundle.id)), WaitHealthy(vmid, url, timeout)
            )
        except ApplyError as err:
            problems.extend(err.problems)
    if problems:
        raise ApplyError(problems)
    say("verified: split status, containers, servers, their GPUs and health")


def server_gpus(serving: dict[str, object]) -> int:
    """The GPUs the planned server runs on: its engine's world size (TP x PP x PCP for
    vLLM, dp x tp x pp for SGLang), which plan() makes the pool's GPU count, the indices
    the contract gives the runtime's visible-devices variable. Not `tp_size`: with a
    pipeline, context or data parallel size past 1 the container lists more GPUs."""
    # Named by the variable: cuda_visible_devices, hip_visible_devices (apply_doc.py).
    visible = next((str(v) for k, v in serving.items() if k.endswith("_visible_devices")), "")
    return len([i for i in visible.split(",") if i.strip()])


def _problem(subject: str, message: str) -> Diagnostic:
    return Diagnostic.error(
        "verify-failed",
        subject,
        message,
        "every step ran; look at this by hand, or `pvegpu revert`",
    )
