"""/etc/pve/storage.cfg: the storages of a cluster, read to find where a volume lies.

The format is Proxmox's section config: a header `<type>: <storage id>` at the start of a
line, then its properties, one per indented line, `key value` (a key alone is a flag:
`sparse`, `disable`); blank lines end a section and `#` lines are comments. Read only:
pvegpu never writes this file.
"""

from __future__ import annotations

import re

import attrs

from pvegpu.values import value_class

_HEADER = re.compile(r"^(?P<type>[a-z][a-z0-9]*):\s*(?P<id>\S+)\s*$")
_PROPERTY = re.compile(r"^\s+(?P<key>\S+)(?:\s+(?P<value>.*?))?\s*$")

DEFAULT_DIR = "/var/lib/vz"
"""The path of storage `local`: Proxmox adds `dir: local` with it when the file lacks it."""


@value_class
@attrs.frozen(eq=False, repr=False)
class Storage:
    """One section of storage.cfg: its type, id and properties as written."""

    type: str
    id: str
    properties: tuple[tuple[str, str], ...] = ()
    """(key, value) in file order; a flag's value is empty."""

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.properties if k == key), None)


def parse_storage_cfg(text: str) -> dict[str, Storage]:
    """Every storage by id, `local` included even when the file does not define it.

    Like Proxmox's own reader, a line that is neither a header nor a property of the open
    section is skipped, and `local` is always a `dir` at /var/lib/vz (pve-storage replaces
    any other `local` by it, so every node agrees on it).
    """
    storages: dict[str, Storage] = {}
    current: tuple[str, str] | None = None
    properties: list[tuple[str, str]] = []

    def close() -> None:
        if current is not None:
            storages[current[1]] = Storage(current[0], current[1], tuple(properties))

    for line in text.split("\n"):
        if line.lstrip().startswith("#"):
            continue
        if not line.strip():
            close()
            current, properties = None, []
        elif header := _HEADER.match(line):
            close()
            current, properties = (header["type"], header["id"]), []
        elif current is not None and (prop := _PROPERTY.match(line)):
            properties.append((prop["key"], prop["value"] or ""))
    close()
    local = storages.get("local")
    if local is None or local.type != "dir" or local.get("path") != DEFAULT_DIR:
        storages["local"] = Storage("dir", "local", (("path", DEFAULT_DIR),))
    return storages
