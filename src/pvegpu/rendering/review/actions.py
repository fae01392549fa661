"""The runbook's steps as typed actions: one list for SUMMARY.md and for `pvegpu apply`.

Each action knows the shell lines the admin pastes (`lines()`, the runbook text) and
carries the typed values `pvegpu.apply` executes through its effects seam. The runbook
prints the lines; apply runs the actions; both come from the same `Step` values, so what
the reviewer approved is what apply does. Actions are plain values, written into
MANIFEST.json (by the apply contract's codec, `contract.py`) so a rendered directory can
be applied without planning again.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from typing import ClassVar, get_args

import attrs

from pvegpu.formats.shell import word as sh
from pvegpu.pci import PciAddress
from pvegpu.rendering.bundle_layout import MANIFEST as MANIFEST_FILE
from pvegpu.rendering.revert import ABSENT_SUFFIX, KEPT_SUFFIX
from pvegpu.rendering.review.changes import BACKUP_DIR, container_vmid
from pvegpu.rendering.review.commands import SPLIT_SCRIPT, driver_check
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_TOOL

OMIT_DEFAULT = "pvegpu.omit-default"
"""Field metadata: MANIFEST.json leaves the field out while it has its default, so the
actions of bundles that do not use it read as before it existed."""


def _sha_line(target: str, path: str, sha256: str) -> str:
    line = f"{sha256}  /{path}"
    vmid = container_vmid(target)
    # pct exec passes stdin through, so the same check runs inside the container.
    where = "" if vmid is None else f"pct exec {vmid} -- "
    return f"echo {shlex.quote(line)} | {where}sha256sum -c -"


@value_class
@attrs.frozen(eq=False, repr=False)
class CheckNode:
    """Apply runs on the planned node, from a rendered bundle."""

    kind: ClassVar[str] = "check-node"
    node: str

    def lines(self) -> tuple[str, ...]:
        return (f'test "$(hostname)" = {sh(self.node)} && test -f {MANIFEST_FILE} && echo ready',)


@value_class
@attrs.frozen(eq=False, repr=False)
class CheckBase:
    """A file to patch is still the copy the patch was made from."""

    kind: ClassVar[str] = "check-base"
    target: str
    path: str
    sha256: str

    def lines(self) -> tuple[str, ...]:
        return (_sha_line(self.target, self.path, self.sha256),)


@value_class
@attrs.frozen(eq=False, repr=False)
class SaveCopies:
    """Host files written whole that revert/ cannot restore: copied aside first."""

    kind: ClassVar[str] = "save-copies"
    paths: tuple[str, ...]

    def lines(self) -> tuple[str, ...]:
        files = " ".join(sh("/" + p) for p in self.paths)
        return (f"mkdir -p {BACKUP_DIR}", f"cp --parents {files} {BACKUP_DIR}/")


@value_class
@attrs.frozen(eq=False, repr=False)
class StopService:
    kind: ClassVar[str] = "stop-service"
    vmid: int
    unit: str

    def lines(self) -> tuple[str, ...]:
        return (f"pct exec {self.vmid} -- systemctl stop {sh(self.unit)}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class StartService:
    kind: ClassVar[str] = "start-service"
    vmid: int
    unit: str

    def lines(self) -> tuple[str, ...]:
        return (f"pct exec {self.vmid} -- systemctl start {sh(self.unit)}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class PullCopy:
    """A container unit pvegpu could not read, copied out for revert.sh (`pct pull`)."""

    kind: ClassVar[str] = "pull-copy"
    vmid: int
    path: str
    copy: str
    """Where the copy goes, relative to the rendered directory."""

    def lines(self) -> tuple[str, ...]:
        directory = posixpath.dirname(self.copy)
        probe = f"test -e {sh('/' + self.path)} && echo present || echo absent"
        return (
            f"mkdir -p {sh(directory)}",
            f'case "$(pct exec {self.vmid} -- sh -c {sh(probe)})" in '
            f"present) pct pull {self.vmid} {sh('/' + self.path)} {sh(self.copy)} --perms 0600 ;; "
            f"absent) touch {sh(self.copy + ABSENT_SUFFIX)} ;; *) false ;; esac",
            f"ls {sh(directory)}",
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class MakeContainerDir:
    kind: ClassVar[str] = "make-container-dir"
    vmid: int
    path: str

    def lines(self) -> tuple[str, ...]:
        return (f"pct exec {self.vmid} -- mkdir -p {sh('/' + self.path)}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class KeepAside:
    """An old container file holding secrets is copied aside inside the container."""

    kind: ClassVar[str] = "keep-aside"
    vmid: int
    path: str

    def lines(self) -> tuple[str, ...]:
        src = "/" + self.path
        return (f"pct exec {self.vmid} -- cp -a {sh(src)} {sh(src + KEPT_SUFFIX)}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class PushFile:
    """A bundle file into a running container (`pct push`)."""

    kind: ClassVar[str] = "push-file"
    vmid: int
    file: str
    """Where the file lies in the rendered directory."""
    path: str
    mode: int

    def lines(self) -> tuple[str, ...]:
        return (
            f"pct push {self.vmid} {sh(self.file)} {sh('/' + self.path)} --perms {self.mode:04o}",
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class ContainerReload:
    kind: ClassVar[str] = "container-reload"
    vmid: int

    def lines(self) -> tuple[str, ...]:
        return (f"pct exec {self.vmid} -- systemctl daemon-reload",)


@value_class
@attrs.frozen(eq=False, repr=False)
class StopContainer:
    kind: ClassVar[str] = "stop-container"
    vmid: int
    shutdown_s: int = attrs.field(default=0, metadata={OMIT_DEFAULT: True})
    """Shut it down cleanly, killed after this many seconds (`pct shutdown`); 0: `pct
    stop` at once, for a container whose server was stopped first (emptied_steps.py)."""

    def lines(self) -> tuple[str, ...]:
        if self.shutdown_s:
            return (f"pct shutdown {self.vmid} --timeout {self.shutdown_s} --forceStop 1",)
        return (f"pct stop {self.vmid}",)

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(self.lines()[0].split())


@value_class
@attrs.frozen(eq=False, repr=False)
class StartContainer:
    kind: ClassVar[str] = "start-container"
    vmid: int

    def lines(self) -> tuple[str, ...]:
        return (f"pct start {self.vmid}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class CheckHolders:
    """Nothing has the GPUs that leave nvidia open (an unbind would block)."""

    kind: ClassVar[str] = "check-holders"
    devices: tuple[str, ...]

    def lines(self) -> tuple[str, ...]:
        return (f"fuser -v {' '.join(self.devices)}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class InstallFile:
    """A host file outside /etc/pve: `install -D -m`."""

    kind: ClassVar[str] = "install-file"
    file: str
    path: str
    mode: int

    def lines(self) -> tuple[str, ...]:
        return (f"install -D -m {self.mode:04o} {sh(self.file)} {sh('/' + self.path)}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class WritePveFile:
    """A file under /etc/pve: `cp`, because pmxcfs sets modes and owners itself."""

    kind: ClassVar[str] = "write-pve-file"
    file: str
    path: str

    def lines(self) -> tuple[str, ...]:
        return (f"cp {sh(self.file)} {sh('/' + self.path)}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class HostCommand:
    """A fixed command on the host (`systemctl daemon-reload`, `update-initramfs -u -k all`).

    `rerun_on_revert`: the command acts on files (the initramfs is built from
    modprobe.d), so undoing the change runs it again once the files are back.
    """

    kind: ClassVar[str] = "host-command"
    line: str
    rerun_on_revert: bool = False

    def lines(self) -> tuple[str, ...]:
        return (self.line,)

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(shlex.split(self.line))


@value_class
@attrs.frozen(eq=False, repr=False)
class EnableUnit:
    kind: ClassVar[str] = "enable-unit"
    unit: str

    def lines(self) -> tuple[str, ...]:
        return (f"systemctl enable {self.unit}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class RestartUnit:
    """A boot unit run now as it runs at every boot (`systemctl restart`), so that what it
    makes is there before the containers start. `cleanup`: the command that takes back
    what it made (the staged userspace), run by the revert while its script is installed."""

    kind: ClassVar[str] = "restart-unit"
    unit: str
    cleanup: tuple[str, ...] = ()

    def lines(self) -> tuple[str, ...]:
        return (f"systemctl restart {sh(self.unit)}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class RunSplit:
    """The rendered split script, the same code the boot unit runs."""

    kind: ClassVar[str] = "run-split"
    mode: str

    def lines(self) -> tuple[str, ...]:
        return (f"{SPLIT_SCRIPT} {self.mode}",)


@value_class
@attrs.frozen(eq=False, repr=False)
class CheckDrivers:
    """Every listed function is bound to `driver`, read from sysfs."""

    kind: ClassVar[str] = "check-drivers"
    addresses: tuple[str, ...]
    driver: str

    def lines(self) -> tuple[str, ...]:
        if not self.addresses:
            return ()
        return (driver_check([PciAddress.parse(a) for a in self.addresses]),)


@value_class
@attrs.frozen(eq=False, repr=False)
class CheckGpus:
    """The GPU tool inside the container (`vendors.CONTAINER_TOOL`) lists exactly these
    GPUs, in this order."""

    kind: ClassVar[str] = "check-gpus"
    vmid: int
    bus_ids: tuple[str, ...]
    driver_dir: str = attrs.field(default="", metadata={OMIT_DEFAULT: True})
    """The staged host userspace as the container sees it (`userspace = "host"`): the tool
    is run from there, on its libraries, as the server runs them; empty: the container's."""

    def command(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """The tool's `argv` as the container runs it for the server."""
        if not self.driver_dir:
            return argv
        staged = self.driver_dir
        return ("env", f"LD_LIBRARY_PATH={staged}/lib", f"{staged}/bin/{argv[0]}", *argv[1:])

    def lines(self) -> tuple[str, ...]:
        return tuple(
            f"pct exec {self.vmid} -- {' '.join(self.command(argv))}"
            for argv in (CONTAINER_TOOL.list_gpus, CONTAINER_TOOL.query_bus_ids)
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class CheckNodes:
    """The container has these device nodes, each the char device of these numbers: the
    check for a vendor with no GPU listing tool (its userspace opens just the nodes)."""

    kind: ClassVar[str] = "check-nodes"
    vmid: int
    paths: tuple[str, ...]
    numbers: tuple[str, ...]
    """`major:minor` (decimal) of each path."""
    owner: str | None = None
    """`<gid> <mode>` every node has (`993 660`), as the devN entries create them; None:
    bind mounts, which keep the host node's, unknown to the plan."""

    @property
    def format(self) -> str:
        """stat's format: the node, its numbers and, when planned, its group and mode."""
        return "%n %t:%T %g %a" if self.owner is not None else "%n %t:%T"

    def lines(self) -> tuple[str, ...]:
        return (f"pct exec {self.vmid} -- stat -c '{self.format}' {' '.join(self.paths)}",)

    def expected(self) -> tuple[str, ...]:
        """What the command prints: stat's `%t:%T` is major:minor in hex, `%a` the mode in
        octal without a leading zero."""
        found = []
        for path, number in zip(self.paths, self.numbers, strict=True):
            major, _, minor = number.partition(":")
            line = f"{path} {int(major):x}:{int(minor):x}"
            found.append(line if self.owner is None else f"{line} {self.owner}")
        return tuple(found)


@value_class
@attrs.frozen(eq=False, repr=False)
class WaitHealthy:
    kind: ClassVar[str] = "wait-healthy"
    vmid: int
    url: str
    timeout_s: int

    def lines(self) -> tuple[str, ...]:
        return (
            f"timeout {self.timeout_s} sh -c 'until pct exec {self.vmid} -- curl -fsS "
            f"{self.url}; do sleep 10; done' && echo healthy",
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class Manual:
    """A line for the admin that apply does not run (a reboot, starting a VM, later checks)."""

    kind: ClassVar[str] = "manual"
    line: str

    def lines(self) -> tuple[str, ...]:
        return (self.line,)


Action = (
    CheckNode
    | CheckBase
    | SaveCopies
    | StopService
    | StartService
    | PullCopy
    | MakeContainerDir
    | KeepAside
    | PushFile
    | ContainerReload
    | StopContainer
    | StartContainer
    | CheckHolders
    | InstallFile
    | WritePveFile
    | HostCommand
    | EnableUnit
    | RestartUnit
    | RunSplit
    | CheckDrivers
    | CheckGpus
    | CheckNodes
    | WaitHealthy
    | Manual
)
ACTIONS: Mapping[str, type[Action]] = {cls.kind: cls for cls in get_args(Action)}
"""Each action class by its `kind`, the key MANIFEST.json names it by."""


def lines_of(actions: Sequence[Action]) -> tuple[str, ...]:
    return tuple(line for a in actions for line in a.lines())
