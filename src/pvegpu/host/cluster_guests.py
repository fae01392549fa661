"""The guests of the cluster's other nodes, by config file name only.

Proxmox's guest ids are cluster-wide: a VM and a container never share one, on any node.
pmxcfs shows every node's guests under `etc/pve/nodes/<node>/{lxc,qemu-server}/<id>.conf`
(this node's are `etc/pve/lxc` and `etc/pve/qemu-server`, read whole by discovery). The
planner needs only which ids the other nodes' guests hold (`model.guests.Guests.config_path`), so
their configs are recorded as `FileStat`s, by path (size 0), never read: another node's
guest is none of this plan's business beyond its id.
"""

from __future__ import annotations

from pvegpu.host.reader import RootReader
from pvegpu.model.facts import FileStat
from pvegpu.model.paths import NODES_DIR

GUEST_DIRS = ("lxc", "qemu-server")


def read_cluster_guests(reader: RootReader, node: str) -> tuple[FileStat, ...]:
    """Every other node's guest configs, in path order; none on a host without a cluster
    (then `etc/pve/nodes` holds this node alone)."""
    found: list[FileStat] = []
    for other in reader.listdir(NODES_DIR):
        if other == node:
            continue
        for kind in GUEST_DIRS:
            directory = f"{NODES_DIR}/{other}/{kind}"
            for name in reader.listdir(directory, _is_guest_config):
                path = f"{directory}/{name}"
                # Asked for its size so a snapshot keeps the name (archived empty); the
                # size is recorded as 0: the plan uses the name only, and so the facts of
                # an unpacked snapshot equal the host's.
                if reader.size(path) is not None:
                    found.append(FileStat(path, 0))
    return tuple(sorted(found, key=lambda s: s.path))


def _is_guest_config(name: str) -> bool:
    stem, dot, ext = name.partition(".")
    return bool(dot) and ext == "conf" and stem.isdigit()
