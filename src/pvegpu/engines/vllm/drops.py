"""What the rendered vLLM unit leaves out of the container's current one.

The same three lists as SGLang's `engines.sglang.drops` (kept, replaced or retired,
dropped with where the spec would carry it), with vLLM's command line: the words after
`vllm serve` (any path to the script, `python -m vllm.entrypoints.cli.main serve`) or
after `-m vllm.entrypoints.openai.api_server`, read against the new release's table.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from pvegpu.engines.sglang.drops import (
    EXTRA_ARGS,
    LIST_SETTINGS,
    NOT_RENDERED,
    SPEC_DIRECTIVES,
    SPEC_ENVIRONMENT,
    DroppedSetting,
    UnitComparison,
)
from pvegpu.engines.vllm.command import DERIVED, MODEL, OWNED
from pvegpu.engines.vllm.environment import retired_variable
from pvegpu.engines.vllm.option_check import ParsedOption, parse_command_line
from pvegpu.engines.vllm.options import OptionSpec, OptionTable, load_table, shipped_versions
from pvegpu.redact import MARK, is_secret_name, redact_argv, redact_line
from pvegpu.serving.unitfile import (
    ENVIRONMENT,
    ENVIRONMENT_FILE,
    EXEC_START,
    SERVICE,
    UnitFile,
    environment_pairs,
    exec_words,
    merge_units,
    unit_words,
)

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
    old_unit, new_unit = merge_units(old), merge_units(new)
    dropped: list[DroppedSetting] = []
    replaced: list[tuple[str, str]] = []
    retired: list[tuple[str, str]] = []
    _compare_command(old_unit, new_unit, table, dropped, replaced, retired)
    _compare_environment(old_unit, new_unit, dropped, retired)
    _compare_settings(old_unit, new_unit, dropped)
    return UnitComparison(tuple(dropped), tuple(replaced), tuple(retired))


def _exec_start(unit: UnitFile) -> tuple[str, ...] | None:
    values = unit.values(SERVICE, EXEC_START)
    return exec_words(values[-1]) if values else None


def _compare_command(
    old: UnitFile,
    new: UnitFile,
    table: OptionTable,
    dropped: list[DroppedSetting],
    replaced: list[tuple[str, str]],
    retired: list[tuple[str, str]],
) -> None:
    old_argv, new_argv = _exec_start(old), _exec_start(new)
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


def _compare_environment(
    old: UnitFile, new: UnitFile, dropped: list[DroppedSetting], retired: list[tuple[str, str]]
) -> None:
    kept = dict(environment_pairs(new.values(SERVICE, ENVIRONMENT)))
    environment_file = new.values(SERVICE, ENVIRONMENT_FILE)
    for name, value in environment_pairs(old.values(SERVICE, ENVIRONMENT)):
        if name in kept:
            continue
        if is_secret_name(name) and value:
            # Never shown; the new unit reads it by reference (serving-secrets-moved).
            if environment_file:
                retired.append(
                    (f"{name}={MARK}", f"read from EnvironmentFile={environment_file[-1]}")
                )
            else:
                dropped.append(DroppedSetting(f"{name}={MARK}", "serving.environment_file"))
            continue
        why = retired_variable(name)
        if why is not None:
            retired.append((f"{name}={value}", why))
        else:
            dropped.append(DroppedSetting(f"{name}={value}", SPEC_ENVIRONMENT))


def _compare_settings(old: UnitFile, new: UnitFile, dropped: list[DroppedSetting]) -> None:
    for section, key in old.settings_named():
        if section == SERVICE and key in (EXEC_START, ENVIRONMENT):
            continue  # compared option by option and variable by variable above
        carry = SPEC_DIRECTIVES.get((section, key), NOT_RENDERED)
        old_values = old.values(section, key)
        new_values = new.values(section, key)
        if not new_values:
            dropped.extend(DroppedSetting(redact_line(f"{key}={v}"), carry) for v in old_values)
        elif key in LIST_SETTINGS:
            have = {w for v in new_values for w in unit_words(v)}
            missing = [w for v in old_values for w in unit_words(v) if w not in have]
            dropped.extend(DroppedSetting(f"{key}={w}", NOT_RENDERED) for w in missing)
