"""The SGLang server of an LXC pool: command line, environment, pinning and checks, as values.

`SglangServing.from_pool(plan_or_facts, pool)` is the only way to get one, so what the
seed deployment got wrong cannot be written down: the TP size is the pool's GPU count
(a `--tp 8` left over from the 8-GPU layout cannot survive), flags come from the option
table of the SGLang version the spec names (a renamed or removed flag is a render-time
error), P2P is decided from the IOMMU and SEV-SNP facts, the memory fit and the head
divisibility come from the model's own config.json, and the container's NVIDIA userspace
is compared with the host's kernel module.

Pure: every host file it looks at is in the facts. `read_serving_files(root, spec)` is
the thin reader that puts them there (`with_serving_files` for a whole HostFacts).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Iterator
from enum import StrEnum
from pathlib import Path

import attrs

from pvegpu.errors import PlanError, Problem, PvegpuError, RenderError
from pvegpu.facts import GPU, ConfigFile, FileStat, HostFacts
from pvegpu.model import Finding, Plan, Pool, Severity
from pvegpu.modelcfg import (
    ModelConfig,
    checkpoint_bytes_from_index,
    checkpoint_bytes_from_shards,
    kv_bytes_per_token,
    parse_model_config,
    problem_tp,
    tp_divides,
    valid_tp_sizes,
)
from pvegpu.pci import CpuList
from pvegpu.sglang import OptionTable, ParsedCommandLine, load_table, version_key
from pvegpu.spec import P2PSetting, ServingSpec, Spec

MIB = 1024**2
GIB = 1024**3

KNOWN_GPU_MEMORY: dict[str, tuple[int, str]] = {
    # nvidia-smi's FB memory total for this card; pci.ids names 10de:2bb5. 96 GB of GDDR7
    # less what the driver reserves. Source and how to add a card: docs/serving.md.
    "10de:2bb5": (97887 * MIB, "RTX PRO 6000 Blackwell Server Edition"),
}
"""Per-GPU memory by PCI vendor:device, used when the spec gives no gpu_memory_bytes."""

DEFAULT_MEM_FRACTION = 0.88
"""mem_fraction_static of the fit estimate when the spec sets none. Not rendered: SGLang
then computes its own from GPU memory and TP, by rules that change between versions, so
the finding names the value used and the spec can pin it."""

SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
AUTO_NUMA_ENV = "SGLANG_AUTO_NUMA_BIND"
P2P_ENV = "NCCL_P2P_DISABLE"
FORBIDDEN_ENV = {
    "NCCL_SHM_DISABLE": "with P2P off NCCL needs shared memory; without both it falls "
    "back to sockets between GPUs of one host",
}

# The options pvegpu writes, by every spelling SGLang has used for them (first: the
# preferred one). The table of the version picks the entry and its canonical name.
MODEL_PATH = ("--model-path", "--model")
SERVED_MODEL_NAME = ("--served-model-name",)
HOST_OPT = ("--host",)
PORT_OPT = ("--port",)
TP_SIZE = ("--tp-size", "--tensor-parallel-size")
CONTEXT_LENGTH = ("--context-length",)
MEM_FRACTION = ("--mem-fraction-static",)
DISABLE_CUSTOM_ALL_REDUCE = ("--disable-custom-all-reduce",)
NUMA_NODE = ("--numa-node",)
SPECULATIVE_ALGORITHM = ("--speculative-algorithm",)
KV_CACHE_DTYPE = ("--kv-cache-dtype",)
# The version matrix (docs/serving.md): the mamba cache strategy option was renamed in
# 0.5.14 and the old name removed in 0.5.20.
MAMBA_STRATEGY_OLD = ("--mamba-scheduler-strategy",)
MAMBA_STRATEGY_NEW = ("--mamba-radix-cache-strategy",)

# MTP defaults: a greedy chain (top-k 1) of 3 drafted tokens, verified together with the
# current one (draft tokens = steps + 1 when top-k is 1). extra_args may set any of them.
MTP_TUNING: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--speculative-num-steps",), "3"),
    (("--speculative-eagle-topk",), "1"),
    (("--speculative-num-draft-tokens",), "4"),
)

# Options pvegpu derives from the spec and the facts; extra_args may not set them, or the
# unit would say two things (argparse keeps the last) and the checks here would be wrong.
OWNED: tuple[tuple[tuple[str, ...], str], ...] = (
    (MODEL_PATH, "model_path"),
    (SERVED_MODEL_NAME, "served_model_name"),
    (HOST_OPT, "host"),
    (PORT_OPT, "port"),
    (TP_SIZE, "the pool's GPUs (TP = GPU count)"),
    (CONTEXT_LENGTH, "context_length"),
    (MEM_FRACTION, "mem_fraction_static"),
    (NUMA_NODE, "the pool's NUMA node (systemd pins the service)"),
    (SPECULATIVE_ALGORITHM, "mtp = true"),
)

# KV cache element size by --kv-cache-dtype, for the fit estimate.
KV_CACHE_DTYPE_BITS = {
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "mxfp8": 8,
    "bf16": 16,
    "bfloat16": 16,
    "fp4_e2m1": 4,
    "nvfp4": 4,
}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\-]+$")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")
# Words that need no quotes in ExecStart= (after % and $ are doubled).
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./%$-]+$")
_LIB = re.compile(r"^(?P<lib>libcuda|libnvidia-ml)\.so\.(?P<version>\d+\.\d+(?:\.\d+)?)$")
_DRIVER_VERSION = re.compile(r"^\d{3}\.\d+(?:\.\d+)?$")
_MAJOR_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<major>\d{3})$")

CONTAINER_LIBDIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
DPKG_STATUS = "var/lib/dpkg/status"
UNIT_DIR = "etc/systemd/system"
# Where else a copy of the unit tends to live: other unit directories (systemd would
# load these if /etc's copy went away) and admins' homes (the "local copy" that drifts).
OTHER_UNIT_DIRS = (
    "lib/systemd/system",
    "usr/lib/systemd/system",
    "usr/local/lib/systemd/system",
    "etc/systemd/user",
    "usr/lib/systemd/user",
)
HOME_DIRS = ("root", "home", "opt", "srv")
HOME_DEPTH = 3


# --------------------------------------------------------------------------- values


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
        built = _Builder(plan_or_facts, pool).build()
        if isinstance(built, PvegpuError):
            raise built
        return built


# ------------------------------------------------------------------ pure helpers


def exec_word(word: str) -> str:
    """One ExecStart= word: `%` and `$` doubled (specifier/variable expansion), quoted if needed."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if word and _PLAIN_WORD.match(word):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def environment_assignment(name: str, value: str) -> str:
    """One quoted Environment= assignment.

    Environment= unquotes C-style (`\\\\`, `\\"`) and expands specifiers (`%` -> `%%`), but
    does no variable expansion: `$` has no special meaning there (systemd.exec(5)), so a
    `$` is written as is, and `$HOME` in a value stays the four characters `$HOME`.
    """
    text = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{text}"'


