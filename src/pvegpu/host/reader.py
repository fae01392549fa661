"""The one reader of a host root: every file, link and directory pvegpu reads under --root.

Discovery, the serving inputs, the CLI's "what is there now" and snapshot all read through
a `RootReader`, so they share one set of rules (docs/discovery.md, "How the tree is read"):

- **Inside the root only.** A path is resolved component by component as if the root
  were `/`: an absolute link target means `root/...`, `..` stops at the root, more than
  40 links in one lookup is a loop. No link is ever followed out of the root; a target
  that does not exist inside it reads as missing.
- **Regular files only.** The resolved path is lstat'ed (or its d_type read from a
  listing) before it is opened: anything else where a file is expected is a `not-a-file`
  error and is never opened (opening a FIFO blocks, opening some devices acts). The open
  uses O_NONBLOCK|O_NOFOLLOW and is checked with fstat, in case the file changed since.
- **A size cap.** At most `max_bytes + 1` bytes are read from any file.
- **A trace.** Given a `Trace`, the reader records every file it read (the bytes read),
  every link it followed or listed, every directory it listed, and the files it only
  stat'ed; `pvegpu.host.snapshot` archives exactly that.

Every failure is a `DiscoveryError` whose subject is the path as the caller asked for it,
relative to the root.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pvegpu.host.rawfile import MAX_FILE_BYTES as MAX_FILE_BYTES
from pvegpu.host.rawfile import RECAPTURE as RECAPTURE
from pvegpu.host.rawfile import decode, kind, read_regular
from pvegpu.host.rawfile import fail as fail

MAX_LINK_HOPS = 40
"""The kernel's own limit on symlinks followed in one lookup (ELOOP)."""


class Trace:
    """What a reader touched, by real path relative to the root (see pvegpu.host.snapshot).

    A plain class: a recorder that is filled in place and never compared, on every
    command's import path, where an attrs class costs its generated methods' compile."""

    __slots__ = ("dirs", "files", "links", "sized")

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.links: dict[str, str] = {}
        self.dirs: set[str] = set()
        self.sized: set[str] = set()
        """Files known by their size only (weight shards, libraries): archived empty."""


def _keep_all(_: str) -> bool:
    return True


