"""The boot units that ready the containers' GPUs before guests start.

- `pvegpu-device-nodes`: makes every device node the plan's containers are given that its
  driver does not make as it binds a GPU (NVIDIA's, made by nvidia-modprobe; AMD's
  /dev/kfd, by loading amdgpu), and waits for the ones it does: after a reboot a
  container's `devN` for a node nothing made yet fails `pct start`.
- `pvegpu-driver-userspace` (only with a pool of `userspace = "host"`): stages the host's
  driver userspace of the module loaded at that boot for the containers' bind mount.

Both are a POSIX sh script and a oneshot unit ordered before pve-guests.service (and
pve-ha-lrm.service, which starts HA guests). What each does at boot is read then (which
module version is loaded, which nodes exist), never fixed at render time: a driver
upgrade is followed by the next boot. Their data (which nodes, which commands, which
library names) is the vendors' (`DeviceNodes.makers`, `Vendor.host_userspace`).
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from pvegpu.formats.shell import in_double_quotes
from pvegpu.formats.shell import word as sh
from pvegpu.formats.templating import render_template
from pvegpu.model.artifact import HOST, Artifact
from pvegpu.model.own_files import own_files
from pvegpu.model.paths import (
    CONTAINER_DRIVER_DIR,
    NODES_SCRIPT,
    NODES_UNIT,
    NODES_UNIT_NAME,
    USERSPACE_DIR,
    USERSPACE_SCRIPT,
    USERSPACE_UNIT,
)
from pvegpu.model.plan import Plan, Pool
from pvegpu.pvefiles import lxcconf
from pvegpu.values import value_class
from pvegpu.vendors import Vendor
from pvegpu.wording import plural

NODE_WAIT_S = 30
"""How long the nodes script waits for a node its driver makes: udev's coldplug of a
large host can still be probing GPUs when multi-user.target starts."""


@value_class
@attrs.frozen(eq=False, repr=False)
class BootNode:
    """One node a container of the plan is given, and how it comes to exist at boot."""

    path: str
    vmids: tuple[int, ...]
    command: tuple[str, ...] | None
    """What makes it; None: its driver does, as it binds the GPU."""

    @property
    def containers(self) -> str:
        return ", ".join(f"CT {v}" for v in self.vmids)

    @property
    def how(self) -> str:
        if self.command is None:
            return "its driver makes it as it binds the GPU"
        return "made by " + " ".join(self.command)


def boot_nodes(plan: Plan) -> tuple[BootNode, ...]:
    """Every device node the plan's container lines name, in the order they are written,
    that comes to exist at boot by a command or its driver; a node neither makes (a MIG
    instance's capability node, which exists once the instance is made again) is left
    to `pvegpu check`."""
    found: dict[str, BootNode] = {}
    for pool in plan.lxc_pools:
        lxc = pool.lxc
        if lxc is None:
            continue
        nodes = lxc.nodes
        for path in _paths(lxc.gpu_lines):
            command = nodes.make_command(path)
            if command is None and not (nodes.gpu_node.match(path) or path in nodes.shared):
                continue
            known = found.get(path)
            vmids = (*known.vmids, lxc.vmid) if known is not None else (lxc.vmid,)
            found[path] = BootNode(path, tuple(dict.fromkeys(vmids)), command)
    return tuple(found.values())


def _paths(lines: lxcconf.GpuLines) -> Iterator[str]:
    for value in lines.devices:
        yield lxcconf.dev_path(value)
    for key, value in lines.raw:
        source = value.split(maxsplit=1)[:1]
        if key == lxcconf.MOUNT_ENTRY and source and source[0].startswith("/dev/"):
            yield source[0]


def render_boot_units(plan: Plan) -> tuple[Artifact, ...]:
    """The nodes script and unit (when a node needs a command), and the userspace
    script and unit (when a pool has `userspace = "host"`)."""
    return (*_nodes_units(plan), *_userspace_units(plan))


def _nodes_units(plan: Plan) -> tuple[Artifact, ...]:
    nodes = boot_nodes(plan)
    commands = tuple(dict.fromkeys(n.command for n in nodes if n.command is not None))
    if not commands:
        return ()  # every node appears as its driver binds (Intel's render nodes)
    facts = plan.facts
    script = render_template(
        "device-nodes.sh.j2",
        node=facts.node,
        nodes=nodes,
        commands=[" ".join(sh(w) for w in c) for c in commands],
        wait=NODE_WAIT_S,
    )
    unit = render_template("device-nodes.service.j2", node=facts.node, script="/" + NODES_SCRIPT)
    vmids = sorted({v for n in nodes for v in n.vmids})
    containers = ", ".join(f"CT {v}" for v in vmids)
    return (
        Artifact(
            path=NODES_SCRIPT,
            content=script,
            reason=(
                f"makes the {plural(len(nodes), 'device node')} {containers} "
                f"{'is' if len(vmids) == 1 else 'are'} given ({', '.join(n.path for n in nodes)}) "
                f"with {_and(list(dict.fromkeys(c[0] for c in commands)))}, and waits for them"
            ),
            mode=0o755,
            target=HOST,
            base=own_files(facts).nodes_script,
        ),
        Artifact(
            path=NODES_UNIT,
            content=unit,
            reason=(
                "runs pvegpu-device-nodes at every boot before pve-guests and pve-ha-lrm "
                "start guests: a devN entry for a node nothing made yet fails `pct start`, "
                "a bind mount of one hands over nothing"
            ),
            target=HOST,
            base=own_files(facts).nodes_unit,
        ),
    )


def host_userspace_pools(plan: Plan) -> tuple[Pool, ...]:
    """The container pools whose GPU programs run the host's driver userspace."""
    return tuple(p for p in plan.lxc_pools if p.lxc is not None and p.lxc.host_userspace)


def userspace_vendor(plan: Plan) -> Vendor | None:
    """The vendor whose host userspace is staged: that of the pools' GPUs (the planner
    refuses a pool whose vendor has none; one staging directory holds one vendor's)."""
    for pool in host_userspace_pools(plan):
        vendor = pool.gpus[0].vendor if pool.gpus else None
        if vendor is not None and vendor.host_userspace is not None:
            return vendor
    return None


def _userspace_units(plan: Plan) -> tuple[Artifact, ...]:
    vendor = userspace_vendor(plan)
    if vendor is None or vendor.host_userspace is None or vendor.driver_version is None:
        return ()
    userspace = vendor.host_userspace
    facts = plan.facts
    vmids = [p.lxc.vmid for p in host_userspace_pools(plan) if p.lxc is not None]
    containers = ", ".join(f"CT {v}" for v in vmids)
    # The version is the script's variable at run time, inside a double-quoted message.
    install = in_double_quotes(userspace.install.format(version="@V@")).replace("@V@", "$version")
    script = render_template(
        "driver-userspace.sh.j2",
        node=facts.node,
        vendor=vendor.name,
        driver=vendor.host_driver,
        containers=containers,
        module_version=vendor.driver_version.module_version,
        libdir=userspace.libdir,
        bindir=userspace.bindir,
        stage="/" + USERSPACE_DIR,
        mount_point=CONTAINER_DRIVER_DIR,
        libraries=userspace.libraries,
        required_libraries=userspace.required_libraries,
        tools=userspace.tools,
        required_tools=userspace.required_tools,
        install=install,
    )
    nodes_unit = NODES_UNIT_NAME if _nodes_units(plan) else ""
    unit = render_template(
        "driver-userspace.service.j2",
        node=facts.node,
        containers=containers,
        script="/" + USERSPACE_SCRIPT,
        nodes_unit=nodes_unit,
    )
    loaded = facts.gpu_driver(vendor.host_driver)
    now = f" ({loaded.version} now)" if loaded is not None else ""
    return (
        Artifact(
            path=USERSPACE_SCRIPT,
            content=script,
            reason=(
                f"stages the host's {vendor.name} userspace of the loaded module's "
                f"version{now} in /{USERSPACE_DIR}/current for {containers} to bind-mount "
                f"read-only at /{CONTAINER_DRIVER_DIR}; refuses a version whose files are "
                "not installed"
            ),
            mode=0o755,
            target=HOST,
            base=own_files(facts).userspace_script,
        ),
        Artifact(
            path=USERSPACE_UNIT,
            content=unit,
            reason=(
                "runs pvegpu-driver-userspace at every boot before guests start, so a "
                "driver upgrade is followed by the next boot with nothing to do in the "
                "containers"
            ),
            target=HOST,
            base=own_files(facts).userspace_unit,
        ),
    )


def _and(words: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join(filter(None, (", ".join(words[:-1]), words[-1])))
