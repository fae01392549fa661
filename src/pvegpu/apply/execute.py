"""Carry out a bundle's steps on a host: each action once, journaled, resumable.

For every action, in the runbook's order:
1. the journal of this bundle says it was done -> reported as already done, with when;
2. the host already is as the action would leave it (the file equals the bundle's, the
   container is stopped) -> reported as already done, with what was found;
3. else the file it replaces is backed up, `begin` is journaled, the action runs through
   the host seam, and `done` is journaled with what it found (`was_active`).
A failure raises ApplyError naming the action; a kill leaves the journal at the last
event. Either way, running apply again completes (actions are idempotent and
already-done ones are skipped) and `pvegpu revert` undoes what was begun.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pvegpu.apply import container
from pvegpu.apply.bundle import Bundle, Entry
from pvegpu.apply.container import checked, pct_exec
from pvegpu.apply.host import Host, sha256_of
from pvegpu.apply.state import State
from pvegpu.errors import ApplyError, Problem
from pvegpu.rendering.revert import KEPT_SUFFIX
from pvegpu.rendering.review.actions import (
    Action,
    CheckBase,
    CheckDrivers,
    CheckGpus,
    CheckHolders,
    CheckNode,
    ContainerReload,
    EnableUnit,
    HostCommand,
    InstallFile,
    KeepAside,
    MakeContainerDir,
    Manual,
    PushFile,
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

Say = Callable[[str], None]
HEALTH_POLL_S = 10


def _fail(subject: str, message: str) -> ApplyError:
    return ApplyError(
        [
            Problem(
                "apply-step-failed",
                subject,
                message,
                "fix the cause, then run pvegpu apply again (it resumes), or pvegpu revert",
            )
        ]
    )


class Executor:
    def __init__(self, host: Host, bundle: Bundle, state: State, say: Say) -> None:
        self.host = host
        self.bundle = bundle
        self.state = state
        self.say = say

    # --- the loop -----------------------------------------------------------

    def run(self, *, dry_run: bool) -> None:
        total = len(self.bundle.steps)
        for i, step in enumerate(self.bundle.steps):
            self.say(f"step {i + 1}/{total}: {step.title}")
            for j, action in enumerate(step.actions):
                for line in action.lines():
                    self.say(f"  $ {line}")
                self.say(f"    -> {self._one(i, j, action, dry_run=dry_run)}")

    def _one(self, i: int, j: int, action: Action, *, dry_run: bool) -> str:
        if isinstance(action, Manual):
            return "left to you: apply does not run this"
        done = self.state.done(i, j)
        if done is not None:
            return f"already done (journal: {done['at']})"
        already = self.already(action)
        if already is not None:
            return f"already done: {already}"
        if dry_run:
            return "would run"
        self.backup(action)
        self.state.record(i, j, "begin")
        note = self.do(action) or {}
        self.state.record(i, j, "done", **note)
        return "done"

    # --- what is already so -------------------------------------------------

    def already(self, action: Action) -> str | None:
        """Why the host already is as `action` would leave it; None when it must run."""
        host = self.host
        if not host.live and not isinstance(action, InstallFile | WritePveFile | PushFile):
            return None  # a tree (a snapshot) holds files, not what runs: no command asks
        if isinstance(action, InstallFile | WritePveFile):
            entry = self.bundle.by_file(action.file)
            if sha256_of(host.read(entry.path)) == entry.sha256:
                return f"/{entry.path} equals the bundle's copy"
        elif isinstance(action, PushFile):
            entry = self.bundle.by_file(action.file)
            if not host.live or container.running(host, action.vmid):
                try:
                    now = container.read(host, action.vmid, entry.path)
                except ApplyError:
                    if host.live:
                        raise
                    return None  # not in the snapshot: preflight named it if it matters
                if sha256_of(now) == entry.sha256:
                    return f"CT {action.vmid}:/{entry.path} equals the bundle's copy"
        elif isinstance(action, StopContainer):
            if not container.running(host, action.vmid):
                return f"CT {action.vmid} is stopped"
        elif isinstance(action, StartContainer):
            if container.running(host, action.vmid):
                return f"CT {action.vmid} is running"
        elif isinstance(action, StopService):
            if not container.running(host, action.vmid):
                return f"CT {action.vmid} is stopped, and its server with it"
            if not container.active(host, action.vmid, action.unit):
                return f"{action.unit} is not running"
        elif isinstance(action, StartService):
            if container.active(host, action.vmid, action.unit):
                return f"{action.unit} is active"
        elif isinstance(action, EnableUnit):
            if host.run(["systemctl", "is-enabled", action.unit]).stdout.strip() == "enabled":
                return f"{action.unit} is enabled"
        elif isinstance(action, MakeContainerDir):
            if host.run(pct_exec(action.vmid, "test", "-d", "/" + action.path)).rc == 0:
                return f"CT {action.vmid}:/{action.path} exists"
        elif isinstance(action, KeepAside) and container.exists(
            self.host, action.vmid, action.path + KEPT_SUFFIX
        ):
            return f"CT {action.vmid}:/{action.path}{KEPT_SUFFIX} exists"
        return None

    # --- backups ------------------------------------------------------------

    def backup(self, action: Action) -> None:
        """The files `action` replaces, as they are now, into the state directory."""
        if isinstance(action, InstallFile | WritePveFile):
            entry = self.bundle.by_file(action.file)
            self.state.backup("host", entry.path, self.host.read(entry.path), entry.mode)
        elif isinstance(action, SaveCopies):
            for path in action.paths:
                copy = f"{BACKUP_DIR.lstrip('/')}/{path}"
                self.state.backup("host", copy, self.host.read(copy), 0o600)
        elif isinstance(action, PushFile):
            entry = self.bundle.by_file(action.file)
            now = container.read(self.host, action.vmid, entry.path)
            self.state.backup(entry.target, entry.path, now, action.mode)
        elif isinstance(action, KeepAside):
            aside = action.path + KEPT_SUFFIX
            self.state.backup(f"ct:{action.vmid}", aside, None, 0o600)

    # --- doing it -----------------------------------------------------------

    def do(self, action: Action) -> dict[str, Any] | None:
        host = self.host
        if isinstance(action, CheckNode):
            name = (host.read("etc/hostname") or b"").decode(errors="replace").strip()
            if name != action.node:
                raise _fail("/etc/hostname", f"this is {name!r}, not {action.node!r}")
        elif isinstance(action, CheckBase):
            self._check_base(action)
        elif isinstance(action, SaveCopies):
            for path in action.paths:
                content = host.read(path)
                if content is not None:
                    copy = f"{BACKUP_DIR.lstrip('/')}/{path}"
                    host.write(copy, content, 0o600, before=None)
        elif isinstance(action, StopService):
            checked(
                host, pct_exec(action.vmid, "systemctl", "stop", action.unit), "stopping the server"
            )
            return {"was_active": True}
        elif isinstance(action, StartService):
            checked(
                host,
                pct_exec(action.vmid, "systemctl", "start", action.unit),
                "starting the server",
            )
        elif isinstance(action, MakeContainerDir):
            checked(host, pct_exec(action.vmid, "mkdir", "-p", "/" + action.path), "mkdir")
        elif isinstance(action, KeepAside):
            src = "/" + action.path
            checked(host, pct_exec(action.vmid, "cp", "-a", src, src + KEPT_SUFFIX), "cp -a")
        elif isinstance(action, PushFile):
            self._push(action)
        elif isinstance(action, ContainerReload):
            checked(host, pct_exec(action.vmid, "systemctl", "daemon-reload"), "daemon-reload")
        elif isinstance(action, StopContainer):
            checked(host, ["pct", "stop", str(action.vmid)], f"stopping CT {action.vmid}")
            return {"was_running": True}
        elif isinstance(action, StartContainer):
            checked(host, ["pct", "start", str(action.vmid)], f"starting CT {action.vmid}")
        elif isinstance(action, CheckHolders):
            holders = host.holders(action.devices)
            if holders:
                held = "; ".join(f"{h.device} by pid {h.pid} ({h.command})" for h in holders)
                raise _fail(" ".join(action.devices), f"still held: {held}")
        elif isinstance(action, InstallFile | WritePveFile):
            self._write_host(self.bundle.by_file(action.file))
        elif isinstance(action, HostCommand):
            checked(host, list(action.argv), action.line)
        elif isinstance(action, EnableUnit):
            checked(host, ["systemctl", "enable", action.unit], f"enabling {action.unit}")
        elif isinstance(action, RunSplit):
            checked(host, [SPLIT_SCRIPT, action.mode], f"pvegpu-vfio-split {action.mode}")
        elif isinstance(action, CheckDrivers):
            self.check_drivers(action)
        elif isinstance(action, CheckGpus):
            self.check_gpus(action)
        elif isinstance(action, WaitHealthy):
            self.wait_healthy(action)
        return None

    def _check_base(self, action: CheckBase) -> None:
        entry = self.bundle.entry(action.target, action.path)
        vmid = container_vmid(action.target)
        content = (
            self.host.read(action.path)
            if vmid is None
            else container.read(self.host, vmid, action.path)
        )
        allowed = {action.sha256, entry.sha256 if entry else action.sha256}
        if sha256_of(content) not in allowed:
            raise ApplyError.one(
                "file-changed",
                "/" + action.path if vmid is None else f"CT {vmid}:/{action.path}",
                "changed since the bundle was rendered",
                "discover and render again, review, then apply the new bundle",
            )

    def _allowed_before(self, entry: Entry) -> frozenset[str]:
        """What the file may be when written: as backed up (before apply), or the new one."""
        before = self.state.before_sha(entry.target, entry.path)
        return frozenset(
            {before, entry.sha256} | ({entry.base_sha256} if entry.base_sha256 else set())
        )

    def _write_host(self, entry: Entry) -> None:
        self.host.write(entry.path, entry.content, entry.mode, before=self._allowed_before(entry))
        self.verify_written(entry)

    def _push(self, action: PushFile) -> None:
        entry = self.bundle.by_file(action.file)
        container.write(
            self.host,
            action.vmid,
            entry.path,
            entry.content,
            action.mode,
            staging=f"{self.state.dir}/staging/{entry.file}",
            before=self._allowed_before(entry),
        )
        self.verify_written(entry)

    def verify_written(self, entry: Entry) -> None:
        """Read the file back: it must equal the bundle's artifact byte for byte."""
        vmid = container_vmid(entry.target)
        now = (
            self.host.read(entry.path)
            if vmid is None
            else container.read(self.host, vmid, entry.path)
        )
        if now != entry.content:
            where = "/" + entry.path if vmid is None else f"CT {vmid}:/{entry.path}"
            raise _fail(where, "differs from the bundle's copy after writing it")

    # --- checks a person would make -----------------------------------------

    def check_drivers(self, action: CheckDrivers) -> None:
        wrong = [
            f"{a} on {self.host.driver(a) or 'no driver'}"
            for a in action.addresses
            if self.host.driver(a) != action.driver
        ]
        if wrong:
            raise _fail(
                ", ".join(action.addresses), f"not all on {action.driver}: {', '.join(wrong)}"
            )

    def check_gpus(self, action: CheckGpus) -> None:
        query = "--query-gpu=index,pci.bus_id"
        out = checked(
            self.host,
            pct_exec(action.vmid, "nvidia-smi", query, "--format=csv,noheader"),
            f"nvidia-smi in CT {action.vmid}",
        ).stdout
        seen = tuple(line.strip() for line in out.splitlines() if line.strip())
        want = tuple(f"{i}, {b}" for i, b in enumerate(action.bus_ids))
        if seen != want:
            raise _fail(
                f"CT {action.vmid}", f"nvidia-smi lists {list(seen)}, expected {list(want)}"
            )

    def wait_healthy(self, action: WaitHealthy) -> None:
        waited = 0
        while True:
            if self.host.run(pct_exec(action.vmid, "curl", "-fsS", action.url)).rc == 0:
                return
            if waited >= action.timeout_s:
                raise _fail(
                    action.url,
                    f"no answer within {action.timeout_s} s; read `pct exec {action.vmid} -- "
                    "journalctl -u <unit> -n 200 --no-pager`",
                )
            self.host.sleep(HEALTH_POLL_S)
            waited += HEALTH_POLL_S
