"""Immutable plan-level models: pools, their consumers, mappings, findings, the plan."""

from __future__ import annotations

from enum import StrEnum

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.model.decision import DecidedServer
from pvegpu.model.facts import GPU, ConfigFile, HostFacts, NumaNode, PciFunction
from pvegpu.model.host_changes import HostChanges
from pvegpu.model.released import ContainerGpusRemoved, MapLinesMoved
from pvegpu.model.schema import CpusetPolicy, DeviceStyle, Spec, UserspacePolicy
from pvegpu.pvefiles.lxcconf import PLAIN, GpuLines, NodeNaming
from pvegpu.pvefiles.pcicfg import PciMap as PciMap
from pvegpu.pvefiles.pcicfg import PciMapping as PciMapping
from pvegpu.pvefiles.qemuconf import NumaPin
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_NODES, DeviceNodes
from pvegpu.vendors.partitions import VgpuSource


class PoolKind(StrEnum):
    LXC = "lxc"
    """GPUs stay on their host driver; device nodes go into a container."""
    VFIO = "vfio"
    """GPUs move to vfio-pci for VM passthrough (or, NVIDIA vGPU virtual functions, stay
    on the host driver and go to VMs as vGPUs: `Pool.vgpu_type`)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class LxcContainer:
    vmid: int
    devices: DeviceStyle
    mode: str
    gid: int | None
    config: ConfigFile | None
    """The existing etc/pve/lxc/<vmid>.conf; plan() refuses a container without one."""
    gpu_lines: GpuLines = attrs.field(factory=GpuLines)
    """The device lines plan() decided: the pool's GPUs by their real minors."""
    gpu_majors: frozenset[int] = frozenset()
    """Char majors of this host's GPU driver stack besides the nodes' fixed one (which
    always counts): old cgroup rules on them are GPU lines."""
    cpuset: NumaNode | None = None
    """The NUMA node whose CPUs the container's cpuset holds: the one its server's unit
    is pinned to (CPUAffinity= inside the container needs those CPUs). None: unpinned."""
    cpuset_policy: CpusetPolicy = CpusetPolicy.NUMA
    """The spec's `lxc.cpuset`: KEEP leaves `cpuset` None whatever the server's pin."""
    nodes: DeviceNodes = CONTAINER_NODES
    """The device nodes of the pool's GPUs' vendor, which its lines hand over."""
    group_gid: int | None = None
    """The gid of the container's own render group, read from its /etc/group, which its
    devN entries get when the spec gives no `gid` (an unprivileged container)."""
    naming: NodeNaming = PLAIN
    """How this host's lines name GPU nodes (its cgroup key, by-path names): the old
    lines the patch replaces are recognised by it, and raw lines use its key."""
    userspace: UserspacePolicy = UserspacePolicy.CONTAINER
    """The spec's `lxc.userspace`: HOST adds the bind mount of the staged host userspace
    to `gpu_lines`, and the boot unit that stages it to the bundle."""

    @property
    def config_path(self) -> str:
        return f"etc/pve/lxc/{self.vmid}.conf"

    @property
    def host_userspace(self) -> bool:
        """Its GPU programs run the host's driver userspace (`userspace = "host"`)."""
        return self.userspace is UserspacePolicy.HOST

    @property
    def node_gid(self) -> int:
        """The group its devN nodes get inside: the spec's `gid`, else its own render
        group's, else root's (pve-container's default)."""
        if self.gid is not None:
            return self.gid
        return self.group_gid if self.group_gid is not None else 0


@value_class
@attrs.frozen(eq=False, repr=False)
class VmGuest:
    vmid: int
    numa: bool
    config: ConfigFile | None
    """The existing etc/pve/qemu-server/<vmid>.conf; None: the VM gets a review snippet."""
    mapping_id: str = ""
    """The pool's PCI mapping, which every hostpci line of the pool names."""
    count: int = 0
    """How many hostpci lines: one per GPU of the pool (and per NVSwitch of a whole board)."""
    numa_pin: NumaPin | None = None
    """The host node the VM is pinned to; plan() sets it exactly when `numa` is on."""
    mapped: tuple[str, ...] = ()
    """The mapping's pci.cfg paths on this node: raw hostpci lines for them are converted."""
    pcie: bool = True
    """`pcie=1` on the lines: only a q35 machine (or a VM yet to be created as one)."""
    old_mappings: tuple[str, ...] = ()
    """Existing mappings the pool's devices leave (a renamed mapping's old id): the VM's
    main-section lines on them become lines of `mapping_id` in place."""
    mdev: str | None = None
    """The vGPU type every hostpci line of the pool carries (`mdev=nvidia-1155`): a vGPU
    pool's (`Pool.vgpu_type`); None for passthrough."""

    @property
    def config_path(self) -> str:
        return f"etc/pve/qemu-server/{self.vmid}.conf"


