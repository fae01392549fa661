"""The values a pool's server is made of: the decision `plan()` puts on each serving pool.

`DecidedServer` is what any engine decides and what planning, rendering, the runbook and
`check` read (`Pool.serving`). Each engine extends it with its own decided settings, in
its own package (`engines.sglang.decision.SglangServing`,
`engines.vllm.decision.VllmServing`), built by its `decide_serving` only; this module
holds values only, so the plan models can carry them without importing any checks.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

import attrs

from pvegpu.model.facts import GPU, ConfigFile, FileStat
from pvegpu.model.model_config import ModelConfig
from pvegpu.model.paths import UNIT_DIR
from pvegpu.pci import CpuList
from pvegpu.values import value_class
from pvegpu.vendors import ComputeRuntime


class P2PSource(StrEnum):
    FACTS = "facts"
    SPEC = "spec"


@value_class
@attrs.frozen(eq=False, repr=False)
class P2PDecision:
    """Whether GPUs of the pool may DMA to each other, and why (shown in the summary)."""

    enabled: bool
    reason: str
    source: P2PSource
    facts_enabled: bool
    """What the facts alone say; differs from `enabled` when the spec overrides them."""


@value_class
@attrs.frozen(eq=False, repr=False)
class NumaPinning:
    node: int
    cpus: CpuList


@value_class
@attrs.frozen(eq=False, repr=False)
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


@value_class
@attrs.frozen(eq=False, repr=False)
class ContainerDriver:
    """The NVIDIA userspace found in a container's root filesystem."""

    libraries: tuple[tuple[str, str], ...]
    """(file name, driver version) of libcuda.so.<v> / libnvidia-ml.so.<v>."""
    packages: tuple[tuple[str, str], ...]
    """(package, upstream version) of installed dpkg packages carrying a driver version."""

    @property
    def versions(self) -> frozenset[str]:
        return frozenset(v for _, v in (*self.libraries, *self.packages))


@value_class
@attrs.frozen(eq=False, repr=False)
class DropinChange:
    """A drop-in of the unit whose settings the rendered unit decides, switched off.

    Written to `path` (the unit's own drop-in directory in /etc, same file name): over the
    drop-in itself when it is there (`base`), else as a new file that hides the original
    of that name in /usr/lib, /run or a prefix/top-level directory (`source`).
    """

    path: str
    """Inside the container: `etc/systemd/system/<unit>.service.d/<name>.conf`."""
    source: str
    """Where the drop-in systemd reads now is, inside the container (== path in /etc)."""
    content: str
    base: ConfigFile | None
    settings: tuple[str, ...]
    """What it set that the rendered unit decides, as the finding shows it (no secrets)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class ServingFiles:
    """What `read_serving_files` found, to add to HostFacts."""

    files: tuple[ConfigFile, ...] = ()
    stats: tuple[FileStat, ...] = ()


DECIDED = object()
"""The key `decide_serving` passes; anything else is refused, so TP cannot be set by hand."""


def _check_key(instance: DecidedServer, attribute: attrs.Attribute[object], value: object) -> None:
    if value is not DECIDED:
        raise TypeError(
            f"{type(instance).__name__} is built by plan() (its engine's decide_serving) only"
        )


def _check_tp(instance: DecidedServer, attribute: attrs.Attribute[int], value: int) -> None:
    # attrs runs validators once every field is set, so a subclass's stages are known.
    gpus = len(instance.visible_devices)
    if value < 1 or value * instance.pipeline_stages != gpus:
        raise ValueError(
            f"tp_size {value} x {instance.pipeline_stages} TP groups != {gpus} pool GPUs"
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class DecidedServer:
    """A pool's server as its engine decided it, checked once, by plan(); on `Pool.serving`.

    What every engine's server has (the container, the GPUs, the unit, P2P, NUMA, the
    memory fit, the option lines); the engine's own settings are its subclass's fields,
    and only the engine formats them (`Engine.unit_content`). The findings about the
    server are on the plan, with every other finding.
    """

    engine: ClassVar[str]
    """The spec's `engine` value of the server: each engine's decided class sets its own."""

    pool: str
    vmid: int
    version: str
    unit: str
    python: str
    model_path: str
    served_model_name: str | None
    host: str
    """The address the server listens on; the health check reaches it from the container."""
    port: int
    runtime: ComputeRuntime
    """The compute runtime the server's build runs on (CUDA, ROCm)."""
    visible_devices: tuple[int, ...]
    """Indices of the pool's GPUs among the GPUs the container sees, in PCI order: the
    value of the runtime's `visible_devices` variable."""
    gpus: tuple[GPU, ...]
    tp_size: int = attrs.field(validator=_check_tp)
    """The pool's GPU count over the pipeline stages: the validator and `decide_serving`
    see to it."""
    options: tuple[tuple[str, ...], ...]
    """The launch_server options, each with its values: one line of ExecStart each."""
    environment: tuple[tuple[str, str], ...]
    p2p: P2PDecision
    numa: NumaPinning | None
    fit: MemoryFit | None
    model: ModelConfig | None
    container_driver: ContainerDriver | None
    base: ConfigFile | None
    """The unit as it is in the container now (None: new file, or not read: `unit_unread`)."""
    unit_unread: bool
    """The container's files could not be read (block storage): whether the unit exists is
    unknown, so it is never treated as new; the runbook copies it out with `pct pull`."""
    dropins: tuple[DropinChange, ...]
    """Drop-ins that set what the unit decides, switched off by the bundle."""
    user: str | None
    working_directory: str | None
    limit_nofile: int | None
    environment_file: str | None
    """`EnvironmentFile=`: where the unit reads its secrets; never read by pvegpu."""
    _key: object = attrs.field(alias="_key", repr=False, eq=False, validator=_check_key)

    @property
    def pipeline_stages(self) -> int:
        """TP groups: TP x groups is the pool's GPU count (1 unless the engine says more)."""
        return 1

    @property
    def unit_path(self) -> str:
        """Path inside the container; the only copy systemd runs."""
        return f"{UNIT_DIR}/{self.unit}.service"
