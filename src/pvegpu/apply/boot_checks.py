"""`pvegpu check` of what the boot units ready for the containers (rendering/boot_units.py):
every device node a container's config names exists on the host, and the host userspace
a container bind-mounts is staged at the loaded module's version.

Read through the root reader like the rest of check. A root without a /dev directory (a
snapshot, a fixture tree) has no nodes to look at, so the node check needs one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

from pvegpu.host.reader import RootReader
from pvegpu.model.paths import NODES_UNIT_NAME, USERSPACE_CURRENT, USERSPACE_SCRIPT
from pvegpu.model.plan import Finding, Severity
from pvegpu.pvefiles.guestconf import ConfLine, LineKind
from pvegpu.pvefiles.lxcconf import STAGED_USERSPACE, has_userspace_mount, is_gpu_line, node_source
from pvegpu.vendors import DeviceNodes


def absent_node_findings(
    reader: RootReader,
    vmid: int,
    config: str,
    lines: Sequence[ConfLine],
    families: Sequence[DeviceNodes],
    reported: Collection[str],
) -> Iterator[Finding]:
    """Each GPU line of the container's main section (`lines`) whose node does not exist
    under the root's /dev; `reported`: nodes another finding already names (a GPU's node
    by a number no GPU has now)."""
    if not reader.is_dir("dev"):
        return
    for number, line in enumerate(lines, start=1):
        node = node_source(line)
        if node is None or node in reported or node == STAGED_USERSPACE:
            continue
        family = next((n for n in families if is_gpu_line(line, n)), None)
        if family is None or reader.exists(node.lstrip("/")):
            continue
        devn = line.kind is LineKind.KEY
        effect = (
            f"`pct start {vmid}` fails"
            if devn
            else "the container starts without it (a bind mount of a missing node)"
        )
        command = family.make_command(node)
        how = (
            f"`{' '.join(command)}` makes it; {NODES_UNIT_NAME} does so at every boot "
            "before guests start once a plan with this container is applied"
            if command is not None
            else "it appears once its driver holds the GPU (a MIG instance's node, once "
            "the instance is made again)"
        )
        yield Finding(
            Severity.ERROR,
            "device-node-missing",
            f"{config} line {number}",
            f"CT {vmid}'s {line.key} names {node}, which does not exist on the host: "
            f"{effect}. {how}",
        )


def staged_userspace_findings(
    reader: RootReader, vmid: int, config: str, text: str, host_version: str | None
) -> Iterator[Finding]:
    """A container bind-mounting the staged host userspace gets the loaded module's
    version: `current` must point at it (the boot unit ran since the last driver change)."""
    if not has_userspace_mount(text) or host_version is None:
        return
    staged = reader.readlink(USERSPACE_CURRENT)
    if staged == host_version and reader.is_dir(USERSPACE_CURRENT):
        return
    now = f"is {staged}" if staged else "holds none"
    yield Finding(
        Severity.ERROR,
        "host-userspace-stale",
        f"/{USERSPACE_CURRENT}",
        f"CT {vmid} bind-mounts the host's staged driver userspace ({config}), which {now}, "
        f"while the loaded module is {host_version}: the container fails to start (nothing "
        "staged) or its server fails CUDA init (another version). Run "
        f"`/{USERSPACE_SCRIPT} stage` (its journal says why the boot unit did not), then "
        f"restart CT {vmid}",
    )
