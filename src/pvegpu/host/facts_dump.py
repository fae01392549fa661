"""HostFacts -> the facts JSON document, without cattrs: what `pvegpu discover --json` runs.

`pvegpu.host.facts_json` reads and writes the document through one cattrs Converter.
Writing needs none of it: the document is the attrs fields in order, with the value forms
of docs/facts-schema.md. Importing cattrs and building the converter was about a fifth of
`discover --json` on a small host, and cattrs' unstructuring a tenth of the rest on a
large one, so the writer lives here and `facts_json` re-exports it; the tests check both
against the converter and the golden documents byte for byte.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from json.encoder import encode_basestring_ascii
from typing import Any

import attrs

from pvegpu.model.bootconfig import BootConfig
from pvegpu.model.facts import (
    GPU,
    FabricManager,
    GpuDriver,
    HostFacts,
    IommuGroup,
    NumaNode,
    PciFunction,
)
from pvegpu.model.kernels import Kernels
from pvegpu.model.platform import PvePackages
from pvegpu.model.references import CgroupVersion, GpuReference
from pvegpu.model.userspace import UserspaceFile
from pvegpu.pci import CpuList, PciAddress
from pvegpu.vendors import DRIVER_VERSION_VENDORS

SCHEMA = "pvegpu.facts/1"

GPU_KEYS = {"node_minor": "nvidia_minor"}
"""GPU fields whose key in the document is the name they had while only NVIDIA's GPUs had
a node minor: documents and snapshots written then read the same."""
FUNCTION_OPTIONAL = ("physfn", "sriov", "bars", "boot_vga", "removable")
"""PciFunction fields left out of the document while they have their default: no SR-IOV,
and what only a GPU's functions have (their BARs, the boot display, a Thunderbolt port)."""
NUMA_OPTIONAL = ("memory_kib", "free_kib")
"""NumaNode fields left out while None (the node's meminfo was not read)."""
GPU_OPTIONAL = ("drm_card", "drm_render", "compute_partition", "uuid")
"""GPU fields left out of the document while None: a GPU no DRM driver holds (every
NVIDIA GPU without nvidia-drm), or that no driver splits, reads as it did before DRM
nodes and partitions were discovered."""

_NAMES: dict[type, tuple[str, ...]] = {}
_SCALARS = (str, int, bool, float)


def _names(cls: type) -> tuple[str, ...]:
    """The fields cattrs unstructures, in order: every attrs field but init=False ones."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in attrs.fields(cls) if f.init)
    return names


def _value(value: Any) -> Any:
    kind = type(value)
    if value is None or kind in _SCALARS:
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if kind is PciAddress or kind is CpuList:
        return str(value)
    if kind is tuple or kind is list:
        return [_value(item) for item in value]
    if kind is GpuReference:
        # Its keys are left out while they have their default: most name a GPU one way.
        return {
            name: _value(item)
            for name, default in _reference_defaults()
            if (item := getattr(value, name)) != default
        }
    if kind is UserspaceFile:
        # A link has its text; a library or tool only its path.
        return {
            name: item
            for name in _names(kind)
            if (item := getattr(value, name)) is not None or name == "path"
        }
    if attrs.has(kind):
        return {name: _value(getattr(value, name)) for name in _names(kind)}
    raise TypeError(f"no JSON form for {kind.__name__}")


_REFERENCE_DEFAULTS: list[tuple[str, Any]] = []


def _reference_defaults() -> list[tuple[str, Any]]:
    """GpuReference's fields in order, each with its default (a sentinel when required)."""
    if not _REFERENCE_DEFAULTS:
        required = object()
        _REFERENCE_DEFAULTS.extend(
            (f.name, required if f.default is attrs.NOTHING else f.default)
            for f in attrs.fields(GpuReference)
        )
    return _REFERENCE_DEFAULTS


def _gpu(gpu: GPU) -> dict[str, Any]:
    """A GPU by its function's address; the function itself is in `functions`."""
    doc: dict[str, Any] = {
        "address": str(gpu.function.address),
        "companions": [str(c.address) for c in gpu.companions],
    }
    for name in _names(GPU):
        value = getattr(gpu, name)
        if name in ("function", "companions") or (name in GPU_OPTIONAL and value is None):
            continue
        doc[GPU_KEYS.get(name, name)] = _value(value)
    return doc


