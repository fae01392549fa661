"""`pvegpu discover`: what the host has, as a table or the facts JSON.

Its arguments are in cli/arguments.py; this module is imported only to run it, and
imports nothing of planning, rendering or serving.
"""

from __future__ import annotations

import argparse
import sys

from pvegpu.host.discover import discover
from pvegpu.host.facts_dump import facts_to_json
from pvegpu.model.facts import HostFacts
from pvegpu.vendors import DRIVER_VERSION_VENDORS, Vendor


def run_discover(args: argparse.Namespace) -> int:
    facts = discover(args.root)
    sys.stdout.write(facts_to_json(facts) if args.json else format_table(facts))
    return 0


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _driver(facts: HostFacts, vendor: Vendor) -> str:
    loaded = facts.gpu_driver(vendor.host_driver)
    return "-" if loaded is None else f"{loaded.version} ({loaded.flavor})"


def format_table(facts: HostFacts) -> str:
    """The human view: host line, one row per GPU, then the GPUs of each NUMA node."""
    iommu = str(facts.iommu_mode)
    if facts.iommu.enabled:
        count = len(facts.iommu.units)
        iommu += f" ({facts.iommu.vendor or 'unknown'}, {count} unit{'s' if count > 1 else ''})"
    drivers = "".join(f", {v.host_driver} {_driver(facts, v)}" for v in DRIVER_VERSION_VENDORS)
    lines = [
        f"node {facts.node}: IOMMU {iommu}, SEV-SNP {'on' if facts.sev_snp else 'off'}{drivers}",
        "",
    ]
    header = ("GPU", "ADDRESS", "ID", "NUMA", "GROUP", "DRIVER", "MINOR", "WITH", "MODEL")
    rows = [
        (
            str(index),
            str(gpu.address),
            gpu.vendor_device,
            _dash(gpu.numa_node),
            _dash(gpu.iommu_group),
            _dash(gpu.driver),
            _dash(gpu.node_minor),
            ",".join(f".{c.address.function}" for c in gpu.companions) or "-",
            gpu.model or "-",
        )
        for index, gpu in enumerate(facts.gpus)
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        lines.append("(no display controllers: no PCI function of class 0x03)")
    lines.append("")
    for node in facts.numa_nodes:
        on_node = [g.address.short for g in facts.gpus if g.numa_node == node.id]
        lines.append(f"NUMA {node.id} (cpus {node.cpus}): {' '.join(on_node) or '-'}")
    unplaced = [g.address.short for g in facts.gpus if g.numa_node is None]
    if unplaced:
        lines.append(f"no NUMA node (numa_node -1): {' '.join(unplaced)}")
    return "\n".join(lines) + "\n"
