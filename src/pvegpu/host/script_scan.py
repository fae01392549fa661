"""What a shell script (a VM hookscript, an LXC hook, a unit's command) does to GPUs.

pvegpu does not run scripts, so it reads them for what a GPU-moving script has to write
somewhere: PCI addresses, device nodes, and the sysfs files and commands that unbind,
bind, reset or remove a device. A script that does such a thing without naming an
address pvegpu can resolve (a loop over `lspci` output, a variable) is reported as one
pvegpu cannot follow, never as harmless.
"""

from __future__ import annotations

import re
from typing import TypeVar

import attrs

from pvegpu.host.gpu_index import GpuIndex
from pvegpu.model.references import NodeRef
from pvegpu.pci import PciAddress
from pvegpu.pvefiles.hostpci import HostId
from pvegpu.values import value_class
from pvegpu.vendors import VENDORS
from pvegpu.vendors.drm import DRM_NODES

# A PCI address as scripts write it: with the domain (`0000:81:00.0`, sysfs's form) or
# without (`81:00.0`, lspci's); not inside a longer run of hex digits and colons (a MAC
# address, an IPv6 address, a time of day with seconds has no `.function` digit after two
# two-digit fields).
T = TypeVar("T")

_PCI_ADDRESS = re.compile(
    r"(?<![0-9A-Fa-f:.])((?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?![0-9A-Fa-f:])"
)


def _gpu_nodes() -> re.Pattern[str]:
    """Any vendor's GPU node by number, a DRM node, or a DRM node's by-path name."""
    numbered = [
        nodes.gpu_node.pattern.removeprefix("^").removesuffix("$")
        for nodes in (*(v.nodes for v in VENDORS if v.nodes is not None), DRM_NODES)
    ]
    by_path = r"/dev/dri/by-path/pci-[0-9a-f:.]+-(?:render|card)"
    return re.compile("|".join(dict.fromkeys((*numbered, by_path))))


def _gpu_words() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """What says a script handles GPUs though it names no device: the vendors' tools and
    hooks, their node directories, vfio-pci, mknod of a GPU node's major."""
    words: list[tuple[str, re.Pattern[str]]] = []
    for vendor in VENDORS:
        names = [vendor.tool.name] if vendor.tool is not None else []
        names += [vendor.container_hook.tool] if vendor.container_hook is not None else []
        words += [(name, re.compile(rf"\b{re.escape(name)}\b")) for name in names]
        nodes = vendor.nodes
        if nodes is not None and not nodes.drm:
            prefix = nodes.gpu_path.format(minor="")
            words.append((f"{prefix}*", re.compile(rf"{re.escape(prefix)}(?![0-9a-z-])")))
    words.append(("/dev/dri", re.compile(r"/dev/dri\b(?!/(?:renderD|card)[0-9]|/by-path/pci)")))
    words.append(("vfio-pci", re.compile(r"\bvfio[-_]pci\b")))
    majors = sorted({n.major for n in (*(v.nodes for v in VENDORS if v.nodes), DRM_NODES)})
    mknod = rf"\bmknod\b[^\n]*\b(?:{'|'.join(str(m) for m in majors)})\b"
    words.append(("mknod of a GPU node", re.compile(mknod)))
    return tuple(words)


def _node_globs() -> tuple[tuple[int, re.Pattern[str]], ...]:
    """What names every GPU node of a major at once: a vendor's node prefix as a glob
    (`/dev/nvidia*`, `/dev/nvidia[0-9]*`), the DRM directory or a glob in it
    (`chown -R /dev/dri`, `/dev/dri/renderD*`)."""
    found: list[tuple[int, re.Pattern[str]]] = []
    for vendor in VENDORS:
        nodes = vendor.nodes
        if nodes is not None and not nodes.drm:
            prefix = re.escape(nodes.gpu_path.format(minor=""))
            glob = rf"(?<![\w}}/.-]){prefix}(?:\*|\?|\[0-9\][*?]?)"
            found.append((nodes.major, re.compile(glob)))
    # Not a path under another root: `${LXC_ROOTFS_MOUNT}/dev/dri` is the container's.
    drm = r"(?<![\w}/.-])/dev/dri(?:/?(?=[\s'\")|;&]|$)|/\*|/(?:renderD|card)(?:\*|\?|\[0-9\]))"
    found.append((DRM_NODES.major, re.compile(drm, re.MULTILINE)))
    return tuple(found)


