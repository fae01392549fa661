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
from typing import Any

import attrs

from pvegpu.host.bootconfig import BootConfig
from pvegpu.host.facts import GPU, HostFacts, PciFunction
from pvegpu.pci import CpuList, PciAddress

SCHEMA = "pvegpu.facts/1"

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
    if kind is PciFunction:
        return _function(value)
    if isinstance(value, enum.Enum):
        return value.value
    if kind is PciAddress or kind is CpuList:
        return str(value)
    if kind is tuple or kind is list:
        return [_value(item) for item in value]
    if attrs.has(kind):
        return {name: _value(getattr(value, name)) for name in _names(kind)}
    raise TypeError(f"no JSON form for {kind.__name__}")


def _function(fn: PciFunction) -> dict[str, Any]:
    """The ids as the kernel's hex without 0x (`10de`, class `030200`), `class` renamed."""
    local_cpus = fn.local_cpus
    link = fn.link
    return {
        "address": str(fn.address),
        "vendor": f"{fn.vendor:04x}",
        "device": f"{fn.device:04x}",
        "subsystem_vendor": f"{fn.subsystem_vendor:04x}",
        "subsystem_device": f"{fn.subsystem_device:04x}",
        "class": f"{fn.pci_class:06x}",
        "sysfs_path": fn.sysfs_path,
        "numa_node": fn.numa_node,
        "iommu_group": fn.iommu_group,
        "driver": fn.driver,
        "driver_override": fn.driver_override,
        "local_cpus": None if local_cpus is None else str(local_cpus),
        "link": None if link is None else _value(link),
        "mdev_capable": fn.mdev_capable,
    }


def _gpu(gpu: GPU) -> dict[str, Any]:
    """A GPU by its function's address; the function itself is in `functions`."""
    doc: dict[str, Any] = {
        "address": str(gpu.function.address),
        "companions": [str(c.address) for c in gpu.companions],
    }
    for name in _names(GPU):
        if name not in ("function", "companions"):
            doc[name] = _value(getattr(gpu, name))
    return doc


def unstructure_facts(facts: HostFacts) -> dict[str, Any]:
    """HostFacts -> the JSON-ready dict, `schema` first, GPUs by function address."""
    doc: dict[str, Any] = {"schema": SCHEMA}
    for name in _names(HostFacts):
        value = getattr(facts, name)
        if name == "gpus":
            doc[name] = [_gpu(gpu) for gpu in value]
        elif name == "boot":
            # Left out while empty (no boot files read, as on every bundled fixture), so
            # documents of hosts without them read as before it existed.
            if value != BootConfig():
                doc[name] = _value(value)
        else:
            doc[name] = _value(value)
    return doc


def facts_to_json(facts: HostFacts) -> str:
    """The facts document: `pvegpu discover --json`."""
    return json.dumps(unstructure_facts(facts), indent=2) + "\n"
