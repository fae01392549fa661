"""The GPU references in guest configs: every section of every container and VM config.

Containers: `devN` entries (by number, by `/dev/dri/by-path` name, a MIG instance's node),
`lxc.cgroup2.devices.allow` and `lxc.cgroup.devices.allow` rules (one minor, every minor
of a major, `a`), `lxc.mount.entry` binds (one node, all of `/dev/dri`), and `lxc.hook.*`
lines: LXC's nvidia hook with the GPUs its section's `NVIDIA_VISIBLE_DEVICES` names, any
other hook by what its script names. VMs: `hostpciN` by address or mapping, `args:`
devices, and the hookscript. Which file a hook or hookscript runs is read through the
`Scripts` the caller hands in (`host/references.py`): this module reads no file itself.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Iterator

import attrs

from pvegpu.host.gpu_index import GpuIndex, PathTarget
from pvegpu.host.script_scan import (
    ReadScript,
    ScriptUse,
    merged,
    numbered_node,
    reached,
    scan_script,
)
from pvegpu.model.references import CgroupVersion, GpuReference, Holder, NodeRef, ReferenceKind
from pvegpu.pci import PciAddress
from pvegpu.pvefiles import hostpci, lxcconf
from pvegpu.pvefiles.guestconf import ConfLine, LineKind, split_sections
from pvegpu.values import value_class
from pvegpu.vendors import VENDORS
from pvegpu.vendors.vendor import ContainerHook

_DEV_KEY = re.compile(r"^dev[0-9]+$")
_ALLOW_KEYS = {
    "lxc.cgroup2.devices.allow": ReferenceKind.CGROUP2_RULE,
    "lxc.cgroup.devices.allow": ReferenceKind.CGROUP1_RULE,
}
_HOOK_KEY = re.compile(r"^lxc\.hook\.[a-z-]+$")
# The environment keys whose variables LXC's hooks see: `lxc.environment` (init and
# hooks) and `lxc.environment.hooks` (hooks only); `lxc.environment.runtime` reaches
# only the container's init, never the vendor hook (lxc.container.conf(5)).
_HOOK_ENVIRONMENT = ("lxc.environment", "lxc.environment.hooks")
_MIG_INDEX = re.compile(r"^([0-9]+):([0-9]+)$")

Scripts = Callable[[str], ReadScript]
"""Reads a host path (absolute, as a config names it): its text, or why it cannot."""
# Packaged programs: a hook running one is read as its command line, never opened (an
# ELF binary is no script; the admin's own scripts live elsewhere).
_PACKAGED = ("/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/", "/usr/lib/", "/usr/libexec/")


@value_class
@attrs.frozen(eq=False, repr=False)
class _Place:
    path: str
    vmid: int
    holder: Holder
    section: str | None
    number: int
    line: ConfLine


def _numbered(text: str) -> Iterator[tuple[str | None, int, ConfLine]]:
    """Each line with its section's name and its number in the file; `[special:...]`
    sections hand over no device."""
    number = 0
    for section in split_sections(text):
        for line in section.lines:
            number += 1
            if not (section.name or "").lower().startswith("special:"):
                yield section.name, number, line


def _ref(place: _Place, kind: ReferenceKind, **values: object) -> GpuReference:
    return GpuReference(
        kind=kind,
        path=place.path,
        line=place.number,
        text=place.line.raw.rstrip("\n"),
        holder=place.holder,
        vmid=place.vmid,
        section=place.section,
        **values,  # type: ignore[arg-type]
    )


def container_references(
    path: str, vmid: int, text: str, index: GpuIndex, cgroup: CgroupVersion, scripts: Scripts,
    dev_links: Callable[[str], str | None],
) -> list[GpuReference]:  # fmt: skip
    """Every reference of a container config, in file order."""
    found: list[GpuReference] = []
    environment: dict[str | None, dict[str, str]] = {}
    hooks: list[_Place] = []
    for section, number, line in _numbered(text):
        place = _Place(path, vmid, Holder.CONTAINER, section, number, line)
        if line.kind is LineKind.KEY and _DEV_KEY.match(line.key):
            device = lxcconf.dev_path(line.value)
            target = index.path(device, dev_links(device))
            if target is not None:
                found.append(_by_path(place, ReferenceKind.DEV_ENTRY, device, target, index))
        elif line.kind is not LineKind.RAW:
            continue
        elif line.key in _ALLOW_KEYS and (rule_path := lxcconf.allow_path(line.value)):
            # LXC stats the path on the host at start: a node by path, like a devN entry.
            target = index.path(rule_path, dev_links(rule_path))
            if target is not None:
                by_path = _by_path(place, _ALLOW_KEYS[line.key], rule_path, target, index)
                inert = _inert(_ALLOW_KEYS[line.key], cgroup)
                found.append(attrs.evolve(by_path, inert=inert))
        elif line.key in _ALLOW_KEYS:
            ref = _rule(place, _ALLOW_KEYS[line.key], line.value, index, cgroup)
            if ref is not None:
                found.append(ref)
        elif line.key == lxcconf.MOUNT_ENTRY:
            source = line.value.split(maxsplit=1)
            device = source[0] if source else ""
            target = index.path(device, dev_links(device)) if device.startswith("/dev") else None
            if target is not None:
                found.append(_by_path(place, ReferenceKind.MOUNT_ENTRY, device, target, index))
        elif line.key in _HOOK_ENVIRONMENT:
            name, _, value = line.value.partition("=")
            environment.setdefault(section, {})[name.strip()] = value.strip()
        elif _HOOK_KEY.match(line.key):
            hooks.append(place)
    for place in hooks:
        ref = _hook(place, environment.get(place.section, {}), index, scripts)
        if ref is not None:
            found.append(ref)
    return sorted(found, key=lambda r: r.line or 0)


def _by_path(
    place: _Place, kind: ReferenceKind, device: str, target: PathTarget, index: GpuIndex
) -> GpuReference:
    if target.unresolved is not None:
        return _ref(place, kind, node_path=device, unresolved=target.unresolved)
    if target.node is not None:
        major, minor = target.node
        gpu = index.node(major, minor)
        return _ref(
            place,
            kind,
            node=NodeRef(major, minor),
            node_path=device,
            gpus=() if gpu is None else (gpu,),
        )
    if target.address is not None:
        gpus = index.addresses((str(target.address),))
        return _ref(
            place,
            kind,
            node_path=device,
            addresses=(target.address,),
            gpus=gpus,
            unresolved=None
            if gpus
            else f"{target.address} is no GPU of this host: the link is missing, so "
            "pve-container refuses to start the container (`Device ... does not exist`)",
        )
    every = target.every or "every device node"
    gpus = index.on_major(target.every_major) if target.every_major else index.every_gpu
    return _ref(place, kind, node_path=device, every=every, gpus=gpus)


def _rule(
    place: _Place, kind: ReferenceKind, value: str, index: GpuIndex, cgroup: CgroupVersion
) -> GpuReference | None:
    """A devices.allow rule that reaches a GPU: one minor, every minor of a GPU major, or
    every device; rules for other devices (and shared nodes: nvidiactl, uvm) are none."""
    inert = _inert(kind, cgroup)
    rule = lxcconf.allow_rule(value)
    if rule is None:
        return _ref(
            place,
            kind,
            inert=inert,
            unresolved="not a device rule LXC reads (`a`, or `c|b MAJOR:MINOR [rwm]` with "
            "numbers or `*`)",
        )
    device_type, major, minor = rule
    if device_type == "b":
        return None
    if device_type == "a" or major == "*":
        return _ref(
            place,
            kind,
            node=NodeRef(None, None),
            every="every device",
            gpus=index.every_gpu,
            inert=inert,
        )
    number = int(major)
    if minor == "*":
        every = index.every_name(number)
        if every is None:
            return None
        return _ref(
            place,
            kind,
            node=NodeRef(number, None),
            every=every,
            gpus=index.on_major(number),
            inert=inert,
        )
    gpu = index.node(number, int(minor))
    if gpu is None and index.every_name(number) is None:
        return None
    node = NodeRef(number, int(minor))
    return _ref(place, kind, node=node, gpus=() if gpu is None else (gpu,), inert=inert)


def _inert(kind: ReferenceKind, cgroup: CgroupVersion) -> str | None:
    """Why a rule of this key does nothing on this host; None when LXC applies it."""
    if kind is cgroup.rule_kind:
        return None
    return (
        f"this host's devices controller is cgroup {cgroup.value}, whose key is "
        f"{cgroup.allow_key}: LXC does not apply this one"
    )


def _hook(
    place: _Place, environment: dict[str, str], index: GpuIndex, scripts: Scripts
) -> GpuReference | None:
    """A vendor's LXC hook by the GPUs its variable names; any other hook by what its
    script (or inline command) names."""
    try:
        words = shlex.split(place.line.value)
    except ValueError:
        words = place.line.value.split()
    command = words[0] if words else ""
    for vendor in VENDORS:
        hook = vendor.container_hook
        if hook is not None and posixpath.basename(command) == hook.script and "/hooks/" in command:
            return _vendor_hook(place, hook, environment, index)
    own = command.startswith("/") and not command.startswith(_PACKAGED)
    script = scripts(command) if own else None
    if script is not None and script.text is None:
        return _ref(
            place,
            ReferenceKind.LXC_HOOK,
            unresolved=f"pvegpu cannot read the hook {command} ({script.why}), so it cannot "
            "tell which GPUs it reaches",
        )
    text = script.text if script is not None and script.text is not None else place.line.value
    use = _with_calls(scan_script(text), scripts, command)
    return _from_script(place, ReferenceKind.LXC_HOOK, use, index, command)


def _with_calls(use: ScriptUse, scripts: Scripts, own: str) -> ScriptUse:
    """What a script does with the admin's scripts it names (`/usr/local/bin/x.sh`), one
    level deep: a hook that runs a handoff script moves what the handoff moves."""
    for path in use.calls:
        if path == own:
            continue
        called = scripts(path)
        if called.text is not None:
            use = merged(use, scan_script(called.text))
    return use


def _vendor_hook(
    place: _Place, hook: ContainerHook, environment: dict[str, str], index: GpuIndex
) -> GpuReference | None:
    value = environment.get(hook.variable)
    legacy = hook.legacy and hook.legacy in environment and hook.legacy_guard not in environment
    if value is None and legacy:
        value = hook.every  # the hook's rule for an old image
    if value is None or value.strip().lower() in hook.nothing:
        return None
    kind = ReferenceKind.GPU_HOOK
    shown = f"{hook.variable}={value}"
    every = f"every GPU the {hook.script} driver holds"
    if value.strip() == hook.every:
        return _ref(place, kind, selector=shown, every=every, gpus=index.ordered)
    gpus: list[PciAddress] = []
    unknown: list[str] = []
    for item in (i.strip() for i in value.split(",")):
        mig = _MIG_INDEX.match(item)
        if item.isascii() and item.isdigit():
            position = int(item)
        elif mig is not None:
            position = int(mig[1])
        elif item in index.uuids:
            gpus.append(index.uuids[item])
            continue
        else:
            unknown.append(item)
            continue
        if position < len(index.ordered):
            gpus.append(index.ordered[position])
        else:
            unknown.append(item)
    unresolved = None
    if unknown:
        unresolved = (
            f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} no GPU the "
            f"{hook.script} driver holds now (indices 0..{len(index.ordered) - 1}, or the "
            "GPUs' UUIDs)"
        )
    return _ref(
        place,
        kind,
        selector=shown,
        gpus=tuple(sorted(set(gpus))),
        unresolved=unresolved,
    )


def _from_script(
    place: _Place, kind: ReferenceKind, use: ScriptUse, index: GpuIndex, name: str
) -> GpuReference | None:
    """A reference for what a script names, None when it names no GPU and touches none."""
    found = reached(use, index)
    gpus = found.gpus
    if not gpus and not use.gpu_words and not use.operations:
        return None
    binds = ", ".join(use.operations) or None
    unresolved = None
    if not gpus:
        what = ", ".join((*use.operations, *use.gpu_words))
        unresolved = (
            f"{name} uses {what} but names no GPU of this host by address or node, so "
            "pvegpu cannot tell which GPUs it reaches"
        )
    return _ref(
        place,
        kind,
        addresses=found.functions,
        every=found.every,
        binds=binds,
        gpus=gpus,
        unresolved=unresolved,
        **numbered_node(use, index),
    )


def vm_references(
    path: str,
    vmid: int,
    text: str,
    index: GpuIndex,
    mappings: Callable[[str], tuple[str, ...] | None],
    hookscripts: Callable[[str], ReadScript],
    scripts: Scripts,
) -> list[GpuReference]:
    """Every reference of a VM config: hostpci lines, `args:` devices, its hookscript.
    `mappings(id)`: the map lines' paths of this node in pci.cfg (None: no such mapping);
    `hookscripts(volume)`: a hookscript by its volume; `scripts(path)`: any host file."""
    found: list[GpuReference] = []
    for section, number, line in _numbered(text):
        place = _Place(path, vmid, Holder.VM, section, number, line)
        use = hostpci.hostpci_use(line)
        if use is not None:
            found.append(_hostpci(place, use, index, mappings))
        elif line.kind is LineKind.KEY and line.key == "args":
            ref = _qemu_args(place, index)
            if ref is not None:
                found.append(ref)
        elif line.kind is LineKind.KEY and line.key == "hookscript":
            ref = _hookscript(place, index, hookscripts, scripts)
            if ref is not None:
                found.append(ref)
    return found


def _hostpci(
    place: _Place,
    use: hostpci.HostpciUse,
    index: GpuIndex,
    mappings: Callable[[str], tuple[str, ...] | None],
) -> GpuReference:
    if use.mapping is None:
        functions, gpus = index.hosts(use.hosts)
        return _ref(place, ReferenceKind.HOSTPCI, addresses=functions, gpus=gpus)
    paths = mappings(use.mapping)
    if paths is None:
        return _ref(
            place,
            ReferenceKind.HOSTPCI,
            mapping=use.mapping,
            unresolved=f"mapping {use.mapping} is not in pci.cfg for this node: the VM does "
            "not start with this line",
        )
    functions, gpus = index.hosts(hostpci.host_ids(paths))
    return _ref(place, ReferenceKind.HOSTPCI, mapping=use.mapping, addresses=functions, gpus=gpus)


_VFIO_DEVICE = re.compile(r"\bvfio-pci\b")
_HOST_OPTION = re.compile(r"(?:^|,)host=([0-9a-fA-F:.]+)")
_SYSFSDEV = re.compile(r"(?:^|,)sysfsdev=\S*?/([0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])")
# A mediated device by its UUID (`sysfsdev=/sys/bus/mdev/devices/<uuid>`): a vGPU of a GPU.
_SYSFSDEV_MDEV = re.compile(
    r"(?:^|,)sysfsdev=\S*?/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
    r"-[0-9a-fA-F]{12})(?=[,\s/]|$)"
)


def _qemu_args(place: _Place, index: GpuIndex) -> GpuReference | None:
    """`args: -device vfio-pci,host=0000:81:00.0,...`: a device QEMU opens itself, behind
    qemu-server's checks (and behind every mapping and hostpci rule)."""
    value = place.line.value
    if not _VFIO_DEVICE.search(value):
        return None
    texts = [m[1] for m in _HOST_OPTION.finditer(value)] + [m[1] for m in _SYSFSDEV.finditer(value)]
    texts += [
        str(parent)
        for m in _SYSFSDEV_MDEV.finditer(value)
        if (parent := index.mdev_parent(m[1])) is not None
    ]
    hosts = [h for t in texts if (h := hostpci.HostId.parse(t)) is not None]
    functions, gpus = index.hosts(hosts)
    unresolved = None
    missing = [m[1] for m in _SYSFSDEV_MDEV.finditer(value) if index.mdev_parent(m[1]) is None]
    if missing:
        unresolved = (
            f"it passes mediated device {', '.join(missing)}, which does not exist on this "
            "host now (mdevctl may make it at boot), so pvegpu cannot tell whose vGPU it is"
        )
    elif not hosts:
        unresolved = "it passes a vfio-pci device whose host address pvegpu cannot read"
    return _ref(
        place,
        ReferenceKind.QEMU_ARGS,
        addresses=functions,
        binds="vfio-pci (QEMU opens the device at VM start)",
        gpus=gpus,
        unresolved=unresolved,
    )


def _hookscript(
    place: _Place, index: GpuIndex, hookscripts: Callable[[str], ReadScript], scripts: Scripts
) -> GpuReference | None:
    volume = place.line.value.strip()
    script = hookscripts(volume)
    if script.text is None:
        return _ref(
            place,
            ReferenceKind.HOOKSCRIPT,
            unresolved=f"pvegpu cannot read the hookscript {volume} ({script.why}): it runs "
            "at every start and stop of the VM and may unbind, rebind or reset GPUs",
        )
    use = _with_calls(scan_script(script.text), scripts, "/" + script.path)
    return _from_script(place, ReferenceKind.HOOKSCRIPT, use, index, volume)
