"""What each action does to the host, how apply sees it is already done, what it backs up.

One function per action and concern, each taking the action's own class; apply/handlers.py
puts them in the one table apply dispatches through. They act only through the effects
seam (`Host`) and the bundle's own files, so what runs is what MANIFEST.json lists.
"""

from __future__ import annotations

from typing import Any

import attrs

from pvegpu.apply import container
from pvegpu.apply.bundle import Bundle, Entry
from pvegpu.apply.container import checked, pct_exec
from pvegpu.apply.host import Host, sha256_of
from pvegpu.apply.state import State
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import ApplyError
from pvegpu.rendering.revert import KEPT_SUFFIX
from pvegpu.rendering.review.actions import (
    CheckBase,
    CheckDrivers,
    CheckGpus,
    CheckHolders,
    CheckNode,
    CheckNodes,
    ContainerReload,
    EnableUnit,
    HostCommand,
    InstallFile,
    KeepAside,
    MakeContainerDir,
    PushFile,
    RestartUnit,
    RunSplit,
    SaveCopies,
    StartContainer,
    StartService,
    StopContainer,
    StopService,
    WaitHealthy,
    WritePveFile,
)
from pvegpu.rendering.review.changes import BACKUP_DIR, container_vmid
from pvegpu.rendering.review.commands import SPLIT_SCRIPT
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_TOOL

HEALTH_POLL_S = 10

Note = dict[str, Any] | None
"""What `do` found, journaled with its `done` event (`was_active`) for revert to read."""


@value_class
@attrs.frozen(eq=False, repr=False)
class Applying:
    """The host an action runs on, the bundle it comes from, the apply's state directory."""

    host: Host
    bundle: Bundle
    state: State


def step_failed(subject: str, message: str) -> ApplyError:
    return ApplyError(
        [
            Diagnostic.error(
                "apply-step-failed",
                subject,
                message,
                "fix the cause, then run pvegpu apply again (it resumes), or pvegpu revert",
            )
        ]
    )


# --- files ------------------------------------------------------------------


def _allowed_before(at: Applying, entry: Entry) -> frozenset[str]:
    """What the file may be when written: as backed up (before apply), or the new one."""
    before = at.state.before_sha(entry.target, entry.path)
    return frozenset({before, entry.sha256} | ({entry.base_sha256} if entry.base_sha256 else set()))


def verify_written(at: Applying, entry: Entry) -> None:
    """Read the file back: it must equal the bundle's artifact byte for byte."""
    vmid = container_vmid(entry.target)
    now = at.host.read(entry.path) if vmid is None else container.read(at.host, vmid, entry.path)
    if now != entry.content:
        where = "/" + entry.path if vmid is None else f"CT {vmid}:/{entry.path}"
        raise step_failed(where, "differs from the bundle's copy after writing it")


def host_file_already(at: Applying, action: InstallFile | WritePveFile) -> str | None:
    entry = at.bundle.by_file(action.file)
    if sha256_of(at.host.read(entry.path)) == entry.sha256:
        return f"/{entry.path} equals the bundle's copy"
    return None


def host_file_backup(at: Applying, action: InstallFile | WritePveFile) -> None:
    entry = at.bundle.by_file(action.file)
    at.state.backup("host", entry.path, at.host.read(entry.path), entry.mode)


def write_host_file(at: Applying, action: InstallFile | WritePveFile) -> Note:
    entry = at.bundle.by_file(action.file)
    at.host.write(entry.path, entry.content, entry.mode, before=_allowed_before(at, entry))
    verify_written(at, entry)
    return None


def push_already(at: Applying, action: PushFile) -> str | None:
    host = at.host
    entry = at.bundle.by_file(action.file)
    if not host.live or container.running(host, action.vmid):
        try:
            now = container.read(host, action.vmid, entry.path)
        except ApplyError:
            if host.live:
                raise
            return None  # not in the snapshot: preflight named it if it matters
        if sha256_of(now) == entry.sha256:
            return f"CT {action.vmid}:/{entry.path} equals the bundle's copy"
    return None


