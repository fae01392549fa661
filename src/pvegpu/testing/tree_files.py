"""The files of a fake host's tree, written the one way every part of it is: `TreeFiles`.

The writer (`writer.py`) and the parts it delegates to (`kernels.py`, `partitions.py`)
write through one `TreeFiles`, so every directory is made once and every mode is the same
whatever the umask. It knows no description of a host, so each part may use it without
importing the writer.
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o644
DIR_MODE = 0o755


class HostSpecError(ValueError):
    """The description cannot be a real host (a dangling parent, a duplicate address)."""


class TreeFiles:
    """Writes files and links under one root, each directory made once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: set[str] = {""}

    # Every write goes through here, so modes never depend on the umask.

    def dir(self, rel: str) -> None:
        if rel in self.made:
            return
        self.dir(rel.rpartition("/")[0])
        path = self.root / rel
        try:
            path.mkdir()
            path.chmod(DIR_MODE)
        except FileExistsError:
            if not path.is_dir():  # a link to a directory (pmxcfs's etc/pve/lxc) is fine
                raise
        self.made.add(rel)

    def put(self, rel: str, content: bytes) -> None:
        """A new file at a path the writer chose (no links on the way, never outside)."""
        self.dir(rel.rpartition("/")[0])
        try:
            fd = os.open(self.root / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            raise HostSpecError(f"{rel} is written twice") from None
        try:
            os.write(fd, content)
            os.fchmod(fd, FILE_MODE)
        finally:
            os.close(fd)

    def file(self, rel: str, content: str) -> None:
        """A file the description names: followed through links, kept under the root."""
        root = Path(os.path.realpath(self.root))
        # Resolved so that files given as etc/pve/lxc/... land in pmxcfs's node directory.
        real = Path(os.path.realpath(self.root / rel))
        if not real.is_relative_to(root):
            raise HostSpecError(f"{rel} would be written outside the root, at {real}")
        self.put(real.relative_to(root).as_posix(), content.encode())

    def link(self, rel: str, target: str) -> None:
        self.dir(rel.rpartition("/")[0])
        (self.root / rel).symlink_to(target)

    def rel_link(self, rel: str, target_rel: str) -> None:
        """A relative link like the kernel's, from `rel` to `target_rel` (both root-relative)."""
        parent = rel.rpartition("/")[0] or "."
        self.link(rel, os.path.relpath(target_rel, parent))
