"""The one seam through which apply changes a host: files under a root, commands, sysfs.

`Host` is what the apply, revert and check code calls; `LiveHost` is the real thing.
Files are changed as Proxmox changes them (reference: pve-common's file_set_contents
and the guest config locks):
- guest configs under the guest's node-local flock (`/run/lock/lxc/pve-config-<vmid>.lock`,
  `/var/lock/qemu-server/lock-<vmid>.conf`), held for the whole read-check-write, so a
  `pct set`, the GUI or a backup cannot interleave;
- cluster files (`/etc/pve/mapping/pci.cfg`) under pmxcfs' directory lock
  (`/etc/pve/priv/lock/file-<path with . and / as _>`), cluster-wide;
- every write is `<file>.tmp.<pid>` (O_EXCL), fsync, rename over the target: a kill at any
  moment leaves the old file or the new one, never a mix. /etc/pve takes no chmod.
Commands run only when the root is `/` (`live`): against a copied tree they would still
act on the live machine. A root that is not `/` (a snapshot, for `apply --dry-run`) is read
as if it were `/`, its links resolved inside it, so nothing of the live `/` is read. A
command that is not installed is a `command-missing` problem, never a traceback.
`exclusive` is the one node-wide lock of apply and revert. Tests subclass LiveHost and
answer the commands themselves.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Protocol

import attrs

from pvegpu.apply.not_installed import missing_command
from pvegpu.errors import ApplyError
from pvegpu.host.reader import RootReader
from pvegpu.values import value_class

LOCK_TIMEOUT_S = 10.0
"""How long Proxmox itself waits for a guest config lock or a pmxcfs lock."""
PMXCFS_LOCK_DIR = "etc/pve/priv/lock"
PVE_DIR = "etc/pve/"
_LXC_CONF = re.compile(r"etc/pve/(?:nodes/[^/]+/)?lxc/(\d+)\.conf")
_QEMU_CONF = re.compile(r"etc/pve/(?:nodes/[^/]+/)?qemu-server/(\d+)\.conf")


@value_class
@attrs.frozen(eq=False, repr=False)
class Completed:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str


@value_class
@attrs.frozen(eq=False, repr=False)
class Holder:
    pid: int
    command: str
    device: str
    cgroup: str
    """`/proc/<pid>/cgroup`: `0::/lxc/129/...` for a process of container 129."""

    def in_container(self, vmid: int) -> bool:
        return f"/lxc/{vmid}/" in self.cgroup or self.cgroup.rstrip().endswith(f"/lxc/{vmid}")


class Host(Protocol):
    """Every effect apply has on a host. Paths are relative to the host's root."""

    root: Path
    live: bool
    """Commands run here and act on this host: the root is the running machine's `/`."""

    def read(self, path: str) -> bytes | None: ...

    def write(self, path: str, content: bytes, mode: int, *, before: frozenset[str] | None) -> None:
        """Replace `path` atomically under its Proxmox lock, if its sha256 (or `absent`)
        is one of `before` (None: whatever it is); else refuse naming it."""

    def remove(self, path: str, *, before: frozenset[str] | None) -> None: ...

    def run(self, argv: Sequence[str]) -> Completed: ...

    def installed(self, command: str) -> bool:
        """`command` (a name looked up on PATH, or an absolute path) can be run."""

    def exclusive(self, rel: str) -> AbstractContextManager[None]:
        """Hold the exclusive lock `rel` for the block; refuse at once (`apply-locked`,
        naming the holder's pid) when another process holds it."""

    def holders(self, devices: Sequence[str]) -> tuple[Holder, ...]: ...

    def driver(self, address: str) -> str | None: ...

    def sleep(self, seconds: float) -> None: ...

    def path(self, rel: str) -> str:
        """`rel` as the commands on this host name it (absolute)."""


ABSENT = "absent"
"""In `before`: the file may not exist yet."""


def sha256_of(content: bytes | None) -> str:
    return ABSENT if content is None else hashlib.sha256(content).hexdigest()


