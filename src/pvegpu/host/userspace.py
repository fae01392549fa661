"""The loaded GPU driver's userspace in the host root: what `userspace = "host"` stages.

For each vendor that has one (`Vendor.host_userspace`, NVIDIA's) and whose module is
loaded, the files of exactly that module's version: `<library>.so.<version>` in the
multiarch directory, the links there that end at one of them (`libcuda.so.1 ->
libcuda.so.590.48.01`, as ldconfig or the installer made them), and the tools. Listed
and stat'ed through the reader, never opened: a name says what the staging script will
find, and a snapshot archives the files empty.
"""

from __future__ import annotations

import posixpath

from pvegpu.host.reader import RootReader
from pvegpu.model.facts import GpuDriver
from pvegpu.model.userspace import UserspaceFile
from pvegpu.vendors import VENDORS, HostUserspace


def read_driver_userspace(
    reader: RootReader, drivers: tuple[GpuDriver, ...]
) -> tuple[UserspaceFile, ...]:
    """Every vendor's host userspace files of its loaded module's version, by path."""
    found: list[UserspaceFile] = []
    for vendor in VENDORS:
        userspace = vendor.host_userspace
        loaded = next((d for d in drivers if d.driver == vendor.host_driver), None)
        if userspace is not None and loaded is not None:
            found += _libraries(reader, userspace, loaded.version)
            found += _tools(reader, userspace)
    return tuple(sorted(found, key=lambda f: f.path))


def _libraries(reader: RootReader, userspace: HostUserspace, version: str) -> list[UserspaceFile]:
    libdir = userspace.libdir
    if reader.through_link(libdir) or not reader.is_dir(libdir):
        return []
    files = {userspace.library(n, version) for n in userspace.libraries}
    prefixes = tuple(f"{n}.so" for n in userspace.libraries)
    names = reader.listdir(libdir, lambda name: name.startswith(prefixes))
    found: dict[str, UserspaceFile] = {}
    links: dict[str, str] = {}
    for name in names:
        path = f"{libdir}/{name}"
        target = reader.readlink(path)
        if target is not None:
            links[name] = target
        elif name in files and reader.size(path) is not None:
            # Stat'ed through the reader (a snapshot archives it, empty), never opened.
            found[name] = UserspaceFile(path)
    # A link counts when it ends at a file found, through links to names beside it
    # (libcuda.so -> libcuda.so.1 -> libcuda.so.590.48.01), as ldconfig and the installer
    # make them; another version's link, or one with a path, is left out.
    for name, target in links.items():
        seen = {name}
        while target in links and target not in seen:
            seen.add(target)
            target = links[target]
        if target in found:
            found[name] = UserspaceFile(f"{libdir}/{name}", link=links[name])
    return list(found.values())


def _tools(reader: RootReader, userspace: HostUserspace) -> list[UserspaceFile]:
    found = []
    for tool in userspace.tools:
        path = posixpath.join(userspace.bindir, tool)
        if reader.exists(path) and reader.size(path) is not None:
            found.append(UserspaceFile(path))
    return found
