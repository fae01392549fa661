"""Each action's inverse, for `pvegpu revert` (apply/undo.py runs them, newest first).

`done` is what the action's `do` journaled: a container or server found already stopped
(`was_running`/`was_active` false) is not started again. A file goes back only over what
apply wrote, or over the old copy: a later edit is someone's work and is left alone.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from pvegpu.apply import container
from pvegpu.apply.container import checked, pct_exec
from pvegpu.apply.doing import Applying
from pvegpu.apply.host import Host, sha256_of
from pvegpu.apply.state import State
from pvegpu.rendering.revert import KEPT_SUFFIX
from pvegpu.rendering.review.actions import (
    EnableUnit,
    InstallFile,
    KeepAside,
    PushFile,
    RestartUnit,
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

Done = Mapping[str, object]


def restore_host_file(at: Applying, action: InstallFile | WritePveFile, done: Done) -> None:
    entry = at.bundle.by_file(action.file)
    _restore_host(at.host, at.state, entry.path, entry.sha256)


def restore_copies(at: Applying, action: SaveCopies, done: Done) -> None:
    for path in action.paths:
        copy = f"{BACKUP_DIR.lstrip('/')}/{path}"
        _restore_host(at.host, at.state, copy, sha256_of(at.host.read(path)))


def restore_pushed(at: Applying, action: PushFile, done: Done) -> None:
    entry = at.bundle.by_file(action.file)
    _restore_container(at.host, at.state, action.vmid, entry.path, entry.sha256)


def remove_kept(at: Applying, action: KeepAside, done: Done) -> None:
    container.remove(at.host, action.vmid, action.path + KEPT_SUFFIX)


def restart_service(at: Applying, action: StopService, done: Done) -> None:
    if done.get("was_active", True) and container.running(at.host, action.vmid):
        checked(at.host, pct_exec(action.vmid, "systemctl", "start", action.unit), "start")


def stop_started_service(at: Applying, action: StartService, done: Done) -> None:
    if container.running(at.host, action.vmid):
        checked(at.host, pct_exec(action.vmid, "systemctl", "stop", action.unit), "stop")


def restart_container(at: Applying, action: StopContainer, done: Done) -> None:
    if done.get("was_running", True) and not container.running(at.host, action.vmid):
        checked(at.host, ["pct", "start", str(action.vmid)], f"starting CT {action.vmid}")


def stop_started_container(at: Applying, action: StartContainer, done: Done) -> None:
    if container.running(at.host, action.vmid):
        checked(at.host, ["pct", "stop", str(action.vmid)], f"stopping CT {action.vmid}")


def disable_unit(at: Applying, action: EnableUnit, done: Done) -> None:
    checked(at.host, ["systemctl", "disable", action.unit], f"disabling {action.unit}")


def clean_up_unit(at: Applying, action: RestartUnit, done: Done) -> None:
    # What the unit made goes while its script is still there (files go back after).
    if action.cleanup and at.host.read(action.cleanup[0].lstrip("/")) is not None:
        checked(at.host, list(action.cleanup), " ".join(action.cleanup))


def revert_split(at: Applying, action: RunSplit, done: Done) -> None:
    # Only a split that moved functions is reverted, and only while its script is there.
    if action.mode in ("bind", "override") and at.host.read(SPLIT_SCRIPT.lstrip("/")) is not None:
        checked(at.host, [SPLIT_SCRIPT, "revert"], "pvegpu-vfio-split revert")


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
