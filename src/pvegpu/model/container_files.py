"""A container's root file system as the facts' files say, worked out once per facts value.

Discovery reads what pvegpu judges of a container from its root file system on the host
(its storage's directory, else where `pct mount` puts it: `model/rootfs.py`): its dpkg
status database, its account databases, its systemd units, its GPU libraries (stats: names
and sizes), its runtime's release file, an engine's `--config`. What serving, the engines
and planning ask of them is answered here, each answer on first use and then kept with the
facts' lookups (`container_files(facts).at(rootfs)`): whether anything of a container was
read there, its installed packages, its NVIDIA userspace, its users and groups, whether a
file is there. So they look no container file up by path and parse no text, and facts read
back from their JSON document, or evolved by a test, answer from their own files. No I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping

from pvegpu.formats.accounts import group_ids, user_gids
from pvegpu.formats.dpkg import installed_packages, upstream_version
from pvegpu.model.decision import ContainerDriver
from pvegpu.model.facts import ConfigFile, FileStat, HostFacts
from pvegpu.model.paths import (
    CONTAINER_LIBDIRS,
    DPKG_STATUS,
    GROUP_FILE,
    PASSWD_FILE,
    SYSTEM_UNIT_PATH,
)
from pvegpu.vendors import CONTAINER_USERSPACE, RUNTIME_RELEASE_FILES, Vendor, module_version_file

_DRIVER_VERSION = re.compile(r"^\d{3}\.\d+(?:\.\d+)?$")

_READ_MARKS = (*SYSTEM_UNIT_PATH, GROUP_FILE, PASSWD_FILE, *RUNTIME_RELEASE_FILES)
"""Files whose presence says discovery read a container there (besides its dpkg database
and GPU libraries): a unit, its accounts, its runtime's release."""


def container_files(facts: HostFacts) -> ContainerFiles:
    """The facts' container file systems, worked out once per facts value."""
    return facts.derived(ContainerFiles)


def driver_state(library_names: Iterable[str], packages: Mapping[str, str]) -> ContainerDriver:
    """Driver versions from a libdir listing and the installed dpkg packages (name ->
    Debian version)."""
    userspace = CONTAINER_USERSPACE
    libraries = sorted(
        (name, m.group("version")) for name in library_names if (m := userspace.library.match(name))
    )
    found: list[tuple[str, str]] = []
    for name, version in packages.items():
        upstream = upstream_version(version)
        # A driver package of the right name carrying a driver version: that is what keeps
        # unrelated packages (toolkits with their own versions) out.
        if userspace.driver_package(name) and _DRIVER_VERSION.match(upstream):
            found.append((name, upstream))
    return ContainerDriver(tuple(libraries), tuple(sorted(found)))


def container_driver_state(
    library_names: Iterable[str], dpkg_status: str | None
) -> ContainerDriver:
    """Driver versions from a libdir listing and the dpkg status database text (a
    container's as `check` reads it live: `model.observed`)."""
    return driver_state(library_names, installed_packages(dpkg_status or ""))


def module_version(facts: HostFacts, vendor: Vendor) -> str:
    """The version the host driver's module shows (an out-of-tree build's, amdgpu-dkms);
    "" for the kernel's own modules, which show none (`vendors.module_version_file`)."""
    file = facts.file(module_version_file(vendor))
    return file.content.strip() if file is not None else ""


class Accounts:
    """A container's /etc/group and /etc/passwd as getent reads them (`formats.accounts`).
    A plain class, never compared or shown."""

    __slots__ = ("_passwd", "group_file", "groups")

    def __init__(self, group: ConfigFile | None, passwd: ConfigFile | None) -> None:
        self.group_file = group
        """/etc/group as read; None when it was not."""
        self.groups: dict[str, tuple[int, tuple[str, ...]]] = group_ids(
            group.content if group is not None else ""
        )
        """name -> (gid, members), the first line of a name winning."""
        self._passwd = passwd.content if passwd is not None else ""

    def user_gids(self, user: str) -> set[int] | None:
        """The gids `user` has (its primary one and those listing it); None when
        /etc/passwd has no such user (or was not read)."""
        group = self.group_file.content if self.group_file is not None else ""
        return user_gids(self._passwd, group, user)

    def group_name(self, gid: int) -> str | None:
        """The name of the first group with `gid`; None when there is none."""
        return next((n for n, (g, _) in self.groups.items() if g == gid), None)


