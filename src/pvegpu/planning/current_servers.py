"""The SGLang and vLLM servers a container's units start, for the comment `pvegpu init`
writes at that container's pool. Pure: the units are in the facts (`host.container_units`
read them for the containers of the pools).

**Decision: a server found is said, not written as `[pools.lxc.serving]`.** A serving
table makes pvegpu render the unit anew (its flags, environment and parallel size by
construction), which rewrites the unit the container runs now: not the host as it is.
The comment names the unit and its parallel size so the admin can add the table.
"""

from __future__ import annotations

from pvegpu.model.current import CurrentServer
from pvegpu.model.facts import HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.paths import ENABLING_DIRS
from pvegpu.model.rootfs import rootfs_dirs
from pvegpu.planning.unit_gpus import unit_demand
from pvegpu.serving.container_units import container_units


def container_servers(facts: HostFacts, vmid: int) -> tuple[CurrentServer, ...]:
    """The servers the units in the container's /etc/systemd/system start, by unit name."""
    found: dict[str, CurrentServer] = {}
    for directory in rootfs_dirs(vmid, guests(facts).rootfs(vmid)):
        units = container_units(facts, directory)
        for entry in units.entries:
            parent, name, file = entry.directory, entry.name, entry.file
            if not name.endswith(".service") or (parent and not parent.endswith(ENABLING_DIRS)):
                continue
            for server in unit_demand(units.parsed(file)).servers:
                old = found.get(name)
                found[name] = CurrentServer(
                    name,
                    file.path if old is None or not parent else old.path,
                    server.server,
                    server.shown,
                    bool(parent) or (old is not None and old.enabled),
                    server.gpus,
                )
    return tuple(found[n] for n in sorted(found))
