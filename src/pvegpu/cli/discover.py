"""`pvegpu discover`: what the host has, as a table or the facts JSON, and with --svg
a drawing of it.

Its arguments are in cli/arguments.py; this module is imported only to run it, and
imports nothing of planning, rendering or serving: the drawing (rendering/host_svg.py,
which needs neither jinja2 nor the planner) is imported only when --svg asks for it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import RenderError
from pvegpu.host.discover import discover
from pvegpu.host.facts_dump import facts_to_json
from pvegpu.model.facts import HostFacts
from pvegpu.model.references import Holder
from pvegpu.pci import PciAddress
from pvegpu.vendors import Vendor


def run_discover(args: argparse.Namespace) -> int:
    if args.svg is not None:
        _check_svg_target(args.svg)  # before reading the host: a typo fails at once
    facts = discover(args.root)
    sys.stdout.write(facts_to_json(facts) if args.json else format_table(facts))
    if args.svg is not None:
        from pvegpu.rendering.host_svg import host_svg  # only for --svg

        _write_svg(args.svg, host_svg(facts))
        print(f"pvegpu discover: drew {facts.node}'s GPUs into {args.svg}", file=sys.stderr)
    return 0


def _svg_problem(path: Path, message: str, fix: str) -> RenderError:
    return RenderError([Diagnostic.error("output-unwritable", str(path), message, fix)])


def _check_svg_target(path: Path) -> None:
    """`--svg FILE`: its directory must exist (nothing is created), and FILE must not be
    a directory; an existing file is replaced."""
    parent = path.parent
    if not parent.is_dir():
        raise _svg_problem(
            path,
            f"cannot write: the directory {str(parent)!r} does not exist (or is not a "
            "directory); pvegpu creates no directories",
            f"create it first (mkdir -p {parent}), or give --svg a path in an existing directory",
        )
    if path.is_dir():
        raise _svg_problem(
            path, "cannot write: it is a directory", "give --svg a file name, e.g. DIR/host.svg"
        )


def _write_svg(path: Path, text: str) -> None:
    """Write beside FILE, then rename over it: a reader never sees half a drawing, and a
    failed write leaves the previous file as it was."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as err:
        raise _svg_problem(
            path, f"cannot write: {err.strerror or err}", "choose a writable --svg directory"
        ) from err
    temporary = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        temporary.chmod(0o644)
        temporary.replace(path)
    except OSError as err:
        temporary.unlink(missing_ok=True)
        raise _svg_problem(
            path, f"cannot write: {err.strerror or err}", "choose a writable --svg path"
        ) from err


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _driver(facts: HostFacts, vendor: Vendor) -> str:
    loaded = facts.gpu_driver(vendor.host_driver)
    return "-" if loaded is None else f"{loaded.version} ({loaded.flavor})"


def _partition_lines(facts: HostFacts) -> list[str]:
    """The virtual GPU types and instances of each parent, then each GPU's MIG instances
    with their capability node minors (what a container must keep)."""
    lines = []
    for parent in sorted(
        {t.parent for t in facts.mdev_types} | {i.parent for i in facts.mdev_instances}
    ):
        types = [
            t.type_id + (f" ({t.name})" if t.name else "")
            for t in facts.mdev_types
            if t.parent == parent
        ]
        live = [i for i in facts.mdev_instances if i.parent == parent]
        used = ", ".join(f"{i.type_id or '?'}" + (f" {i.uuid}" if i.uuid else "") for i in live)
        lines.append(
            f"vGPU {parent.short}: types {', '.join(types) or '-'}; in use: {used or 'none'}"
        )
    by_gpu: dict[int, list[str]] = {}
    for cap in facts.mig_caps:
        if cap.gpu_minor is not None:
            what = f"gi{cap.gpu_instance}" + (
                "" if cap.compute_instance is None else f"/ci{cap.compute_instance}"
            )
            by_gpu.setdefault(cap.gpu_minor, []).append(f"{what} cap{cap.minor}")
    host_wide = [f"{c.name} cap{c.minor}" for c in facts.mig_caps if c.gpu_minor is None]
    for minor, instances in sorted(by_gpu.items()):
        gpu = next((g for g in facts.gpus if g.node_minor == minor), None)
        name = f"{gpu.address.short} ({gpu.node_path})" if gpu else f"minor {minor}"
        lines.append(f"MIG {name}: {', '.join(instances)}")
    if host_wide:
        lines.append(f"MIG host-wide: {', '.join(host_wide)}")
    return lines


def _fabric_line(facts: HostFacts) -> str:
    """The host's NVSwitches and the Fabric Manager that programs them (planning/fabric.py)."""
    manager = facts.fabric_manager
    state = "installed, not enabled" if manager.installed else "not installed"
    if manager.enabled:
        state = "enabled"
    mode = "" if manager.mode is None else f", FABRIC_MODE={manager.mode}"
    switches = " ".join(s.address.short for s in facts.nvswitches)
    return f"NVSwitch {switches}: Fabric Manager {state}{mode}"


