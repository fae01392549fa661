"""HostFacts <-> a stable JSON document (`"schema": "pvegpu.facts/1"`, docs/facts-schema.md).

One cattrs Converter at the edge; the domain types stay free of serialization concerns.
Value forms are the ones Proxmox and the kernel use, so the JSON can be compared with
pci.cfg and sysfs by eye: PCI addresses `"0000:81:00.0"`, CPU lists `"0-31,64-95"`,
vendor/device/subsystem ids as 4 lowercase hex digits without `0x` (`"10de"`, as pci.cfg
and Proxmox's sysfs check compare them), the class as 6 hex digits (`"030200"`), every
other number a JSON int. GPUs refer to their functions by address instead of repeating
them. `facts_from_json(facts_to_json(f)) == f` for every HostFacts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.v import format_exception

from pvegpu.errors import DiscoveryError

# Writing the document needs no converter (pvegpu.host.facts_dump, what `discover --json`
# imports); the converter below reads it, and serves types that embed HostFacts parts.
from pvegpu.host.facts_dump import (
    FUNCTION_OPTIONAL,
    GPU_KEYS,
    GPU_OPTIONAL,
    NUMA_OPTIONAL,
    driver_keys,
)
from pvegpu.host.facts_dump import SCHEMA as SCHEMA
from pvegpu.host.facts_dump import facts_to_json as facts_to_json
from pvegpu.host.facts_dump import unstructure_facts as unstructure_facts
from pvegpu.jsontext import load_json
from pvegpu.model.bootconfig import BootConfig
from pvegpu.model.facts import GPU, HostFacts, NumaNode, PciFunction, moves_with
from pvegpu.model.references import GpuReference
from pvegpu.model.userspace import UserspaceFile
from pvegpu.pci import CpuList, PciAddress
from pvegpu.vendors import DRIVER_VERSION_VENDORS


def _hex(digits: int) -> tuple[Callable[[int], str], Callable[[Any, Any], int]]:
    pattern = re.compile(rf"[0-9a-f]{{{digits}}}")

    def dump(value: int) -> str:
        return f"{value:0{digits}x}"

    def load(value: Any, _: Any) -> int:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise ValueError(f"expected {digits} lowercase hex digits without 0x, got {value!r}")
        return int(value, 16)

    return dump, load


def _text(parse: Callable[[str], Any]) -> Callable[[Any, Any], Any]:
    def load(value: Any, _: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return parse(value)

    return load


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_unstructure_hook(PciAddress, str)
    conv.register_structure_hook(PciAddress, _text(PciAddress.parse))
    conv.register_unstructure_hook(CpuList, str)
    conv.register_structure_hook(CpuList, _text(CpuList.parse))
    id4, id6 = _hex(4), _hex(6)
    hex4 = override(unstruct_hook=id4[0], struct_hook=id4[1])
    klass = override(rename="class", unstruct_hook=id6[0], struct_hook=id6[1])
    # SR-IOV keys and a GPU's BARs, boot display and removability are left out while
    # they have their default, so documents of hosts without them read as before.
    absent = override(omit_if_default=True)
    optional: dict[str, Any] = dict.fromkeys(FUNCTION_OPTIONAL, absent)
    conv.register_unstructure_hook(
        PciFunction,
        make_dict_unstructure_fn(
            PciFunction, conv, vendor=hex4, device=hex4, subsystem_vendor=hex4,
            subsystem_device=hex4, pci_class=klass, **optional,
        ),
    )  # fmt: skip
    numa: dict[str, Any] = dict.fromkeys(NUMA_OPTIONAL, absent)
    conv.register_unstructure_hook(NumaNode, make_dict_unstructure_fn(NumaNode, conv, **numa))
    conv.register_structure_hook(
        PciFunction,
        make_dict_structure_fn(
            PciFunction, conv, vendor=hex4, device=hex4, subsystem_vendor=hex4,
            subsystem_device=hex4, pci_class=klass,
        ),
    )  # fmt: skip
    gpu_keys: dict[str, Any] = {"node_minor": override(rename=GPU_KEYS["node_minor"])}
    gpu_keys |= {name: override(omit_if_default=True) for name in GPU_OPTIONAL}
    conv.register_unstructure_hook(GPU, make_dict_unstructure_fn(GPU, conv, **gpu_keys))
    # A reference's keys are left out while they have their default: most name a GPU
    # one way only (facts_dump writes them so too).
    reference_keys: dict[str, Any] = {
        f.name: override(omit_if_default=True)
        for f in attrs.fields(GpuReference)
        if f.default is not attrs.NOTHING
    }
    conv.register_unstructure_hook(
        GpuReference, make_dict_unstructure_fn(GpuReference, conv, **reference_keys)
    )
    conv.register_structure_hook(GPU, make_dict_structure_fn(GPU, conv, **gpu_keys))
    # `kernels` is left out while empty (no /boot or osrelease read), as facts_dump does.
    conv.register_unstructure_hook(
        BootConfig,
        make_dict_unstructure_fn(BootConfig, conv, kernels=override(omit_if_default=True)),
    )
    # A link has its text; a library or tool only its path.
    conv.register_unstructure_hook(
        UserspaceFile,
        make_dict_unstructure_fn(UserspaceFile, conv, link=absent),
    )
    # `boot` is left out while it is empty (no boot files read, as on every bundled
    # fixture), so documents of hosts without them read as before it existed.
    facts_fields = make_dict_unstructure_fn(
        HostFacts,
        conv,
        boot=override(omit_if_default=True),
        # Left out while empty, as facts_dump writes them (its _OMITTED_WHILE_EMPTY).
        acs_ports=override(omit_if_default=True),
        driverctl=override(omit_if_default=True),
        mdev_types=override(omit_if_default=True),
        mdev_instances=override(omit_if_default=True),
        mig_caps=override(omit_if_default=True),
        fabric_manager=override(omit_if_default=True),
        cpu=override(omit_if_default=True),
        pve=override(omit_if_default=True),
        cgroup=override(omit_if_default=True),
        references=override(omit_if_default=True),
        driver_userspace=override(omit_if_default=True),
    )

    def unstructure(facts: HostFacts) -> dict[str, Any]:
        # `gpu_drivers` is a key per vendor in the document (facts_dump.driver_keys), in
        # the field's place.
        doc: dict[str, Any] = {}
        for key, value in facts_fields(facts).items():
            doc |= driver_keys(facts) if key == "gpu_drivers" else {key: value}
        return doc

    conv.register_unstructure_hook(HostFacts, unstructure)
    return conv


def _gpu_drivers(body: dict[str, Any]) -> dict[str, Any]:
    """The document's per-vendor driver keys back into the one `gpu_drivers` field."""
    drivers = []
    rest = dict(body)
    for vendor in DRIVER_VERSION_VENDORS:
        key = vendor.host_driver
        if key not in rest:
            raise ValueError(f"$.{key}: missing (an object {{version, flavor}}, or null)")
        value = rest.pop(key)
        if value is None:
            continue
        if not isinstance(value, dict) or "driver" in value:
            raise ValueError(f"$.{key}: expected an object {{version, flavor}} or null")
        drivers.append({"driver": key, **value})
    return rest | {"gpu_drivers": drivers}


