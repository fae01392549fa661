"""The declarative split spec (TOML): what the admin wants, before it meets the host."""

from __future__ import annotations

from enum import StrEnum

import attrs

# The two ways the LXC file format hands device nodes to a container: the codec's own
# value, which the spec's `lxc.devices` key takes as it is.
from pvegpu.pvefiles.lxcconf import DeviceStyle as DeviceStyle
from pvegpu.values import value_class


class CpusetPolicy(StrEnum):
    """Whether pvegpu writes the container's `lxc.cgroup2.cpuset.cpus`."""

    NUMA = "numa"
    """The CPUs of the NUMA node its server is pinned to (only for a pool with a server
    pinned to one node); replaces any cpuset line the container had."""
    KEEP = "keep"
    """Never written: the container keeps whatever cpuset line it has (or none)."""


class UserspacePolicy(StrEnum):
    """Whose GPU driver userspace (libcuda, NVML, nvidia-smi) a container's server runs."""

    CONTAINER = "container"
    """The container's own, installed in it (packages or a runfile): it must be the
    host module's version exactly, and a driver upgrade on the host means one in it."""
    HOST = "host"
    """The host's own, of the loaded module's version: staged at every boot under
    /var/lib/pvegpu/userspace and bind-mounted read-only into the container, where the
    server's unit finds it first. The container's own packages are left alone."""


class P2PSetting(StrEnum):
    AUTO = "auto"
    """Decide from facts: off when the IOMMU translates DMA or SEV-SNP is on."""
    OFF = "off"
    ON = "on"


@value_class
@attrs.frozen(eq=False, repr=False)
class MappingSpec:
    """A cluster PCI mapping (`/etc/pve/mapping/pci.cfg` section) over a pool's GPUs."""

    id: str
    description: str | None = None


DEFAULT_ENGINE = "sglang"
"""The `engine` of a [pools.lxc.serving] table that sets none."""

EngineValue = int | float | str | bool
"""A value of a key one engine reads (`ServingSpec.engine_keys`): a TOML scalar."""


@value_class
@attrs.frozen(eq=False, repr=False)
class ServingSpec:
    """An inference server in the container, with tensor parallelism over the pool."""

    version: str | None = attrs.field(default=None, kw_only=True)
    """SGLang release; selects flags, environment and the option table to check against.
    Optional when `container_rootfs` is readable: the release installed for `python` is
    used, and a version here that differs from it is an error."""
    model_path: str
    """Path of the model directory as the container sees it."""
    engine: str = DEFAULT_ENGINE
    """The engine registry's name of the server (`pvegpu.engines`); a spec that names none
    gets the default."""
    unit: str = "sglang"
    """systemd unit name inside the container (`<unit>.service`)."""
    python: str = "/usr/bin/python3"
    served_model_name: str | None = None
    host: str = "0.0.0.0"
    port: int = 30000
    context_length: int | None = None
    mem_fraction_static: float | None = None
    mtp: bool = False
    """Multi-token prediction (speculative decoding with the model's own NEXTN head)."""
    model_config: str | None = None
    """config.json of the model, relative to the root (host view); enables head/fit checks."""
    checkpoint_bytes: int | None = None
    """Total size of the weights; read from model_config's directory when absent."""
    gpu_memory_bytes: int | None = None
    """Per-GPU memory; defaults from the GPU model where pvegpu knows it."""
    p2p: P2PSetting = P2PSetting.AUTO
    p2p_reason: str | None = None
    """Required when `p2p` overrides what the facts say; shown in the summary."""
    allow_multi_numa: bool = False
    container_rootfs: str | None = None
    """Container root filesystem relative to the host root, for version and unit checks."""
    extra_args: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    user: str | None = None
    """`User=` of the unit (also sets HOME, which SGLang's JIT and model caches use)."""
    working_directory: str | None = None
    """`WorkingDirectory=` of the unit: an absolute path inside the container."""
    limit_nofile: int | None = None
    """`LimitNOFILE=` of the unit (systemd's default soft limit is 1024 open files)."""
    environment_file: str | None = None
    """`EnvironmentFile=` of the unit: a root-only file in the container that holds the
    secrets (HF_TOKEN, API keys). pvegpu never reads it, so no secret reaches a bundle."""
    engine_keys: tuple[tuple[str, EngineValue], ...] = ()
    """The keys of the table that only its engine reads, as the spec sets them, in its
    order (vLLM's `pipeline_parallel_size`): each engine declares its own
    (`Engine.spec_keys`), and the loader takes them out of the table by those
    declarations (spec/engine_keys.py). Not a key of the TOML itself."""

    def engine_key(self, name: str) -> EngineValue | None:
        """The value the spec sets for its engine's key `name`; None when it sets none."""
        return next((value for key, value in self.engine_keys if key == name), None)