def _boot(boot: BootConfig) -> dict[str, Any]:
    """The boot object, `kernels` left out while empty (no /boot or osrelease read), so
    documents of hosts without them read as before they were discovered."""
    doc: dict[str, Any] = _value(boot)
    if boot.kernels == Kernels():
        del doc["kernels"]
    return doc


def _numa_node(node: NumaNode) -> dict[str, Any]:
    doc = {name: _value(getattr(node, name)) for name in _names(NumaNode)}
    return {k: v for k, v in doc.items() if k not in NUMA_OPTIONAL or v is not None}


def driver_keys(facts: HostFacts) -> dict[str, Any]:
    """`HostFacts.gpu_drivers` as the document holds it: a key per vendor whose driver
    version discovery reads, named by its host driver (`"nvidia"`), `{version, flavor}`
    or null when that driver is not loaded. One key per vendor keeps the document's shape
    as vendors are added, and a missing key tells an old reader nothing was lost."""
    return {v.host_driver: _driver(facts.gpu_driver(v.host_driver)) for v in DRIVER_VERSION_VENDORS}


def _driver(driver: GpuDriver | None) -> dict[str, str] | None:
    return None if driver is None else {"version": driver.version, "flavor": driver.flavor.value}


def unstructure_facts(facts: HostFacts) -> dict[str, Any]:
    """HostFacts -> the JSON-ready dict, `schema` first, GPUs by function address: the
    document `facts_to_json` writes, read back (for callers that want it as data)."""
    document: dict[str, Any] = json.loads(facts_to_json(facts))
    return document


def facts_to_json(facts: HostFacts) -> str:
    """The facts document: `pvegpu discover --json`, as `json.dumps(doc, indent=2)` prints it.

    With an indent, the json module encodes in pure Python, value by value: at 2,048 PCI
    functions that was a seventh of `discover --json`. The two lists that grow with the
    host, `functions` and `iommu_groups`, are written here from one format per record;
    every other value goes through json.dumps. tests/test_facts_json.py checks the text
    against json.dumps of the converter's document for any facts.
    """
    fields = []
    for name, value in _fields(facts):
        text = value if isinstance(value, _Text) else json.dumps(value, indent=2)
        fields.append(f'  "{name}": {text.replace(_NL, _NL_IN_FIELD)}')
    return "{\n" + ",\n".join(fields) + "\n}\n"


def _fields(facts: HostFacts) -> Iterator[tuple[str, Any]]:
    """The document's fields in order: JSON-ready values, or already written `_Text`."""
    yield "schema", SCHEMA
    for name in _names(HostFacts):
        value = getattr(facts, name)
        if name == "functions":
            yield name, _functions_text(value)
        elif name == "iommu_groups":
            yield name, _list_text([_group_text(g) for g in value])
        elif name == "gpus":
            yield name, [_gpu(gpu) for gpu in value]
        elif name == "numa_nodes":
            yield name, [_numa_node(node) for node in value]
        elif name == "gpu_drivers":
            yield from driver_keys(facts).items()
        elif name == "boot":
            # Left out while empty (no boot files read, as on every bundled fixture), so
            # documents of hosts without them read as before it existed.
            if value != BootConfig():
                yield name, _boot(value)
        elif name in _OMITTED_WHILE_EMPTY:
            if value:
                yield name, _value(value)
        elif name == "fabric_manager":
            # Left out while it has its default (no NVSwitch, so not read), as above.
            if value != FabricManager():
                yield name, _value(value)
        elif name == "cpu":
            if value is not None:  # left out while not read (no /proc/cpuinfo), as above
                yield name, _value(value)
        elif name == "pve":
            if value != PvePackages():  # left out while not read, as above
                yield name, _value(value)
        elif name == "cgroup":
            # Left out on the unified hierarchy, every PVE host's since 7.0.
            if value is not CgroupVersion.V2:
                yield name, _value(value)
        else:
            yield name, _value(value)


