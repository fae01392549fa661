"""How many GPUs a systemd unit's inference server needs, read from its ExecStart=. Pure.

Recognised servers (anywhere in the command, also inside `sh -c '...'` and after `env`):
every engine's, as its `ServerLine` shows it (`engines/<engine>/server_line.py`, handed
through the engine registry): its `-m` modules or its `serve` command, the options that
size it, and how many GPUs they open (SGLang's dp x tp x pp over its nodes, vLLM's world
size TP x PP x PCP times its local DP replicas; each engine's module says its sources).

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

import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence

import attrs

from pvegpu.engines import Engine, every_engine
from pvegpu.engines.common.config_file import EngineConfig, unit_config
from pvegpu.engines.common.deprecations import FlagDeprecation
from pvegpu.engines.common.server_line import ServerLine
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
_SHELLS = ("sh", "bash", "dash", "zsh")
_WORKING_DIRECTORY = "WorkingDirectory"
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
    """`tp`, `pp`, `dp` or the engine's own (`ServerLine.sizes`: SGLang's `nnodes`,
    `base`, `step`; vLLM's `dpl`, `pcp`)."""
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

    engine: str
    """The spec's `engine` value of the server's engine."""
    server: str
    """The engine as messages name it (`SGLang`)."""
    line: ServerLine
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
        return self.line.count({o.kind: o.value or 0 for o in self.options}, self.dp_attention)

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


def _marker(tokens: Sequence[str], i: int) -> tuple[Engine, int] | None:
    """(engine, index of its first option) when an engine's server starts at tokens[i]."""
    word = tokens[i]
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    engines = every_engine()
    if word == "-m":
        found = next((e for e in engines if after in e.server_line.modules), None)
        if found is not None:
            return found, i + 2
    name = posixpath.basename(word)
    if after == "serve":
        found = next((e for e in engines if name == e.server_line.command), None)
        if found is not None:
            return found, i + 2
    return None


@value_class
@attrs.frozen(eq=False, repr=False)
class _ConfigReader:
    """A server's `--config` file read from its container, as the engines read it."""

    text: ConfigText | None
    working_directory: str | None

    def config(self, path: str) -> EngineConfig:
        return unit_config(path, self.working_directory, self.text)


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
    engine: Engine, words: Sequence[str], visible: tuple[str, ...] | None, configs: _ConfigReader
) -> ServerDemand:
    path = _config_path(words)
    problem: str | None = None
    if path is not None:
        # The file's options come first: the command line's own override them.
        found = configs.config(path)
        problem = found.problem
        names = engine.server_line.size_kinds
        unread = [k for k in found.unread() if engine.server_line.option_name(k) in names]
        if problem is None and unread:
            problem = f"sets {', '.join(unread)} as more than a plain value"
        words = [*found.words(), *words]
    demand = _line(engine, words, visible)
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


def _line(engine: Engine, words: Sequence[str], visible: tuple[str, ...] | None) -> ServerDemand:
    line = engine.server_line
    names = line.size_kinds
    chosen: dict[str, SizeOption] = {}
    dp_attention = False
    config: str | None = None
    deprecated: dict[str, FlagDeprecation] = {}
    i = 0
    while i < len(words):
        word = words[i]
        _, eq, value = word.partition("=")
        name = line.option_name(word)
        i += 1
        if (gone := line.deprecation(name)) is not None:
            deprecated.setdefault(name, gone)
        if line.dp_attention is not None and name == line.dp_attention:
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
        engine.name,
        engine.label,
        line,
        tuple(chosen.values()),
        dp_attention,
        config,
        visible,
        tuple(deprecated.values()),
    )
