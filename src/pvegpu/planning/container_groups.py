"""Who owns a GPU's device nodes inside an unprivileged container.

An unprivileged container maps its ids onto a range of the host's (root is 100000 on the
host), so a node owned by the host's `render` group is owned by nobody inside. A `devN:`
entry makes pve-container create the node inside the container with the gid the entry
names, counted inside the container; the `render` (and `video`) gids differ between
distributions and from the host's, so pvegpu reads the container's own /etc/group (in
its storage's directory, else where `pct mount` puts it: `model.rootfs.rootfs_dirs`). A raw
`lxc.mount.entry` bind keeps the host's ids, which map to nobody: only the node's mode
lets the container's users open it then.
"""

from __future__ import annotations

from collections.abc import Mapping

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.container_files import container_files
from pvegpu.model.facts import HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.paths import GROUP_FILE
from pvegpu.model.plan import LxcContainer
from pvegpu.model.rootfs import RootfsLocation, pct_mount_path, rootfs_dirs
from pvegpu.model.schema import DeviceStyle
from pvegpu.pvefiles.guestconf import LineKind

IDMAP = "lxc.idmap"
"""An unprivileged container's own id mapping (`lxc.idmap: g 0 100000 104`, ...)."""

NODE_GROUPS = ("render", "video")
"""The groups render nodes belong to, in the order they are looked for: Debian and
Ubuntu give render nodes to `render`; older images only have `video`."""


def group_files(location: RootfsLocation, vmid: int) -> tuple[str, ...]:
    """Where the container's /etc/group may be under the root, in the order they are
    taken: its storage's directory, then where `pct mount` puts it (the refusal's fix)."""
    return tuple(f"{d}/{GROUP_FILE}" for d in rootfs_dirs(vmid, location))


def render_group(groups: Mapping[str, object]) -> str | None:
    """The name of the group render nodes belong to among a container's `groups`."""
    return next((g for g in NODE_GROUPS if g in groups), None)


def render_gid(
    facts: HostFacts,
    container: LxcContainer,
    problems: list[Diagnostic],
    findings: list[Diagnostic],
) -> int | None:
    """The gid the container's render nodes get: its own `render` (or `video`) group when
    it is unprivileged and uses devN entries; None (root's, as pve-container writes it)
    for a privileged container, whose ids are the host's. Raw lines in an unprivileged
    container get a finding: a bind keeps the host's ids."""
    assert container.config is not None  # the caller refuses a missing config first
    config = guests(facts).config(container.config)
    if not config.unprivileged:
        return None
    path = container.config_path
    if container.devices is DeviceStyle.RAW:
        # An admin's own lxc.idmap lines may map the host's render group in: then the
        # ids do not go to nobody, and the finding says what to check instead.
        mapped = any(line.kind is LineKind.RAW and line.key == IDMAP for line in config.main)
        ids = (
            "which reach the container only through its own lxc.idmap lines (check that they "
            "map the host's render group to one its users are in)"
            if mapped
            else "which map to nobody inside, so only its mode (0666 on the host) lets the "
            "container's users open it"
        )
        findings.append(
            Diagnostic(
                Severity.WARNING,
                "lxc-raw-unprivileged-ids",
                path,
                f"CT {container.vmid} is unprivileged: a bind-mounted node keeps the host's "
                f'owner and group, {ids}; devices = "dev" gives the nodes the container\'s '
                "own render group",
            )
        )
        return None
    vmid = container.vmid
    location = guests(facts).rootfs(vmid)
    candidates = group_files(location, vmid)
    found = (container_files(facts).at(d).accounts for d in rootfs_dirs(vmid, location))
    accounts = next((a for a in found if a.group_file is not None), None)
    file = accounts.group_file if accounts is not None else None
    groups = accounts.groups if accounts is not None else {}
    name = render_group(groups)
    if name is not None:
        gid, members = groups[name]
        if not members:
            findings.append(
                Diagnostic(
                    Severity.WARNING,
                    "lxc-render-group-empty",
                    path,
                    f"the render nodes get CT {container.vmid}'s group {name} ({gid}), which "
                    "has no members there: add the user the GPU's service runs as "
                    f"(pct exec {container.vmid} -- usermod -aG {name} <user>)",
                )
            )
        return gid
    if file is not None:
        read = f"{file.path} has no render or video group"
    else:
        places = " or ".join(f"/{w}" for w in candidates)
        why = f" ({location.why})" if location.path is None and location.why else ""
        read = f"its /etc/group was not read: nothing at {places}{why}"
    problems.append(
        Diagnostic.error(
            "lxc-render-gid-unknown",
            path,
            f"CT {vmid} is unprivileged, so its render nodes need the container's own "
            f"render group id, and {read}",
            f"set lxc.gid in the pool to the id `pct exec {vmid} -- getent group render` "
            f"prints; or stop CT {vmid}, `pct mount {vmid}` (pvegpu then reads "
            f"/{pct_mount_path(vmid)}/{GROUP_FILE}), plan again, `pct unmount {vmid}`",
        )
    )
    return None
