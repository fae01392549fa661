"""How many GPUs a systemd unit's inference server needs, read from its ExecStart=. Pure.

Recognised servers (anywhere in the command, also inside `sh -c '...'` and after `env`):

- SGLang: `-m sglang.launch_server`, `-m sglang_router.launch_server`, `sglang serve`.
  GPUs: `--tp-size`/`--tensor-parallel-size`/`--tp` x `--pp-size`/
  `--pipeline-parallel-size`/`--pp`, times `--dp-size`/`--data-parallel-size`/`--dp`
  replicas, divided over `--nnodes`; `--base-gpu-id` and `--gpu-id-step` move the
  highest device it opens. Attention data parallelism runs inside the TP group and adds
  no GPUs: `--attn-dp-size`/`--attention-data-parallel-size` (0.5.22 on) and the
  deprecated `--dp-size N --enable-dp-attention`, which SGLang reads as
  `--attn-dp-size N --dp-size 1` (before 0.5.22 the same count: the DP ranks share the
  TP GPUs). SGLang 0.5.23's `compute_world_size` in `sglang/srt/server_args.py` is
  dp x tp x pp, and `handle_deprecated_dp_attention` in
  `sglang/srt/arg_groups/parallel_hook.py` is the rewrite.
- vLLM: `vllm serve`, `-m vllm.entrypoints.openai.api_server` (or `.api_server`). GPUs:
  `--tensor-parallel-size`/`-tp` x `--pipeline-parallel-size`/`-pp` x
  `--prefill-context-parallel-size`/`-pcp` (0.12 on), times
  `--data-parallel-size-local`/`-dpl` (else `--data-parallel-size`/`-dp`). vLLM's world
  size is PP x TP x PCP (`ParallelConfig.__post_init__` in `vllm/config/parallel.py` of
  vLLM 0.12.0 and 0.33.0); `--decode-context-parallel-size`/`-dcp` reuses the TP ranks
  and adds none.

The last occurrence of an option wins (argparse). `${NAME}` and `$NAME` are expanded from
the unit's Environment= (and assignments before the command, `env X=1 cmd`, `X=1 cmd`),
as systemd and the shell would; a size that is still not a number (set in an
EnvironmentFile=) is unknown, never guessed. `--config FILE.yaml` is read when the caller
hands the container's files (`config_text`): its options count before the command line's
own, as both engines insert them (`engines.common.config_file`); a file not read, or a
size in it that is not a plain value, leaves the count unknown.
The runtime's visible-devices variable (`CUDA_VISIBLE_DEVICES`, ROCm's `HIP_VISIBLE_DEVICES`)
is read from the same places: the runtime shows the devices it lists up to the first index
the container does not have.
"""

from __future__ import annotations

import math
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence

import attrs

from pvegpu.engines.common.config_file import EngineConfig, parse_config
from pvegpu.engines.common.deprecations import FlagDeprecation
from pvegpu.engines.sglang import versions as sglang_versions
from pvegpu.model.paths import engine_config_path
from pvegpu.serving.unitfile import (
    ENVIRONMENT,
    ENVIRONMENT_FILE,
    EXEC_START,
    SERVICE,
    UnitFile,
    environment_pairs,
    exec_words,
)
from pvegpu.values import value_class

VISIBLE = "CUDA_VISIBLE_DEVICES"
"""The visible-devices variable read unless the caller names its GPUs' runtime's."""
SGLANG = "SGLang"
VLLM = "vLLM"
_SGLANG_MODULES = ("sglang.launch_server", "sglang_router.launch_server")
_VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_SHELLS = ("sh", "bash", "dash", "zsh")
_SIZES: dict[str, dict[str, str]] = {
    SGLANG: {
        "--tp-size": "tp",
        "--tensor-parallel-size": "tp",
        "--tp": "tp",
        "--pp-size": "pp",
        "--pipeline-parallel-size": "pp",
        "--pp": "pp",
        "--dp-size": "dp",
        "--data-parallel-size": "dp",
        "--dp": "dp",
        "--nnodes": "nnodes",
        "--base-gpu-id": "base",
        "--gpu-id-step": "step",
    },
    VLLM: {
        "--tensor-parallel-size": "tp",
        "-tp": "tp",
        "--pipeline-parallel-size": "pp",
        "-pp": "pp",
        "--data-parallel-size": "dp",
        "-dp": "dp",
        "--data-parallel-size-local": "dpl",
        "-dpl": "dpl",
        "--prefill-context-parallel-size": "pcp",
        "-pcp": "pcp",
    },
}
_WORKING_DIRECTORY = "WorkingDirectory"
_DP_ATTENTION = "--enable-dp-attention"
_CONFIG = "--config"
_RESTARTS = ("always", "on-failure")
"""Restart= values that start a server again after it exits with an error."""
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_OPERATOR = re.compile(r"[;&|()<>]+")


