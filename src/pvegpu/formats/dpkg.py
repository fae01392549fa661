"""dpkg's status database (`/var/lib/dpkg/status`): which packages are installed, and
their versions. A text format of its own, read for the host's Proxmox packages and a
container's driver packages alike."""

from __future__ import annotations


def installed_packages(text: str) -> dict[str, str]:
    """Package -> Version of every stanza whose Status says it is installed (a package
    removed but not purged keeps a stanza, `deinstall ok config-files`)."""
    found: dict[str, str] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace():  # continuation lines belong to Description
                key, _, value = line.partition(": ")
                fields[key] = value
        name, version = fields.get("Package"), fields.get("Version")
        if name and version and fields.get("Status", "").endswith(" installed"):
            found[name] = version
    return found


def upstream_version(version: str) -> str:
    """`1:590.48.01-0ubuntu0.24.04.1` -> `590.48.01`: the epoch and Debian revision dropped."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]