def push_backup(at: Applying, action: PushFile) -> None:
    entry = at.bundle.by_file(action.file)
    now = container.read(at.host, action.vmid, entry.path)
    at.state.backup(entry.target, entry.path, now, action.mode)


def push(at: Applying, action: PushFile) -> Note:
    entry = at.bundle.by_file(action.file)
    container.write(
        at.host,
        action.vmid,
        entry.path,
        entry.content,
        action.mode,
        staging=f"{at.state.dir}/staging/{entry.file}",
        before=_allowed_before(at, entry),
    )
    verify_written(at, entry)
    return None


def save_copies_backup(at: Applying, action: SaveCopies) -> None:
    for path in action.paths:
        copy = f"{BACKUP_DIR.lstrip('/')}/{path}"
        at.state.backup("host", copy, at.host.read(copy), 0o600)


def save_copies(at: Applying, action: SaveCopies) -> Note:
    for path in action.paths:
        content = at.host.read(path)
        if content is not None:
            copy = f"{BACKUP_DIR.lstrip('/')}/{path}"
            at.host.write(copy, content, 0o600, before=None)
    return None


def keep_aside_already(at: Applying, action: KeepAside) -> str | None:
    if container.exists(at.host, action.vmid, action.path + KEPT_SUFFIX):
        return f"CT {action.vmid}:/{action.path}{KEPT_SUFFIX} exists"
    return None


def keep_aside_backup(at: Applying, action: KeepAside) -> None:
    at.state.backup(f"ct:{action.vmid}", action.path + KEPT_SUFFIX, None, 0o600)


def keep_aside(at: Applying, action: KeepAside) -> Note:
    src = "/" + action.path
    checked(at.host, pct_exec(action.vmid, "cp", "-a", src, src + KEPT_SUFFIX), "cp -a")
    return None


def make_dir_already(at: Applying, action: MakeContainerDir) -> str | None:
    if at.host.run(pct_exec(action.vmid, "test", "-d", "/" + action.path)).rc == 0:
        return f"CT {action.vmid}:/{action.path} exists"
    return None


def make_dir(at: Applying, action: MakeContainerDir) -> Note:
    checked(at.host, pct_exec(action.vmid, "mkdir", "-p", "/" + action.path), "mkdir")
    return None


# --- containers and servers -------------------------------------------------


def stop_container_already(at: Applying, action: StopContainer) -> str | None:
    return None if container.running(at.host, action.vmid) else f"CT {action.vmid} is stopped"


def stop_container(at: Applying, action: StopContainer) -> Note:
    checked(at.host, list(action.argv), f"stopping CT {action.vmid}")
    return {"was_running": True}


def start_container_already(at: Applying, action: StartContainer) -> str | None:
    return f"CT {action.vmid} is running" if container.running(at.host, action.vmid) else None


def start_container(at: Applying, action: StartContainer) -> Note:
    checked(at.host, ["pct", "start", str(action.vmid)], f"starting CT {action.vmid}")
    return None


def stop_service_already(at: Applying, action: StopService) -> str | None:
    if not container.running(at.host, action.vmid):
        return f"CT {action.vmid} is stopped, and its server with it"
    if not container.active(at.host, action.vmid, action.unit):
        return f"{action.unit} is not running"
    return None


def stop_service(at: Applying, action: StopService) -> Note:
    checked(at.host, pct_exec(action.vmid, "systemctl", "stop", action.unit), "stopping the server")
    return {"was_active": True}


def start_service_already(at: Applying, action: StartService) -> str | None:
    return (
        f"{action.unit} is active" if container.active(at.host, action.vmid, action.unit) else None
    )


def start_service(at: Applying, action: StartService) -> Note:
    checked(
        at.host, pct_exec(action.vmid, "systemctl", "start", action.unit), "starting the server"
    )
    return None


def container_reload(at: Applying, action: ContainerReload) -> Note:
    checked(at.host, pct_exec(action.vmid, "systemctl", "daemon-reload"), "daemon-reload")
    return None


# --- the host ---------------------------------------------------------------


def host_command(at: Applying, action: HostCommand) -> Note:
    checked(at.host, list(action.argv), action.line)
    return None


