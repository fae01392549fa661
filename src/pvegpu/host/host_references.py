"""The GPU references in the host's own files: udev rules, systemd units, driverctl,
modprobe.d, sysfs.conf and CDI specs.

Each is read for what it names (a PCI address, `vendor:device` ids, a device node by
number, every node of a driver) and what it does to it (binds a driver, loads one,
unbinds, sets permissions); only what names or touches a GPU becomes a reference. The
files are handed in as texts (`host/references.py` reads them), so these are pure.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator

from pvegpu.host.gpu_index import GpuIndex
from pvegpu.host.script_scan import ScriptUse, scan_script
from pvegpu.model.facts import DriverctlOverride, PciFunction, vfio_id_claims
from pvegpu.model.paths import OWN_UNITS, SPLIT_MODPROBE, SPLIT_UDEV_RULE
from pvegpu.model.references import GpuReference, Holder, NodeRef, ReferenceKind
from pvegpu.pci import PciAddress
from pvegpu.pvefiles.hostpci import HostId
from pvegpu.vendors import VENDORS
from pvegpu.vendors.drm import DRM_MAJOR

Texts = Iterable[tuple[str, str]]
"""(root-relative path, content) of each file of a kind."""

UDEV_DIR = "etc/udev/rules.d"
SYSFS_CONF = "etc/sysfs.conf"
SYSFS_DIR = "etc/sysfs.d"
CDI_DIRS = ("etc/cdi", "var/run/cdi", "run/cdi")
_VFIO_MODULES = ("vfio-pci", "vfio_pci")


def _host_ref(
    kind: ReferenceKind, path: str, line: int | None, text: str, **values: object
) -> GpuReference:
    return GpuReference(kind=kind, path=path, line=line, text=text, holder=Holder.HOST, **values)  # type: ignore[arg-type]


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """Logical lines with the number of their first physical line: a `\\` at the end of a
    line continues it (udev, modprobe.d); blank and `#` lines are skipped."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        if not pending:
            start = number
        if raw.endswith("\\"):
            pending.append(raw[:-1])
            continue
        logical = "".join((*pending, raw)).strip()
        pending = []
        if logical and not logical.startswith("#"):
            yield start, logical


# --- udev ------------------------------------------------------------------------------

_UDEV_PAIR = re.compile(r'([A-Z_]+(?:\{[^}]*\})?)\s*(==|!=|\+=|-=|:=|=)\s*"([^"]*)"')


def _node_names() -> dict[str, int]:
    """The kernel names of GPU nodes without their number (`renderD`, `card`, and each
    vendor's own), by the major they are on."""
    names = {"renderD": DRM_MAJOR, "card": DRM_MAJOR}
    for vendor in VENDORS:
        nodes = vendor.nodes
        if nodes is not None and not nodes.drm:
            names[posixpath.basename(nodes.gpu_path.format(minor=""))] = nodes.major
    return names


_NODE_NAMES = _node_names()
_NODE_NAME = re.compile(
    "^(" + "|".join(re.escape(n) for n in sorted(_NODE_NAMES, key=len, reverse=True)) + ")([0-9]+)$"
)


def udev_references(
    files: Texts, index: GpuIndex, functions: Iterable[PciFunction]
) -> list[GpuReference]:
    """Rules that match a GPU (by address, ids, driver or node name) and do something."""
    gpu_functions = [f for f in functions if f.address in index.gpu_addresses]
    found: list[GpuReference] = []
    for path, text in files:
        if path == SPLIT_UDEV_RULE:
            continue  # pvegpu's own rule, for the VFs the split pins
        for number, line in _lines(text):
            ref = _udev_rule(path, number, line, index, gpu_functions)
            if ref is not None:
                found.append(ref)
    return found


