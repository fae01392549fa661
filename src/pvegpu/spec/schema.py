"""The declarative split spec (TOML): what the admin wants, before it meets the host."""

from __future__ import annotations

from enum import StrEnum

import attrs


class DeviceStyle(StrEnum):
    """How GPU device nodes reach an LXC container."""

    DEV = "dev"
    """`devN: /dev/nvidiaN,...` entries; Proxmox writes the cgroup rules (PVE >= 8.1)."""
    RAW = "raw"
    """`lxc.cgroup2.devices.allow` + `lxc.mount.entry` lines (any PVE)."""


class P2PSetting(StrEnum):
    AUTO = "auto"
    """Decide from facts: off when the IOMMU translates DMA or SEV-SNP is on."""
    OFF = "off"
    ON = "on"


@attrs.frozen
class MappingSpec:
    """A cluster PCI mapping (`/etc/pve/mapping/pci.cfg` section) over a pool's GPUs."""

    id: str
    description: str | None = None


@attrs.frozen
class ServingSpec:
    """An inference server in the container, with tensor parallelism over the pool."""

    version: str
    """SGLang version; selects flags, environment and the option table to check against."""
    model_path: str
    """Path of the model directory as the container sees it."""
    engine: str = "sglang"
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


@attrs.frozen
class LxcSpec:
    vmid: int
    devices: DeviceStyle = DeviceStyle.DEV
    mode: str = "0666"
    gid: int | None = None
    serving: ServingSpec | None = None


@attrs.frozen
class VmSpec:
    vmid: int
    numa: bool = False
    """Pin the VM's memory and vCPUs to the pool's NUMA node."""


@attrs.frozen
class VfioSpec:
    vm: VmSpec | None = None


@attrs.frozen
class PoolSpec:
    """A set of GPUs and what consumes them. Exactly one selector and one consumer."""

    name: str
    numa_node: int | None = None
    gpus: tuple[str, ...] | None = None
    """Explicit PCI addresses (`0000:81:00.0` or `81:00.0`)."""
    count: int | None = None
    """Take this many GPUs not claimed by another pool, in PCI order."""
    lxc: LxcSpec | None = None
    vfio: VfioSpec | None = None
    mapping: MappingSpec | None = None


@attrs.frozen
class Spec:
    node: str
    pools: tuple[PoolSpec, ...]
    source: str = "<spec>"
    """Where the spec came from, for messages."""
