"""The thin reader: the host files the serving checks look at, added to the facts."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from pathlib import Path

import attrs

from pvegpu.host.facts import ConfigFile, FileStat, HostFacts
from pvegpu.host.paths import (
    CONTAINER_LIBDIRS,
    DPKG_STATUS,
    HOME_DEPTH,
    HOME_DIRS,
    NVIDIA_LIBRARY,
    OTHER_UNIT_DIRS,
    UNIT_DIR,
    root_relative,
)
from pvegpu.serving.decision import ServingFiles
from pvegpu.spec.schema import Spec


def _read_file(root: Path, rel: str) -> ConfigFile | None:
    path = root / rel
    if not path.is_file():
        return None
    return ConfigFile(rel, path.read_text(encoding="utf-8", errors="replace"))


def _has_symlink(root: Path, rel: str) -> bool:
    # A symlinked directory (merged-/usr `lib -> usr/lib`) is an alias of one read anyway,
    # or points outside the container's tree; either way it is not read twice.
    current = root
    for part in rel.split("/"):
        current = current / part
        if current.is_symlink():
            return True
    return False


def _walk(root: Path, start: str, depth: int) -> Iterator[str]:
    """Root-relative paths of files under `start`, at most `depth` directories down."""
    base = root / start
    if not base.is_dir() or _has_symlink(root, start):
        return
    for dirpath, dirnames, filenames in os.walk(base):
        rel = Path(dirpath).relative_to(root).as_posix()
        if rel.count("/") - start.count("/") >= depth:
            dirnames.clear()
        for name in filenames:
            yield f"{rel}/{name}"


def read_serving_files(root: Path, spec: Spec) -> ServingFiles:
    """Read what the servings of `spec` check: model config/index/shards, container files.

    The only I/O of serving checks; everything else takes the facts this returns.
    """
    files: dict[str, ConfigFile] = {}
    stats: dict[str, FileStat] = {}

    def add(rel: str) -> None:
        if rel not in files and (found := _read_file(root, rel)) is not None:
            files[rel] = found

    for pool in spec.pools:
        serving = pool.lxc.serving if pool.lxc else None
        if serving is None:
            continue
        try:
            model_config = root_relative(serving.model_config) if serving.model_config else None
            rootfs = root_relative(serving.container_rootfs) if serving.container_rootfs else None
        except ValueError:
            continue  # from_pool reports the path
        if model_config is not None:
            add(model_config)
            model_dir = posixpath.dirname(model_config)
            add(f"{model_dir}/model.safetensors.index.json")
            directory = root / model_dir
            if directory.is_dir():
                for entry in sorted(directory.iterdir()):
                    if entry.name.endswith(".safetensors") and entry.is_file():
                        rel = f"{model_dir}/{entry.name}"
                        stats[rel] = FileStat(rel, entry.stat().st_size)
        if rootfs is not None:
            add(f"{rootfs}/{DPKG_STATUS}")
            for libdir in CONTAINER_LIBDIRS:
                directory = root / rootfs / libdir
                if not directory.is_dir() or _has_symlink(root, f"{rootfs}/{libdir}"):
                    continue
                for entry in sorted(directory.iterdir()):
                    if NVIDIA_LIBRARY.match(entry.name) and entry.is_file():
                        rel = f"{rootfs}/{libdir}/{entry.name}"
                        stats[rel] = FileStat(rel, entry.stat().st_size)
            unit = f"{serving.unit}.service"
            add(f"{rootfs}/{UNIT_DIR}/{unit}")
            dropin_dir = f"{rootfs}/{UNIT_DIR}/{unit}.d"
            if (root / dropin_dir).is_dir():
                for entry in sorted((root / dropin_dir).iterdir()):
                    if entry.name.endswith(".conf"):
                        add(f"{dropin_dir}/{entry.name}")
            for directory_name in OTHER_UNIT_DIRS:
                rel_dir = f"{rootfs}/{directory_name}"
                if not _has_symlink(root, rel_dir):
                    add(f"{rel_dir}/{unit}")
            for home in HOME_DIRS:
                for rel in _walk(root, f"{rootfs}/{home}", HOME_DEPTH):
                    if posixpath.basename(rel) == unit:
                        add(rel)
    return ServingFiles(tuple(files.values()), tuple(stats.values()))


def with_serving_files(facts: HostFacts, root: Path, spec: Spec) -> HostFacts:
    """`facts` plus what `read_serving_files` finds (call between discover and plan)."""
    found = read_serving_files(root, spec)
    have = {f.path for f in facts.files}
    have_stats = {s.path for s in facts.stats}
    return attrs.evolve(
        facts,
        files=(*facts.files, *(f for f in found.files if f.path not in have)),
        stats=(*facts.stats, *(s for s in found.stats if s.path not in have_stats)),
    )