def _udev_rule(
    path: str, number: int, line: str, index: GpuIndex, gpu_functions: list[PciFunction]
) -> GpuReference | None:
    matches: dict[str, str] = {}
    assigns: list[tuple[str, str]] = []
    for key, op, value in _UDEV_PAIR.findall(line):
        if op == "==":
            matches[key.removesuffix("S").replace("ATTRS{", "ATTR{")] = value
        elif op != "!=":
            assigns.append((key, value))
    if not assigns:
        return None
    binds = _udev_binds(assigns)
    kernel = matches.get("KERNEL")
    subsystem = matches.get("SUBSYSTEM")
    values: dict[str, object] = {}
    if kernel is not None and (node := _NODE_NAME.match(kernel)):
        major = _NODE_NAMES[node[1]]
        gpu = index.node(major, int(node[2]))
        values = {"node": NodeRef(major, int(node[2])), "gpus": () if gpu is None else (gpu,)}
    elif kernel is not None and subsystem in (None, "pci") and ":" in kernel:
        hit = tuple(f.address for f in gpu_functions if fnmatch.fnmatchcase(str(f.address), kernel))
        if not hit:
            return None
        values = {"addresses": hit, "gpus": hit}
    elif "ATTR{vendor}" in matches:
        hit = tuple(f.address for f in gpu_functions if _ids_match(matches, f))
        if not hit:
            return None
        ids = _udev_ids(matches)
        values = {"ids": (ids,), "gpus": hit, "every": f"every function with ids {ids}"}
    elif subsystem == "drm" or (kernel is not None and kernel.startswith(("renderD", "card"))):
        values = {"every": "every DRM node", "gpus": index.on_major(DRM_MAJOR)}
    elif kernel is not None and (globbed := _glob_major(kernel)) is not None:
        values = {"every": f"every node {kernel} matches", "gpus": index.on_major(globbed)}
    elif (driver := matches.get("DRIVER")) is not None and _is_gpu_driver(driver):
        hit = tuple(f.address for f in gpu_functions if f.driver == driver)
        values = {"every": f"every device {driver} holds", "gpus": hit}
    else:
        return None
    return _host_ref(ReferenceKind.UDEV_RULE, path, number, line, binds=binds, **values)


def _udev_binds(assigns: list[tuple[str, str]]) -> str | None:
    for key, value in assigns:
        if key == "ATTR{driver_override}":
            return f"driver_override = {value}"
        if key in ("ATTR{remove}", "ATTR{reset}"):
            return key[5:-1]
        if key == "RUN":
            use = scan_script(value)
            if use.operations:
                return ", ".join(use.operations)
    return None


def _glob_major(kernel: str) -> int | None:
    """The major of the GPU nodes a KERNEL glob (`nvidia*`, `nvidia[0-9]*`) matches."""
    return next(
        (m for name, m in _NODE_NAMES.items() if fnmatch.fnmatchcase(f"{name}0", kernel)), None
    )


def _is_gpu_driver(driver: str) -> bool:
    module = driver.replace("-", "_")
    return any(module in v.driver_modules or driver in v.drivers for v in VENDORS)


def _hex(value: str) -> int | None:
    try:
        return int(value, 16)
    except ValueError:
        return None


def _ids_match(matches: dict[str, str], function: PciFunction) -> bool:
    for attr, have in (("vendor", function.vendor), ("device", function.device)):
        want = matches.get(f"ATTR{{{attr}}}")
        if want is not None and _hex(want) != have:
            return False
    return True


def _udev_ids(matches: dict[str, str]) -> str:
    vendor = _hex(matches.get("ATTR{vendor}", "")) or 0
    device = _hex(matches.get("ATTR{device}", ""))
    return f"{vendor:04x}:" + ("*" if device is None else f"{device:04x}")


# --- systemd units ---------------------------------------------------------------------

_EXEC = re.compile(r"^Exec[A-Za-z]*\s*=\s*[-@:+!]*(\S+)")
# Where an admin's own scripts live; programs elsewhere (/usr/bin, /usr/lib) are packaged.
_SCRIPT_DIRS = ("/usr/local/", "/etc/", "/opt/", "/root/", "/home/", "/srv/")


