"""What names a GPU on this host now: its device numbers, stable node names, address, UUID.

Discovery resolves every reference it finds (`host/references.py`) through one
`GpuIndex`, built from the facts it has just read, so a `c 195:4` rule, a
`/dev/dri/by-path/pci-0000:03:00.0-render` entry, an `NVIDIA_VISIBLE_DEVICES=GPU-...`
and a `hostpci0: 0000:81:00` all end as the same GPU addresses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import attrs

from pvegpu.model.facts import GPU, CharMajor, MigCap, PciFunction, driver_order
from pvegpu.pci import PciAddress
from pvegpu.pvefiles.hostpci import HostId
from pvegpu.values import value_class
from pvegpu.vendors import VENDORS, DeviceNodes
from pvegpu.vendors.drm import DRM_MAJOR, DRM_NODES

# udev's stable DRM names: /dev/dri/by-path/pci-<address>-{card,render}.
_BY_PATH = re.compile(
    r"^/dev/dri/by-path/pci-(?P<address>[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])"
    r"-(?P<kind>render|card)$"
)
DRM_DIR = "/dev/dri"


@value_class
@attrs.frozen(eq=False, repr=False)
class PathTarget:
    """What one device path names, before it is turned into GPUs."""

    node: tuple[int, int] | None = None
    """(major, minor) of a node named by number."""
    address: PciAddress | None = None
    """The PCI device a stable name (`by-path`) names."""
    every: str | None = None
    """A directory of every node of a kind (`/dev/dri`): what it reaches."""
    every_major: int | None = None
    unresolved: str | None = None


class GpuIndex:
    """The host's GPUs by every name a guest line or a host file can give them."""

    __slots__ = (
        "_by_node",
        "_caps",
        "_caps_major",
        "_every",
        "_families",
        "_mdevs",
        "_slots",
        "functions",
        "gpu_addresses",
        "ordered",
        "uuids",
    )

    def __init__(
        self,
        gpus: Iterable[GPU],
        functions: Iterable[PciFunction],
        mig_caps: Iterable[MigCap],
        char_majors: Iterable[CharMajor],
        mdevs: Mapping[str, PciAddress] | None = None,
    ) -> None:
        gpus = tuple(gpus)
        self._mdevs = dict(mdevs or {})
        self.functions = {f.address: f for f in functions}
        self._slots: dict[tuple[int, int, int], list[PciAddress]] = {}
        for address in self.functions:
            key = (address.domain, address.bus, address.device)
            self._slots.setdefault(key, []).append(address)
        # A GPU, or a virtual function of one (a vGPU or iGPU VF is a slice of that GPU).
        gpu_set = {g.address for g in gpus}
        gpu_set |= {a for a, f in self.functions.items() if f.physfn in gpu_set}
        self.gpu_addresses = frozenset(gpu_set)
        self._by_node: dict[tuple[int, int], PciAddress] = {}
        self._every: dict[int, list[PciAddress]] = {}
        # The vendors whose GPUs have nodes a container can be given, and DRM's.
        self._families: list[DeviceNodes] = [
            v.nodes for v in VENDORS if v.nodes is not None and not v.nodes.drm
        ]
        self._families.append(DRM_NODES)
        for gpu in gpus:
            vendor = gpu.vendor
            own = vendor.nodes if vendor is not None else None
            if own is not None and not own.drm and gpu.node_minor is not None:
                self._add((own.major, gpu.node_minor), gpu.address)
            for number in (gpu.drm_card, gpu.drm_render):
                if number is not None:
                    self._add((DRM_MAJOR, number), gpu.address)
        # A vendor hook's indices are its driver's own order (NVML's for NVIDIA): the GPUs
        # the driver numbers, in PCI order.
        self.ordered = driver_order(gpus)
        self.uuids = {g.uuid: g.address for g in gpus if g.uuid is not None}
        by_minor = {m: a for (major, m), a in self._by_node.items() if major != DRM_MAJOR}
        self._caps = {
            c.minor: by_minor.get(c.gpu_minor) if c.gpu_minor is not None else None
            for c in mig_caps
        }
        names = {c.name: c.major for c in char_majors}
        self._caps_major = next(
            (names.get(v.mig.major_name) for v in VENDORS if v.mig is not None), None
        )

    def _add(self, node: tuple[int, int], address: PciAddress) -> None:
        self._by_node[node] = address
        self._every.setdefault(node[0], []).append(address)

    def node(self, major: int, minor: int) -> PciAddress | None:
        """The GPU whose node is major:minor now (a MIG instance's node: its GPU)."""
        if major == self._caps_major:
            return self._caps.get(minor)
        return self._by_node.get((major, minor))

    def on_major(self, major: int) -> tuple[PciAddress, ...]:
        """Every GPU with a node on `major` now, in address order."""
        return tuple(sorted(set(self._every.get(major, ()))))

    def every_name(self, major: int) -> str | None:
        """What a rule for every minor of `major` reaches, None for no GPU major."""
        if major == DRM_MAJOR:
            return "every GPU a DRM driver holds (every /dev/dri node)"
        for vendor in VENDORS:
            nodes = vendor.nodes
            if nodes is not None and not nodes.drm and nodes.major == major:
                return f"every GPU {vendor.host_driver} holds"
        return None

    def mdev_parent(self, uuid: str) -> PciAddress | None:
        """The function a mediated device (a vGPU, `/sys/bus/mdev/devices/<uuid>`) is a
        slice of; None for a UUID of no mediated device here."""
        return self._mdevs.get(uuid.lower())

    def held_by(self, module: str) -> tuple[PciAddress, ...]:
        """Every GPU (or GPU VF) the driver `module` holds now, in address order: what
        unloading the module takes from its driver. Nothing for a module that binds no
        GPU itself (`nvidia_uvm`, `nvidia_drm`)."""
        name = module.replace("-", "_")
        return tuple(
            sorted(
                a
                for a in self.gpu_addresses
                if (driver := self.functions[a].driver) is not None
                and driver.replace("-", "_") == name
            )
        )

    @property
    def every_gpu(self) -> tuple[PciAddress, ...]:
        """Every GPU with a node now, of any family."""
        return tuple(sorted({a for found in self._every.values() for a in found}))

    def path(self, path: str, link: str | None = None) -> PathTarget | None:
        """What a device path names: a GPU's node by number, a stable name, a directory of
        them; None for a path that is no GPU's (`/dev/nvidiactl`, `/dev/kfd`, `/dev/fb0`).
        `link`: the target of the path's symlink in the host's /dev, when it was read."""
        path = path.rstrip("/") or "/"
        for family in self._families:
            found = family.gpu_node.match(path)
            if found is not None:
                minor = int(found[1])
                if family.drm or minor in family.gpu_minors:
                    return PathTarget(node=(family.major, minor))
        for vendor in VENDORS:
            mig = vendor.mig
            found = mig.node.match(path) if mig is not None else None
            if found is not None and self._caps_major is not None:
                gpu = self._caps.get(int(found[1]))
                # The host-wide capability nodes (`config`, `monitor`) are no GPU's.
                return None if gpu is None else PathTarget(node=(self._caps_major, int(found[1])))
        by_path = _BY_PATH.match(path)
        if by_path is not None:
            return PathTarget(address=PciAddress.parse(by_path["address"]))
        if path == DRM_DIR:
            return PathTarget(every="every DRM node (/dev/dri)", every_major=DRM_MAJOR)
        if path == "/dev":
            return PathTarget(every="every device node (/dev)")
        if path.startswith(f"{DRM_DIR}/by-"):
            if link is not None:
                target = link.rpartition("/")[2]
                named = self.path(f"{DRM_DIR}/{target}")
                if named is not None:
                    return named
            return PathTarget(
                unresolved=f"{path} is a udev link pvegpu cannot follow (no such link in "
                "the host's /dev as read, or one to no GPU node)"
            )
        return None

    def hosts(
        self, hosts: Iterable[HostId]
    ) -> tuple[tuple[PciAddress, ...], tuple[PciAddress, ...]]:
        """The functions host ids (`0000:81:00`, `81:00.0`) hand over, and the GPUs (and
        GPU VFs) among them; an id of no function here hands over nothing."""
        found: set[PciAddress] = set()
        for host in hosts:
            for address in self._slots.get((host.domain, host.bus, host.device), ()):
                if host.function is None or host.function == address.function:
                    found.add(address)
        functions = tuple(sorted(found))
        return functions, tuple(a for a in functions if a in self.gpu_addresses)

    def addresses(self, texts: Iterable[str]) -> tuple[PciAddress, ...]:
        """The GPUs among PCI addresses written in full or short (`81:00.0`)."""
        found: set[PciAddress] = set()
        for text in texts:
            host = HostId.parse(text)
            if host is not None:
                found.update(self.hosts((host,))[1])
        return tuple(sorted(found))
