"""The files of a container vLLM's installed release is read from, through a root reader.

As for SGLang (`engines.sglang.installed_files`): the interpreter's site-packages are
listed for `vllm-<version>.dist-info` and its METADATA read into the facts; for a release
pvegpu ships no option table for, also the sources the table is read from (the serve
subcommand, `make_arg_parser`, `arg_utils.py` and the config modules they use), so that
planning builds the table without touching the root again. The reader it is handed
(`host.reader`) opens them, inside the root and into the snapshot's trace.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from pvegpu.engines.sglang.installed import (
    PYTHON_DIR,
    SITE_NAMES,
    metadata_version,
    python_prefixes,
)
from pvegpu.engines.vllm.installed import DIST_INFO
from pvegpu.engines.vllm.options import shipped_versions
from pvegpu.errors import DiscoveryError
from pvegpu.model.facts import ConfigFile

if TYPE_CHECKING:
    from pvegpu.host.reader import RootReader


def _is_python_dir(name: str) -> bool:
    return PYTHON_DIR.fullmatch(name) is not None


def _is_dist_info(name: str) -> bool:
    return DIST_INFO.fullmatch(name) is not None


def read_installed_vllm(reader: RootReader, rootfs: str, python: str) -> tuple[ConfigFile, ...]:
    """The vLLM METADATA (and, for an unshipped release, sources) that `python` in the
    container whose root file system is `rootfs` (under the host root) imports."""
    files: dict[str, ConfigFile] = {}
    for site in _site_directories(reader, rootfs, python):
        for name in reader.listdir(site, _is_dist_info):
            path = f"{site}/{name}/METADATA"
            text = reader.read(path)
            if text is None:
                continue
            files[path] = ConfigFile(path, text)
            version = metadata_version(text)
            if version is not None and version not in shipped_versions():
                files.update((f.path, f) for f in _table_sources(reader, site, version))
    return tuple(files.values())


def _site_directories(reader: RootReader, rootfs: str, python: str) -> list[str]:
    found = []
    for prefix in python_prefixes(python):
        lib = f"{rootfs}/{prefix}/lib" if prefix else f"{rootfs}/lib"
        for version_dir in reader.listdir(lib, _is_python_dir) if reader.is_dir(lib) else ():
            for site_name in SITE_NAMES:
                site = f"{lib}/{version_dir}/{site_name}"
                if reader.is_dir(site):
                    found.append(site)
    return found


def _table_sources(reader: RootReader, site: str, version: str) -> list[ConfigFile]:
    """The files the option reader opens for the table of the release installed at `site`:
    it runs here once to learn which; planning runs it again on these texts from the facts."""
    from pvegpu.engines.vllm.option_reader import SourcesMissingError, read_option_table

    read: list[ConfigFile] = []

    def source(path: str) -> str | None:
        text = reader.read(f"{site}/{path}")
        if text is not None:
            read.append(ConfigFile(f"{site}/{path}", text))
        return text

    with contextlib.suppress(SourcesMissingError, SyntaxError, RecursionError, DiscoveryError):
        read_option_table(source, version)
    return read
