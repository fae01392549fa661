"""A spec's guest id that is a guest of the other kind: a VM pool's `vm.vmid` that is a
container's, or a container pool's `lxc.vmid` that is a VM's.

Proxmox guest ids are cluster-wide and name one guest, VM or container: `qm create` and
`pct create` refuse an id either kind holds, on any node. A spec that names container
130 as a VM's id is a typo or a stale spec, and what pvegpu would render for it (hostpci
lines for `qm set 130`, device lines for `pct set 130`) lands on nothing or on the wrong
guest. Refused, naming the spec's key (its line) and the config file of the guest that
holds the id: on this node `etc/pve/{lxc,qemu-server}/<id>.conf`, on another node of the
cluster `etc/pve/nodes/<node>/...` (discovery lists those by name, `host/cluster_guests.py`).
"""

from __future__ import annotations

from collections.abc import Iterator

from pvegpu.diagnostic import Diagnostic
from pvegpu.model.facts import HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.schema import Spec

_FIX = (
    "pick an id no guest of the cluster has (`pvesh get /cluster/nextid` prints the next "
    "free one) or the guest you meant"
)


def guest_id_problems(facts: HostFacts, spec: Spec) -> Iterator[Diagnostic]:
    for i, pool in enumerate(spec.pools):
        if pool.vfio is not None and pool.vfio.vm is not None:
            vmid = pool.vfio.vm.vmid
            holder = guests(facts).config_path("lxc", vmid)
            if holder is not None:
                yield Diagnostic.error(
                    "vmid-is-a-container",
                    f"pools[{i}].vfio.vm.vmid",
                    f"{vmid} is the id of a container ({holder} exists), not of a VM: guest "
                    "ids are cluster-wide, and the VM's lines would go to no VM",
                    _FIX,
                )
        if pool.lxc is not None:
            vmid = pool.lxc.vmid
            holder = guests(facts).config_path("qemu-server", vmid)
            if holder is not None:
                yield Diagnostic.error(
                    "vmid-is-a-vm",
                    f"pools[{i}].lxc.vmid",
                    f"{vmid} is the id of a VM ({holder} exists), not of a container: guest "
                    "ids are cluster-wide, and the container's lines would go to no container",
                    _FIX,
                )
