"""The facts JSON document: stable value forms, exact round trip, refused malformed input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings

from depth import examples
from fixture_hosts import HOSTS
from pvegpu.errors import DiscoveryError
from pvegpu.host import facts_dump
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import (
    SCHEMA,
    converter,
    facts_from_json,
    facts_to_json,
    unstructure_facts,
)
from pvegpu.model.bootconfig import BootConfig, BootLoader, BootModule, KernelCmdline
from pvegpu.model.facts import FileStat, GpuDriver, HostFacts, KernelModuleFlavor, PcieLink
from pvegpu.model.kernels import KernelChoice, Kernels, ModuleOrigin, NextModule
from strategies_host import hosts

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_round_trip(name: str) -> None:
    """facts_from_json(facts_to_json(f)) == f for every fixture host."""
    facts = discover(FIXTURES / name)
    assert facts_from_json(facts_to_json(facts)) == facts


def test_round_trip_keeps_stats() -> None:
    """Fields other modules fill in after discovery (stats) survive the trip too."""
    facts = attrs.evolve(
        discover(FIXTURES / "mixed"), stats=(FileStat("shared/models/x/a.safetensors", 7),)
    )
    assert facts_from_json(facts_to_json(facts)) == facts


def test_value_forms(fixture_root: Callable[[str], Path]) -> None:
    """Addresses, cpulists and hex ids are the kernel's/Proxmox's strings; numbers are ints."""
    doc = unstructure_facts(discover(fixture_root("kpro6")))
    assert next(iter(doc)) == "schema" and doc["schema"] == SCHEMA
    gpu_fn = next(f for f in doc["functions"] if f["address"] == "0000:81:00.0")
    assert (gpu_fn["vendor"], gpu_fn["device"], gpu_fn["class"]) == ("10de", "2bb5", "030200")
    assert gpu_fn["subsystem_device"] == "204b"
    assert (gpu_fn["numa_node"], gpu_fn["iommu_group"]) == (1, 40)
    assert gpu_fn["local_cpus"] == "32-63,96-127"
    assert gpu_fn["link"]["current_width"] == 16
    gpu = doc["gpus"][4]
    assert gpu == {
        "address": "0000:81:00.0",
        "companions": ["0000:81:00.1"],
        "nvidia_minor": 4,
        "model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "uuid": "GPU-26515c1c-21cc-5a79-bc50-03376ece417e",
    }
    assert doc["nvidia"] == {"version": "590.48.01", "flavor": "open"}
    assert doc["numa_nodes"][0] == {
        "id": 0,
        "cpus": "0-31,64-95",
        "memory_kib": 1056545177,
        "free_kib": 642147942,
    }
    assert gpu_fn["bars"][1] == {
        "index": 1,
        "size": 128 << 30,
        "is_64bit": True,
        "prefetchable": True,
    }
    assert doc["cpu"] == {"vendor": "AuthenticAMD", "phys_bits": 52}
    # Left out while they have their default: an NVMe drive's BARs are not read.
    nvme = next(f for f in doc["functions"] if f["address"] == "0000:02:00.0")
    assert not {"bars", "boot_vga", "removable"} & set(nvme)


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(facts_to_json(discover(FIXTURES / "mixed")))
    return doc


def _mutations() -> dict[str, tuple[Callable[[dict[str, Any]], None], str]]:
    def set_(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
        def apply(doc: dict[str, Any]) -> None:
            target: Any = doc
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value

        return apply

    def regroup(address: str, group: int) -> Callable[[dict[str, Any]], None]:
        def apply(doc: dict[str, Any]) -> None:
            function = next(f for f in doc["functions"] if f["address"] == address)
            function["iommu_group"] = group

        return apply

    return {
        "wrong schema": (set_(["schema"], "pvegpu.model.facts/0"), "schema"),
        "uppercase hex": (set_(["functions", 0, "vendor"], "10DE"), "hex digits"),
        "trailing newline": (set_(["functions", 0, "device"], "2bb5\n"), "hex digits"),
        "0x prefix": (set_(["functions", 0, "class"], "0x060000"), "hex digits"),
        "bad address": (set_(["functions", 0, "address"], "00:00.0"), "not a PCI address"),
        "unknown gpu ref": (set_(["gpus", 0, "address"], "0000:99:00.0"), r"\$\.gpus\[0\]"),
        "unknown companion": (
            set_(["gpus", 1, "companions"], ["0000:77:00.1"]),
            r"\$\.gpus\[1\]\.companions\[0\]",
        ),
        "companion of another slot": (
            set_(["gpus", 1, "companions"], ["0000:01:00.1"]),
            r"\$\.gpus\[1\]\.companions\[0\]: '0000:01:00\.1' does not move with 0000:04:00\.0",
        ),
        "companion in another group": (
            regroup("0000:04:00.1", 99),
            r"\$\.gpus\[1\]\.companions\[0\]: '0000:04:00\.1' does not move with 0000:04:00\.0",
        ),
        "extra key": (set_(["functions", 0, "colour"], "red"), "extra|colour"),
        "bad cpulist": (set_(["numa_nodes", 0, "cpus"], "0-x"), "CPU list"),
        "bad enum": (set_(["nvidia", "flavor"], "closed"), "closed"),
        "driver not an object": (set_(["nvidia"], "590.48.01"), r"\$\.nvidia: expected an object"),
        "driver names itself": (set_(["nvidia", "driver"], "amdgpu"), r"\$\.nvidia: expected"),
        "driver key missing": (lambda doc: doc.pop("nvidia"), r"\$\.nvidia: missing"),
        "driver without version": (lambda doc: doc["nvidia"].pop("version"), "version"),
    }


def test_driver_keys_are_the_gpu_drivers() -> None:
    """`"nvidia": {version, flavor}` is HostFacts.gpu_drivers' NVIDIA entry, and null
    (not a missing key) when no driver is loaded."""
    doc = _doc()
    assert doc["nvidia"] == {"version": "590.48.01", "flavor": "open"}
    facts = facts_from_json(json.dumps(doc))
    assert facts.gpu_drivers == (GpuDriver("nvidia", "590.48.01", KernelModuleFlavor.OPEN),)
    doc["nvidia"] = None
    bare = facts_from_json(json.dumps(doc))
    assert bare.gpu_drivers == () and json.loads(facts_to_json(bare))["nvidia"] is None


@pytest.mark.parametrize("case", sorted(_mutations()))
def test_malformed_documents(case: str) -> None:
    """Malformed facts JSON raises DiscoveryError naming the document and the bad part."""
    mutate, match = _mutations()[case]
    doc = _doc()
    mutate(doc)
    with pytest.raises(DiscoveryError, match=match) as info:
        facts_from_json(json.dumps(doc), source="facts.json")
    assert info.value.problems[0].code == "bad-facts-json"
    assert info.value.problems[0].subject == "facts.json"


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "1" * 5000])
def test_json_past_the_reader_is_bad_facts_json(text: str) -> None:
    """Nesting past the interpreter's recursion limit and a 5000-digit number are refused
    like any text that is not a facts document, never a traceback."""
    with pytest.raises(DiscoveryError) as info:
        facts_from_json(text, source="facts.json")
    assert info.value.problems[0].code == "bad-facts-json"


def test_not_json() -> None:
    """Text that is not JSON at all is the same error code."""
    with pytest.raises(DiscoveryError, match="not JSON"):
        facts_from_json("{", source="x.json")
    with pytest.raises(DiscoveryError, match="schema"):
        facts_from_json("[]")


def test_type_is_hostfacts() -> None:
    """The result is a HostFacts, GPUs pointing at the very function objects listed."""
    facts = facts_from_json(facts_to_json(discover(FIXTURES / "kpro6")))
    assert isinstance(facts, HostFacts)
    assert facts.gpus[0].function == facts.function(facts.gpus[0].address)


def _odd_strings(facts: HostFacts) -> HostFacts:
    """Every free-text field of the functions and groups with quotes, backslashes,
    control and non-ASCII characters, which the text writer must escape as json does."""
    odd = 'a"b\\c\td\u00e9\u2603\U0001f600'
    functions = tuple(
        attrs.evolve(
            fn,
            sysfs_path=f"sys/devices/{odd}",
            driver=odd,
            driver_override=odd,
            link=PcieLink(odd, None, odd, 4) if i % 2 else None,
            local_cpus=None if i % 3 == 0 else fn.local_cpus,
        )
        for i, fn in enumerate(facts.functions)
    )
    groups = tuple(attrs.evolve(g, type=None) for g in facts.iommu_groups[:1])
    return attrs.evolve(facts, functions=functions, iommu_groups=groups + facts.iommu_groups[1:])


@settings(max_examples=examples(40), deadline=None)
@given(facts=hosts())
def test_writer_without_cattrs_is_the_converter(facts: HostFacts) -> None:
    """`discover --json` writes through pvegpu.host.facts_dump, not cattrs: the same
    document as the converter's, and the same text as json.dumps of it, for any facts,
    boot, stats, files and odd strings included."""
    boot = BootConfig(
        loader=BootLoader.GRUB,
        boot_tool=True,
        cmdlines=(KernelCmdline("etc/default/grub", "quiet", "GRUB_CMDLINE_LINUX"),),
        modules=(BootModule("etc/modules", "vfio_pci"),),
    )
    kernels = Kernels(
        running="6.14.8-2-pve",
        installed=("6.14.8-2-pve", "6.17.2-1-pve"),
        next_boot="6.17.2-1-pve",
        choice=KernelChoice.PIN,
        decided_by="etc/kernel/proxmox-boot-pin",
        modules=(
            NextModule("nvidia", ModuleOrigin.DKMS, "590.48.01", "lib/x.ko", "var/lib/dkms/x"),
            NextModule("other", ModuleOrigin.NONE),
        ),
    )
    for variant in (
        facts,
        attrs.evolve(facts, boot=boot, stats=(FileStat("a", 1),)),
        attrs.evolve(facts, boot=attrs.evolve(boot, kernels=kernels)),
        attrs.evolve(facts, boot=BootConfig(kernels=Kernels(unknown="no kernel image"))),
        _odd_strings(facts),
        attrs.evolve(facts, functions=(), gpus=(), iommu_groups=()),
    ):
        by_converter = {"schema": SCHEMA} | converter.unstructure(variant)
        by_converter["gpus"] = [
            {
                "address": str(g.function.address),
                "companions": [str(c.address) for c in g.companions],
                "nvidia_minor": g.node_minor,
                "model": g.model,
                **({} if g.drm_card is None else {"drm_card": g.drm_card}),
                **({} if g.drm_render is None else {"drm_render": g.drm_render}),
            }
            for g in variant.gpus
        ]
        expected = json.dumps(by_converter, indent=2)
        assert json.dumps(facts_dump.unstructure_facts(variant), indent=2) == expected
        assert facts_dump.facts_to_json(variant) == expected + "\n"
        if variant.boot.kernels != Kernels():
            assert facts_from_json(expected).boot == variant.boot