def _resets() -> str:
    """The vendors' GPU tools' reset options, as a pattern."""
    found = []
    for vendor in VENDORS:
        tool = vendor.tool
        if tool is not None and tool.reset:
            options = "|".join(re.escape(r) for r in tool.reset)
            found.append(rf"{re.escape(tool.name)}\s+(?:\S+\s+)*(?:{options})\b")
    return "|".join(found) or r"(?!x)x"


_NODE_PATH = _gpu_nodes()
_NODE_GLOBS = _node_globs()
# A command that unloads kernel modules: `modprobe -r a b`, `modprobe -rv a`, `rmmod a`.
_SEPARATORS = re.compile(r"[;&|\n()`]|\$\(")
_MODULE = re.compile(r"^[A-Za-z0-9_-]+$")
ADMIN_DIRS = ("/usr/local/", "/etc/", "/opt/", "/root/", "/home/", "/srv/")
"""Where an admin's own scripts live; programs elsewhere (/usr/bin, /usr/lib) are packaged."""
_ADMIN_PATH = re.compile(
    r"(?<![\w/.$])(/(?:usr/local|etc|opt|root|home|srv)/[A-Za-z0-9_./@+-]+)(?![\w/])"
)
# What moves a device between drivers or takes it away, in the spellings scripts use.
_OPERATIONS = (
    ("driver_override", re.compile(r"driver_override")),
    ("unbind", re.compile(r"/unbind\b")),
    ("bind", re.compile(r"/bind\b")),
    ("new_id", re.compile(r"/new_id\b")),
    ("remove", re.compile(r"/remove\b")),
    ("rescan", re.compile(r"/rescan\b")),
    ("reset", re.compile(rf"/reset\b|{_resets()}")),
    ("drivers_probe", re.compile(r"drivers_probe")),
    ("module unload", re.compile(r"\bmodprobe\s+(?:-\S+\s+)*-r\b|\brmmod\b")),
    ("virsh nodedev-detach", re.compile(r"nodedev-(?:detach|reattach)")),
    ("vGPU type", re.compile(r"current_vgpu_type")),
)
_GPU_WORDS = _gpu_words()


