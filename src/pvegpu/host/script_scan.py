"""What a shell script (a VM hookscript, an LXC hook, a unit's command) does to GPUs.

pvegpu does not run scripts, so it reads them for what a GPU-moving script has to write
somewhere: PCI addresses, device nodes, and the sysfs files and commands that unbind,
bind, reset or remove a device. A script that does such a thing without naming an
address pvegpu can resolve (a loop over `lspci` output, a variable) is reported as one
pvegpu cannot follow, never as harmless.
"""

from __future__ import annotations

import re

import attrs

from pvegpu.values import value_class
from pvegpu.vendors import VENDORS
from pvegpu.vendors.drm import DRM_NODES

# A PCI address as scripts write it: with the domain (`0000:81:00.0`, sysfs's form) or
# without (`81:00.0`, lspci's); not inside a longer run of hex digits and colons (a MAC
# address, an IPv6 address, a time of day with seconds has no `.function` digit after two
# two-digit fields).
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


def scan_script(text: str) -> ScriptUse:
    """What `text` names and does to devices (its comments left out)."""
    code = _code(text)
    addresses = tuple(dict.fromkeys(m[1].lower() for m in _PCI_ADDRESS.finditer(code)))
    nodes = tuple(dict.fromkeys(m[0] for m in _NODE_PATH.finditer(code)))
    operations = tuple(name for name, pattern in _OPERATIONS if pattern.search(code))
    words = tuple(name for name, pattern in _GPU_WORDS if pattern.search(code))
    return ScriptUse(addresses, nodes, operations, words)
