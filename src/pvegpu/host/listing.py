"""A directory listed once, then read name by name: a PCI device's attributes.

Discovery reads about a dozen attributes of every device. Resolving each by name costs
an lstat before the open; the directory's listing already says, by d_type, which names
are regular files, links or directories. `Listing` reads a regular file of the listing
straight away (the open still refuses links and FIFOs and is re-checked with fstat, see
`pvegpu.host.rawfile`), and hands every other name to the `RootReader`, so links are
followed inside the root and a directory or device node gets the reader's own error.
"""

from __future__ import annotations

from pvegpu.host.rawfile import decode, read_regular
from pvegpu.host.reader import RootReader, fail


class Listing:
    """The entries of `real`, a directory the reader resolved, listed once."""

    __slots__ = ("_entries", "reader", "real")

    def __init__(self, reader: RootReader, real: str, subject: str) -> None:
        self.reader = reader
        self.real = real
        self._entries = reader.entries(real, subject)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def link(self, name: str) -> bool:
        """Is `name` listed? If so, the reader learns from its d_type whether it is a link
        or a directory (`driver`, `iommu_group`), saving the lstat of resolving it."""
        entry = self._entries.get(name)
        if entry is None:
            return False
        self.reader.known(f"{self.real}/{name}", entry)
        return True

    def link_directory(self, name: str, subject: str) -> tuple[str, str | None] | None:
        """(text, real directory or None) of `name` when the listing says it is a symlink
        (`RootReader.link_directory`); None when it is not listed or not a symlink."""
        entry = self._entries.get(name)
        if entry is None or not entry.is_symlink():
            return None
        self.reader.known(f"{self.real}/{name}", entry)
        return self.reader.link_directory(name, self.real, subject)

    def read(self, name: str, subject: str) -> str | None:
        """The UTF-8 text of regular file `name`, or None when it is not listed."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        if entry.is_file(follow_symlinks=False):
            # RootReader.read_regular, inlined: a dozen files per PCI function.
            reader = self.reader
            real = f"{self.real}/{name}"
            data = read_regular(reader.prefix + real, subject, reader.max_bytes)
            if reader.trace is not None:
                reader.trace.files[real] = data
            return data.decode("ascii") if data.isascii() else decode(data, subject)
        return self.reader.read(name, at=self.real, subject=subject)

    def need(self, name: str, what: str, subject: str) -> str:
        """Like `read`, but a missing file is a `missing-file` error expecting `what`."""
        text = self.read(name, subject)
        if text is None:
            fail("missing-file", subject, f"does not exist; expected {what}")
        return text

    def is_dir(self, name: str, subject: str) -> bool:
        """Is `name` a directory (or a link to one inside the root)?"""
        return name in self._entries and self.reader.is_dir(name, at=self.real, subject=subject)