def unit_references(
    files: Texts, index: GpuIndex, scripts: Callable[[str], str | None]
) -> list[GpuReference]:
    """Host units (and the admin's scripts they run) that name a GPU or move devices.
    `scripts(path)`: the text of an absolute path on the host, None when unreadable."""
    found: list[GpuReference] = []
    for path, text in files:
        if path in OWN_UNITS:
            continue  # pvegpu's own: the split's, and the nodes and userspace boot units
        refs: list[GpuReference] = []
        first_operation: tuple[int, str, ScriptUse] | None = None
        for number, line in _lines(text):
            use = scan_script(line)
            program = _EXEC.match(line)
            if program is not None and program[1].startswith(_SCRIPT_DIRS):
                script = scripts(program[1])
                if script is not None:
                    use = _merged(use, scan_script(script))
            gpus, functions = _named(use, index)
            if gpus:
                refs.append(
                    _host_ref(
                        ReferenceKind.SYSTEMD_UNIT,
                        path,
                        number,
                        line,
                        addresses=functions,
                        binds=", ".join(use.operations) or None,
                        gpus=gpus,
                        **_numbered_node(use, index),
                    )
                )
            elif use.operations and first_operation is None:
                first_operation = (number, line, use)
        if not refs and first_operation is not None:
            number, line, use = first_operation
            refs.append(
                _host_ref(
                    ReferenceKind.SYSTEMD_UNIT,
                    path,
                    number,
                    line,
                    binds=", ".join(use.operations),
                    unresolved=f"{posixpath.basename(path)} moves devices "
                    f"({', '.join(use.operations)}) but names no GPU of this host by address "
                    "or node, so pvegpu cannot tell which GPUs it moves",
                )
            )
        found.extend(refs)
    return found


def _numbered_node(use: ScriptUse, index: GpuIndex) -> dict[str, object]:
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


def _merged(one: ScriptUse, other: ScriptUse) -> ScriptUse:
    def both(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*a, *b)))

    return ScriptUse(
        both(one.addresses, other.addresses),
        both(one.node_paths, other.node_paths),
        both(one.operations, other.operations),
        both(one.gpu_words, other.gpu_words),
    )


def _named(
    use: ScriptUse, index: GpuIndex
) -> tuple[tuple[PciAddress, ...], tuple[PciAddress, ...]]:
    """The GPUs a scanned text names (by address or node), and the functions it names."""
    hosts = [h for t in use.addresses if (h := HostId.parse(t)) is not None]
    functions, gpus = index.hosts(hosts)
    found = set(gpus)
    for device in use.node_paths:
        target = index.path(device)
        if target is not None and target.node is not None and (g := index.node(*target.node)):
            found.add(g)
        elif target is not None and target.address is not None:
            found.update(index.addresses((str(target.address),)))
    return tuple(sorted(found)), functions


# --- driverctl, modprobe.d, sysfs.conf -------------------------------------------------


def driverctl_references(
    overrides: Iterable[DriverctlOverride], index: GpuIndex
) -> list[GpuReference]:
    return [
        _host_ref(
            ReferenceKind.DRIVERCTL,
            o.path,
            None,
            o.driver,
            addresses=(o.address,),
            binds=f"driver_override = {o.driver} at every boot",
            gpus=tuple(a for a in (o.address,) if a in index.gpu_addresses),
        )
        for o in overrides
    ]


_ALIAS = re.compile(r"^pci:v([0-9A-Fa-f]{8}|\*)d([0-9A-Fa-f]{8}|\*)", re.IGNORECASE)
_IDS_OPTION = re.compile(r"(?:^|\s)ids=(\S+)")


def modprobe_references(
    files: Texts, index: GpuIndex, functions: Iterable[PciFunction]
) -> list[GpuReference]:
    """vfio-pci ids and aliases, and what loading a GPU driver runs or is kept from."""
    gpu_functions = [f for f in functions if f.address in index.gpu_addresses]
    found: list[GpuReference] = []
    for path, text in files:
        if path == SPLIT_MODPROBE:
            continue  # pvegpu's own hook, which the plan writes
        for number, line in _lines(text):
            words = line.split()
            if len(words) < 2:
                continue
            command, module = words[0], words[1]
            ref: dict[str, object] | None = None
            if command == "options" and module in _VFIO_MODULES:
                ids = [i for m in _IDS_OPTION.finditer(line) for i in m[1].split(",") if i]
                hit = tuple(f.address for f in gpu_functions if _claimed(ids, f))
                if hit:
                    ref = {"ids": tuple(ids), "gpus": hit, "binds": "vfio-pci ids="}
            elif command == "alias" and len(words) >= 3 and words[2] in _VFIO_MODULES:
                alias = _ALIAS.match(module)
                if alias is not None:
                    vendor, device = (f[-4:].lower() for f in (alias[1], alias[2]))
                    named = f"{vendor}:{device}"
                    hit = tuple(f.address for f in gpu_functions if _alias_match(alias, f))
                    if hit:
                        # kmod takes a config alias before the modules' own: udev then
                        # loads vfio-pci, not the GPU's driver, for these ids.
                        binds = f"loads {words[2]} instead of the GPU's driver for {named}"
                        ref = {"ids": (named,), "gpus": hit, "binds": binds}
            elif command in ("install", "blacklist") and _is_gpu_driver(module):
                hit = tuple(f.address for f in gpu_functions if _binds(module, f))
                if hit:
                    what = "blacklist" if command == "blacklist" else f"install {module} ..."
                    ref = {"every": f"every GPU {module} binds", "gpus": hit, "binds": what}
            if ref is not None:
                found.append(_host_ref(ReferenceKind.MODPROBE, path, number, line, **ref))
    return found


