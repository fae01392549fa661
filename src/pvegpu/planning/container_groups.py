"""Who owns a GPU's device nodes inside an unprivileged container.

An unprivileged container maps its ids onto a range of the host's (root is 100000 on the
host), so a node owned by the host's `render` group is owned by nobody inside. A `devN:`
entry makes pve-container create the node inside the container with the gid the entry
names, counted inside the container; the `render` (and `video`) gids differ between
distributions and from the host's, so pvegpu reads the container's own /etc/group. A raw
`lxc.mount.entry` bind keeps the host's ids, which map to nobody: only the node's mode
lets the container's users open it then.
"""

from __future__ import annotations

from collections.abc import Mapping

from pvegpu.errors import Problem
from pvegpu.formats.accounts import group_ids
from pvegpu.host.rootfs import STORAGE_CFG, locate_rootfs
from pvegpu.model.facts import HostFacts
from pvegpu.model.paths import GROUP_FILE
from pvegpu.model.plan import Finding, LxcContainer, Severity
from pvegpu.model.schema import DeviceStyle
from pvegpu.pvefiles.guestconf import LineKind, split_sections
from pvegpu.pvefiles.lxcconf import unprivileged

IDMAP = "lxc.idmap"
"""An unprivileged container's own id mapping (`lxc.idmap: g 0 100000 104`, ...)."""

NODE_GROUPS = ("render", "video")
"""The groups render nodes belong to, in the order they are looked for: Debian and
Ubuntu give render nodes to `render`; older images only have `video`."""


def group_file(facts: HostFacts, vmid: int) -> str | None:
    """Where the container's /etc/group is under the root, when its rootfs is a directory."""
    config = facts.file(f"etc/pve/lxc/{vmid}.conf")
    storage = facts.file(STORAGE_CFG)
    location = locate_rootfs(
        vmid, config.content if config else None, storage.content if storage else None
    )
    return None if location.path is None else f"{location.path}/{GROUP_FILE}"


def render_group(groups: Mapping[str, object]) -> str | None:
    """The name of the group render nodes belong to among a container's `groups`."""
    return next((g for g in NODE_GROUPS if g in groups), None)


def render_gid(
    facts: HostFacts, container: LxcContainer, problems: list[Problem], findings: list[Finding]
) -> int | None:
    """The gid the container's render nodes get: its own `render` (or `video`) group when
    it is unprivileged and uses devN entries; None (root's, as pve-container writes it)
    for a privileged container, whose ids are the host's. Raw lines in an unprivileged
    container get a finding: a bind keeps the host's ids."""
    assert container.config is not None  # the caller refuses a missing config first
    if not unprivileged(container.config.content):
        return None
    path = container.config_path
    if container.devices is DeviceStyle.RAW:
        # An admin's own lxc.idmap lines may map the host's render group in: then the
        # ids do not go to nobody, and the finding says what to check instead.
        mapped = any(
            line.kind is LineKind.RAW and line.key == IDMAP
            for line in split_sections(container.config.content)[0].lines
        )
        ids = (
            "which reach the container only through its own lxc.idmap lines (check that they "
            "map the host's render group to one its users are in)"
            if mapped
            else "which map to nobody inside, so only its mode (0666 on the host) lets the "
            "container's users open it"
        )
        findings.append(
            Finding(
                Severity.WARNING,
                "lxc-raw-unprivileged-ids",
                path,
                f"CT {container.vmid} is unprivileged: a bind-mounted node keeps the host's "
                f'owner and group, {ids}; devices = "dev" gives the nodes the container\'s '
                "own render group",
            )
        )
        return None
    where = group_file(facts, container.vmid)
    file = facts.file(where) if where is not None else None
    groups = group_ids(file.content) if file is not None else {}
    name = render_group(groups)
    if name is not None:
        gid, members = groups[name]
        if not members:
            findings.append(
                Finding(
                    Severity.WARNING,
                    "lxc-render-group-empty",
                    path,
                    f"the render nodes get CT {container.vmid}'s group {name} ({gid}), which "
                    "has no members there: add the user the GPU's service runs as "
                    f"(pct exec {container.vmid} -- usermod -aG {name} <user>)",
                )
            )
        return gid
    read = f"{where} has no render or video group" if file else "its /etc/group was not read"
    problems.append(
        Problem(
            "lxc-render-gid-unknown",
            path,
            f"CT {container.vmid} is unprivileged, so its render nodes need the "
            f"container's own render group id, and {read}",
            f"set lxc.gid in the pool to the id `pct exec {container.vmid} -- getent "
            "group render` prints, or mount the container's root file system and plan "
            "again",
        )
    )
    return None
