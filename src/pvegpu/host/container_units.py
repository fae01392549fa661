"""The systemd units enabled in containers whose GPUs the plan may change, read for the
leftover-server check (`planning/leftover_servers.py`).

A pool with `[pools.lxc.serving]` gets its unit rendered by pvegpu, which replaces the
unit of that name; any other server enabled there would start next to it. Every other
container that holds GPUs keeps its own units, and one that starts a server with
`--tp 8` on the 4 GPUs the plan leaves it fails at every start.
This module reads what that check needs, through the one reader (`host.reader`), in the
container's root file system as `model.guests.Guests.rootfs` finds it (`model/rootfs.py`: its
storage's directory, else where `pct mount <vmid>` put it):

- which units are enabled: the `*.service` links in `etc/systemd/system/*.wants/` and
  `*.requires/` (what `systemctl enable` writes);
- each enabled unit as systemd loads it: `etc/systemd/system/<name>` (and, for an
  instance `a@b.service`, its template `a@.service`) when there, else what the link
  points to; and its drop-ins in `etc/systemd/system` (`<name>.d/`, the dash prefixes,
  `service.d/`; `*.conf`);
- then, with the files left of the budget, every other `*.service` in
  `etc/systemd/system` (installed, not enabled: it does not start with the container,
  but one `systemctl start` runs it) with its drop-ins, the same way;
- the `--config FILE.yaml` any ExecStart= of those passes (an engine's options file,
  `engines.common.config_file`; which command is an engine's server is the engines' to
  say, in planning, so none is named here), at its path in the container (relative to
  the unit's WorkingDirectory=), within the same budget and size limit and after every
  unit: only a `.yaml`/`.yml` file, the only kind the engines take.

Nothing else: vendor directories (`/usr/lib/systemd/system`) hold what packages ship,
not the servers admins write. The work is bounded: at most `MAX_UNIT_FILES` files per
container, each at most `MAX_UNIT_BYTES` (a larger one is not read), links followed at
most `MAX_UNIT_HOPS` deep. A link is resolved inside the container, one hop at a time: an
absolute target is a path of the container, never of the host; a link to /dev/null is a
masked unit (read as empty, and the host's /dev/null is never opened).

The files go into the facts as `ConfigFile`s at their paths under the root; an enabling
link is kept at the link's own path with the text of the unit it names, which is how the
planner knows the unit is enabled (a unit file with no link naming it, or an instance of
it, is installed but not enabled).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterator

from pvegpu.host.reader import RootReader
from pvegpu.model.decision import ServingFiles
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.paths import (
    ENABLING_DIRS,
    LXC_DIR,
    UNIT_DIR,
    engine_config_path,
    template_of,
    unit_dropin_dirs,
)
from pvegpu.model.rootfs import rootfs_dirs
from pvegpu.model.schema import Spec
from pvegpu.vendors import CONTAINER_NODES
from pvegpu.vendors.drm import DRM_NODES

MASKED = "/dev/null"
MAX_UNIT_FILES = 256
"""Files read per container: a container with more enabled units than this is odd; the
rest are not read (docs/serving.md, "Servers pvegpu does not render")."""
MAX_UNIT_BYTES = 1024 * 1024
"""A unit file is a few KiB; a larger one is not a unit anyone wrote by hand."""
MAX_UNIT_HOPS = 8


def unit_containers(spec: Spec, facts: HostFacts) -> tuple[int, ...]:
    """The containers whose units are read: each container pool's, and every container
    that holds a GPU now (the plan may take it). A serving pool's too: pvegpu renders its
    server, and another server enabled there (another engine, an older unit name) would
    start next to it on the same GPUs."""
    lxc = [p.lxc for p in spec.pools if p.lxc is not None]
    wanted = {c.vmid for c in lxc}
    if spec.pools:
        for file in facts.files:
            directory, _, name = file.path.rpartition("/")
            stem = name.removesuffix(".conf")
            if directory == LXC_DIR and name.endswith(".conf") and stem.isdigit():
                # GPUs by the vendor's own nodes or by DRM render nodes (AMD, Intel).
                for nodes in (CONTAINER_NODES, DRM_NODES):
                    minors, every = guests(facts).granted_gpus(int(stem), nodes)
                    if minors or every:
                        wanted.add(int(stem))
    return tuple(sorted(wanted))


def read_container_units(reader: RootReader, spec: Spec, facts: HostFacts) -> ServingFiles:
    """The enabled units (and their drop-ins) of every container `unit_containers` names
    whose root file system is a directory on the host, or mounted by `pct mount`; block
    storage not mounted reads nothing."""
    found: dict[str, ConfigFile] = {}
    for vmid in unit_containers(spec, facts):
        location = guests(facts).rootfs(vmid)
        # The storage's directory, else where `pct mount` put it (block storage, or a
        # subvolume not mounted): the first that has a unit directory.
        for directory in rootfs_dirs(vmid, location):
            if reader.is_dir(f"{directory}/{UNIT_DIR}"):
                for file in _Units(reader, directory).read_with_configs():
                    found.setdefault(file.path, file)
                break
    return ServingFiles(tuple(found.values()))


def _exec_values(text: str, key: str) -> Iterator[str]:
    """The values of `key=` lines of a unit text, continuation lines joined."""
    for line in text.replace("\\\n", " ").splitlines():
        name, eq, value = line.strip().partition("=")
        if eq and name.strip() == key:
            yield value.strip()


def _working_directories(text: str) -> Iterator[str]:
    return _exec_values(text, "WorkingDirectory")


def _config_paths(text: str) -> Iterator[str]:
    """The `--config` files of a unit text's ExecStart= (a shell's `-c` script too), of
    whatever command: read broadly, the planner decides which are a server's and what
    they mean (the engines' `server_line`)."""
    for value in _exec_values(text, "ExecStart"):
        words = _split(value)
        words = [w for word in words for w in (_split(word) if " " in word else [word])]
        for i, word in enumerate(words):
            if word == "--config" and i + 1 < len(words):
                yield words[i + 1]
            elif word.startswith("--config="):
                yield word.partition("=")[2]


def _split(value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


class _Units:
    """One container's enabled units, then its other installed ones, read at most
    MAX_UNIT_FILES files deep."""

    def __init__(self, reader: RootReader, rootfs: str) -> None:
        self.reader = reader
        self.rootfs = rootfs
        self.budget = MAX_UNIT_FILES
        # Text by path inside the container: a link usually names the /etc file itself.
        self.texts: dict[str, str | None] = {}

    def _host(self, inside: str) -> str:
        return f"{self.rootfs}/{inside.lstrip('/')}"

    def read(self) -> Iterator[ConfigFile]:
        unit_dir = self._host(UNIT_DIR)
        # A symlinked unit directory is not followed: its absolute target would be read
        # as a host path, not the container's.
        if self.reader.through_link(unit_dir) or not self.reader.is_dir(unit_dir):
            return
        names = set(self.reader.listdir(unit_dir))
        enabled: dict[str, list[str]] = {}
        for entry in sorted(names):
            where = f"{unit_dir}/{entry}"
            if not entry.endswith(ENABLING_DIRS) or self.reader.readlink(where) is not None:
                continue
            if not self.reader.is_dir(where):
                continue
            for name in self.reader.listdir(where, lambda n: n.endswith(".service")):
                if len(enabled) < MAX_UNIT_FILES:
                    enabled.setdefault(name, []).append(f"{UNIT_DIR}/{entry}/{name}")
        for name, links in enabled.items():
            for link in links:
                # The link's own path, holding the text of the unit it names.
                if (text := self._text(link)) is not None:
                    yield ConfigFile(self._host(link), text)
            for unit in (name, template_of(name)):
                loaded = f"{UNIT_DIR}/{unit}"
                if unit in names and (text := self._text(loaded)) is not None:
                    yield ConfigFile(self._host(loaded), text)
            for directory in unit_dropin_dirs(name):
                yield from self._dropins(directory, names)
        # Then the units installed here but not enabled, with what budget is left: none
        # starts by itself, but `systemctl start` would run it on the GPUs the plan leaves.
        used = {*enabled, *(t for n in enabled if (t := template_of(n)) is not None)}
        for name in sorted(names - used):
            if not name.endswith(".service"):
                continue
            target = self.reader.readlink(f"{unit_dir}/{name}")
            if target is not None and posixpath.basename(target) in used:
                continue  # an Alias= of an enabled unit: judged as that unit
            if (text := self._text(f"{UNIT_DIR}/{name}")) is None:
                continue
            yield ConfigFile(self._host(f"{UNIT_DIR}/{name}"), text)
            for directory in unit_dropin_dirs(name):
                yield from self._dropins(directory, names)

    def read_with_configs(self) -> Iterator[ConfigFile]:
        """`read`, then the `--config` files the servers of what it read name."""
        units = list(self.read())
        yield from units
        # A relative path is the unit's WorkingDirectory='s, which a drop-in may set:
        # each one the container's units name is tried.
        directories = (
            None,
            *dict.fromkeys(d for u in units for d in _working_directories(u.content)),
        )
        paths = dict.fromkeys(p for u in units for p in _config_paths(u.content))
        places = dict.fromkeys(engine_config_path(p, d) for p in paths for d in directories)
        for inside in places:
            if inside is not None and (text := self._text(inside)) is not None:
                yield ConfigFile(self._host(inside), text)

    def _dropins(self, directory: str, names: set[str]) -> Iterator[ConfigFile]:
        if posixpath.basename(directory) not in names:
            return
        where = self._host(directory)
        if self.reader.readlink(where) is not None or not self.reader.is_dir(where):
            return
        for name in self.reader.listdir(where, lambda n: n.endswith(".conf")):
            if (text := self._text(f"{directory}/{name}")) is not None:
                yield ConfigFile(f"{where}/{name}", text)

    def _text(self, inside: str) -> str | None:
        """The text of the file at `inside` (a path in the container), links followed in
        the container; "" when masked; None when missing, too deep, too large or over
        the container's budget."""
        inside = "/" + inside.lstrip("/")
        if inside in self.texts:
            return self.texts[inside]
        start = inside
        text: str | None = None
        for _ in range(MAX_UNIT_HOPS):
            target = self.reader.readlink(self._host(inside), subject=self._host(start))
            if target is None:
                text = self._file(inside, start)
                break
            joined = posixpath.join(posixpath.dirname(inside), target)
            # normpath keeps a leading `//`; `..` stops at the container's root.
            inside = "/" + posixpath.normpath(joined).lstrip("/")
            if inside == MASKED:
                # Also `../../dev/null`, as an unpacked snapshot writes the link.
                text = ""
                break
        self.texts[start] = text
        return text

    def _file(self, inside: str, start: str) -> str | None:
        rel = self._host(inside)
        subject = self._host(start)
        if self.budget <= 0 or not self.reader.exists(rel) or self.reader.is_dir(rel):
            return None
        size = self.reader.size(rel)
        if size is None or size > MAX_UNIT_BYTES:
            return None
        self.budget -= 1
        return self.reader.read(rel, subject=subject)