def _claimed(ids: list[str], function: PciFunction) -> bool:
    try:
        return any(vfio_id_claims(i, function) for i in ids)
    except ValueError:
        return False


def _alias_match(alias: re.Match[str], function: PciFunction) -> bool:
    vendor, device = alias[1], alias[2]
    return (vendor == "*" or int(vendor, 16) == function.vendor) and (
        device == "*" or int(device, 16) == function.device
    )


def _binds(module: str, function: PciFunction) -> bool:
    """Whether loading `module` binds the function now (its driver is that module)."""
    driver = function.driver or ""
    return driver.replace("-", "_") == module.replace("-", "_")


_SYSFS_LINE = re.compile(r"^(?:(?:mode|owner)\s+)?(\S+)\s*=\s*(.*)$")
_SYSFS_ADDRESS = re.compile(r"([0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/([a-z_]+)$")
_SYSFS_ACTIONS = ("driver_override", "remove", "reset", "unbind", "bind", "new_id", "rescan")


def sysfs_references(files: Texts, index: GpuIndex) -> list[GpuReference]:
    """sysfsutils lines (written at every boot) that act on a PCI device."""
    found: list[GpuReference] = []
    for path, text in files:
        for number, line in _lines(text):
            match = _SYSFS_LINE.match(line)
            if match is None or line.startswith(("mode ", "owner ")):
                continue
            target, value = match[1], match[2].strip()
            device = _SYSFS_ADDRESS.search(target)
            action = target.rstrip("/").rpartition("/")[2]
            if action not in _SYSFS_ACTIONS:
                continue
            if device is None:
                if "pci" in target:
                    found.append(
                        _host_ref(
                            ReferenceKind.SYSFS_CONF,
                            path,
                            number,
                            line,
                            binds=f"{action} = {value}",
                            unresolved="it writes a PCI driver file pvegpu cannot tie to a "
                            "device (no address in the path)",
                        )
                    )
                continue
            address = PciAddress.parse(device[1])
            gpus = tuple(a for a in (address,) if a in index.gpu_addresses)
            if gpus:
                found.append(
                    _host_ref(
                        ReferenceKind.SYSFS_CONF,
                        path,
                        number,
                        line,
                        addresses=(address,),
                        binds=f"{action} = {value}",
                        gpus=gpus,
                    )
                )
    return found


# --- CDI -------------------------------------------------------------------------------

_CDI_NAME = re.compile(r"""^\s*-?\s*"?name"?\s*:\s*"?([^",]+?)"?\s*,?\s*$""")
_CDI_PATH = re.compile(r"""^\s*-?\s*"?(?:hostPath|path)"?\s*:\s*"?(/dev/[^",\s]+)"?""")


def cdi_references(files: Texts, index: GpuIndex) -> list[GpuReference]:
    """The device nodes a CDI spec hands each of its devices (`nvidia-ctk cdi generate`
    writes them by number: they are stale once the numbers change)."""
    found: list[GpuReference] = []
    for path, text in files:
        name: str | None = None
        for number, raw in enumerate(text.split("\n"), start=1):
            named = _CDI_NAME.match(raw)
            if named is not None:
                name = named[1].strip()
                continue
            node = _CDI_PATH.match(raw)
            if node is None:
                continue
            target = index.path(node[1])
            if target is None or target.node is None:
                continue
            major, minor = target.node
            gpu = index.node(major, minor)
            found.append(
                _host_ref(
                    ReferenceKind.CDI,
                    path,
                    number,
                    raw.strip(),
                    node=NodeRef(major, minor),
                    node_path=node[1],
                    selector=name,
                    gpus=() if gpu is None else (gpu,),
                )
            )
    return found