def _use_lines(facts: HostFacts) -> list[str]:
    """Who reaches each GPU now (`HostFacts.references`, main and pending sections: a
    snapshot is history), what reaches every GPU of a kind, and what pvegpu cannot tell."""
    by_gpu: dict[PciAddress, dict[str, list[str]]] = {}
    every: list[str] = []
    unknown: list[str] = []
    for ref in facts.references:
        if (ref.section is not None and not ref.pending) or ref.inert is not None:
            continue
        label = ref.text.split(":", 1)[0].strip() if ref.holder is not Holder.HOST else ref.where
        if ref.unresolved is not None:
            unknown.append(f"?   {ref.where} ({ref.guest}, {ref.kind.value}): {ref.unresolved}")
        elif ref.every is not None:
            every.append(f"ALL {ref.guest}: `{ref.text.strip()}` reaches {ref.every}")
        for gpu in () if ref.every is not None else ref.gpus:
            by_gpu.setdefault(gpu, {}).setdefault(ref.guest, []).append(label)
    used = [
        f"USE {gpu.short}: "
        + "; ".join(
            f"{guest} {', '.join(dict.fromkeys(labels))}" for guest, labels in holders.items()
        )
        for gpu, holders in sorted(by_gpu.items())
    ]
    return used + every + unknown


def format_table(facts: HostFacts) -> str:
    """The human view: host line, one row per GPU, then the GPUs of each NUMA node."""
    iommu = str(facts.iommu_mode)
    if facts.iommu.enabled:
        count = len(facts.iommu.units)
        iommu += f" ({facts.iommu.vendor or 'unknown'}, {count} unit{'s' if count > 1 else ''})"
    drivers = "".join(f", {v.host_driver} {_driver(facts, v)}" for v in facts.reported_drivers())
    lines = [
        f"node {facts.node}: IOMMU {iommu}, SEV-SNP {'on' if facts.sev_snp else 'off'}{drivers}",
        "",
    ]
    header = ("GPU", "ADDRESS", "ID", "NUMA", "GROUP", "DRIVER", "MINOR", "WITH", "MODEL")
    rows = []
    for index, gpu in enumerate(facts.gpus):
        rows.append(
            (
                str(index),
                str(gpu.address),
                gpu.vendor_device,
                _dash(gpu.numa_node),
                _dash(gpu.iommu_group),
                _dash(gpu.driver),
                _dash(gpu.node_minor),
                ",".join(f".{c.address.function}" for c in gpu.companions) or "-",
                gpu.model or ("BMC display (never pooled)" if gpu.bmc_display else "-"),
            )
        )
        # SR-IOV VFs under their PF: slices of this GPU, not GPUs of their own.
        rows.extend(
            (
                f"{index}.vf{n}",
                str(vf.address),
                vf.vendor_device,
                _dash(vf.numa_node),
                _dash(vf.iommu_group),
                _dash(vf.driver),
                "-",
                "-",
                f"virtual function {n} of {gpu.address.short}",
            )
            for n, vf in enumerate(facts.virtual_functions(gpu.address))
        )
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        lines.append("(no GPUs: no PCI function of class 0x03 or 0x12)")
    lines.append("")
    # Only GPUs a DRM driver holds have them: a host without keeps the table it had.
    drm_lines = [
        f"DRM {gpu.address.short}: /dev/dri/card{gpu.drm_card}, /dev/dri/renderD{gpu.drm_render}"
        + (f" (compute partitions: {gpu.compute_partition})" if gpu.partitioned else "")
        for gpu in facts.gpus
        if gpu.drm_card is not None and gpu.drm_render is not None
    ]
    if drm_lines:
        lines += [*drm_lines, ""]
    sriov_lines = [
        f"SR-IOV {gpu.address.short}: {sriov.num_vfs} of {sriov.total_vfs} VFs, "
        f"sriov_drivers_autoprobe {int(sriov.drivers_autoprobe)}"
        for gpu in facts.gpus
        if (sriov := gpu.function.sriov) is not None
    ]
    if sriov_lines:
        lines += [*sriov_lines, ""]
    if partitions := _partition_lines(facts):
        lines += [*partitions, ""]
    if facts.nvswitches:
        lines += [_fabric_line(facts), ""]
    if uses := _use_lines(facts):
        lines += [*uses, ""]
    for node in facts.numa_nodes:
        on_node = [g.address.short for g in facts.gpus if g.numa_node == node.id]
        lines.append(f"NUMA {node.id} (cpus {node.cpus}): {' '.join(on_node) or '-'}")
    unplaced = [g.address.short for g in facts.gpus if g.numa_node is None]
    if unplaced:
        lines.append(f"no NUMA node (numa_node -1): {' '.join(unplaced)}")
    return "\n".join(lines) + "\n"