class ContainerTree:
    """What the facts hold of one container root file system (`path`, root-relative).
    A plain class, never compared or shown; each answer on first use."""

    __slots__ = ("_accounts", "_driver", "_files", "_libraries", "_packages", "_stats", "path")

    def __init__(self, path: str, files: dict[str, ConfigFile], stats: dict[str, FileStat]):
        self.path = path
        """The root file system's directory, relative to the host root."""
        self._files = files
        """Path inside the container (no leading /) -> the file as read."""
        self._stats = stats
        """Path inside the container -> its stat (names and sizes, no content)."""
        self._packages: dict[str, str] | None = None
        self._driver: ContainerDriver | None = None
        self._accounts: Accounts | None = None
        self._libraries: tuple[str, ...] | None = None

    @property
    def was_read(self) -> bool:
        """Did discovery read anything of a container here: its dpkg database, a GPU
        library, a unit, its accounts or its runtime's release (a ROCm image has no
        NVIDIA library)."""
        if DPKG_STATUS in self._files or self.libraries:
            return True
        return any(inside.startswith(_READ_MARKS) for inside in self._files)

    @property
    def libraries(self) -> tuple[str, ...]:
        """The names of the files directly in the container's library directories
        (`CONTAINER_LIBDIRS`), in that order, then the facts'."""
        if self._libraries is None:
            self._libraries = tuple(
                posixpath.basename(inside)
                for d in CONTAINER_LIBDIRS
                for inside in self._stats
                if posixpath.dirname(inside) == d
            )
        return self._libraries

    @property
    def dpkg_read(self) -> bool:
        """Whether its dpkg status database was read."""
        return DPKG_STATUS in self._files

    @property
    def packages(self) -> Mapping[str, str]:
        """Its installed dpkg packages, name -> version (empty when none was read)."""
        if self._packages is None:
            status = self._files.get(DPKG_STATUS)
            self._packages = installed_packages(status.content if status is not None else "")
        return self._packages

    @property
    def driver(self) -> ContainerDriver:
        """Its NVIDIA userspace: libraries and driver packages with their versions."""
        if self._driver is None:
            self._driver = driver_state(self.libraries, self.packages)
        return self._driver

    @property
    def accounts(self) -> Accounts:
        """Its users and groups."""
        if self._accounts is None:
            self._accounts = Accounts(self._files.get(GROUP_FILE), self._files.get(PASSWD_FILE))
        return self._accounts

    def has(self, inside: str) -> bool:
        """Whether discovery saw a file at `inside` (a path in the container, its leading
        / optional) by its stat: an interpreter, a library."""
        return inside.lstrip("/") in self._stats

    def text(self, inside: str) -> str | None:
        """The text of the file at `inside` (a path in the container, its leading /
        optional) as discovery read it; None when it did not (a `--config`, a release)."""
        found = self._files.get(inside.lstrip("/"))
        return found.content if found is not None else None

    def file(self, inside: str) -> ConfigFile | None:
        """The file at `inside` as read (its root-relative path, its text)."""
        return self._files.get(inside.lstrip("/"))

    @property
    def files(self) -> Mapping[str, ConfigFile]:
        """Every file read of it, by its path inside (no leading /), in the facts' order."""
        return self._files


class ContainerFiles:
    """A HostFacts' container file systems by directory, each on first use. A plain
    class, never compared or shown (as `HostFacts`' lookups)."""

    __slots__ = ("_facts", "_trees")

    def __init__(self, facts: HostFacts) -> None:
        self._facts = facts
        self._trees: dict[str, ContainerTree] = {}

    def at(self, rootfs: str) -> ContainerTree:
        """The container root file system at `rootfs` (relative to the host root)."""
        found = self._trees.get(rootfs)
        if found is None:
            prefix = rootfs.rstrip("/") + "/"
            cut = len(prefix)
            files: dict[str, ConfigFile] = {}
            for file in self._facts.files:
                if file.path.startswith(prefix):
                    files.setdefault(file.path[cut:], file)  # the first, as `facts.file`
            stats = {s.path[cut:]: s for s in self._facts.stats if s.path.startswith(prefix)}
            found = ContainerTree(rootfs, files, stats)
            self._trees[rootfs] = found
        return found