@value_class
@attrs.frozen(eq=False, repr=False)
class SizeOption:
    """One parallel-size option of the command line, as the unit writes it."""

    kind: str
    """`tp`, `pp`, `dp`, `dpl` (vLLM's local DP), `pcp` (vLLM's prefill context
    parallelism), `nnodes`, `base`, `step`."""
    spelling: str
    written: str
    """`--tp 8` or `--tp=8`: how the fix names it."""
    value: int | None
    """None: not a number after expansion (`${TP}` from an EnvironmentFile=)."""

    def rewritten(self, value: int) -> str:
        """The same option with another value, written the same way."""
        return f"{self.spelling}={value}" if "=" in self.written else f"{self.spelling} {value}"


@value_class
@attrs.frozen(eq=False, repr=False)
class ServerDemand:
    """One server a unit starts and the GPUs it opens."""

    server: str
    options: tuple[SizeOption, ...]
    """The option of each kind that counts (the last), in the order they were written."""
    dp_attention: bool = False
    config: str | None = None
    """`--config FILE`: sizes may be set there, where pvegpu does not look."""
    visible: tuple[str, ...] | None = None
    """The visible-devices variable as the server gets it; None: not set."""
    deprecated: tuple[FlagDeprecation, ...] = ()
    """Flags of the line the engine's release table deprecates (`--enable-dp-attention`)."""
    config_problem: str | None = None
    """Why `config` was not read (`is not in the container`); None when it was, or none."""

    def option(self, kind: str) -> SizeOption | None:
        return next((o for o in self.options if o.kind == kind), None)

    @property
    def unresolved(self) -> SizeOption | None:
        return next((o for o in self.options if o.value is None), None)

    @property
    def gpus(self) -> int | None:
        """The devices it opens (its highest device index + 1); None when unknown."""
        if self.unresolved is not None or self.config_problem is not None:
            return None
        size = {o.kind: o.value or 0 for o in self.options}
        tp, pp = size.get("tp", 1), size.get("pp", 1)
        if self.server == VLLM:
            return tp * pp * size.get("pcp", 1) * size.get("dpl", size.get("dp", 1))
        dp = 1 if self.dp_attention else size.get("dp", 1)
        per_node = math.ceil(tp * pp * dp / max(size.get("nnodes", 1), 1))
        return size.get("base", 0) + (per_node - 1) * size.get("step", 1) + 1

    @property
    def shown(self) -> str:
        """The options that set its size, as written (`--tp 4 --pp 2`)."""
        if not self.options:
            return "no parallel-size option (1 GPU)"
        return " ".join(f"`{o.written}`" for o in self.options)


@value_class
@attrs.frozen(eq=False, repr=False)
class UnitDemand:
    """What a unit (merged with its drop-ins) runs on GPUs."""

    servers: tuple[ServerDemand, ...]
    visible: tuple[str, ...] | None
    """The visible-devices variable of the unit's Environment=; None: not set."""
    restarts: bool
    """Restart=always/on-failure: a server that cannot start is started again and again."""
    environment_file: bool
    """EnvironmentFile= is set: variables may come from a file pvegpu does not read."""


ConfigText = Callable[[str], "str | None"]
"""The text of a file of the unit's container by its path there (None: not read)."""


def unit_demand(
    unit: UnitFile, visible: str = VISIBLE, config_text: ConfigText | None = None
) -> UnitDemand:
    """The servers of every ExecStart= of `unit` and the devices each opens; `visible`: the
    variable the GPUs' runtime narrows them by (`HIP_VISIBLE_DEVICES` on ROCm);
    `config_text`: the container's files, for a server's `--config` (None: not read)."""
    environment = dict(environment_pairs(unit.values(SERVICE, ENVIRONMENT)))
    directory = unit.values(SERVICE, _WORKING_DIRECTORY)
    config = _ConfigReader(config_text, directory[-1] if directory else None)
    servers = tuple(
        server
        for value in unit.values(SERVICE, EXEC_START)
        for server in _servers(exec_words(value), environment, visible, config)
    )
    restart = unit.values(SERVICE, "Restart")
    return UnitDemand(
        servers,
        _entries(environment.get(visible)),
        bool(restart) and restart[-1] in _RESTARTS,
        bool(unit.values(SERVICE, ENVIRONMENT_FILE)),
    )


def visible_count(entries: tuple[str, ...] | None, count: int) -> int | None:
    """How many GPUs CUDA shows a process in a container with `count` of them.

    CUDA takes the listed indices in order and stops at the first that is not a device
    (CUDA C Programming Guide, CUDA_VISIBLE_DEVICES). None: not set, or it names GPUs by
    UUID, which the host's facts cannot match to the container's devices.
    """
    if entries is None:
        return None
    seen: set[int] = set()
    for entry in entries:
        if not (entry.isascii() and entry.isdigit()):
            return None
        index = int(entry)
        if index >= count or index in seen:
            break
        seen.add(index)
    return len(seen)


