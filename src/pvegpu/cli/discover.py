"""`pvegpu discover` (what the host has) and `pvegpu snapshot` (capture it for later)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pvegpu.host.discover import discover
from pvegpu.host.facts import HostFacts
from pvegpu.host.facts_json import facts_to_json
from pvegpu.host.snapshot import snapshot
from pvegpu.spec.load import load_spec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser(
        "discover",
        help="show the host's GPUs, NUMA nodes, IOMMU groups and drivers",
        description="Read sysfs, procfs and /etc under --root and print the GPU topology: "
        "one line per GPU in PCI order, the host line (node, IOMMU mode, SEV-SNP, "
        "nvidia module) and the GPUs of each NUMA node. Reads only; writes nothing.",
    )
    d.add_argument("--root", type=Path, default=Path("/"), help="host root (default: /)")
    d.add_argument("--json", action="store_true", help="the facts document (docs/facts-schema.md)")
    d.set_defaults(func=run_discover)

    s = sub.add_parser(
        "snapshot",
        help="archive exactly what discover reads into a .tar.gz",
        description="Capture every file and symlink discover reads under --root into "
        "a .tar.gz that `pvegpu discover --root <unpacked>` reads back to the same "
        "facts. Attach it to bug reports; it holds no secrets beyond /etc/pve configs.",
    )
    s.add_argument("--root", type=Path, default=Path("/"), help="host root (default: /)")
    s.add_argument("--out", type=Path, required=True, help="archive to write (.tar.gz)")
    s.add_argument(
        "--spec",
        type=Path,
        help="also capture what planning this spec's servers reads (model config, "
        "container files), so `pvegpu plan` works on the unpacked archive",
    )
    s.set_defaults(func=run_snapshot)


def run_discover(args: argparse.Namespace) -> int:
    facts = discover(args.root)
    sys.stdout.write(facts_to_json(facts) if args.json else format_table(facts))
    return 0


def run_snapshot(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec) if args.spec is not None else None
    result = snapshot(args.root, args.out, spec)
    print(f"wrote {result.path} ({result.entries} entries)")
    if result.error is None:
        return 0
    print("pvegpu snapshot: discovery failed; the archive holds what was read", file=sys.stderr)
    for problem in result.error.problems:
        print(f"  {problem}", file=sys.stderr)
    return result.error.exit_code


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def format_table(facts: HostFacts) -> str:
    """The human view: host line, one row per GPU, then the GPUs of each NUMA node."""
    iommu = str(facts.iommu_mode)
    if facts.iommu.enabled:
        count = len(facts.iommu.units)
        iommu += f" ({facts.iommu.vendor or 'unknown'}, {count} unit{'s' if count > 1 else ''})"
    nvidia = "-" if facts.nvidia is None else f"{facts.nvidia.version} ({facts.nvidia.flavor})"
    lines = [
        f"node {facts.node}: IOMMU {iommu}, SEV-SNP {'on' if facts.sev_snp else 'off'}, "
        f"nvidia {nvidia}",
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
            _dash(gpu.nvidia_minor),
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
