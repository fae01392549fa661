"""Reading one regular file the reader has resolved, and the errors of reading.

`pvegpu.host.reader` decides *which* path may be opened (inside the root, a regular file
by lstat or by a listing's d_type); this module opens it without blocking, re-checks it
with fstat, caps its size and decodes it. Every failure is a `DiscoveryError` whose
subject is the path as the caller asked for it.
"""

from __future__ import annotations

import os
import stat
from typing import NoReturn

from pvegpu.errors import DiscoveryError

MAX_FILE_BYTES = 64 * 1024 * 1024
"""Per-file cap. sysfs and procfs attributes are a few bytes; the largest real inputs are a
container's dpkg status and a big /etc/pve config, a few MiB each. 64 MiB leaves an order
of magnitude of room for those and still stops a runaway or hostile file from filling
memory (pvegpu keeps every file it reads in the facts)."""

RECAPTURE = "capture the host again with `pvegpu snapshot --root / --out host.tar.gz`"

_CHUNK = 64 * 1024
# O_NONBLOCK: a FIFO swapped in after the check cannot block the open. O_NOFOLLOW: nor can
# a symlink swapped in (the path was resolved inside the root already). O_NOCTTY: a tty
# never becomes our controlling terminal.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


def fail(code: str, subject: str, message: str, fix: str = RECAPTURE) -> NoReturn:
    raise DiscoveryError.one(code, subject, message, fix)


def kind(mode: int) -> str:
    """What a file of this mode is, for messages: `a FIFO`, `a directory`, ..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def read_regular(path: str, subject: str, max_bytes: int) -> bytes:
    """The bytes of `path`, already known to be a regular file: at most `max_bytes`."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as err:
        fail("unreadable", subject, f"cannot be read: {err.strerror}")
    try:
        info = os.fstat(fd)
        mode = info.st_mode
        if not stat.S_ISREG(mode):
            fail("not-a-file", subject, f"became {kind(mode)} while it was read")
        # Read until EOF: a short read is not the end of every file (procfs seq_files
        # stop at a record that does not fit), and the snapshot keeps exactly what was read.
        # One exception saves a read per file of a snapshot or fixture tree: a short read
        # of exactly the size fstat gave is the whole file of a disk or tmpfs filesystem
        # (sysfs says 4096 and procfs 0 for every file, so they are always read to EOF).
        want = min(_CHUNK, max_bytes + 1)
        chunk = os.read(fd, want)
        if not chunk or len(chunk) == info.st_size < want:
            return chunk
        chunks = [chunk]
        total = len(chunk)
        while chunk := os.read(fd, min(_CHUNK, max_bytes + 1 - total)):
            total += len(chunk)
            chunks.append(chunk)
            if total > max_bytes:
                break
        if total > max_bytes:
            fail(
                "file-too-large",
                subject,
                f"is larger than {max_bytes} bytes, the most pvegpu reads from one file; "
                "no file the kernel, Proxmox or a container writes there is that big",
                "check what wrote it and truncate or remove it",
            )
    except OSError as err:
        fail("unreadable", subject, f"cannot be read: {err.strerror}")
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def decode(data: bytes, subject: str) -> str:
    """`data` as UTF-8, strictly; anything else is a `not-utf8` error about `subject`."""
    if data.isascii():
        return data.decode("ascii")  # nearly every sysfs and procfs file
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        fail(
            "not-utf8",
            subject,
            f"is not UTF-8 text (byte {err.start} is {data[err.start]:#04x})",
            "the kernel, Proxmox and systemd write UTF-8; check what wrote this file",
        )
