"""What a plan takes away from guests and mappings outside its pools, decided once.

Kept apart from plan.py's pool classes so the modules that decide these (host_guests,
mapping_moves) and the renderers can share them without an import cycle.
"""

from __future__ import annotations

import attrs

from pvegpu.model.facts import ConfigFile
from pvegpu.pvefiles.lxccaps import CapsRemoval
from pvegpu.pvefiles.lxcconf import PLAIN, NodeNaming
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_NODES, DeviceNodes


@value_class
@attrs.frozen(eq=False, repr=False)
class ContainerGpusRemoved:
    """Another container's lines for single GPUs the plan gives elsewhere, and its lines
    for GPUs it keeps whose numbers the next boot changes.

    The bundle removes the first from its main section and moves the second to their new
    numbers (the revert restores the file): after the split the node is gone or, after a
    reboot, names another GPU.
    """

    vmid: int
    config: ConfigFile
    minors: tuple[int, ...]
    """The minor of each GPU node (`nodes`: /dev/nvidiaN, a render node) whose devN, bind
    mount and `c <major>:N` lines go."""
    keys: tuple[str, ...]
    """The removed lines' keys in file order (`dev0`, `lxc.mount.entry`), for the reason."""
    shared_majors: frozenset[int] | None = None
    """Set when the container keeps no GPU: its lines for nvidiactl, nvidia-uvm and the
    other shared nodes (these majors) go too, since `pct start` fails on a node that is
    gone once no GPU is left on nvidia, and a container without a GPU has no use for them."""
    shared_keys: tuple[str, ...] = ()
    """The keys of those shared-node lines, for the reason."""
    nodes: DeviceNodes = CONTAINER_NODES
    """The node family the lines are of (the vendor's own nodes or the DRM ones)."""
    mig_caps: CapsRemoval | None = None
    """The MIG capability nodes of those GPUs' instances its lines hand over, which go with
    them (and the host-wide ones once it holds no instance); None: none (planning/mig.py)."""
    renumber: tuple[tuple[int, int], ...] = ()
    """(minor now, minor after the next boot) of the nodes of GPUs it keeps whose numbers
    the split's reboot changes (planning/numbering.py): its lines move to them."""
    naming: NodeNaming = PLAIN
    """How the host's lines name GPU nodes (cgroup key, by-path names)."""

    @property
    def config_path(self) -> str:
        return f"etc/pve/lxc/{self.vmid}.conf"


@value_class
@attrs.frozen(eq=False, repr=False)
class MapLinesMoved:
    """A mapping outside the pools losing this node's map lines for devices that move
    into a pool's mapping: a device is in one mapping only."""

    mapping_id: str
    values: tuple[str, ...]
    """The map strings left out, verbatim as pci.cfg holds them."""
    paths: tuple[str, ...]
    targets: tuple[str, ...]
    """The mappings they move to, sorted."""
    removed: bool = False
    """No map line (of any node) is left, so the whole section goes."""
