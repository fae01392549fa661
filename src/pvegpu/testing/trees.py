"""Trees compared as git keeps them: files and symlinks by relative path, byte for byte."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import attrs

from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class TreeEntry:
    """One entry of a tree as git can keep it: a file or a symlink (empty dirs are lost)."""

    kind: str
    """`file` or `link`."""
    data: bytes
    """File content, or the link text."""
    executable: bool = False


def tree_entries(root: Path) -> dict[str, TreeEntry]:
    """Files and symlinks under `root` by relative path, to compare trees byte for byte.

    Directories are not listed: git keeps no empty directory, so a committed tree and a
    freshly written one agree on every file and link but not on empty directories.
    """
    found: dict[str, TreeEntry] = {}
    for path in _walk(root):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            found[rel] = TreeEntry("link", str(path.readlink()).encode())
        elif stat.S_ISREG(st.st_mode):
            found[rel] = TreeEntry("file", path.read_bytes(), bool(st.st_mode & stat.S_IXUSR))
    return found


def _walk(root: Path) -> Iterator[Path]:
    for entry in sorted(root.iterdir()):
        yield entry
        if entry.is_dir() and not entry.is_symlink():
            yield from _walk(entry)
