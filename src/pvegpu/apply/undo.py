"""`pvegpu revert`: undo the last apply from its state directory, newest action first,
except that a container's server is stopped and its own files put back before anything
else (while it runs, and before it restarts with the old unit in place).

Only actions the journal shows begun are undone, each by its inverse: a file goes back to
its backup (or away, if apply created it), a stopped container or server is started
again, a started one stopped, the split reverted and its unit disabled. Commands that
act on files (`systemctl daemon-reload`, the initramfs rebuild) run once more at the
end, after every file is back. A file someone changed after apply wrote it is left
alone and named. Revert is journaled too: run it again after a failure.
"""

from __future__ import annotations

import posixpath

from pvegpu.apply import container
from pvegpu.apply.bundle import Bundle, parse_bundle
from pvegpu.apply.commands import missing_commands, refuse_off_node
from pvegpu.apply.container import checked, pct_exec
from pvegpu.apply.execute import Say
from pvegpu.apply.host import Host, sha256_of
from pvegpu.apply.state import LOCK, State, last_apply
from pvegpu.errors import ApplyError
from pvegpu.rendering.revert import KEPT_SUFFIX
from pvegpu.rendering.review.actions import (
    Action,
    EnableUnit,
    HostCommand,
    InstallFile,
    KeepAside,
    PushFile,
    RunSplit,
    SaveCopies,
    StartContainer,
    StartService,
    StopContainer,
    StopService,
    WritePveFile,
)
from pvegpu.rendering.review.changes import BACKUP_DIR, is_unit
from pvegpu.rendering.review.commands import SPLIT_SCRIPT


def load_last(host: Host) -> tuple[Bundle, State]:
    bundle_id = last_apply(host)
    if bundle_id is None:
        raise ApplyError.one(
            "nothing-applied",
            "/var/lib/pvegpu/apply/last",
            "no apply to revert on this host",
            "nothing to undo; to undo a change made by hand, use the bundle's revert/revert.sh",
        )
    state = State(host, bundle_id)

    def file(rel: str) -> bytes:
        content = host.read(f"{state.dir}/bundle/{rel}")
        if content is None:
            raise ApplyError.one(
                "state-damaged",
                f"/{state.dir}/bundle/{rel}",
                "is missing from the state of the last apply",
                "undo by hand with revert/revert.sh of the bundle that was applied",
            )
        return content

    return parse_bundle(file("MANIFEST.json").decode(), file), state


def revert(host: Host, say: Say) -> None:
    """Undo the last apply; refused off the node, while another apply or revert runs
    (`apply-locked`), and before any change when a command it needs is missing."""
    refuse_off_node(host)
    bundle, state = load_last(host)  # before the lock: no apply, no state directory made
    missing = () if state.reverted else missing_commands(host, bundle)
    if missing:
        raise ApplyError(missing)  # before the first undo, not half way through
    with host.exclusive(LOCK):
        _revert(host, say)


def _revert(host: Host, say: Say) -> None:
    bundle, state = load_last(host)  # again: another run may have changed it meanwhile
    if state.reverted:
        say(f"apply {bundle.id} was already reverted; nothing to do")
        return
    rerun: list[HostCommand] = []
    begun = [
        (i, j)
        for i in reversed(range(len(bundle.steps)))
        for j in reversed(range(len(bundle.steps[i].actions)))
        if state.begun(i, j) is not None
    ]
    # A container's own files go back first, while it still runs (pct push needs it
    # running) and before it is stopped and started again: an enabled unit starts with
    # its container, so the old one must be in place by then. Its server is stopped
    # first. The rest is undone newest first.
    early = [(i, j) for i, j in begun if isinstance(bundle.steps[i].actions[j], _IN_CONTAINER)]
    for i, j in early + [k for k in begun if k not in early]:
        step = bundle.steps[i]
        action = step.actions[j]
        if isinstance(action, HostCommand) and action.rerun_on_revert:
            rerun.insert(0, action)
            continue
        done = state.done(i, j) or {}
        say(f"undo step {i + 1} ({step.title}): {' ; '.join(action.lines())}")
        _undo(host, bundle, state, action, done)
    for action in dict.fromkeys(rerun):
        say(f"again, now that the files are back: {action.line}")
        checked(host, list(action.argv), action.line)
    state.set_flag("reverted", True)
    say(f"reverted apply {bundle.id}")


_IN_CONTAINER = (StartService, PushFile, KeepAside)
"""Undone before anything else: the server stopped, the container's files put back."""


def _undo(
    host: Host, bundle: Bundle, state: State, action: Action, done: dict[str, object]
) -> None:
    if isinstance(action, InstallFile | WritePveFile):
        entry = bundle.by_file(action.file)
        _restore_host(host, state, entry.path, entry.sha256)
    elif isinstance(action, SaveCopies):
        for path in action.paths:
            copy = f"{BACKUP_DIR.lstrip('/')}/{path}"
            _restore_host(host, state, copy, sha256_of(host.read(path)))
    elif isinstance(action, PushFile):
        entry = bundle.by_file(action.file)
        _restore_container(host, state, action.vmid, entry.path, entry.sha256)
    elif isinstance(action, KeepAside):
        container.remove(host, action.vmid, action.path + KEPT_SUFFIX)
    elif isinstance(action, StopService) and done.get("was_active", True):
        if container.running(host, action.vmid):
            checked(host, pct_exec(action.vmid, "systemctl", "start", action.unit), "start")
    elif isinstance(action, StartService):
        if container.running(host, action.vmid):
            checked(host, pct_exec(action.vmid, "systemctl", "stop", action.unit), "stop")
    elif isinstance(action, StopContainer) and done.get("was_running", True):
        if not container.running(host, action.vmid):
            checked(host, ["pct", "start", str(action.vmid)], f"starting CT {action.vmid}")
    elif isinstance(action, StartContainer):
        if container.running(host, action.vmid):
            checked(host, ["pct", "stop", str(action.vmid)], f"stopping CT {action.vmid}")
    elif isinstance(action, EnableUnit):
        checked(host, ["systemctl", "disable", action.unit], f"disabling {action.unit}")
    elif (
        isinstance(action, RunSplit)
        and action.mode in ("bind", "override")
        and host.read(SPLIT_SCRIPT.lstrip("/")) is not None
    ):
        checked(host, [SPLIT_SCRIPT, "revert"], "pvegpu-vfio-split revert")


def _restore_host(host: Host, state: State, path: str, applied_sha: str) -> None:
    saved = state.backed_up("host", path)
    if saved is None:
        return  # apply began the step but never got to back this file up: untouched
    content, mode = saved
    # Only over what apply wrote (or the old copy again): a later edit is someone's work.
    allowed = frozenset({applied_sha, sha256_of(content)})
    if content is None:
        host.remove(path, before=allowed)
    else:
        host.write(path, content, mode, before=allowed)


def _restore_container(host: Host, state: State, vmid: int, path: str, applied_sha: str) -> None:
    saved = state.backed_up(f"ct:{vmid}", path)
    if saved is None:
        return
    content, mode = saved
    if not container.running(host, vmid):
        checked(host, ["pct", "start", str(vmid)], f"starting CT {vmid} to restore /{path}")
    if content is None:
        container.remove(host, vmid, path)
    else:
        container.write(
            host,
            vmid,
            path,
            content,
            mode,
            staging=f"{state.dir}/staging/restore/{posixpath.basename(path)}",
            before=frozenset({applied_sha, sha256_of(content)}),
        )
    if is_unit(path):
        checked(host, pct_exec(vmid, "systemctl", "daemon-reload"), "daemon-reload")
