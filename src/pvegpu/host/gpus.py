"""A GPU's facts beyond its PCI function: its companions, and what the driver holding it
says: its node minor, model and UUID (the vendor's information file), its DRM nodes,
its compute partitions. Read once per GPU during discovery (`host/discover.py`)."""

from __future__ import annotations

import re

from pvegpu.host.reader import RECAPTURE, RootReader, fail, parsed
from pvegpu.model.facts import GPU, PciFunction, moves_with
from pvegpu.pci import PciAddress
from pvegpu.vendors import VENDORS, GpuNodeSource, vendor_of

PCI_DEVICES = "sys/bus/pci/devices"
_GPU_INFORMATION: tuple[GpuNodeSource, ...] = tuple(
    v.gpu_information for v in VENDORS if v.gpu_information is not None
)


def read_gpus(reader: RootReader, functions: tuple[PciFunction, ...]) -> tuple[GPU, ...]:
    """Every GPU among the functions (not a VF), with its companions and what its
    driver says of it."""
    # Companions by slot, indexed once: scanning every function per GPU made discovery
    # quadratic (80% of it at 2,048 GPUs). Which slot functions are companions is
    # model.facts.moves_with, the one rule the facts JSON reader checks too.
    by_slot: dict[tuple[int, int, int], list[PciFunction]] = {}
    for fn in functions:
        a = fn.address
        by_slot.setdefault((a.domain, a.bus, a.device), []).append(fn)
    gpus = []
    for fn in functions:
        # A VF (an iGPU's or a vGPU card's) is a slice of its PF's GPU, not a GPU.
        if not fn.is_gpu or fn.is_virtual_function:
            continue
        a = fn.address
        companions = tuple(o for o in by_slot[(a.domain, a.bus, a.device)] if moves_with(fn, o))
        minor, model, uuid = _gpu_information(reader, fn.address)
        card, render = _drm_nodes(reader, fn.address)
        partition = _compute_partition(reader, fn)
        gpus.append(
            GPU(
                fn, companions, minor, model,
                drm_card=card, drm_render=render, compute_partition=partition, uuid=uuid,
            )
        )  # fmt: skip
    return tuple(gpus)


def _compute_partition(reader: RootReader, fn: PciFunction) -> str | None:
    """The GPU's compute partition mode as its driver shows it (`SPX`, `CPX`), for a
    vendor whose GPUs can be split; None without the attribute (not split, or older)."""
    vendor = vendor_of(fn)
    # Only its own driver shows it; on vfio-pci the GPU is whole to the guest anyway.
    if vendor is None or vendor.compute_partition is None or fn.driver not in vendor.drivers:
        return None
    path = f"{PCI_DEVICES}/{fn.address}/{vendor.compute_partition}"
    text = reader.read(path)
    if text is None:
        return None
    mode = text.strip()
    if not (mode.isascii() and mode.isalnum()):
        fail("bad-value", path, f"expected a partition mode such as SPX or CPX, got {mode!r}")
    return mode


_DRM_NODE = re.compile(r"(card|renderD)([0-9]+)")


def _drm_nodes(reader: RootReader, address: PciAddress) -> tuple[int | None, int | None]:
    """The GPU's DRM card and render node numbers (each its node's minor on major 226),
    from the `drm/` directory its DRM driver adds under the PCI device; (None, None)
    while no DRM driver holds it (vfio-pci, NVIDIA without nvidia-drm)."""
    path = f"{PCI_DEVICES}/{address}/drm"
    found: dict[str, int] = {}
    for name in reader.listdir(path, lambda n: _DRM_NODE.fullmatch(n) is not None):
        match = _DRM_NODE.fullmatch(name)
        assert match is not None  # kept by the filter
        kind, number = match.group(1), int(match.group(2))
        if kind in found:
            fail(
                "bad-value",
                f"{path}/{name}",
                f"is a second {kind} node of one GPU ({kind}{found[kind]} is the first)",
                RECAPTURE,
            )
        found[kind] = number
    render = found.get("renderD")
    if render is not None and render < 128:
        fail("bad-value", f"{path}/renderD{render}", "is numbered below 128", RECAPTURE)
    return found.get("card"), render


def _gpu_information(
    reader: RootReader, address: PciAddress
) -> tuple[int | None, str | None, str | None]:
    """The node minor, model and UUID the driver holding the GPU gives it (Nones: no
    driver that says so holds it). Every vendor's file is looked for, not just the GPU's
    vendor's: the file says which driver holds it."""
    for source in _GPU_INFORMATION:
        path = source.path(address)
        text = reader.read(path)
        if text is None:
            continue
        info = parsed(path, text, source.parse)
        if info.bus_location not in (None, str(address)):
            fail("bad-value", path, f"says Bus Location {info.bus_location}")
        return info.minor, info.model, info.uuid
    return None, None, None