class LiveHost:
    """The real host under `root` (`/` on a Proxmox node)."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self.live = os.path.realpath(root) == "/"

    # --- files --------------------------------------------------------------

    @staticmethod
    def _checked(rel: str) -> str:
        if rel.startswith("/") or ".." in rel.split("/"):
            raise ApplyError.one(
                "apply-path", rel, "not a path inside the root", "this is a pvegpu bug; report it"
            )
        return rel

    def _abs(self, rel: str) -> Path:
        """The file's real place, its directory's links resolved but kept inside the root.

        /etc/pve/lxc is a link to /etc/pve/nodes/<node>/lxc on a Proxmox node: the file
        is written where the link leads; the file itself is never a link followed.
        Only the running machine is changed: a tree under another root is only read.
        """
        path = self.root / self._checked(rel)
        if not self.live:
            raise ApplyError.one(
                "apply-not-live",
                str(self.root),
                f"/{rel} would be changed in this tree, and the commands that go with it "
                "would act on the running machine",
                "run apply on the node itself, with --root /; elsewhere only --dry-run",
            )
        parent = Path(os.path.realpath(path.parent))
        root = Path(os.path.realpath(self.root))
        if parent != root and root not in parent.parents:
            raise ApplyError.one(
                "apply-path",
                "/" + rel,
                f"its directory leads outside {self.root} ({parent})",
                "replace the link on that path with the directory it stands for",
            )
        return parent / path.name

    def _in_tree(self, rel: str) -> Path | None:
        """`rel` in a tree that is not the running machine (a snapshot), its directory
        resolved as if the root were `/` (an absolute link means root/...), so that no
        lookup reaches the live `/`; None when the directory is not in the tree."""
        head, _, name = self._checked(rel).rpartition("/")
        real = RootReader(self.root).directory(head) if head else ""
        return None if real is None else self.root / real / name

    def read(self, path: str) -> bytes | None:
        target = self._abs(path) if self.live else self._in_tree(path)
        if target is None:
            return None
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise ApplyError.one(
                    "apply-symlink",
                    "/" + path,
                    "is a symbolic link; apply never follows one",
                    "replace the link with the file it points to, then apply again",
                ) from err
            raise
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def write(self, path: str, content: bytes, mode: int, *, before: frozenset[str] | None) -> None:
        target = self._abs(path)
        with self._locked(path):
            self._expect(path, before)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.parent / f"{target.name}.tmp.{os.getpid()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(content)
                    handle.flush()
                    os.fsync(handle.fileno())
                if not path.startswith(PVE_DIR):
                    tmp.chmod(mode)  # pmxcfs sets its own modes and refuses chmod
                tmp.replace(target)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    def remove(self, path: str, *, before: frozenset[str] | None) -> None:
        target = self._abs(path)
        with self._locked(path):
            self._expect(path, before)
            target.unlink(missing_ok=True)

    def _expect(self, path: str, before: frozenset[str] | None) -> None:
        if before is None:
            return
        now = sha256_of(self.read(path))
        if now not in before:
            raise ApplyError.one(
                "file-changed",
                "/" + path,
                "changed since the bundle was rendered (its sha256 is neither the bundle's "
                "base nor its new copy); nothing was written to it",
                "discover and render again, review, then apply the new bundle",
            )

    @contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        if m := _LXC_CONF.fullmatch(path):
            with self._flock(f"run/lock/lxc/pve-config-{m.group(1)}.lock"):
                yield
        elif m := _QEMU_CONF.fullmatch(path):
            with self._flock(f"var/lock/qemu-server/lock-{m.group(1)}.conf"):
                yield
        elif path.startswith(PVE_DIR):
            lockid = "file-" + path[len(PVE_DIR) :].replace(".", "_").replace("/", "_")
            with self._pmxcfs_lock(f"{PMXCFS_LOCK_DIR}/{lockid}"):
                yield
        else:
            yield

    @contextmanager
    def _flock(self, rel: str) -> Iterator[None]:
        lock = self.root / rel
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ApplyError.one(
                            "lock-timeout",
                            "/" + rel,
                            f"held by another process for {LOCK_TIMEOUT_S:.0f} s (pct, qm, "
                            "the GUI or a backup)",
                            "wait until the other operation finishes, then apply again",
                        ) from None
                    time.sleep(0.1)
            yield
        finally:
            os.close(fd)

    @contextmanager
    def _pmxcfs_lock(self, rel: str) -> Iterator[None]:
        lock = self.root / rel
        lock.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                lock.mkdir()
                break
            except FileExistsError:
                # Ask pmxcfs to expire a lock whose holder died (it does after 120 s).
                with suppress(OSError):
                    os.utime(lock, (0, 0))
                if time.monotonic() > deadline:
                    raise ApplyError.one(
                        "lock-timeout",
                        "/" + rel,
                        "the cluster lock is held (another node or tool is changing the file)",
                        "wait and apply again; a dead holder's lock expires after 120 s",
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            lock.rmdir()

    # --- commands, processes, sysfs -----------------------------------------

    def run(self, argv: Sequence[str]) -> Completed:
        if not self.live:
            raise ApplyError.one(
                "apply-not-live",
                str(self.root),
                f"`{' '.join(argv)}` would act on the running machine, not on this root",
                "run apply on the node itself, with --root /",
            )
        try:
            return self._execute(tuple(argv))
        except FileNotFoundError:
            # Preflight checks the runbook's commands; this catches any other one.
            raise ApplyError([missing_command(argv[0], f"`{' '.join(argv)}`")]) from None
        except OSError as err:
            raise ApplyError.one(
                "command-failed",
                " ".join(argv),
                f"cannot be started: {err.strerror}",
                "fix the cause, then run pvegpu apply again (it resumes) or pvegpu revert",
            ) from None

    def _execute(self, argv: tuple[str, ...]) -> Completed:
        """Run `argv` (OSError when it cannot be started); tests answer it themselves."""
        proc = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        return Completed(argv, proc.returncode, proc.stdout, proc.stderr)

    def installed(self, command: str) -> bool:
        # The PATH lookup subprocess makes too: what is found here is what would run.
        return shutil.which(command) is not None

    @contextmanager
    def exclusive(self, rel: str) -> Iterator[None]:
        """A non-blocking flock on `rel`, our pid in it while held (cleared before release,
        so no refusal names a stale pid). Refusing, not waiting: a run that waited would
        act on a host the first one changed. A kill releases it with the process."""
        lock = self._abs(rel)
        try:
            lock.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as err:
            raise ApplyError.one(
                "lock-unusable", "/" + rel, f"cannot be opened: {err.strerror}",
                "make it a plain file (it holds only a pid), then run this again",
            ) from None  # fmt: skip
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
                who = f"process {pid}" if pid.isdigit() else "another process"
                raise ApplyError.one(
                    "apply-locked",
                    "/" + rel,
                    f"is held by {who}: another pvegpu apply or revert is running on this "
                    "node, and two at once would interleave their steps",
                    f"wait until it has finished (`ps -p {pid if pid.isdigit() else '<pid>'}`),"
                    " then run this again",
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            try:
                yield
            finally:
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)

    def holders(self, devices: Sequence[str]) -> tuple[Holder, ...]:
        """Processes with one of `devices` open, from /proc/<pid>/fd under the root."""
        if not self.live:
            # A snapshot holds no processes; links under a tree's proc/ could lead into
            # the live /proc of the machine reviewing it.
            return ()
        wanted = set(devices)
        found: list[Holder] = []
        proc = self.root / "proc"
        try:
            pids = sorted(int(p.name) for p in proc.iterdir() if p.name.isdigit())
        except FileNotFoundError:
            return ()
        for pid in pids:
            try:
                links = {str(fd.readlink()) for fd in (proc / str(pid) / "fd").iterdir()}
                comm = (proc / str(pid) / "comm").read_text(errors="replace").strip()
                cgroup = (proc / str(pid) / "cgroup").read_text(errors="replace")
            except OSError:
                continue  # gone meanwhile, or not ours to read
            found += [Holder(pid, comm, d, cgroup) for d in sorted(links & wanted)]
        return tuple(found)

    def driver(self, address: str) -> str | None:
        link = self.root / "sys/bus/pci/devices" / address / "driver"
        try:
            return link.readlink().name
        except OSError:
            return None

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def path(self, rel: str) -> str:
        return str(self.root / rel)
