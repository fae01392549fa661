"""Discovery of GPU partitions: virtual GPU types and instances (mediated devices and the
vendors' vGPU on SR-IOV virtual functions), and MIG capability nodes.

Read through the discovery's `RootReader` like every other fact; a file the kernel or
the driver would not write so is a DiscoveryError naming it. docs/discovery.md lists
what is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from pvegpu.host.reader import RECAPTURE, RootReader, fail
from pvegpu.model.facts import MdevInstance, MdevType, MigCap, PciFunction
from pvegpu.pci import PciAddress
from pvegpu.vendors import VENDORS
from pvegpu.vendors.partitions import MigSource, VgpuSource

T = TypeVar("T")

MDEV_TYPES = "mdev_supported_types"
MDEV_DEVICES = "sys/bus/mdev/devices"
_NUMBER = re.compile("[0-9]+")
_VGPU: tuple[VgpuSource, ...] = tuple(v.vgpu for v in VENDORS if v.vgpu is not None)
_MIG: tuple[MigSource, ...] = tuple(v.mig for v in VENDORS if v.mig is not None)


def _parse(path: str, raw: str, process: Callable[[str], T]) -> T:
    try:
        return process(raw)
    except ValueError as err:
        fail("bad-value", path, str(err))


def _count(raw: str) -> int:
    text = raw.strip()
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"expected a number, got {raw[:40]!r}")
    return int(text)


def _one_line(raw: str) -> str:
    text = raw.strip()
    if not text or "\n" in text:
        raise ValueError(f"expected one line of text, got {raw[:80]!r}")
    return text


def read_mdev(
    reader: RootReader, functions: tuple[PciFunction, ...]
) -> tuple[tuple[MdevType, ...], tuple[MdevInstance, ...]]:
    """Every mdev-capable function's virtual GPU types and the virtual GPUs that exist."""
    types: list[MdevType] = []
    instances: list[MdevInstance] = []
    for fn in functions:
        if not fn.mdev_capable:
            continue
        base = f"sys/bus/pci/devices/{fn.address}"
        types += _mdev_types(reader, fn.address, fn.sysfs_path, base)
        for source in _VGPU:
            found, current = _vgpu(reader, fn.address, fn.sysfs_path, base, source)
            types += found
            instances += current
    instances += _mdev_devices(reader)
    types.sort(key=lambda t: (t.parent, t.type_id))  # a tie keeps reading order
    return tuple(types), tuple(sorted(instances, key=_instance_key))


def _instance_key(instance: MdevInstance) -> tuple[PciAddress, str, str]:
    return (instance.parent, instance.uuid or "", instance.type_id or "")


def _mdev_types(reader: RootReader, parent: PciAddress, real: str, base: str) -> list[MdevType]:
    found = []
    for name in reader.listdir(f"{real}/{MDEV_TYPES}", subject=f"{base}/{MDEV_TYPES}"):
        where = f"{base}/{MDEV_TYPES}/{name}"
        at = f"{real}/{MDEV_TYPES}/{name}"
        text = reader.read(f"{at}/name", subject=f"{where}/name")
        available = reader.read(f"{at}/available_instances", subject=f"{where}/available_instances")
        found.append(
            MdevType(
                parent,
                name,
                None if text is None else _parse(f"{where}/name", text, _one_line),
                None
                if available is None
                else _parse(f"{where}/available_instances", available, _count),
            )
        )
    return found


def _vgpu(
    reader: RootReader, parent: PciAddress, real: str, base: str, source: VgpuSource
) -> tuple[list[MdevType], list[MdevInstance]]:
    """A vendor's vGPU types on a virtual function, and the one it has now (if any)."""
    where = f"{base}/{source.directory}"
    at = f"{real}/{source.directory}"
    creatable = reader.read(f"{at}/{source.creatable}", subject=f"{where}/{source.creatable}")
    types = []
    if creatable is not None:
        pairs = _parse(f"{where}/{source.creatable}", creatable, source.parse_creatable)
        types = [MdevType(parent, source.mdev_type(i), name) for i, name in pairs]
    current = reader.read(f"{at}/{source.current}", subject=f"{where}/{source.current}")
    if current is None:
        return types, []
    type_id = _parse(f"{where}/{source.current}", current, source.parse_current)
    return types, ([MdevInstance(parent, source.mdev_type(type_id))] if type_id else [])


def _mdev_devices(reader: RootReader) -> list[MdevInstance]:
    """/sys/bus/mdev/devices/<uuid>: links into the parent device's directory."""
    found = []
    for name in reader.listdir(MDEV_DEVICES):
        path = f"{MDEV_DEVICES}/{name}"
        real = reader.directory(path)
        if real is None:
            fail(
                "dangling-link",
                path,
                f"points to {reader.readlink(path)!r}, which is not a directory under the root",
                "a mediated device lives in its parent's directory; " + RECAPTURE,
            )
        parent_name = real.rpartition("/")[0].rpartition("/")[2]
        try:
            parent = PciAddress.parse(parent_name)
        except ValueError:
            continue  # a parent that is not a PCI function (s390 vfio-ap): no GPU's
        kind = reader.readlink("mdev_type", at=real, subject=f"{path}/mdev_type")
        found.append(
            MdevInstance(
                parent, None if kind is None else kind.rstrip("/").rpartition("/")[2], name
            )
        )
    return found


def read_mig(reader: RootReader) -> tuple[MigCap, ...]:
    """The MIG capability nodes the GPU drivers list: host-wide, per GPU and compute
    instance (`MigSource`)."""
    caps: list[MigCap] = []
    for source in _MIG:
        top = source.capabilities

        parse = source.parse_access

        def access(path: str, parse: Callable[[str], int] = parse) -> int:
            return _parse(path, reader.need(path, "a MIG capability's access file"), parse)

        for name in ("config", "monitor"):
            path = f"{top}/mig/{name}"
            if reader.exists(path):
                caps.append(MigCap(access(path), name=f"mig/{name}"))
        for gpu in reader.listdir(top, _numbered("gpu")):
            minor = int(gpu[3:])
            mig = f"{top}/{gpu}/mig"
            for gi in reader.listdir(mig, _numbered("gi")):
                instance = int(gi[2:])
                caps.append(
                    MigCap(access(f"{mig}/{gi}/access"), minor, instance, name=f"{gpu}/mig/{gi}")
                )
                for ci in reader.listdir(f"{mig}/{gi}", _numbered("ci")):
                    caps.append(
                        MigCap(
                            access(f"{mig}/{gi}/{ci}/access"),
                            minor,
                            instance,
                            int(ci[2:]),
                            name=f"{gpu}/mig/{gi}/{ci}",
                        )
                    )
        _check_unique(top, caps)
    return tuple(sorted(caps, key=lambda c: c.minor))  # unique (_check_unique)


def _numbered(prefix: str) -> Callable[[str], bool]:
    def keep(name: str) -> bool:
        return name.startswith(prefix) and _NUMBER.fullmatch(name[len(prefix) :]) is not None

    return keep


def _check_unique(top: str, caps: list[MigCap]) -> None:
    seen: dict[int, MigCap] = {}
    for cap in caps:
        other = seen.setdefault(cap.minor, cap)
        if other is not cap:
            where = f"{top}/{cap.name}" + ("" if cap.gpu_minor is None else "/access")
            fail(
                "bad-value",
                where,
                f"says DeviceFileMinor {cap.minor}, which {other.name} has too; the driver "
                "gives each capability a node of its own",
            )
