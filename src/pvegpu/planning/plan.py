"""Immutable plan-level models: pools, their consumers, mappings, findings, the plan."""

from __future__ import annotations

from enum import StrEnum

import attrs

from pvegpu.host.facts import GPU, ConfigFile, HostFacts, PciFunction
from pvegpu.spec.schema import DeviceStyle, ServingSpec, Spec


class PoolKind(StrEnum):
    LXC = "lxc"
    """GPUs stay on their host driver; device nodes go into a container."""
    VFIO = "vfio"
    """GPUs move to vfio-pci for VM passthrough."""


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"


@attrs.frozen
class Finding:
    """Something the reviewer should know that does not stop the plan."""

    severity: Severity
    code: str
    subject: str
    message: str


@attrs.frozen
class LxcContainer:
    vmid: int
    devices: DeviceStyle
    mode: str
    gid: int | None
    config: ConfigFile | None
    """The existing etc/pve/lxc/<vmid>.conf; None when it does not exist (render refuses)."""

    @property
    def config_path(self) -> str:
        return f"etc/pve/lxc/{self.vmid}.conf"


@attrs.frozen
class VmGuest:
    vmid: int
    numa: bool
    config: ConfigFile | None

    @property
    def config_path(self) -> str:
        return f"etc/pve/qemu-server/{self.vmid}.conf"


@attrs.frozen
class PciMap:
    """One `map` line of pci.cfg. Keys as Proxmox names them."""

    id: str
    node: str
    path: str
    iommugroup: int | None = None
    subsystem_id: str | None = None
    description: str | None = None


@attrs.frozen
class PciMapping:
    """One section of /etc/pve/mapping/pci.cfg."""

    id: str
    maps: tuple[PciMap, ...] = ()
    description: str | None = None
    live_migration_capable: bool | None = None
    mdev: bool | None = None


@attrs.frozen
class Pool:
    name: str
    kind: PoolKind
    gpus: tuple[GPU, ...]
    """In PCI address order."""
    functions: tuple[PciFunction, ...]
    """Every non-bridge function that goes where the GPUs go (companions, group mates)."""
    driver: str
    """Driver the GPUs end on: `vfio-pci`, or their host driver (`nvidia`)."""
    numa_nodes: tuple[int | None, ...]
    lxc: LxcContainer | None = None
    vm: VmGuest | None = None
    mapping: PciMapping | None = None
    serving: ServingSpec | None = None

    @property
    def size(self) -> int:
        return len(self.gpus)


@attrs.frozen
class Plan:
    facts: HostFacts
    spec: Spec
    pools: tuple[Pool, ...]
    findings: tuple[Finding, ...] = ()

    @property
    def vfio_pools(self) -> tuple[Pool, ...]:
        return tuple(p for p in self.pools if p.kind is PoolKind.VFIO)

    @property
    def lxc_pools(self) -> tuple[Pool, ...]:
        return tuple(p for p in self.pools if p.kind is PoolKind.LXC)
