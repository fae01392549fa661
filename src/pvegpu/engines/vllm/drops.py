"""What the rendered vLLM unit leaves out of the container's current one.

The three lists (kept, replaced or retired, dropped with where the spec would carry it),
the environment and the unit settings are every engine's (`engines.common.drops`); vLLM's
own is its command line: the words after `vllm serve` (any path to the script,
`python -m vllm.entrypoints.cli.main serve`) or after `-m vllm.entrypoints.openai.api_server`,
read against the new release's table.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from pvegpu.engines.common import drops
from pvegpu.engines.common.drops import (
    EXTRA_ARGS,
    Changes,
    DroppedSetting,
    UnitComparison,
    exec_start,
)
from pvegpu.engines.common.environment import retired_variable
from pvegpu.engines.vllm.command import DERIVED, MODEL, OWNED
from pvegpu.engines.vllm.option_check import ParsedOption, parse_command_line
from pvegpu.engines.vllm.options import OptionSpec, OptionTable, load_table, shipped_versions
from pvegpu.redact import redact_argv
from pvegpu.serving.unitfile import EXEC_START, UnitFile

_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_CLI_MODULES = ("vllm.entrypoints.cli.main", "vllm.scripts")


def serve_words(argv: Sequence[str]) -> tuple[str, ...] | None:
    """The words after `vllm serve` (or the old api_server module), None if argv runs neither."""
    for i, word in enumerate(argv):
        after = argv[i + 1] if i + 1 < len(argv) else ""
        if posixpath.basename(word) == "vllm" and after == "serve":
            return tuple(argv[i + 2 :])
        if word == "-m" and after in _CLI_MODULES and argv[i + 2 : i + 3] == ["serve"]:
            return tuple(argv[i + 3 :])
        if word == "-m" and after in _MODULES:
            return tuple(argv[i + 2 :])
    return None


def compare_services(old: Sequence[str], new: Sequence[str], table: OptionTable) -> UnitComparison:
    """The settings of the old unit (and its drop-ins) that the new one (for `table`'s
    release, with the same drop-ins as the bundle leaves them) drops, merged as systemd does."""

    def compare_command(
        old: UnitFile,
        new: UnitFile,
        dropped: list[DroppedSetting],
        replaced: Changes,
        retired: Changes,
    ) -> None:
        _compare_command(old, new, table, dropped, replaced, retired)

    return drops.compare_services(old, new, compare_command, retired_variable)


def _compare_command(
    old: UnitFile,
    new: UnitFile,
    table: OptionTable,
    dropped: list[DroppedSetting],
    replaced: Changes,
    retired: Changes,
) -> None:
    old_argv, new_argv = exec_start(old), exec_start(new)
    if old_argv is None:
        return
    old_words = serve_words(old_argv)
    new_words = serve_words(new_argv) if new_argv is not None else None
    if old_words is None or new_words is None:
        dropped.append(
            DroppedSetting(
                f"{EXEC_START}={' '.join(redact_argv(old_argv))}",
                "not a `vllm serve` line, so its options were not compared",
            )
        )
        return
    subject = "the container's current unit"
    rendered = parse_command_line(table, new_words, subject=subject)
    derived = {spec: why for spellings, why in DERIVED if (spec := table.find(*spellings))}
    owners = {spec: owner for spellings, owner in OWNED if (spec := table.find(*spellings))}
    model = table.find(*MODEL)
    for option in parse_command_line(table, old_words, subject=subject).options:
        spec = option.spec or _renamed(option, table)
        # Shown in findings and SUMMARY.md: a secret value (`--api-key V`) never is.
        text = " ".join(redact_argv(tuple(option.tokens)))
        if spec is not None and rendered.of(spec) is not None:
            if option.written not in spec.accepted:
                replaced.append((option.written, spec.canonical))
        elif spec is not None and spec == model and rendered.positionals:
            retired.append((text, "the model is `vllm serve`'s positional, from model_path"))
        elif spec is not None and spec in derived:
            retired.append((text, derived[spec]))
        elif spec is not None and spec in owners:
            dropped.append(DroppedSetting(text, f"serving.{owners[spec]}"))
        elif spec is not None and spec.deprecated:
            dropped.append(DroppedSetting(text, f"deprecated in vllm {table.version}"))
        elif spec is not None and option.written not in spec.accepted:
            dropped.append(DroppedSetting(text, f"{EXTRA_ARGS} as `{spec.canonical}`"))
        elif spec is not None:
            dropped.append(DroppedSetting(text, EXTRA_ARGS))
        else:
            dropped.append(DroppedSetting(text, f"not an option of vllm {table.version}"))


def _renamed(option: ParsedOption, table: OptionTable) -> OptionSpec | None:
    """The action of `table` an option of another release means: any of its names there
    (an alias this release dropped) that this release knows."""
    for version in shipped_versions():
        other = load_table(version).option_strings.get(option.written.replace("_", "-"))
        if other is not None and (found := table.find(*other.options)) is not None:
            return found
    return None
