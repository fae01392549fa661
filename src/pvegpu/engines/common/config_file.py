"""An engine's `--config FILE.yaml`, read as the engine turns it into command-line words.

Both engines take `--config` with a YAML mapping whose keys are option names, and insert
its options *before* the command line's own, so a flag on the command line overrides the
file (argparse keeps the last): `ConfigArgumentMerger.merge_config_with_args` in
`sglang/srt/server_args_config_parser.py` of SGLang 0.5.3 (`sglang/srt/utils/` in 0.5.23),
`FlexibleArgumentParser._pull_args_from_config` in `vllm/utils/__init__.py` of vLLM 0.10.2
(`vllm/utils/argparse_utils.py` in 0.33.0). A key becomes `--key`; `true` the bare flag,
`false` nothing; any other scalar `--key str(value)`; both refuse a file not named
`.yaml`/`.yml`.

**Decision: no YAML library.** pvegpu depends on attrs, cattrs and jinja2 only, and these
files are flat `key: value` lists in practice, so this reads that subset of YAML (plain,
single- or double-quoted scalars, comments, `---`). A key whose value is a nested block,
a list or a flow collection is kept as not read (`UNREAD`), so a size set that way is
unknown rather than guessed; a line that is not `key: value` at all makes the whole file
unread, with the line named.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

import attrs

from pvegpu.diagnostic import Severity
from pvegpu.model.container_files import container_files
from pvegpu.model.paths import engine_config_path
from pvegpu.serving.checks import Checks
from pvegpu.values import value_class
from pvegpu.wording import plural

SUFFIXES = (".yaml", ".yml")
"""What both engines take as a config file."""

UNREAD = object()
"""The value of a key whose YAML is more than a scalar (a nested mapping, a list)."""

_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:(?:\s+(.*?))?\s*")
_COMMENT = re.compile(r"\s+#.*$")
_BOOLS = {
    # YAML 1.1, as PyYAML's safe_load (which both engines use) reads them.
    **dict.fromkeys(("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"), True),
    **dict.fromkeys(("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"), False),
}
_NULLS = ("", "~", "null", "Null", "NULL")


@value_class
@attrs.frozen(eq=False, repr=False)
class EngineConfig:
    """The options a config file sets, or why it could not be read."""

    values: tuple[tuple[str, object], ...] = ()
    """(key, value) in file order: bool, None, str, or UNREAD."""
    problem: str | None = None
    """Why the file is not read (`line 3 is not \\`key: value\\``); None when it is."""

    def words(self) -> tuple[str, ...]:
        """The command-line words the engines make of it (before the line's own)."""
        out: list[str] = []
        for key, value in self.values:
            if value is True:
                out.append(f"--{key}")
            elif value is UNREAD or value is False or value is None:
                continue
            else:
                out.extend((f"--{key}", str(value)))
        return tuple(out)

    def unread(self) -> tuple[str, ...]:
        """The keys whose value is not a scalar, as `--key`."""
        return tuple(f"--{k}" for k, v in self.values if v is UNREAD)


def parse_config(text: str) -> EngineConfig:
    """The flat `key: value` subset of YAML the engines' config files use."""
    values: dict[str, object] = {}
    block: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#") or (number == 1 and line == "---"):
            continue
        if line[0] in " \t-":
            # The block of the key before: a nested mapping or a list.
            if block is None:
                return EngineConfig(problem=f"line {number} is indented with no key before it")
            values[block] = UNREAD
            continue
        match = _KEY.fullmatch(_COMMENT.sub("", line))
        if match is None:
            return EngineConfig(problem=f"line {number} is not `key: value`")
        key, value = match.group(1), match.group(2) or ""
        values.pop(key, None)  # a repeated key: PyYAML keeps the last
        values[key] = _scalar(value)
        block = key if value == "" else None
    return EngineConfig(tuple(values.items()))


def unit_config(
    path: str, working_directory: str | None, text: Callable[[str], str | None] | None
) -> EngineConfig:
    """The `--config FILE` of a unit's server line as the engine reads it, from the
    container's files (`text`: a file's text by its path there, None when not read; None:
    none was read). `working_directory`: the unit's WorkingDirectory=, which a relative
    path is taken from."""
    inside = engine_config_path(path, working_directory)
    if inside is None:
        return EngineConfig(problem="is not a .yaml file pvegpu can locate")
    found = text(inside) if text is not None else None
    if found is None:
        return EngineConfig(problem=f"({inside} in the container) is not read")
    return parse_config(found)


def _scalar(value: str) -> object:
    if value in _NULLS:
        return None
    if value in _BOOLS:
        return _BOOLS[value]
    if value[0] in "[{&*!|>%@`":
        return UNREAD  # flow collection, anchor, alias, tag, block scalar: not read
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        inner = value[1:-1]
        return UNREAD if "\\" in inner else inner
    if value[0] in "'\"":
        return UNREAD  # a quoted scalar over several lines
    return value


@value_class
@attrs.frozen(eq=False, repr=False)
class ExtraConfig:
    """The `--config` file the spec's extra_args pass, as the engine would read it."""

    path: str
    config: EngineConfig


def extra_args_config(
    checks: Checks, rootfs: str | None, sizes: Collection[str]
) -> ExtraConfig | None:
    """The last `--config FILE` of extra_args, read from the facts (discovery read it from
    the container); None when there is none. A file not read, or one that sets a size
    (`sizes`: its option strings) as more than a plain value, is a warning: the sizes it
    may set are not checked against the pool."""
    words = checks.spec.extra_args
    path = None
    for i, word in enumerate(words):
        if word == "--config" and i + 1 < len(words):
            path = words[i + 1]
        elif word.startswith("--config="):
            path = word.partition("=")[2]
    if path is None:
        return None
    inside = engine_config_path(path, checks.spec.working_directory)
    tree = container_files(checks.facts).at(rootfs) if inside and rootfs else None
    found = tree.text(inside) if tree is not None and inside else None
    if found is None:
        where = f" ({inside} in CT {checks.pool.lxc.vmid})" if inside and checks.pool.lxc else ""
        config = EngineConfig(problem=f"{where.strip()} is not read".strip())
    else:
        config = parse_config(found)
    unread = [k for k in config.unread() if k in sizes]
    if config.problem is not None or unread:
        why = config.problem or f"sets {', '.join(unread)} as more than a plain value"
        checks.finding(
            Severity.WARNING,
            "serving-config-unread",
            f"extra_args pass `--config {path}`, which {why}: the parallel sizes it may "
            f"set are not checked against the pool's {plural(len(checks.pool.gpus), 'GPU')}, "
            "and one the rendered line does not override makes the server open other GPUs "
            "than the pool's (check it by hand, or give the sizes in the spec)",
        )
    return ExtraConfig(path, config)