converter = _make_converter()
"""The converter for facts documents; use it for types that embed HostFacts parts."""


def structure_facts(doc: Any, source: str = "<facts>") -> HostFacts:
    """The inverse of unstructure_facts; a malformed document raises DiscoveryError."""
    try:
        return _structure(doc)
    except (cattrs.BaseValidationError, ValueError, KeyError, TypeError) as err:
        lines = (
            cattrs.transform_error(err, format_exception=_describe)
            if isinstance(err, cattrs.BaseValidationError)
            else [str(err)]
        )
        raise DiscoveryError.one(
            "bad-facts-json",
            source,
            "is not a pvegpu.facts/1 document: " + "; ".join(lines),
            "regenerate it with `pvegpu discover --json`",
        ) from err


def _describe(exc: BaseException, kind: Any) -> str:
    # Our hooks' ValueErrors already say what was expected; cattrs' default drops that.
    if type(exc) is ValueError:
        return str(exc)
    return format_exception(exc, kind)


def _structure(doc: Any) -> HostFacts:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"$.schema: expected {SCHEMA!r}, got {found!r}")
    body = {k: v for k, v in doc.items() if k != "schema"}
    functions = {f.get("address"): f for f in body.get("functions", []) if isinstance(f, dict)}

    def function(where: str, address: Any) -> Any:
        if address not in functions:
            raise ValueError(f"{where}: {address!r} is not one of $.functions")
        return functions[address]

    gpus = []
    for i, ref in enumerate(body.get("gpus", [])):
        if not isinstance(ref, dict):
            raise ValueError(f"$.gpus[{i}]: expected an object")
        rest = {k: v for k, v in ref.items() if k not in ("address", "companions")}
        gpu = function(f"$.gpus[{i}].address", ref.get("address"))
        companions = []
        for j, address in enumerate(ref.get("companions", [])):
            companions.append(function(f"$.gpus[{i}].companions[{j}]", address))
        gpus.append({"function": gpu, "companions": companions, **rest})
    facts = converter.structure(_gpu_drivers(body) | {"gpus": gpus}, HostFacts)
    # A document listing another companion would make the plan move a device it never shows.
    for i, gpu_value in enumerate(facts.gpus):
        for j, companion in enumerate(gpu_value.companions):
            if not moves_with(gpu_value.function, companion):
                raise ValueError(
                    f"$.gpus[{i}].companions[{j}]: {str(companion.address)!r} does not move "
                    f"with {gpu_value.address}: not a function of its slot in its IOMMU group"
                )
    return facts


def facts_from_json(text: str, source: str = "<facts>") -> HostFacts:
    try:
        doc = load_json(text)
    except ValueError as err:
        raise DiscoveryError.one(
            "bad-facts-json",
            source,
            f"is not JSON: {err}",
            "regenerate it with `pvegpu discover --json`",
        ) from err
    return structure_facts(doc, source)
