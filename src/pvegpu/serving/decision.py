"""The values a pool's server is made of; `SglangServing.from_pool` is the only way to get one."""

from __future__ import annotations

from enum import StrEnum

import attrs

from pvegpu.errors import PvegpuError
from pvegpu.host.facts import GPU, ConfigFile, FileStat, HostFacts
from pvegpu.host.paths import UNIT_DIR
from pvegpu.pci import CpuList
from pvegpu.planning.plan import Finding, Plan, Pool
from pvegpu.serving.model_config import ModelConfig


class P2PSource(StrEnum):
    FACTS = "facts"
    SPEC = "spec"


@attrs.frozen
class P2PDecision:
    """Whether GPUs of the pool may DMA to each other, and why (shown in the summary)."""

    enabled: bool
    reason: str
    source: P2PSource
    facts_enabled: bool
    """What the facts alone say; differs from `enabled` when the spec overrides them."""


@attrs.frozen
class NumaPinning:
    node: int
    cpus: CpuList


@attrs.frozen
class MemoryFit:
    """The per-GPU memory estimate at TP=tp (docs/serving.md, memory fit)."""

    gpu_memory_bytes: int
    gpu_memory_source: str
    mem_fraction_static: float
    mem_fraction_source: str
    checkpoint_bytes: int
    weights_per_gpu: int
    budget_bytes: int
    """gpu memory x mem_fraction_static - weights per GPU; <= 0: no room for KV cache."""
    kv_bytes_per_token: int | None
    """None where the per-head formula does not apply (MLA models)."""
    kv_tokens: int | None
    context_length: int | None
    """The context the server will offer: the spec's, else the model's maximum."""


@attrs.frozen
class ContainerDriver:
    """The NVIDIA userspace found in a container's root filesystem."""

    libraries: tuple[tuple[str, str], ...]
    """(file name, driver version) of libcuda.so.<v> / libnvidia-ml.so.<v>."""
    packages: tuple[tuple[str, str], ...]
    """(package, upstream version) of installed dpkg packages carrying a driver version."""

    @property
    def versions(self) -> frozenset[str]:
        return frozenset(v for _, v in (*self.libraries, *self.packages))


@attrs.frozen
class ServingFiles:
    """What `read_serving_files` found, to add to HostFacts."""

    files: tuple[ConfigFile, ...] = ()
    stats: tuple[FileStat, ...] = ()


_FROM_POOL = object()


def _check_key(instance: SglangServing, attribute: attrs.Attribute[object], value: object) -> None:
    if value is not _FROM_POOL:
        raise TypeError("SglangServing is built by SglangServing.from_pool(plan, pool) only")


def _check_tp(instance: SglangServing, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1 or value != len(instance.cuda_visible_devices):
        raise ValueError(f"tp_size {value} != {len(instance.cuda_visible_devices)} pool GPUs")


@attrs.frozen
class SglangServing:
    """Everything the unit file says, decided and checked. Build with `from_pool`."""

    pool: str
    vmid: int
    version: str
    unit: str
    python: str
    model_path: str
    served_model_name: str | None
    cuda_visible_devices: tuple[int, ...]
    """Indices of the pool's GPUs among the GPUs the container sees, in PCI order."""
    gpus: tuple[GPU, ...]
    tp_size: int = attrs.field(validator=_check_tp)
    """Always the pool's GPU count: the validator and `from_pool` see to it."""
    options: tuple[tuple[str, ...], ...]
    """The launch_server options, each with its values: one line of ExecStart each."""
    environment: tuple[tuple[str, str], ...]
    p2p: P2PDecision
    numa: NumaPinning | None
    fit: MemoryFit | None
    model: ModelConfig | None
    container_driver: ContainerDriver | None
    base: ConfigFile | None
    """The unit as it is in the container now (None: new file)."""
    user: str | None
    working_directory: str | None
    limit_nofile: int | None
    findings: tuple[Finding, ...]
    _key: object = attrs.field(alias="_key", repr=False, eq=False, validator=_check_key)

    @property
    def unit_path(self) -> str:
        """Path inside the container; the only copy systemd runs."""
        return f"{UNIT_DIR}/{self.unit}.service"

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.python, "-m", "sglang.launch_server", *(w for o in self.options for w in o))

    @classmethod
    def from_pool(cls, plan_or_facts: Plan | HostFacts, pool: Pool) -> SglangServing:
        """Decide and check the server of `pool`; PlanError/RenderError listing every problem.

        Pass the Plan when there is one: the CUDA indices then account for every pool that
        gives GPUs to the same container.
        """
        # Imported here: the builder imports this module for the class it builds.
        from pvegpu.serving.build import build

        built = build(plan_or_facts, pool)
        if isinstance(built, PvegpuError):
            raise built
        return built