def _entries(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(e.strip() for e in value.split(",")) if value.strip() else ()


def _tokens(argv: Sequence[str]) -> list[str]:
    """The words the command runs; a shell's `-c` script split the way sh would."""
    if argv and posixpath.basename(argv[0]) in _SHELLS:
        for j, word in enumerate(argv[1:-1], start=1):
            if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
                lexer = shlex.shlex(argv[j + 1], posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                try:
                    return list(lexer)
                except ValueError:
                    return argv[j + 1].split()
    return list(argv)


def _expand(word: str, environment: Mapping[str, str]) -> list[str]:
    """`word` with the variables `environment` sets substituted; `$NAME` alone splits."""
    whole = _VARIABLE.fullmatch(word)
    if whole and whole.group(2) and whole.group(2) in environment:
        return environment[whole.group(2)].split()

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return environment.get(name, match.group(0))

    return [_VARIABLE.sub(value, word)]


def _marker(tokens: Sequence[str], i: int) -> tuple[str, int] | None:
    """(server, index of its first option) when a server starts at tokens[i]."""
    word = tokens[i]
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    if word == "-m" and after in _SGLANG_MODULES:
        return SGLANG, i + 2
    if word == "-m" and after in _VLLM_MODULES:
        return VLLM, i + 2
    name = posixpath.basename(word)
    if after == "serve" and name in ("sglang", "vllm"):
        return (SGLANG if name == "sglang" else VLLM), i + 2
    return None


@value_class
@attrs.frozen(eq=False, repr=False)
class _ConfigReader:
    """A server's `--config` file read from its container, as the engines read it."""

    text: ConfigText | None
    working_directory: str | None

    def read(self, path: str) -> EngineConfig:
        inside = engine_config_path(path, self.working_directory)
        if inside is None:
            return EngineConfig(problem="is not a .yaml file pvegpu can locate")
        text = self.text(inside) if self.text is not None else None
        if text is None:
            return EngineConfig(problem=f"({inside} in the container) is not read")
        return parse_config(text)


def _servers(
    argv: Sequence[str], unit_environment: Mapping[str, str], visible: str, config: _ConfigReader
) -> list[ServerDemand]:
    tokens = _tokens(argv)
    environment = dict(unit_environment)
    servers: list[ServerDemand] = []
    i = 0
    while i < len(tokens):
        found = _marker(tokens, i)
        if found is None:
            if (assigned := _ASSIGNMENT.fullmatch(tokens[i])) is not None:
                # `env X=1 cmd`, `X=1 cmd`, `export X=1;` before the server: its environment.
                name, value = assigned.groups()
                environment[name] = " ".join(_expand(value, environment))
            i += 1
            continue
        server, start = found
        end = start
        while end < len(tokens) and not _OPERATOR.fullmatch(tokens[end]):
            end += 1
        words = [w for t in tokens[start:end] for w in _expand(t, environment)]
        servers.append(_server(server, words, _entries(environment.get(visible)), config))
        i = end
    return servers


def _server(
    server: str, words: Sequence[str], visible: tuple[str, ...] | None, reader: _ConfigReader
) -> ServerDemand:
    path = _config_path(words)
    problem: str | None = None
    if path is not None:
        # The file's options come first: the command line's own override them.
        found = reader.read(path)
        problem = found.problem
        names = _SIZES[server]
        unread = [k for k in found.unread() if _size_name(server, k) in names]
        if problem is None and unread:
            problem = f"sets {', '.join(unread)} as more than a plain value"
        words = [*found.words(), *words]
    demand = _line(server, words, visible)
    return attrs.evolve(demand, config=path, config_problem=problem)


def _config_path(words: Sequence[str]) -> str | None:
    """The last `--config FILE` of the line (both engines take one)."""
    path = None
    for i, word in enumerate(words):
        if word == _CONFIG and i + 1 < len(words):
            path = words[i + 1]
        elif word.startswith(f"{_CONFIG}="):
            path = word.partition("=")[2]
    return path


def _size_name(server: str, word: str) -> str:
    name = word.partition("=")[0]
    if server == VLLM and name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")  # vLLM takes --tensor_parallel_size
    return name


def _line(server: str, words: Sequence[str], visible: tuple[str, ...] | None) -> ServerDemand:
    names = _SIZES[server]
    chosen: dict[str, SizeOption] = {}
    dp_attention = False
    config: str | None = None
    deprecated: dict[str, FlagDeprecation] = {}
    i = 0
    while i < len(words):
        word = words[i]
        _, eq, value = word.partition("=")
        name = _size_name(server, word)
        i += 1
        if server == SGLANG and (gone := sglang_versions.RULES.deprecation(name)) is not None:
            deprecated.setdefault(name, gone)
        if name == _DP_ATTENTION and server == SGLANG:
            dp_attention = True
            continue
        if name in names or name == _CONFIG:
            if not eq and i < len(words):
                value, written = words[i], f"{word} {words[i]}"
                i += 1
            else:
                written = word
            if name == _CONFIG:
                config = value
                continue
            number = int(value) if value.isascii() and value.isdigit() else None
            chosen.pop(names[name], None)
            chosen[names[name]] = SizeOption(names[name], name, written, number)
    # Re-inserted at each occurrence: the dict is in the order of the ones that count.
    return ServerDemand(
        server,
        tuple(chosen.values()),
        dp_attention,
        config,
        visible,
        tuple(deprecated.values()),
    )