def unit_text(text: str) -> str:
    """A value for a plain unit setting (Description=): specifiers only."""
    return text.replace("%", "%%")


def visible_indices(container_gpus: Iterable[GPU], pool_gpus: Iterable[GPU]) -> tuple[int, ...]:
    """CUDA ordinals of `pool_gpus` with CUDA_DEVICE_ORDER=PCI_BUS_ID in the container.

    CUDA numbers the GPUs a process can open in PCI bus order, so an ordinal is a GPU's
    position among the container's GPUs sorted by address.
    """
    order = sorted({g.address for g in container_gpus})
    missing = [g.address for g in pool_gpus if g.address not in order]
    if missing:
        raise ValueError(f"{', '.join(map(str, missing))} not among the container's GPUs")
    return tuple(order.index(g.address) for g in sorted(pool_gpus, key=lambda g: g.address))


def container_driver_state(
    library_names: Iterable[str], dpkg_status: str | None
) -> ContainerDriver:
    """Driver versions from a libdir listing and the dpkg status database text."""
    libraries = sorted(
        (name, m.group("version")) for name in library_names if (m := _LIB.match(name))
    )
    packages: list[tuple[str, str]] = []
    for stanza in (dpkg_status or "").split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace():  # continuation lines belong to Description
                key, _, value = line.partition(": ")
                fields[key] = value
        name, version = fields.get("Package"), fields.get("Version")
        if not name or not version or not fields.get("Status", "").endswith(" installed"):
            continue
        # 1:590.48.01-0ubuntu0.24.04.1 -> 590.48.01 (epoch and Debian revision dropped).
        upstream = version.split(":", 1)[-1].rsplit("-", 1)[0]
        # Only the driver's own packages carry a driver version (cuda-toolkit is 12.x,
        # nvidia-container-toolkit 1.x): that is what keeps unrelated packages out.
        if ("nvidia" in name or name.startswith("libcuda")) and _DRIVER_VERSION.match(upstream):
            packages.append((name, upstream))
    return ContainerDriver(tuple(libraries), tuple(sorted(packages)))


def container_driver_problems(
    state: ContainerDriver, host_version: str, *, rootfs: str, vmid: int
) -> tuple[Problem, ...]:
    """The container's userspace must be the host module's exact version."""
    subject = f"{rootfs}/{CONTAINER_LIBDIRS[0]}"
    if not state.libraries:
        return (
            Problem(
                "container-driver-missing",
                subject,
                f"no libcuda.so.<version> or libnvidia-ml.so.<version> in container {vmid}: "
                f"CUDA cannot start (host module {host_version})",
                f"pct exec {vmid} -- apt install libnvidia-compute-{host_version.split('.')[0]}"
                f"={host_version}-*",
            ),
        )
    wrong = sorted(v for v in state.versions if v != host_version)
    if not wrong:
        return ()
    found = ", ".join(f"{n} ({v})" for n, v in (*state.libraries, *state.packages))
    major = host_version.split(".")[0]
    installs, removes = [], []
    for name, version in state.packages:
        if version == host_version:
            continue
        m = _MAJOR_SUFFIX.match(name)
        if m:
            installs.append(f"{m.group('base')}-{major}={host_version}-*")
            removes.append(name)
        else:
            installs.append(f"{name}={host_version}-*")
    stale = [n for n, v in state.libraries if v != host_version]
    if installs:
        cmd = f"apt install {' '.join(dict.fromkeys(installs))}"
        if removes:
            cmd += f" && apt remove {' '.join(removes)}"
        fix = f"pct exec {vmid} -- sh -c '{cmd}'"
    elif stale and any(v == host_version for _, v in state.packages):
        # The packages are right; the old libraries are leftovers (e.g. of a runfile).
        libdir = f"/{CONTAINER_LIBDIRS[0]}"
        fix = f"pct exec {vmid} -- rm " + " ".join(f"{libdir}/{n}" for n in stale)
    else:
        fix = (
            f"install the {host_version} userspace in container {vmid} "
            f"(NVIDIA-Linux-x86_64-{host_version}.run --no-kernel-modules)"
        )
    return (
        Problem(
            "container-driver-mismatch",
            subject,
            f"container {vmid} has NVIDIA userspace {', '.join(wrong)} but the host's kernel "
            f"module is {host_version}; a mismatch hangs NCCL or fails CUDA init "
            f"(found: {found})",
            fix,
        ),
    )


