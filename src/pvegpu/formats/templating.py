"""One jinja2 environment for every renderer: strict, newline-preserving, no autoescape.

Compiling the templates from source was a third of a `pvegpu render`, so the CLI keeps
the compiled code in a per-user bytecode cache ($XDG_CACHE_HOME/pvegpu, else
~/.cache/pvegpu): `use_bytecode_cache`, called by the process, never by `render()`
itself, which as a pure stage writes nothing anywhere. A library caller gets no cache
unless it asks for one. jinja2 keys each cache entry by template name and checks the
source's checksum, so an edited template is compiled again; the file name pattern also
carries the jinja2 version, the Python version and the environment options below, which
change the generated code without changing the source. Where the directory cannot be
made or written (a read-only home, no home at all), rendering goes on without a cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from pvegpu.formats import shell

# StrictUndefined: a typo in a template is an error, never an empty string in a config
# file. Autoescape off: these are shell, systemd and Proxmox files, not HTML.
_OPTIONS: dict[str, Any] = {
    "undefined": jinja2.StrictUndefined,
    "keep_trailing_newline": True,
    "trim_blocks": True,
    "lstrip_blocks": True,
    "autoescape": False,
}


class _QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """A cache that never fails a render: an entry it cannot write is simply not kept."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def default_cache_dir() -> Path | None:
    """$XDG_CACHE_HOME/pvegpu, else ~/.cache/pvegpu; None when there is no home."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):
            return None
    return Path(base) / "pvegpu"


def bytecode_cache(directory: Path | None) -> jinja2.BytecodeCache | None:
    """A bytecode cache in `directory`, or None when it cannot be used safely.

    The directory must end up ours and not writable by others: the cache holds code that
    is executed, so a directory someone else can write is no cache at all.
    """
    if directory is None:
        return None
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o022 or not os.access(directory, os.W_OK):
        return None
    settings = repr(sorted((k, getattr(v, "__name__", v)) for k, v in _OPTIONS.items()))
    key = f"{jinja2.__version__}|{sys.version_info[:2]}|{settings}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return _QuietBytecodeCache(str(directory), f"template-{digest}-%s.cache")


def make_environment(
    loader: jinja2.BaseLoader, cache: jinja2.BytecodeCache | None
) -> jinja2.Environment:
    env = jinja2.Environment(loader=loader, bytecode_cache=cache, **_OPTIONS)
    # Shell quoting for the scripts (formats/shell.py): `{{ x | sh }}`, `"{{ x | dq }}"`.
    env.filters["sh"] = shell.word
    env.filters["dq"] = shell.in_double_quotes
    return env


def _loader() -> jinja2.BaseLoader:
    try:
        return jinja2.PackageLoader("pvegpu.templates", ".")
    except ModuleNotFoundError:
        # A checkout whose src/pvegpu/templates symlink did not survive (git with
        # core.symlinks=false): the top-level templates/ it points to.
        return jinja2.FileSystemLoader(Path(__file__).resolve().parents[3] / "templates")


_cache_dir: list[Path | None] = [None]
"""The process's bytecode cache directory (use_bytecode_cache); None: no cache."""


def use_bytecode_cache(directory: Path | None) -> None:
    """Keep compiled templates in `directory` for the rest of this process (None: not).

    The CLI's choice, made before it renders; checked as `bytecode_cache` checks it."""
    _cache_dir[0] = directory
    environment.cache_clear()


@cache
def environment() -> jinja2.Environment:
    return make_environment(_loader(), bytecode_cache(_cache_dir[0]))


def render_template(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)