def enable_unit_already(at: Applying, action: EnableUnit) -> str | None:
    enabled = at.host.run(["systemctl", "is-enabled", action.unit]).stdout.strip()
    return f"{action.unit} is enabled" if enabled == "enabled" else None


def enable_unit(at: Applying, action: EnableUnit) -> Note:
    checked(at.host, ["systemctl", "enable", action.unit], f"enabling {action.unit}")
    return None


def restart_unit(at: Applying, action: RestartUnit) -> Note:
    checked(at.host, ["systemctl", "restart", action.unit], f"running {action.unit}")
    return None


def run_split(at: Applying, action: RunSplit) -> Note:
    checked(at.host, [SPLIT_SCRIPT, action.mode], f"pvegpu-vfio-split {action.mode}")
    return None


# --- checks a person would make ---------------------------------------------


def check_node(at: Applying, action: CheckNode) -> Note:
    name = (at.host.read("etc/hostname") or b"").decode(errors="replace").strip()
    if name != action.node:
        raise step_failed("/etc/hostname", f"this is {name!r}, not {action.node!r}")
    return None


def check_base(at: Applying, action: CheckBase) -> Note:
    entry = at.bundle.entry(action.target, action.path)
    vmid = container_vmid(action.target)
    content = (
        at.host.read(action.path) if vmid is None else container.read(at.host, vmid, action.path)
    )
    allowed = {action.sha256, entry.sha256 if entry else action.sha256}
    if sha256_of(content) not in allowed:
        raise ApplyError.one(
            "file-changed",
            "/" + action.path if vmid is None else f"CT {vmid}:/{action.path}",
            "changed since the bundle was rendered",
            "discover and render again, review, then apply the new bundle",
        )
    return None


def check_holders(at: Applying, action: CheckHolders) -> Note:
    holders = at.host.holders(action.devices)
    if holders:
        held = "; ".join(f"{h.device} by pid {h.pid} ({h.command})" for h in holders)
        raise step_failed(" ".join(action.devices), f"still held: {held}")
    return None


def check_drivers(at: Applying, action: CheckDrivers) -> Note:
    wrong = [
        f"{a} on {at.host.driver(a) or 'no driver'}"
        for a in action.addresses
        if at.host.driver(a) != action.driver
    ]
    if wrong:
        raise step_failed(
            ", ".join(action.addresses), f"not all on {action.driver}: {', '.join(wrong)}"
        )
    return None


def check_gpus(at: Applying, action: CheckGpus) -> Note:
    tool = CONTAINER_TOOL
    argv = action.command(tool.query_bus_ids)
    out = checked(at.host, pct_exec(action.vmid, *argv), f"{tool.name} in CT {action.vmid}").stdout
    seen = tuple(line.strip() for line in out.splitlines() if line.strip())
    want = tuple(f"{i}, {b}" for i, b in enumerate(action.bus_ids))
    if seen != want:
        raise step_failed(
            f"CT {action.vmid}", f"{tool.name} lists {list(seen)}, expected {list(want)}"
        )
    return None


def check_nodes(at: Applying, action: CheckNodes) -> Note:
    argv = ("stat", "-c", action.format, *action.paths)
    out = checked(at.host, pct_exec(action.vmid, *argv), f"stat in CT {action.vmid}").stdout
    seen = tuple(line.strip() for line in out.splitlines() if line.strip())
    if seen != action.expected():
        raise step_failed(
            f"CT {action.vmid}", f"its nodes are {list(seen)}, expected {list(action.expected())}"
        )
    return None


def wait_healthy(at: Applying, action: WaitHealthy) -> Note:
    waited = 0
    while True:
        if at.host.run(pct_exec(action.vmid, "curl", "-fsS", action.url)).rc == 0:
            return None
        if waited >= action.timeout_s:
            raise step_failed(
                action.url,
                f"no answer within {action.timeout_s} s; read `pct exec {action.vmid} -- "
                "journalctl -u <unit> -n 200 --no-pager`",
            )
        at.host.sleep(HEALTH_POLL_S)
        waited += HEALTH_POLL_S