def _rel(path: str) -> str:
    """A spec path as a root-relative POSIX path (a leading / is tolerated)."""
    norm = posixpath.normpath(path.lstrip("/"))
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"{path!r} leaves the root")
    return norm


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


# ------------------------------------------------------------------ the builder


class _Builder:
    """Collects every problem of one pool's server before raising, like plan() does."""

    def __init__(self, plan_or_facts: Plan | HostFacts, pool: Pool) -> None:
        if pool.serving is None:
            raise ValueError(f"pool {pool.name} has no serving spec")
        self.pool = pool
        self.spec: ServingSpec = pool.serving
        if isinstance(plan_or_facts, Plan):
            self.facts = plan_or_facts.facts
            self.pools = plan_or_facts.pools
            names = [p.name for p in plan_or_facts.spec.pools]
            index = names.index(pool.name) if pool.name in names else None
        else:
            self.facts, self.pools, index = plan_or_facts, (pool,), None
        self.where = (
            f"pools[{index}].lxc.serving" if index is not None else f"pool {pool.name} serving"
        )
        self.plan_problems: list[Problem] = []
        self.render_problems: list[Problem] = []
        self.findings: list[Finding] = []

    # -- small helpers

    def problem(self, code: str, message: str, fix: str = "", subject: str | None = None) -> None:
        self.plan_problems.append(Problem(code, subject or self.where, message, fix))

    def finding(self, severity: Severity, code: str, message: str) -> None:
        self.findings.append(Finding(severity, code, f"pool {self.pool.name}", message))

    def path(self, field: str, value: str) -> str | None:
        try:
            return _rel(value)
        except ValueError as err:
            self.problem("serving-invalid-path", f"{field}: {err}", "give a path under the root")
            return None

    # -- steps

    def build(self) -> SglangServing | PvegpuError:
        spec, pool = self.spec, self.pool
        if pool.lxc is None:
            return PlanError.one(
                "serving-needs-lxc",
                self.where,
                "an inference server runs in the pool's container; this pool has none",
            )
        table = self._table()
        self._check_scalars()
        gpus = pool.gpus
        for gpu in gpus:
            if not gpu.is_nvidia:
                self.problem(
                    "serving-gpu-not-nvidia",
                    f"{gpu.address} ({gpu.vendor_device}) is not an NVIDIA GPU; SGLang's "
                    "CUDA build cannot use it",
                    "serve from a pool of NVIDIA GPUs",
                )
        tp = len(gpus)
        indices = self._indices(pool.lxc.vmid)
        self._printable("python", spec.python)
        self._printable("p2p_reason", spec.p2p_reason or "")
        model = self._model(tp)
        if spec.mtp and spec.model_config is None:
            self.problem(
                "mtp-needs-model-config",
                "mtp = true needs model_config: whether the model is hybrid (linear "
                "attention) decides the flags SGLang needs, and whether it has an MTP head "
                "decides if MTP can work at all",
                "set model_config to the model's config.json (path under the root)",
            )
        p2p = self._p2p()
        numa = self._numa()
        extra = self._extra_args(table)
        kv_bits = self._kv_bits(table, extra)
        fit = self._fit(model, tp, kv_bits) if model is not None else None
        driver = self._container(pool.lxc.vmid)
        base = self._unit_files(pool.lxc.vmid)
        options = self._options(table, model, tp, p2p, extra) if table else ()
        environment = self._environment(model, p2p, numa, indices)
        if table is not None and options:
            argv = [w for o in options for w in o]
            # The whole line again: catches what only shows in combination (a repeat, a
            # missing required option) and any generated flag the version lacks. What
            # extra_args alone already showed is not reported twice.
            said = {(p.code, p.message) for p in self.render_problems}
            problems = table.parse(argv, subject=f"{self.where}: sglang {spec.version}").problems
            self.render_problems.extend(p for p in problems if (p.code, p.message) not in said)
            for word in argv:
                self._printable("command line", word)
        if self.plan_problems:
            return PlanError([*self.plan_problems, *self.render_problems])
        if self.render_problems:
            return RenderError(self.render_problems)
        return SglangServing(
            pool=pool.name,
            vmid=pool.lxc.vmid,
            version=spec.version,
            unit=spec.unit,
            python=spec.python,
            model_path=spec.model_path,
            served_model_name=spec.served_model_name,
            cuda_visible_devices=indices,
            gpus=gpus,
            tp_size=tp,
            options=options,
            environment=environment,
            p2p=p2p,
            numa=numa,
            fit=fit,
            model=model,
            container_driver=driver,
            base=base,
            findings=tuple(self.findings),
            _key=_FROM_POOL,
        )

    def _table(self) -> OptionTable | None:
        if self.spec.engine != "sglang":
            self.problem(
                "serving-engine-unknown",
                f"engine {self.spec.engine!r}: pvegpu renders SGLang servers only",
                'set engine = "sglang"',
            )
            return None
        try:
            return load_table(self.spec.version)
        except RenderError as err:
            self.render_problems.extend(
                attrs.evolve(p, subject=f"{self.where}.version") for p in err.problems
            )
            return None

    def _printable(self, what: str, value: str) -> None:
        if _UNPRINTABLE.search(value):
            self.problem(
                "serving-unprintable",
                f"{what} {value!r} holds a control character; systemd cannot carry it",
                "remove it",
            )
        if value == ";":
            self.problem(
                "serving-unprintable",
                f"{what}: a lone `;` separates commands in ExecStart=",
                "remove it",
            )

    def _check_scalars(self) -> None:
        spec = self.spec
        if not _UNIT_NAME.match(spec.unit) or spec.unit.endswith(".service"):
            self.problem(
                "serving-invalid-unit",
                f"unit {spec.unit!r} is not a unit name (letters, digits, `:_.-\\`, no suffix)",
                'e.g. unit = "sglang-qwen" for sglang-qwen.service',
            )
        if not spec.python.startswith("/"):
            self.problem(
                "serving-invalid-python",
                f"python {spec.python!r} is not an absolute path; ExecStart= needs one",
                'e.g. python = "/root/ml-env/bin/python3"',
            )
        if spec.served_model_name is not None and ":" in spec.served_model_name:
            self.problem(
                "served-model-name-colon",
                f"served_model_name {spec.served_model_name!r} contains `:`, which SGLang "
                "reads as a model:adapter separator",
                f'e.g. served_model_name = "{spec.served_model_name.replace(":", "-")}"',
            )
        if spec.context_length is not None and spec.context_length < 1:
            self.problem("serving-invalid-value", f"context_length {spec.context_length} < 1")
        if spec.mem_fraction_static is not None and not 0 < spec.mem_fraction_static < 1:
            self.problem(
                "serving-invalid-value",
                f"mem_fraction_static {spec.mem_fraction_static} is not between 0 and 1",
            )
        if not 0 < spec.port < 65536:
            self.problem("serving-invalid-value", f"port {spec.port} is not a TCP port")

    def _indices(self, vmid: int) -> tuple[int, ...]:
        # What the container gets: the GPUs of every pool that hands GPUs to this vmid.
        container = [
            g for p in self.pools if p.lxc is not None and p.lxc.vmid == vmid for g in p.gpus
        ]
        return visible_indices([*container, *self.pool.gpus], self.pool.gpus)

    def _model(self, tp: int) -> ModelConfig | None:
        spec = self.spec
        if spec.model_config is None:
            return None
        path = self.path("model_config", spec.model_config)
        if path is None:
            return None
        file = self.facts.file(path)
        if file is None:
            self.problem(
                "model-config-missing",
                f"{path} was not read from the host: no such file under the root",
                "check model_config (relative to the root, host view of the model directory)",
                subject=path,
            )
            return None
        try:
            model = parse_model_config(file.content, path=path)
        except PlanError as err:
            self.plan_problems.extend(err.problems)
            return None
        if not tp_divides(model, tp):
            self.plan_problems.append(problem_tp(model, tp, self.where))
        if spec.mtp:
            if model.mtp_layers == 0:
                self.problem(
                    "model-has-no-mtp-layers",
                    f"{path} has no MTP (NEXTN) layers, so mtp = true cannot draft tokens",
                    "set mtp = false, or serve a checkpoint with MTP layers",
                )
            elif model.mtp_layers is None:
                self.finding(
                    Severity.WARNING,
                    "serving-mtp-layers-unknown",
                    f"{path} does not say whether it has MTP layers (no mtp_num_hidden_layers "
                    "or num_nextn_predict_layers); SGLang fails at load if it has none",
                )
        ctx = spec.context_length
        if (
            ctx is not None
            and model.max_position_embeddings
            and ctx > model.max_position_embeddings
        ):
            self.finding(
                Severity.WARNING,
                "serving-context-exceeds-model",
                f"context_length {ctx} exceeds max_position_embeddings "
                f"{model.max_position_embeddings} of {path}; SGLang refuses it unless the "
                "model's rope scaling allows more or SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
            )
        return model

    def _p2p(self) -> P2PDecision:
        facts, spec = self.facts, self.spec
        reasons: list[str] = []
        if facts.sev_snp:
            reasons.append("SEV-SNP is on (the IOMMU must translate; P2P DMA is unreliable)")
        if facts.iommu.enabled:
            translating, unknown = [], []
            for gpu in self.pool.gpus:
                group = facts.group(gpu.iommu_group) if gpu.iommu_group is not None else None
                if group is None or group.type is None:
                    unknown.append(str(gpu.address))
                elif group.type.translates:
                    translating.append(f"{group.id} ({group.type})")
            if translating:
                reasons.append(
                    "IOMMU group(s) " + ", ".join(dict.fromkeys(translating)) + " translate "
                    "GPU DMA (P2P corrupts or hangs under translation)"
                )
            if unknown:
                reasons.append(
                    "the IOMMU is on but the domain type of " + ", ".join(unknown) + " is "
                    "unknown, so P2P is not trusted"
                )
        facts_on = not reasons
        facts_reason = (
            "; ".join(reasons)
            if reasons
            else (
                "every GPU's IOMMU group is in passthrough (identity)"
                if facts.iommu.enabled
                else "no IOMMU: GPU DMA is not translated"
            )
        )
        if spec.p2p is P2PSetting.AUTO or (spec.p2p is P2PSetting.ON) == facts_on:
            return P2PDecision(facts_on, facts_reason, P2PSource.FACTS, facts_on)
        wanted = spec.p2p is P2PSetting.ON
        if not spec.p2p_reason:
            self.problem(
                "p2p-override-without-reason",
                f"p2p = {spec.p2p.value} overrides the facts ({facts_reason}) without a reason",
                'add p2p_reason = "..." saying why (e.g. the nccl-tests run that proved it), '
                'or set p2p = "auto"',
                subject=f"{self.where}.p2p",
            )
        if wanted:
            self.finding(
                Severity.WARNING,
                "serving-p2p-forced-on",
                f"P2P forced on against the facts ({facts_reason}): {spec.p2p_reason}. "
                "Prove it with nccl-tests `all_reduce_perf -c 1` on these GPUs",
            )
        return P2PDecision(wanted, spec.p2p_reason or "", P2PSource.SPEC, facts_on)

    def _numa(self) -> NumaPinning | None:
        nodes = {g.numa_node for g in self.pool.gpus}
        known = sorted(n for n in nodes if n is not None)
        if len(known) > 1:
            if not self.spec.allow_multi_numa:
                self.problem(
                    "serving-pool-spans-numa-nodes",
                    f"the pool's GPUs are on NUMA nodes {', '.join(map(str, known))}: every "
                    "all-reduce crosses the socket link and the service cannot be pinned",
                    "select the pool by numa_node, or set allow_multi_numa = true to serve "
                    "unpinned",
                )
            else:
                self.finding(
                    Severity.WARNING,
                    "serving-unpinned",
                    f"GPUs on NUMA nodes {', '.join(map(str, known))} (allow_multi_numa): "
                    "the service is not pinned to a node",
                )
            return None
        if None in nodes or not known:
            self.finding(
                Severity.WARNING,
                "serving-unpinned",
                "firmware gives no NUMA node for some of the pool's GPUs; the service is "
                "not pinned",
            )
            return None
        node = next((n for n in self.facts.numa_nodes if n.id == known[0]), None)
        if node is None or not node.cpus:
            self.finding(
                Severity.WARNING,
                "serving-unpinned",
                f"NUMA node {known[0]} has no CPUs in the facts; the service is not pinned",
            )
            return None
        return NumaPinning(node.id, node.cpus)

    def _extra_args(self, table: OptionTable | None) -> ParsedCommandLine | None:
        if table is None:
            return None
        subject = f"{self.where}.extra_args"
        parsed = table.parse(self.spec.extra_args, subject=subject, complete=False)
        self.render_problems.extend(parsed.problems)
        for spellings, owner in OWNED:
            option = parsed.of(table.find(*spellings))
            if option is not None:
                self.problem(
                    "serving-extra-arg-owned",
                    f"`{option.written}` is rendered from {owner}; extra_args may not set it",
                    f"remove `{' '.join(option.tokens)}` from extra_args"
                    + ("" if " " in owner else f" and set {owner} in the spec"),
                    subject=subject,
                )
        return parsed

    def _kv_bits(self, table: OptionTable | None, extra: ParsedCommandLine | None) -> int | None:
        option = extra.of(table.find(*KV_CACHE_DTYPE)) if extra and table else None
        if option is None or not option.values:
            return None
        return KV_CACHE_DTYPE_BITS.get(option.values[0])

    def _gpu_memory(self) -> tuple[int, str] | None:
        if self.spec.gpu_memory_bytes is not None:
            return self.spec.gpu_memory_bytes, "spec gpu_memory_bytes"
        known = [KNOWN_GPU_MEMORY.get(g.vendor_device) for g in self.pool.gpus]
        if any(k is None for k in known) or not known:
            ids = sorted({g.vendor_device for g in self.pool.gpus})
            self.problem(
                "gpu-memory-unknown",
                f"pvegpu does not know the memory of {', '.join(ids)}, so it cannot check "
                "that the model fits",
                "set gpu_memory_bytes (nvidia-smi --query-gpu=memory.total --format=csv: "
                "MiB x 1048576)",
            )
            return None
        size, name = min(k for k in known if k is not None)
        return size, f"{name} ({self.pool.gpus[0].vendor_device})"

    def _checkpoint(self, model_dir: str) -> tuple[int, str] | None:
        if self.spec.checkpoint_bytes is not None:
            return self.spec.checkpoint_bytes, "spec checkpoint_bytes"
        index_path = f"{model_dir}/model.safetensors.index.json"
        index = self.facts.file(index_path)
        if index is not None:
            try:
                return checkpoint_bytes_from_index(index.content, path=index_path), index_path
            except PlanError as err:
                self.plan_problems.extend(err.problems)
                return None
        shards = [(posixpath.basename(s.path), s.size) for s in self.facts.stats_in(model_dir)]
        total = checkpoint_bytes_from_shards(shards)
        if total is None:
            self.problem(
                "checkpoint-size-unknown",
                f"no model.safetensors.index.json and no *.safetensors in {model_dir}",
                "set checkpoint_bytes (total size of the weights) in the serving spec",
            )
            return None
        return total, f"{model_dir}/*.safetensors"

    def _fit(self, model: ModelConfig, tp: int, kv_bits: int | None) -> MemoryFit | None:
        memory = self._gpu_memory()
        checkpoint = self._checkpoint(posixpath.dirname(model.path))
        if memory is None or checkpoint is None:
            return None
        gpu_memory, memory_source = memory
        total, _ = checkpoint
        spec = self.spec
        fraction = spec.mem_fraction_static or DEFAULT_MEM_FRACTION
        fraction_source = "spec" if spec.mem_fraction_static else "pvegpu's estimate default"
        weights = -(-total // tp)
        if weights > gpu_memory:
            fitting = [t for t in valid_tp_sizes(model) if -(-total // t) < gpu_memory]
            self.problem(
                "model-does-not-fit",
                f"the weights ({_gib(total)}, {model.path}) need {_gib(weights)} per GPU at "
                f"TP={tp}, more than the {_gib(gpu_memory)} of each GPU ({memory_source})",
                f"use a pool of at least {fitting[0]} GPUs"
                if fitting
                else "serve a smaller or quantized checkpoint",
            )
            return None
        budget = int(gpu_memory * fraction) - weights
        context = spec.context_length or model.max_position_embeddings
        per_token = None if model.mla else kv_bytes_per_token(model, tp, kv_bits)
        tokens = None if per_token is None else max(0, budget) // per_token
        fit = MemoryFit(
            gpu_memory_bytes=gpu_memory,
            gpu_memory_source=memory_source,
            mem_fraction_static=fraction,
            mem_fraction_source=fraction_source,
            checkpoint_bytes=total,
            weights_per_gpu=weights,
            budget_bytes=budget,
            kv_bytes_per_token=per_token,
            kv_tokens=tokens,
            context_length=context,
        )
        head = (
            f"TP={tp}: weights {_gib(weights)} per GPU of {_gib(gpu_memory)}; at "
            f"mem_fraction_static {fraction} ({fraction_source}) {_gib(budget)} left"
        )
        if budget <= 0:
            self.finding(
                Severity.WARNING,
                "serving-no-kv-budget",
                f"{head}: no room for a KV cache; raise mem_fraction_static or add GPUs",
            )
        elif per_token is None or tokens is None:
            self.finding(
                Severity.INFO,
                "serving-memory",
                f"{head}; {model.path} uses latent attention (MLA), so pvegpu does not "
                "estimate its KV cache",
            )
        else:
            self.finding(
                Severity.INFO,
                "serving-memory",
                f"{head} for the KV cache: {per_token} bytes per token "
                f"({model.full_attention_layers} KV layers) -> at most {tokens:,} tokens "
                "(an upper bound: SGLang also reserves activations, CUDA graphs and, for "
                "hybrid models, the recurrent state)",
            )
            if context is not None and tokens < context:
                self.finding(
                    Severity.WARNING,
                    "serving-kv-below-context",
                    f"KV cache for at most {tokens:,} tokens is less than one full context "
                    f"of {context:,}: long requests will be refused or preempted",
                )
        return fit

    def _rootfs(self) -> str | None:
        if self.spec.container_rootfs is None:
            return None
        return self.path("container_rootfs", self.spec.container_rootfs)

    def _container(self, vmid: int) -> ContainerDriver | None:
        rootfs = self._rootfs()
        if rootfs is None:
            return None
        names = [
            posixpath.basename(s.path)
            for d in CONTAINER_LIBDIRS
            for s in self.facts.stats_in(f"{rootfs}/{d}")
        ]
        status = self.facts.file(f"{rootfs}/{DPKG_STATUS}")
        unit = self.facts.file(f"{rootfs}/{UNIT_DIR}/{self.spec.unit}.service")
        if not names and status is None and unit is None:
            self.problem(
                "container-rootfs-unread",
                f"nothing was read from {rootfs} (no {DPKG_STATUS}, no NVIDIA libraries, no "
                "unit): it is not a container root filesystem, or it is not mounted",
                f"check container_rootfs; for a stopped container: pct mount {vmid}",
                subject=rootfs,
            )
            return None
        state = container_driver_state(names, status.content if status else None)
        if self.facts.nvidia is None:
            self.finding(
                Severity.WARNING,
                "container-driver-unchecked",
                "the host has no nvidia module loaded, so the container's NVIDIA userspace "
                f"({', '.join(sorted(state.versions)) or 'none'}) was not compared with it",
            )
            return state
        self.plan_problems.extend(
            container_driver_problems(state, self.facts.nvidia.version, rootfs=rootfs, vmid=vmid)
        )
        return state

    def _unit_files(self, vmid: int) -> ConfigFile | None:
        rootfs = self._rootfs()
        if rootfs is None:
            return None
        name = f"{self.spec.unit}.service"
        authoritative = f"{rootfs}/{UNIT_DIR}/{name}"
        base = self.facts.file(authoritative)
        dropins = f"{authoritative}.d/"
        copies, overrides = [], []
        for file in self.facts.files:
            if not file.path.startswith(rootfs + "/") or file.path == authoritative:
                continue
            if file.path.startswith(dropins) and file.path.endswith(".conf"):
                overrides.append(file.path)
            elif posixpath.basename(file.path) == name:
                same = base is not None and file.content == base.content
                copies.append(f"/{file.path[len(rootfs) + 1 :]}" + (" (same)" if same else ""))
        if copies:
            self.finding(
                Severity.WARNING,
                "serving-unit-copies",
                f"other copies of {name} in container {vmid}: "
                f"{', '.join(copies)}. /{UNIT_DIR}/{name} is the one systemd runs and the one "
                "pvegpu writes; delete the others so no one edits a copy that drifts",
            )
        if overrides:
            shown = ", ".join(f"/{p[len(rootfs) + 1 :]}" for p in sorted(overrides))
            self.finding(
                Severity.WARNING,
                "serving-unit-dropins",
                f"drop-ins override the rendered unit: {shown}; move what they set into the "
                "spec (environment, extra_args) and delete them",
            )
        return base

    def _options(
        self,
        table: OptionTable,
        model: ModelConfig | None,
        tp: int,
        p2p: P2PDecision,
        extra: ParsedCommandLine | None,
    ) -> tuple[tuple[str, ...], ...]:
        spec = self.spec
        options: list[tuple[str, ...]] = []

        def add(spellings: tuple[str, ...], *values: str) -> None:
            found = table.find(*spellings)
            # Not in this version: written as pvegpu knows it, so the table check of the
            # whole line reports it with the version's own suggestions.
            options.append((found.canonical if found else spellings[0], *values))

        add(MODEL_PATH, spec.model_path)
        if spec.served_model_name is not None:
            add(SERVED_MODEL_NAME, spec.served_model_name)
        add(HOST_OPT, spec.host)
        add(PORT_OPT, str(spec.port))
        add(TP_SIZE, str(tp))
        if spec.context_length is not None:
            add(CONTEXT_LENGTH, str(spec.context_length))
        if spec.mem_fraction_static is not None:
            add(MEM_FRACTION, repr(spec.mem_fraction_static))
        if not p2p.enabled:
            # Custom all-reduce does its own P2P outside NCCL: off whenever P2P is.
            add(DISABLE_CUSTOM_ALL_REDUCE)
        if spec.mtp:
            add(SPECULATIVE_ALGORITHM, "NEXTN")
            for spellings, value in MTP_TUNING:
                if extra is None or extra.of(table.find(*spellings)) is None:
                    add(spellings, value)
            if model is not None and model.is_hybrid:
                add(_mamba_strategy(spec.version), "extra_buffer")
        if extra is not None:
            options.extend(o.tokens for o in extra.options)
        return tuple(options)

    def _environment(
        self,
        model: ModelConfig | None,
        p2p: P2PDecision,
        numa: NumaPinning | None,
        indices: tuple[int, ...],
    ) -> tuple[tuple[str, str], ...]:
        spec = self.spec
        key = version_key(spec.version) if _is_version(spec.version) else ()
        env: list[tuple[str, str]] = [
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            ("CUDA_VISIBLE_DEVICES", ",".join(map(str, indices))),
        ]
        if not p2p.enabled:
            env.append((P2P_ENV, "1"))
        hybrid_mtp = spec.mtp and model is not None and model.is_hybrid
        if hybrid_mtp and key and key < (0, 5, 14):
            # 0.5.10-0.5.13 refuse MTP on a hybrid model without it; <= 0.5.10 default off.
            env.append((SPEC_V2_ENV, "1"))
        if numa is not None and key and key >= (0, 5, 23):
            # systemd already binds the whole service to one node; SGLang's own per-GPU
            # binding would only repeat it (and could fight a later CPUAffinity change).
            env.append((AUTO_NUMA_ENV, "0"))
        ours = dict(env)
        for name, value in spec.environment:
            where = f"{self.where}.environment.{name}"
            if not _ENV_NAME.match(name):
                self.problem(
                    "serving-env-invalid-name",
                    f"{name!r} is not an environment variable name",
                    subject=where,
                )
                continue
            self._printable(f"environment {name}", value)
            if name in FORBIDDEN_ENV:
                self.problem(
                    "serving-env-forbidden",
                    f"{name} must not be set: {FORBIDDEN_ENV[name]}",
                    f"remove {name}",
                    subject=where,
                )
                continue
            if name == SPEC_V2_ENV and key and key >= (0, 5, 14):
                self.finding(
                    Severity.WARNING,
                    "serving-spec-v2-removed",
                    f"{SPEC_V2_ENV} was removed in SGLang 0.5.14; {spec.version} ignores it",
                )
            if name in ours:
                if ours[name] != value:
                    self.problem(
                        "serving-env-conflict",
                        f"{name}={value} contradicts {name}={ours[name]}, which pvegpu derives "
                        "from the facts and the spec",
                        "remove it" + (" and use p2p / p2p_reason" if name == P2P_ENV else ""),
                        subject=where,
                    )
                continue
            env.append((name, value))
        return tuple(env)


def _is_version(version: str) -> bool:
    try:
        version_key(version)
    except ValueError:
        return False
    return True


def _mamba_strategy(version: str) -> tuple[str, ...]:
    """The mamba cache strategy option of this version (renamed in 0.5.14)."""
    return MAMBA_STRATEGY_OLD if version_key(version) < (0, 5, 14) else MAMBA_STRATEGY_NEW


# ----------------------------------------------------------------- plan-level API


def servings(plan: Plan) -> tuple[SglangServing, ...]:
    """The server of every pool that has one; one error listing every pool's problems."""
    built: list[SglangServing] = []
    plan_problems: list[Problem] = []
    render_problems: list[Problem] = []
    for pool in plan.pools:
        if pool.serving is None:
            continue
        result = _Builder(plan, pool).build()
        if isinstance(result, PlanError):
            plan_problems.extend(result.problems)
        elif isinstance(result, PvegpuError):
            render_problems.extend(result.problems)
        else:
            built.append(result)
    seen: dict[tuple[int, str], str] = {}
    for serving in built:
        key = (serving.vmid, serving.unit)
        if key in seen:
            plan_problems.append(
                Problem(
                    "serving-unit-clash",
                    f"ct:{serving.vmid}/{serving.unit_path}",
                    f"pools {seen[key]} and {serving.pool} both render this unit",
                    "give each server its own unit name",
                )
            )
        seen[key] = serving.pool
    if plan_problems:
        raise PlanError([*plan_problems, *render_problems])
    if render_problems:
        raise RenderError(render_problems)
    return tuple(built)


def serving_findings(plan: Plan) -> tuple[Finding, ...]:
    """What the planner adds to the plan for its servers (raises like `servings`)."""
    out: list[Finding] = []
    for serving in servings(plan):
        p2p = serving.p2p
        state = "on" if p2p.enabled else "off"
        effect = "" if p2p.enabled else f": {P2P_ENV}=1 and --disable-custom-all-reduce"
        origin = "spec override" if p2p.source is P2PSource.SPEC else "from the facts"
        out.append(
            Finding(
                Severity.INFO,
                "serving-p2p",
                f"pool {serving.pool}",
                f"GPU peer-to-peer {state} ({origin}: {p2p.reason}){effect}",
            )
        )
        out.extend(serving.findings)
    return tuple(out)


# ------------------------------------------------------------------ thin reader


def _read_file(root: Path, rel: str) -> ConfigFile | None:
    path = root / rel
    if not path.is_file():
        return None
    return ConfigFile(rel, path.read_text(encoding="utf-8", errors="replace"))


def _has_symlink(root: Path, rel: str) -> bool:
    # A symlinked directory (merged-/usr `lib -> usr/lib`) is an alias of one read anyway,
    # or points outside the container's tree; either way it is not read twice.
    current = root
    for part in rel.split("/"):
        current = current / part
        if current.is_symlink():
            return True
    return False


def _walk(root: Path, start: str, depth: int) -> Iterator[str]:
    """Root-relative paths of files under `start`, at most `depth` directories down."""
    base = root / start
    if not base.is_dir() or _has_symlink(root, start):
        return
    for dirpath, dirnames, filenames in os.walk(base):
        rel = Path(dirpath).relative_to(root).as_posix()
        if rel.count("/") - start.count("/") >= depth:
            dirnames.clear()
        for name in filenames:
            yield f"{rel}/{name}"


def read_serving_files(root: Path, spec: Spec) -> ServingFiles:
    """Read what the servings of `spec` check: model config/index/shards, container files.

    The only I/O of serving checks; everything else takes the facts this returns.
    """
    files: dict[str, ConfigFile] = {}
    stats: dict[str, FileStat] = {}

    def add(rel: str) -> None:
        if rel not in files and (found := _read_file(root, rel)) is not None:
            files[rel] = found

    for pool in spec.pools:
        serving = pool.lxc.serving if pool.lxc else None
        if serving is None:
            continue
        try:
            model_config = _rel(serving.model_config) if serving.model_config else None
            rootfs = _rel(serving.container_rootfs) if serving.container_rootfs else None
        except ValueError:
            continue  # from_pool reports the path
        if model_config is not None:
            add(model_config)
            model_dir = posixpath.dirname(model_config)
            add(f"{model_dir}/model.safetensors.index.json")
            directory = root / model_dir
            if directory.is_dir():
                for entry in sorted(directory.iterdir()):
                    if entry.name.endswith(".safetensors") and entry.is_file():
                        rel = f"{model_dir}/{entry.name}"
                        stats[rel] = FileStat(rel, entry.stat().st_size)
        if rootfs is not None:
            add(f"{rootfs}/{DPKG_STATUS}")
            for libdir in CONTAINER_LIBDIRS:
                directory = root / rootfs / libdir
                if not directory.is_dir() or _has_symlink(root, f"{rootfs}/{libdir}"):
                    continue
                for entry in sorted(directory.iterdir()):
                    if _LIB.match(entry.name) and entry.is_file():
                        rel = f"{rootfs}/{libdir}/{entry.name}"
                        stats[rel] = FileStat(rel, entry.stat().st_size)
            unit = f"{serving.unit}.service"
            add(f"{rootfs}/{UNIT_DIR}/{unit}")
            dropin_dir = f"{rootfs}/{UNIT_DIR}/{unit}.d"
            if (root / dropin_dir).is_dir():
                for entry in sorted((root / dropin_dir).iterdir()):
                    if entry.name.endswith(".conf"):
                        add(f"{dropin_dir}/{entry.name}")
            for directory_name in OTHER_UNIT_DIRS:
                rel_dir = f"{rootfs}/{directory_name}"
                if not _has_symlink(root, rel_dir):
                    add(f"{rel_dir}/{unit}")
            for home in HOME_DIRS:
                for rel in _walk(root, f"{rootfs}/{home}", HOME_DEPTH):
                    if posixpath.basename(rel) == unit:
                        add(rel)
    return ServingFiles(tuple(files.values()), tuple(stats.values()))


def with_serving_files(facts: HostFacts, root: Path, spec: Spec) -> HostFacts:
    """`facts` plus what `read_serving_files` finds (call between discover and plan)."""
    found = read_serving_files(root, spec)
    have = {f.path for f in facts.files}
    have_stats = {s.path for s in facts.stats}
    return attrs.evolve(
        facts,
        files=(*facts.files, *(f for f in found.files if f.path not in have)),
        stats=(*facts.stats, *(s for s in found.stats if s.path not in have_stats)),
    )