_OMITTED_WHILE_EMPTY = frozenset({"acs_ports", "driverctl"})
_OMITTED_WHILE_EMPTY |= {"mdev_types", "mdev_instances", "mig_caps"}  # no vGPU, no MIG
_OMITTED_WHILE_EMPTY |= {"references"}  # no guest or host file that reaches a GPU
_OMITTED_WHILE_EMPTY |= {"driver_userspace"}  # no driver loaded, or its files not installed
"""Fields left out of the document while empty (no ACS override, no driverctl), so the
documents of hosts without them read as before they existed (facts_json likewise)."""


class _Text(str):
    """A field's JSON text, already written (not a string value to encode)."""


_NL = "\n"
_NL_IN_FIELD = "\n  "


def _string(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


def _number(value: int | None) -> str:
    return "null" if value is None else str(value)


def _list_text(items: list[str]) -> _Text:
    """A JSON list of already-written items (each indented as an item of a top field)."""
    return _Text("[\n" + ",\n".join(items) + "\n]" if items else "[]")


def _function_text(fn: PciFunction, local_cpus: str | None) -> str:
    link = fn.link
    link_text = (
        "null"
        if link is None
        else (
            "{\n"
            f'      "current_speed": {_string(link.current_speed)},\n'
            f'      "current_width": {_number(link.current_width)},\n'
            f'      "max_speed": {_string(link.max_speed)},\n'
            f'      "max_width": {_number(link.max_width)}\n'
            "    }"
        )
    )
    return (
        "  {\n"
        f'    "address": "{fn.address}",\n'
        f'    "vendor": "{fn.vendor:04x}",\n'
        f'    "device": "{fn.device:04x}",\n'
        f'    "subsystem_vendor": "{fn.subsystem_vendor:04x}",\n'
        f'    "subsystem_device": "{fn.subsystem_device:04x}",\n'
        f'    "class": "{fn.pci_class:06x}",\n'
        f'    "sysfs_path": {_string(fn.sysfs_path)},\n'
        f'    "numa_node": {_number(fn.numa_node)},\n'
        f'    "iommu_group": {_number(fn.iommu_group)},\n'
        f'    "driver": {_string(fn.driver)},\n'
        f'    "driver_override": {_string(fn.driver_override)},\n'
        f'    "local_cpus": {_string(local_cpus)},\n'
        f'    "link": {link_text},\n'
        f'    "mdev_capable": {"true" if fn.mdev_capable else "false"}'
        f"{_sriov_text(fn)}\n"
        "  }"
    )


def _sriov_text(fn: PciFunction) -> str:
    """The SR-IOV keys, left out while they have their default (no SR-IOV), so
    documents of hosts without VFs read as before they existed; then the keys of a
    VM's start (`FUNCTION_OPTIONAL`), likewise."""
    text = ""
    if fn.physfn is not None:
        text += f',\n    "physfn": "{fn.physfn}"'
    if fn.sriov is not None:
        text += ',\n    "sriov": ' + json.dumps(_value(fn.sriov), indent=2).replace(_NL, "\n    ")
    if fn.bars:
        text += ',\n    "bars": ' + json.dumps(_value(fn.bars), indent=2).replace(_NL, "\n    ")
    if fn.boot_vga:
        text += ',\n    "boot_vga": true'
    if fn.removable:
        text += ',\n    "removable": true'
    return text


def _group_text(group: IommuGroup) -> str:
    members = ",\n".join(f'      "{m}"' for m in group.members)
    kind = group.type
    return (
        "  {\n"
        f'    "id": {group.id},\n'
        f'    "members": {"[" + _NL + members + _NL + "    ]" if members else "[]"},\n'
        f'    "type": {_string(None if kind is None else kind.value)}\n'
        "  }"
    )


def _functions_text(functions: tuple[PciFunction, ...]) -> _Text:
    # The functions of a NUMA node share one CpuList (discovery parses each text once);
    # printing it is a loop over its CPUs, so once per list, not per function.
    cpus_text: dict[int, str] = {}
    texts = []
    for fn in functions:
        cpus = fn.local_cpus
        text = None
        if cpus is not None:
            text = cpus_text.get(id(cpus))
            if text is None:
                text = cpus_text[id(cpus)] = str(cpus)
        texts.append(_function_text(fn, text))
    return _list_text(texts)
