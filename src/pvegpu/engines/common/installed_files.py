"""The files of a container an engine's installed release is read from, through a root reader.

In the container's root file system (found by discovery from its storage or the spec's
container_rootfs), the interpreter's site-packages
(`<prefix>/lib/python3.*/{site,dist}-packages`, prefix from the spec's `python`) are
listed for the engine's `<package>-<version>.dist-info`, and its METADATA is read into the
facts. `installed` then decides the release from them. For a release pvegpu ships no
option table for, the sources the engine's table is read from are read too, so planning
can build the table without touching the root again.

The engine says which files it needs; the reader it is handed (`RootFiles`: host/'s root
reader, which discovery passes) is what opens them, inside the root and into the
snapshot's trace, so this module opens no path and no engine imports host/.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from pvegpu.engines.common.installed import (
    PYTHON_DIR,
    SITE_NAMES,
    Distribution,
    metadata_version,
    python_prefixes,
)
from pvegpu.model.facts import ConfigFile


class RootFiles(Protocol):
    """What an engine asks of the root it reads its installed release from: the text of
    a file, the names in a directory, whether a path is one. Paths are root-relative;
    what opens them (host/'s reader) keeps them inside the root."""

    def read(self, rel: str) -> str | None:
        """The file's text, None when it does not exist."""
        ...

    def listdir(self, rel: str, keep: Callable[[str], bool]) -> list[str]:
        """The sorted names in the directory that `keep` accepts; [] when it is missing."""
        ...

    def is_dir(self, rel: str) -> bool: ...


Source = Callable[[str], "str | None"]
"""The text of a file of the release's site-packages by its path there, None if absent."""
TableReader = Callable[[Source, str], None]
"""An engine's option reader run over `Source` for a release, only for the files it opens;
it must raise nothing (what fails is reported by planning, from the facts)."""


def _is_python_dir(name: str) -> bool:
    return PYTHON_DIR.fullmatch(name) is not None


def read_installed(
    reader: RootFiles,
    rootfs: str,
    python: str,
    distribution: Distribution,
    shipped: Collection[str],
    read_table: TableReader,
) -> tuple[ConfigFile, ...]:
    """The METADATA of `distribution` (and, for a release not in `shipped`, the sources
    `read_table` opens) that `python` in the container whose root file system is `rootfs`
    (under the host root) imports."""
    dist_info = distribution.dist_info
    files: dict[str, ConfigFile] = {}
    for site in _site_directories(reader, rootfs, python):
        for name in reader.listdir(site, lambda n: dist_info.fullmatch(n) is not None):
            path = f"{site}/{name}/METADATA"
            text = reader.read(path)
            if text is None:
                continue
            files[path] = ConfigFile(path, text)
            version = metadata_version(text)
            if version is not None and version not in shipped:
                files.update((f.path, f) for f in _table_sources(reader, site, version, read_table))
    return tuple(files.values())


def _site_directories(reader: RootFiles, rootfs: str, python: str) -> list[str]:
    found = []
    for prefix in python_prefixes(python):
        lib = f"{rootfs}/{prefix}/lib" if prefix else f"{rootfs}/lib"
        for version_dir in reader.listdir(lib, _is_python_dir) if reader.is_dir(lib) else ():
            for site_name in SITE_NAMES:
                site = f"{lib}/{version_dir}/{site_name}"
                if reader.is_dir(site):
                    found.append(site)
    return found


def _table_sources(
    reader: RootFiles, site: str, version: str, read_table: TableReader
) -> list[ConfigFile]:
    """The files the option reader opens for the table of the release installed at `site`.

    The reader runs here once only to learn which files it needs; planning runs it again
    on these texts from the facts. What fails here is reported there, from the facts.
    """
    read: list[ConfigFile] = []

    def source(path: str) -> str | None:
        text = reader.read(f"{site}/{path}")
        if text is not None:
            read.append(ConfigFile(f"{site}/{path}", text))
        return text

    read_table(source, version)
    return read