@value_class
@attrs.frozen(eq=False, repr=False)
class Pool:
    name: str
    kind: PoolKind
    gpus: tuple[GPU, ...]
    """In PCI address order."""
    functions: tuple[PciFunction, ...]
    """Every non-bridge function that goes where the GPUs go (companions, group mates):
    what a vfio pool moves to vfio-pci. Empty for a vGPU pool, whose VFs stay put."""
    driver: str
    """Driver the GPUs end on: `vfio-pci`, or their host driver (`nvidia`; a vGPU pool's
    VFs stay on it)."""
    numa_nodes: tuple[int | None, ...]
    lxc: LxcContainer | None = None
    vm: VmGuest | None = None
    mapping: PciMapping | None = None
    serving: DecidedServer | None = None
    """The server plan() decided for the pool's container (its last step), if the spec asks one."""
    nvswitches: tuple[PciFunction, ...] = ()
    """The NVSwitches that go with the GPUs (a vfio pool with a whole NVSwitch board,
    planning/fabric.py); they are in `functions` and the mapping too."""
    vgpu_type: str | None = None
    """A vGPU pool (planning/vgpu.py): a vfio pool of NVIDIA vGPU virtual functions, which
    stay on the host driver; each VM gets this type on one of them (`mdev=`) when it
    starts. None: the pool's GPUs move to vfio-pci."""
    vgpu_source: VgpuSource | None = None
    """A vGPU pool's vendor's vGPU files, where its virtual functions show their types
    (the runbook's check reads them); None for every other pool."""

    @property
    def size(self) -> int:
        return len(self.gpus)

    @property
    def moves_to_vfio(self) -> bool:
        """Whether the split moves this pool's GPUs to vfio-pci: a vfio pool that is not a
        vGPU pool."""
        return self.kind is PoolKind.VFIO and self.vgpu_type is None


@value_class
@attrs.frozen(eq=False, repr=False)
class SharedPciCfg:
    """The cluster's one pci.cfg as a cluster plan decided it (planning/cluster.py)."""

    writer: str
    """The node whose bundle writes the file; pmxcfs hands it to every other node."""
    nodes: tuple[str, ...]
    """The nodes planned together: their map lines come from their own facts."""
    mappings: tuple[PciMapping, ...]
    """Every pool mapping, with the map lines of each node that contributes to it."""
    drop: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """By mapping id, the map strings (verbatim) that leave it: devices that move into a
    pool's mapping on one of `nodes`."""


@value_class
@attrs.frozen(eq=False, repr=False)
class Plan:
    facts: HostFacts
    spec: Spec
    pools: tuple[Pool, ...]
    findings: tuple[Diagnostic, ...] = ()
    containers_losing_gpus: tuple[ContainerGpusRemoved, ...] = ()
    """Other containers' lines for the pools' GPUs, which the bundle removes."""
    moved_map_lines: tuple[MapLinesMoved, ...] = ()
    """Map lines of other mappings for devices that move into a pool's mapping."""
    shared_pci_cfg: SharedPciCfg | None = None
    """Set when the node is planned as part of a cluster: pci.cfg is then written once,
    whole, by the writer's bundle, and by no other node's."""
    host_changes: HostChanges = attrs.field(factory=HostChanges)
    """What the plan does to the host's drivers and services (`model/host_changes.py`),
    decided once by plan() for the split's files, the runbook and the manual revert."""

    @property
    def vfio_pools(self) -> tuple[Pool, ...]:
        """The VM pools: their GPUs go to VMs, by passthrough or as vGPUs."""
        return tuple(p for p in self.pools if p.kind is PoolKind.VFIO)

    @property
    def split_pools(self) -> tuple[Pool, ...]:
        """The VM pools whose GPUs the split moves to vfio-pci (not the vGPU pools)."""
        return tuple(p for p in self.pools if p.moves_to_vfio)

    @property
    def lxc_pools(self) -> tuple[Pool, ...]:
        return tuple(p for p in self.pools if p.kind is PoolKind.LXC)


@value_class
@attrs.frozen(eq=False, repr=False)
class ClusterPlan:
    """Every node of a cluster spec planned at once (`planning.cluster.plan_cluster`)."""

    spec: Spec
    plans: tuple[Plan, ...]
    """One plan per node, in the spec's order of `nodes`."""
    shared: SharedPciCfg | None = None
    """The cluster's pci.cfg; None when no pool of any node has a mapping."""
    findings: tuple[Diagnostic, ...] = ()
    """What concerns several nodes (a mapping's devices differ in subsystem id or memory);
    each node's own findings stay on its plan."""

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(p.facts.node for p in self.plans)

    def plan_of(self, node: str) -> Plan:
        return next(p for p in self.plans if p.facts.node == node)
