"""The GPU references in the host's own files: udev rules, systemd units, driverctl,
modprobe.d, the kernel command line and sysfs.conf (CDI specs: host/cdi_specs.py).

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
from pvegpu.host.script_scan import (
    ReadScript,
    ScriptUse,
    merged,
    numbered_node,
    reached,
    scan_script,
)
from pvegpu.model.facts import DriverctlOverride, PciFunction, vfio_id_claims
from pvegpu.model.paths import OWN_UNITS, SPLIT_MODPROBE, SPLIT_UDEV_RULE
from pvegpu.model.references import GpuReference, Holder, NodeRef, ReferenceKind
from pvegpu.pci import PciAddress
from pvegpu.vendors import VENDORS, vendor_of
from pvegpu.vendors.drm import DRM_MAJOR

Texts = Iterable[tuple[str, str]]
"""(root-relative path, content) of each file of a kind."""

UDEV_DIR = "etc/udev/rules.d"
SYSFS_CONF = "etc/sysfs.conf"
SYSFS_DIR = "etc/sysfs.d"
_VFIO_MODULES = ("vfio-pci", "vfio_pci")


def host_ref(
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
    ancestors = False
    for key, op, value in _UDEV_PAIR.findall(line):
        if op == "==":
            # KERNELS, ATTRS, DRIVERS match the device or any device above it.
            ancestors |= key == "KERNELS"
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
        hit = tuple(f.address for f in gpu_functions if _kernel_match(f, kernel, ancestors))
        if not hit:
            return None
        values = {"addresses": hit, "gpus": hit}
        if ancestors and any(not fnmatch.fnmatchcase(str(a), kernel) for a in hit):
            values["every"] = f"every device below {kernel}"
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
    return host_ref(ReferenceKind.UDEV_RULE, path, number, line, binds=binds, **values)


def _kernel_match(function: PciFunction, kernel: str, ancestors: bool) -> bool:
    """KERNEL== matches the function's own name; KERNELS== its own or any device's above
    it (a bridge's address matches every function behind the bridge)."""
    if fnmatch.fnmatchcase(str(function.address), kernel):
        return True
    return ancestors and any(
        fnmatch.fnmatchcase(name, kernel) for name in function.sysfs_path.split("/")
    )


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

_EXEC = re.compile(r"^Exec[A-Za-z]*\s*=\s*[-@:+!|]*(\S+)")


def unit_references(
    files: Texts, index: GpuIndex, scripts: Callable[[str], ReadScript]
) -> list[GpuReference]:
    """Host units (and the admin's scripts they run) that name a GPU or move devices.
    `scripts(path)`: an absolute path on the host, read (or why it cannot be)."""
    found: list[GpuReference] = []
    for path, text in files:
        if path in OWN_UNITS:
            continue  # pvegpu's own: the split's, and the nodes and userspace boot units
        refs: list[GpuReference] = []
        first_operation: tuple[int, str, ScriptUse] | None = None
        unread: tuple[int, str, str] | None = None
        for number, line in _lines(text):
            use = scan_script(line)
            program = _EXEC.match(line)
            for called in use.calls:
                script = scripts(called)
                if script.text is not None:
                    use = merged(use, scan_script(script.text))
                elif program is not None and program[1] == called and unread is None:
                    unread = (number, line, f"it runs {called}, which pvegpu cannot read "
                              f"({script.why})")  # fmt: skip
            found_gpus = reached(use, index)
            if found_gpus.gpus:
                refs.append(
                    host_ref(
                        ReferenceKind.SYSTEMD_UNIT,
                        path,
                        number,
                        line,
                        addresses=found_gpus.functions,
                        every=found_gpus.every,
                        binds=", ".join(use.operations) or None,
                        gpus=found_gpus.gpus,
                        **numbered_node(use, index),
                    )
                )
            elif use.operations and first_operation is None:
                first_operation = (number, line, use)
        if not refs and first_operation is not None:
            number, line, use = first_operation
            refs.append(
                host_ref(
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
        elif not refs and unread is not None:
            number, line, why = unread
            refs.append(
                host_ref(
                    ReferenceKind.SYSTEMD_UNIT,
                    path,
                    number,
                    line,
                    unresolved=f"{why}, so it cannot tell whether it moves GPUs",
                )
            )
        found.extend(refs)
    return found


# --- driverctl, modprobe.d, sysfs.conf -------------------------------------------------


def driverctl_references(
    overrides: Iterable[DriverctlOverride], index: GpuIndex
) -> list[GpuReference]:
    return [
        host_ref(
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
                found.append(host_ref(ReferenceKind.MODPROBE, path, number, line, **ref))
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
    """Whether loading `module` binds the function: its driver now, or for a GPU on no
    driver or on vfio-pci, its vendor's host driver (the one a container pool gives it
    back to)."""
    driver = function.driver or ""
    if driver in ("", *_VFIO_MODULES):
        vendor = vendor_of(function)
        driver = vendor.host_driver if vendor is not None else ""
    return driver.replace("-", "_") == module.replace("-", "_")


# The kernel command line's blacklists: kmod's (`modprobe.blacklist=`, a `blacklist` line
# for every module named) and the kernel's own (`module_blacklist=`: never loaded at all).
_CMDLINE_BLACKLISTS = {"modprobe.blacklist": "blacklist", "module_blacklist": "module_blacklist"}
CMDLINE = "proc/cmdline"


def cmdline_references(
    cmdline: str, index: GpuIndex, functions: Iterable[PciFunction]
) -> list[GpuReference]:
    """The module blacklists of the command line the host booted with, for GPU drivers."""
    gpu_functions = [f for f in functions if f.address in index.gpu_addresses]
    found: list[GpuReference] = []
    for word in cmdline.split():
        name, _, value = word.partition("=")
        binds = _CMDLINE_BLACKLISTS.get(name)
        if binds is None:
            continue
        for module in dict.fromkeys(m for m in value.split(",") if _is_gpu_driver(m)):
            hit = tuple(f.address for f in gpu_functions if _binds(module, f))
            if hit:
                found.append(
                    host_ref(
                        ReferenceKind.CMDLINE,
                        CMDLINE,
                        None,
                        word,
                        every=f"every GPU {module} binds",
                        gpus=hit,
                        binds=binds,
                    )
                )
    return found


_SYSFS_LINE = re.compile(r"^(?:(?:mode|owner)\s+)?(\S+)\s*=\s*(.*)$")
_SYSFS_ADDRESS = re.compile(r"([0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/([a-z_]+)$")
# `sriov_numvfs` makes a PF's VFs at every boot: it moves nothing, but fails once the PF
# is on a driver that makes none (vfio-pci), and every VF goes with it.
_SYSFS_ACTIONS = (
    "driver_override", "remove", "reset", "unbind", "bind", "new_id", "rescan", "sriov_numvfs",
)  # fmt: skip


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
                        host_ref(
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
                    host_ref(
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