@value_class
@attrs.frozen(eq=False, repr=False)
class LxcSpec:
    vmid: int
    devices: DeviceStyle = DeviceStyle.DEV
    mode: str = "0666"
    gid: int | None = None
    cpuset: CpusetPolicy = CpusetPolicy.NUMA
    serving: ServingSpec | None = None
    display: bool = False
    """Also the GPUs' DRM card nodes (display, modesetting); the render node is enough
    for compute and video."""
    userspace: UserspacePolicy = UserspacePolicy.CONTAINER
    """Whose driver userspace the container's GPU programs run (`UserspacePolicy`)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class VmSpec:
    vmid: int
    numa: bool = False
    """Pin the VM's memory and vCPUs to the pool's NUMA node."""


@value_class
@attrs.frozen(eq=False, repr=False)
class VfioSpec:
    vm: VmSpec | None = None
    vgpu_type: str | None = None
    """The NVIDIA vGPU type (`nvidia-1155`, as Proxmox's `mdev=` names it) each VM gets on
    the pool's vGPU virtual functions. They stay on the host driver: nothing moves to
    vfio-pci, and Proxmox sets the type when the VM starts."""


@value_class
@attrs.frozen(eq=False, repr=False)
class PoolSpec:
    """A set of GPUs and what consumes them. Exactly one selector and one consumer."""

    name: str
    node: str | None = attrs.field(default=None, kw_only=True)
    """The cluster node the pool's GPUs are on: required in a spec with `nodes`; in a
    single-node spec it may be left out (or equal `node`)."""
    numa_node: int | None = None
    gpus: tuple[str, ...] | None = None
    """Explicit PCI addresses (`0000:81:00.0` or `81:00.0`)."""
    count: int | None = None
    """Take this many GPUs not claimed by another pool, in PCI order."""
    lxc: LxcSpec | None = None
    vfio: VfioSpec | None = None
    mapping: MappingSpec | None = None


@value_class
@attrs.frozen(eq=False, repr=False)
class Spec:
    """A split of one node (`node`), or of several nodes of one cluster (`nodes`, with a
    `node` on every pool). The loader admits exactly one of the two forms."""

    node: str | None = None
    """The one node a single-node spec is for; None in a cluster spec."""
    nodes: tuple[str, ...] = attrs.field(default=(), kw_only=True)
    """The cluster's nodes this spec plans, in the order bundles and tables list them."""
    pools: tuple[PoolSpec, ...] = ()
    source: str = "<spec>"
    """Where the spec came from, for messages."""

    @property
    def node_names(self) -> tuple[str, ...]:
        """Every node the spec plans: `nodes`, or the single `node`."""
        if self.nodes:
            return self.nodes
        return (self.node,) if self.node is not None else ()

    @property
    def is_cluster(self) -> bool:
        return bool(self.nodes)

    def pool_node(self, pool: PoolSpec) -> str | None:
        return pool.node if pool.node is not None else self.node

    def pool_indexes(self, node: str) -> tuple[int, ...]:
        """Positions in `pools` of the pools on `node`."""
        return tuple(i for i, p in enumerate(self.pools) if self.pool_node(p) == node)

    def for_node(self, node: str) -> Spec:
        """The single-node spec of one node: its pools, in spec order. Planning a cluster
        plans each node with this; `pools[i]` paths in its problems are re-numbered by
        planning/cluster.py to the cluster spec's own."""
        pools = tuple(self.pools[i] for i in self.pool_indexes(node))
        return attrs.evolve(self, node=node, nodes=(), pools=pools)