class RootReader:
    """Reads a root as if it were `/`. Paths are relative to the root, `/`-separated.

    One reader is one reading of the tree: directory and link lookups are cached for its
    lifetime (discovery resolves the same bridges and links thousands of times).
    Methods that take `at` read `rel` relative to `at`, a real directory this reader
    resolved before (discovery resolves each device directory once); `subject` is the
    path errors name, by default `rel` as given.
    """

    def __init__(
        self, root: Path, trace: Trace | None = None, *, max_bytes: int = MAX_FILE_BYTES
    ) -> None:
        self.root = root
        self.trace = trace
        self.max_bytes = max_bytes
        self._prefix = os.fspath(root).rstrip("/") + "/"
        self.prefix = self._prefix
        """The root as a string ending in `/`: prefix + a real path is the path to open."""
        # Only directories and links are cached (leaves are read once; 16k devices).
        self._modes: dict[str, int] = {}
        self._targets: dict[str, str] = {}
        # (at, rel) -> (real directory, links followed on the way), for the walk above.
        self._walked: dict[tuple[str, str], tuple[str, int]] = {}

    # -- lookups

    def _mode(self, real: str, subject: str) -> int | None:
        mode = self._modes.get(real)
        if mode is not None:
            return mode
        try:
            mode = os.lstat(self._prefix + real).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:
            fail("unreadable", subject, f"cannot be read: {err.strerror}")
        if stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
            self._modes[real] = mode
        return mode

    def known(self, real: str, entry: os.DirEntry[str]) -> None:
        """What a listing's d_type said `real` is, when it is a link or a directory: the
        lstat of the next lookup through it is saved."""
        if entry.is_symlink():
            self._modes[real] = stat.S_IFLNK
        elif entry.is_dir(follow_symlinks=False):
            self._modes[real] = stat.S_IFDIR

    def _link_text(self, real: str, subject: str) -> str:
        target = self._targets.get(real)
        if target is None:
            try:
                # os, not pathlib: one Path object per link is measurable at 16k devices.
                target = os.readlink(self._prefix + real)  # noqa: PTH115
            except OSError as err:
                fail("unreadable", subject, f"cannot read the link: {err.strerror}")
            self._targets[real] = target
            if self.trace is not None:
                self.trace.links[real] = target
        return target

    def _resolve(self, rel: str, follow: bool, at: str, subject: str) -> tuple[str, int] | None:
        """(real path, lstat mode) of `rel`, or None when some component is missing."""
        if "/" not in rel and rel not in ("", ".", ".."):
            # One name in a resolved directory (every device attribute): one lookup.
            path = f"{at}/{rel}" if at else rel
            found = self._mode(path, subject)
            if found is None:
                return None
            if not (follow and stat.S_ISLNK(found)):
                return path, found
        if follow:
            again = self._walked.get((at, rel))
            if again is not None:
                return again[0], stat.S_IFDIR
        head, _, last = rel.rpartition("/")
        walked = self._walked.get((at, head)) if last not in ("", ".", "..") else None
        if walked is not None:
            # The directory part was resolved before (sys/kernel/iommu_groups/<N> for
            # its devices/ and type): only the last name is left, with the hops so far.
            here, hops = walked
            pending = [last]
        else:
            pending = [p for p in rel.split("/") if p and p != "."]
            pending.reverse()
            here = at
            hops = 0
        mode = stat.S_IFDIR  # `at`, the root and a walked directory are directories
        while pending:
            name = pending.pop()
            if name == "..":
                here = here.rpartition("/")[0]
                mode = stat.S_IFDIR
                continue
            path = f"{here}/{name}" if here else name
            found = self._mode(path, subject)
            if found is None:
                return None
            if stat.S_ISLNK(found) and (pending or follow):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    fail("symlink-loop", subject, f"more than {MAX_LINK_HOPS} symlinks to resolve")
                here, mode = self._follow(path, here, pending, subject), stat.S_IFDIR
                continue
            here, mode = path, found
        if stat.S_ISDIR(mode):
            # Directories only (devices, groups, drivers: bounded by the tree's directories,
            # not its files). A real path resolves to itself, in no hops.
            self._walked[(at, rel)] = (here, hops)
            self._walked[("", here)] = (here, 0)
        return here, mode

    def _follow(self, link: str, here: str, pending: list[str], subject: str) -> str:
        """The directory the walk goes on from after `link` (in real directory `here`, so
        `..` is its parent); names of the target still to walk are put on `pending`.

        A target naming a directory known to be real (resolved or listed before) is one
        step: each device's `iommu_group` and `driver` link, and its sys/bus/pci/devices
        link once its bridge was read, would otherwise walk every name again.
        """
        target = self._link_text(link, subject)
        names = [p for p in target.split("/") if p and p != "."]
        if target.startswith("/"):
            here = ""
        climb = 0
        while climb < len(names) and names[climb] == "..":
            here = here.rpartition("/")[0]
            climb += 1
        rest = names[climb:]
        if rest and ".." not in rest:
            landed = "/".join([here, *rest] if here else rest)
            if self._walked.get(("", landed)) == (landed, 0):
                return landed
            parent, _, last = landed.rpartition("/")
            if parent and self._walked.get(("", parent)) == (parent, 0):
                pending.append(last)
                return parent
        pending.extend(reversed(rest))
        return here

    def resolve(
        self, rel: str, *, follow: bool = True, at: str = "", subject: str | None = None
    ) -> str | None:
        """The real path of `rel` inside the root, or None when some component is missing.

        With follow=False the last component is not followed (like lstat/readlink).
        """
        found = self._resolve(rel, follow, at, subject or rel)
        return None if found is None else found[0]

    def readlink(self, rel: str, *, at: str = "", subject: str | None = None) -> str | None:
        """The text of the symlink `rel`, or None when it is missing or not a symlink."""
        subject = subject or rel
        found = self._resolve(rel, False, at, subject)
        if found is None or not stat.S_ISLNK(found[1]):
            return None
        return self._link_text(found[0], subject)

    def link_directory(self, name: str, at: str, subject: str) -> tuple[str, str | None]:
        """(text, real directory or None) of `name`, a link listed in real directory `at`
        (`Listing.link` said so): `readlink` and `directory` of it in one lookup.

        A target that lands in a directory known to be real (a device's `iommu_group`
        and `driver`, its `physfn` once the function was read) takes no lookup at all;
        any other is walked as `directory` walks it, inside the root.
        """
        path = f"{at}/{name}"
        text = self._link_text(path, subject)
        pending: list[str] = []
        landed = self._follow(path, at, pending, subject)
        if pending:
            found = self._resolve(name, True, at, subject)
            if found is None or not stat.S_ISDIR(found[1]):
                return text, None
            landed = found[0]
        if self.trace is not None:
            self.trace.dirs.add(landed)
        return text, landed

    def exists(self, rel: str, *, at: str = "", subject: str | None = None) -> bool:
        return self._resolve(rel, True, at, subject or rel) is not None

    def is_dir(self, rel: str, *, at: str = "", subject: str | None = None) -> bool:
        return self.directory(rel, at=at, subject=subject) is not None

    def directory(self, rel: str, *, at: str = "", subject: str | None = None) -> str | None:
        """The real path of directory `rel` (or of a link to one) inside the root, or None."""
        found = self._resolve(rel, True, at, subject or rel)
        if found is None or not stat.S_ISDIR(found[1]):
            return None
        if self.trace is not None:
            self.trace.dirs.add(found[0])
        return found[0]

    def through_link(self, rel: str) -> bool:
        """Does any component of `rel` (from the root) name a symlink?

        The serving reader skips such directories: a symlinked directory (merged-/usr
        `lib -> usr/lib`) is an alias of one read anyway.
        """
        path = ""
        for name in rel.split("/"):
            path = f"{path}/{name}" if path else name
            mode = self._mode(path, rel)
            if mode is None:
                return False
            if stat.S_ISLNK(mode):
                return True
        return False

    # -- files

    def read_bytes(
        self, rel: str, *, at: str = "", subject: str | None = None, limit: int | None = None
    ) -> bytes | None:
        """The bytes of regular file `rel`, or None when it does not exist. `limit`: a
        smaller cap than the reader's for this file (a PCI `config` is 4 KiB at most)."""
        subject = subject or rel
        found = self._resolve(rel, True, at, subject)
        return None if found is None else self.read_found(*found, subject, limit=limit)

    def read_found(self, real: str, mode: int, subject: str, *, limit: int | None = None) -> bytes:
        """The bytes of `real`, resolved by this reader, whose mode (lstat, or the d_type
        of a listing) says what it is: anything but a regular file is refused unopened."""
        if not stat.S_ISREG(mode):
            fail(
                "not-a-file",
                subject,
                f"is {kind(mode)}, where a regular file is expected; it was not opened",
                "replace it with the file the kernel or Proxmox writes there; " + RECAPTURE,
            )
        return self.read_regular(real, subject, limit=limit)

    def read_regular(self, real: str, subject: str, *, limit: int | None = None) -> bytes:
        """`read_found` of a path a listing's d_type says is a regular file."""
        cap = self.max_bytes if limit is None else min(limit, self.max_bytes)
        data = read_regular(self._prefix + real, subject, cap)
        if self.trace is not None:
            self.trace.files[real] = data
        return data

    def read(self, rel: str, *, at: str = "", subject: str | None = None) -> str | None:
        """The UTF-8 text of regular file `rel`, or None when it does not exist."""
        subject = subject or rel
        data = self.read_bytes(rel, at=at, subject=subject)
        return None if data is None else decode(data, subject)

    def need(self, rel: str, what: str, *, at: str = "", subject: str | None = None) -> str:
        """Like `read`, but a missing file is a `missing-file` error expecting `what`."""
        subject = subject or rel
        text = self.read(rel, at=at, subject=subject)
        if text is None:
            fail("missing-file", subject, f"does not exist; expected {what}")
        return text

    def size(self, rel: str) -> int | None:
        """The size of regular file `rel` from stat, or None when it does not exist."""
        found = self._resolve(rel, True, "", rel)
        if found is None:
            return None
        real, mode = found
        if not stat.S_ISREG(mode):
            fail("not-a-file", rel, f"is {kind(mode)}, where a regular file is expected")
        try:
            size = os.lstat(self._prefix + real).st_size
        except OSError as err:
            fail("unreadable", rel, f"cannot be read: {err.strerror}")
        if self.trace is not None:
            self.trace.sized.add(real)
        return size

    # -- directories

    def _scan(self, real: str, subject: str, keep: Callable[[str], bool]) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(self._prefix + real) as listing:
                entries = [e for e in listing if keep(e.name)]
            for entry in entries:
                # d_type comes with the listing: caching it saves the lstat of each entry
                # when the caller resolves it next (every device of sys/bus/pci/devices).
                path = f"{real}/{entry.name}" if real else entry.name
                if entry.is_symlink():
                    self._modes[path] = stat.S_IFLNK
                elif entry.is_dir(follow_symlinks=False):
                    self._modes[path] = stat.S_IFDIR
                    # Real, as its parent is: a link into it lands in one step (_follow).
                    self._walked[("", path)] = (path, 0)
        except OSError as err:
            fail("unreadable", subject, f"cannot be listed: {err.strerror}")
        entries.sort(key=lambda e: e.name)
        return entries

    def entries(self, real: str, subject: str) -> dict[str, os.DirEntry[str]]:
        """The entries of directory `real` (resolved by this reader) by name, listed once.

        For reading many names of one directory: `pvegpu.host.listing` tells files, links
        and directories apart by the listing's d_type instead of an lstat per name. Not
        traced: only what is then read from it is.
        """
        try:
            with os.scandir(self._prefix + real) as listing:
                return {entry.name: entry for entry in listing}
        except OSError as err:
            fail("unreadable", subject, f"cannot be listed: {err.strerror}")

    def listdir(
        self,
        rel: str,
        keep: Callable[[str], bool] = _keep_all,
        *,
        at: str = "",
        subject: str | None = None,
    ) -> list[str]:
        """Sorted names in directory `rel` that `keep` accepts; [] when it does not exist.

        A missing directory reads as empty: git keeps no empty directories, so a fixture
        tree or snapshot lacks sys/class/iommu where the kernel shows it empty. Something
        else where a directory is expected is a `not-a-directory` error. With a trace,
        the kept entries that are links or directories are recorded, so the unpacked
        snapshot lists the same names.
        """
        subject = subject or rel
        found = self._resolve(rel, True, at, subject)
        if found is None:
            return []
        real, mode = found
        if not stat.S_ISDIR(mode):
            fail(
                "not-a-directory",
                subject,
                f"is {kind(mode)}, where a directory is expected",
                "replace it with the directory the kernel or Proxmox has there; " + RECAPTURE,
            )
        entries = self._scan(real, subject, keep)
        if self.trace is not None:
            self.trace.dirs.add(real)
            for entry in entries:
                path = f"{real}/{entry.name}" if real else entry.name
                mode = self._modes.get(path, 0)
                if stat.S_ISLNK(mode):
                    self._link_text(path, subject)
                elif stat.S_ISDIR(mode):
                    self.trace.dirs.add(path)
        return [e.name for e in entries]

    def find(self, start: str, name: str, depth: int) -> list[str]:
        """Paths of the non-directories called `name` under `start`, `depth` levels down.

        Never through a symlinked directory (`start` included): that is an alias of a
        directory read anyway, or a way out of the tree. Nothing is traced but what the
        caller then reads, so a snapshot does not list the directories searched.
        """
        if self.through_link(start):
            return []
        found = self._resolve(start, True, "", start)
        if found is None or not stat.S_ISDIR(found[1]):
            return []
        matches: list[str] = []
        level = [start]
        for down in range(depth + 1):
            below: list[str] = []
            for directory in level:
                for entry in self._scan(directory, start, _keep_all):
                    path = f"{directory}/{entry.name}"
                    is_dir = stat.S_ISDIR(self._modes.get(path, 0))
                    if entry.name == name and not is_dir:
                        matches.append(path)
                    elif down < depth and is_dir:
                        below.append(path)
            level = below
        return sorted(matches)


_T = TypeVar("_T")
_R = TypeVar("_R")


def parsed(path: str, raw: _R, process: Callable[[_R], _T]) -> _T:
    """Run a pure parser; its ValueError becomes a bad-value problem about `path`."""
    try:
        return process(raw)
    except ValueError as err:
        fail("bad-value", path, str(err))
