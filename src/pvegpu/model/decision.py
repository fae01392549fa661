"""The values a pool's server is made of: the decision `plan()` puts on each serving pool.

`engines.sglang.build.decide_serving` is the only way to get an `SglangServing` (and
`engines.vllm.build.decide_serving` of its `VllmServing` extension); this module
holds values only, so the plan models can carry them without importing any checks.
"""

from __future__ import annotations

from enum import StrEnum

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


def _check_key(instance: SglangServing, attribute: attrs.Attribute[object], value: object) -> None:
    if value is not DECIDED:
        raise TypeError(
            "SglangServing is built by plan() (engines.sglang.build.decide_serving) only"
        )


def _check_tp(instance: SglangServing, attribute: attrs.Attribute[int], value: int) -> None:
    # attrs runs validators once every field is set, so a subclass's stages are known.
    gpus = len(instance.visible_devices)
    if value < 1 or value * instance.pipeline_stages != gpus:
        raise ValueError(
            f"tp_size {value} x {instance.pipeline_stages} TP groups != {gpus} pool GPUs"
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class SglangServing:
    """Everything the unit file says, decided and checked once, by plan(); on `Pool.serving`.

    The findings about the server are on the plan, with every other finding.
    """

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
    def engine(self) -> str:
        """The spec's `engine` of the server (each engine's decided class says its own)."""
        return "sglang"

    @property
    def pipeline_stages(self) -> int:
        """Pipeline stages: TP x stages is the pool's GPU count (SGLang's servers: 1)."""
        return 1

    @property
    def unit_path(self) -> str:
        """Path inside the container; the only copy systemd runs."""
        return f"{UNIT_DIR}/{self.unit}.service"

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.python, "-m", "sglang.launch_server", *(w for o in self.options for w in o))


@value_class
@attrs.frozen(eq=False, repr=False)
class VllmServing(SglangServing):
    """A pool's vLLM server, decided by `engines.vllm.build.decide_serving` only.

    It extends `SglangServing`, the decided server `Pool.serving` and every renderer are
    typed by, so that both engines' servers go through the same planner, renderers,
    runbook and `check` unchanged; `tp_size` is `--tensor-parallel-size`.
    """

    pp_size: int
    """`--pipeline-parallel-size`: TP x PP = the pool's GPU count."""
    executable: str
    """The `vllm` console script of the unit's Python environment."""
    mtp_config: str | None
    """The `--speculative-config` JSON MTP writes, or None."""
    pcp_size: int = 1
    """`--prefill-context-parallel-size`: TP x PP x PCP = the pool's GPU count."""
    dcp_size: int = 1
    """`--decode-context-parallel-size`: reuses the TP ranks (no GPUs of its own)."""

    @property
    def engine(self) -> str:
        return "vllm"

    @property
    def pipeline_stages(self) -> int:
        """TP groups: vLLM's world size is PP x TP x PCP (vllm/config/parallel.py)."""
        return self.pp_size * self.pcp_size

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.executable, "serve", *(w for o in self.options for w in o))
