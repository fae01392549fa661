"""`apply_bundle`: preflight, the steps, then what a person would check at the end."""

from __future__ import annotations

from pvegpu.apply import container
from pvegpu.apply.bundle import Bundle
from pvegpu.apply.container import checked, pct_exec
from pvegpu.apply.execute import Executor, Say
from pvegpu.apply.host import Host
from pvegpu.apply.preflight import preflight
from pvegpu.apply.state import State
from pvegpu.errors import ApplyError, Problem
from pvegpu.rendering.review.actions import StartService, WaitHealthy
from pvegpu.rendering.review.commands import HEALTH_TIMEOUT_S, SPLIT_SCRIPT


def apply_bundle(host: Host, bundle: Bundle, say: Say, *, dry_run: bool = False) -> None:
    """Apply `bundle` to `host`; with dry_run, check and print everything, change nothing.

    Raises ApplyError with every preflight problem before any change, or with the first
    failed action after; either way apply can be run again.
    """
    state = State(host, bundle.id)
    if state.reverted and not dry_run:
        state = State.fresh(host, bundle.id)  # applied again after a revert: a new start
    resuming = state.exists and not state.reverted
    problems = preflight(host, bundle, resuming=resuming)
    if problems:
        raise ApplyError(problems)
    if resuming:
        say(f"resuming apply {bundle.id} (journal /{state.dir}/journal.json)")
    if not dry_run:
        state.save_bundle(bundle)
    Executor(host, bundle, state, say).run(dry_run=dry_run)
    if dry_run:
        say("dry run: nothing was changed")
        return
    verify(host, bundle, say)
    state.set_flag("finished", True)
    say(f"applied {bundle.id}; `pvegpu revert` undoes it")


def verify(host: Host, bundle: Bundle, say: Say) -> None:
    """The split's status, each started container and its server, its GPUs, its health."""
    problems: list[Problem] = []
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
        listed = checked(host, pct_exec(vmid, "nvidia-smi", "-L"), "nvidia-smi -L").stdout
        gpus = [line for line in listed.splitlines() if line.startswith("GPU ")]
        if len(gpus) != int(serving["tp_size"]):
            problems.append(
                _problem(where, f"nvidia-smi -L lists {len(gpus)} GPUs, TP is {serving['tp_size']}")
            )
        wait = waits.get(vmid)
        url = str(serving["health_url"])
        timeout = wait.timeout_s if wait else HEALTH_TIMEOUT_S
        executor = Executor(host, bundle, State(host, bundle.id), say)
        try:
            executor.wait_healthy(WaitHealthy(vmid, url, timeout))
        except ApplyError as err:
            problems.extend(err.problems)
    if problems:
        raise ApplyError(problems)
    say("verified: split status, containers, servers, their GPUs and health")


def _problem(subject: str, message: str) -> Problem:
    return Problem(
        "verify-failed",
        subject,
        message,
        "every step ran; look at this by hand, or `pvegpu revert`",
    )