@value_class
@attrs.frozen(eq=False, repr=False)
class ScriptUse:
    """What a script names and does, as read."""

    addresses: tuple[str, ...] = ()
    """PCI addresses as written (with or without a domain)."""
    node_paths: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()
    """What it does to devices (`unbind`, `driver_override`), in a fixed order."""
    gpu_words: tuple[str, ...] = ()
    """GPU tools and paths it uses without naming a device."""
    every_majors: tuple[int, ...] = ()
    """Majors whose every GPU node it names at once (`/dev/nvidia*`, `/dev/dri`)."""
    unloads: tuple[str, ...] = ()
    """Kernel modules it unloads (`modprobe -r nvidia`, `rmmod amdgpu`)."""
    calls: tuple[str, ...] = ()
    """Absolute paths of the admin's own files it names (scripts it may run)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class ReadScript:
    """A script as read for a reference: its text, or why there is none."""

    text: str | None
    path: str
    """Root-relative, as read."""
    why: str = ""


def merged(one: ScriptUse, other: ScriptUse) -> ScriptUse:
    """What two texts name and do together (a script and the one it runs)."""

    def both(a: tuple[T, ...], b: tuple[T, ...]) -> tuple[T, ...]:
        return tuple(dict.fromkeys((*a, *b)))

    return ScriptUse(
        addresses=both(one.addresses, other.addresses),
        node_paths=both(one.node_paths, other.node_paths),
        operations=tuple(n for n, _ in _OPERATIONS if n in (*one.operations, *other.operations)),
        gpu_words=both(one.gpu_words, other.gpu_words),
        every_majors=both(one.every_majors, other.every_majors),
        unloads=both(one.unloads, other.unloads),
        calls=both(one.calls, other.calls),
    )


def _code(text: str) -> str:
    """The script without its comments: `#` to the end of a line, outside quotes only
    roughly (a `#` after whitespace or at the start), as shell treats most of them."""
    kept = []
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("#"):
            continue
        kept.append(re.sub(r"\s#.*$", "", line))
    return "\n".join(kept)


def _unloaded(code: str) -> tuple[str, ...]:
    """The modules the commands of `code` unload, in order."""
    found: list[str] = []
    for command in _SEPARATORS.split(code):
        words = command.split()
        while words and "=" in words[0]:
            words.pop(0)  # VAR=value before the command
        if not words:
            continue
        program = words[0].rpartition("/")[2]
        options = [w for w in words[1:] if w.startswith("-")]
        removing = program == "rmmod" or (
            program == "modprobe"
            and any(o == "--remove" or (not o.startswith("--") and "r" in o) for o in options)
        )
        if removing:
            found += [w for w in words[1:] if not w.startswith("-") and _MODULE.match(w)]
    return tuple(dict.fromkeys(found))


def scan_script(text: str) -> ScriptUse:
    """What `text` names and does to devices (its comments left out)."""
    code = _code(text)
    addresses = tuple(dict.fromkeys(m[1].lower() for m in _PCI_ADDRESS.finditer(code)))
    nodes = tuple(dict.fromkeys(m[0] for m in _NODE_PATH.finditer(code)))
    operations = tuple(name for name, pattern in _OPERATIONS if pattern.search(code))
    words = tuple(name for name, pattern in _GPU_WORDS if pattern.search(code))
    every = tuple(dict.fromkeys(major for major, p in _NODE_GLOBS if p.search(code)))
    calls = tuple(dict.fromkeys(m[1] for m in _ADMIN_PATH.finditer(code)))
    return ScriptUse(addresses, nodes, operations, words, every, _unloaded(code), calls)


@value_class
@attrs.frozen(eq=False, repr=False)
class Reached:
    """The GPUs a scanned text reaches on this host now."""

    gpus: tuple[PciAddress, ...] = ()
    functions: tuple[PciAddress, ...] = ()
    """Every function it names by address (GPUs or not)."""
    every: str | None = None
    """What it reaches all of, when it names GPUs as a kind (a node glob, a driver it
    unloads) rather than one by one."""


def reached(use: ScriptUse, index: GpuIndex) -> Reached:
    """The GPUs `use` names: by address, by node (number or by-path), every node of a
    major (`/dev/nvidia*`, `/dev/dri`), every GPU of a driver it unloads."""
    hosts = [h for t in use.addresses if (h := HostId.parse(t)) is not None]
    functions, named = index.hosts(hosts)
    gpus = set(named)
    for device in use.node_paths:
        target = index.path(device)
        if target is not None and target.node is not None:
            gpu = index.node(*target.node)
            gpus.update(() if gpu is None else (gpu,))
        elif target is not None and target.address is not None:
            gpus.update(index.addresses((str(target.address),)))
    every: list[str] = []
    for major in use.every_majors:
        gpus.update(index.on_major(major))
        every.append(index.every_name(major) or f"every node on major {major}")
    for module in use.unloads:
        held = index.held_by(module)
        if held:
            gpus.update(held)
            every.append(f"every GPU {module} holds (it unloads the module)")
    return Reached(tuple(sorted(gpus)), functions, "; ".join(every) or None)


def numbered_node(use: ScriptUse, index: GpuIndex) -> dict[str, object]:
    """`node` and `node_path` of a line naming exactly one GPU node by number (and no
    address): what changes meaning when the node is numbered afresh."""
    numbered = [
        (path, t.node)
        for path in use.node_paths
        if (t := index.path(path)) is not None and t.node is not None
    ]
    if len(numbered) != 1 or use.addresses:
        return {}
    path, (major, minor) = numbered[0]
    return {"node": NodeRef(major, minor), "node_path": path}
