"""What the rendered unit leaves out of the container's current one: the settings it drops.

`compare_units(old, new, table)` is pure: two unit texts and the option table of the new
unit's SGLang version. The old unit is what someone tuned by hand (a reasoning parser,
CUDA paths, a file limit); the new one is rendered from the spec, so whatever the spec
does not say silently disappears. Each old setting ends up in one of three lists:

- kept: the new unit sets it too (its value may change: `--tp 8` -> `--tp-size 4`);
- replaced or retired: pvegpu knows why it goes (a renamed option is written by its new
  name, a variable the version removed, an option pvegpu decides from the facts);
- dropped: nothing explains it; the `serving-drops-settings` warning names it and where
  in the spec it would go.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from pvegpu.engines.sglang.command import DERIVED, OWNED, RENAMED
from pvegpu.engines.sglang.environment import retired_variable
from pvegpu.engines.sglang.option_check import ParsedOption, parse_command_line
from pvegpu.engines.sglang.options import OptionSpec, OptionTable, load_table, shipped_versions
from pvegpu.redact import MARK, is_secret_name, redact_argv, redact_line
from pvegpu.serving.unitfile import (
    ENVIRONMENT,
    ENVIRONMENT_FILE,
    EXEC_START,
    SERVICE,
    UnitFile,
    environment_pairs,
    exec_words,
    launch_options,
    merge_units,
    unit_words,
)

EXTRA_ARGS = "serving.extra_args"
SPEC_ENVIRONMENT = "serving.environment"
NOT_RENDERED = "pvegpu does not render it"

SPEC_DIRECTIVES = {
    (SERVICE, "User"): "serving.user",
    (SERVICE, "WorkingDirectory"): "serving.working_directory",
    (SERVICE, "LimitNOFILE"): "serving.limit_nofile",
    (SERVICE, "EnvironmentFile"): "serving.environment_file",
}
"""Unit settings the spec can carry, and the spec field that does."""

LIST_SETTINGS = frozenset(
    {
        "After",
        "Before",
        "Wants",
        "Requires",
        "Requisite",
        "BindsTo",
        "PartOf",
        "Upholds",
        "Conflicts",
        "OnFailure",
        "OnSuccess",
        "WantedBy",
        "RequiredBy",
        "UpheldBy",
        "Also",
        "Alias",
    }
)
"""Settings that are lists of unit names: an old name missing from the new list is dropped.
Any other setting is one value, and a new value replaces the old on purpose (Type=)."""


@attrs.frozen
class DroppedSetting:
    """One setting of the old unit the new one lacks, and where the spec would carry it."""

    text: str
    """As the old unit says it: `--reasoning-parser qwen3`, `NCCL_DEBUG=WARN`, `User=root`."""
    carry: str
    """The spec field that would bring it back, or why it cannot be."""


@attrs.frozen
class UnitComparison:
    dropped: tuple[DroppedSetting, ...]
    replaced: tuple[tuple[str, str], ...]
    """(old spelling, new spelling) of options both units set: (`--tp`, `--tp-size`)."""
    retired: tuple[tuple[str, str], ...]
    """(old setting, why) of settings pvegpu leaves out on purpose."""


def compare_units(old: str, new: str, table: OptionTable) -> UnitComparison:
    """The settings of unit text `old` that unit text `new` (for `table`'s version) drops."""
    return compare_services((old,), (new,), table)


def compare_services(old: Sequence[str], new: Sequence[str], table: OptionTable) -> UnitComparison:
    """`compare_units` for a unit and its drop-ins on each side, merged as systemd does."""
    old_unit, new_unit = merge_units(old), merge_units(new)
    dropped: list[DroppedSetting] = []
    replaced: list[tuple[str, str]] = []
    retired: list[tuple[str, str]] = []
    _compare_command(old_unit, new_unit, table, dropped, replaced, retired)
    _compare_environment(old_unit, new_unit, table.version, dropped, retired)
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
    old_words = launch_options(old_argv)
    new_words = launch_options(new_argv) if new_argv is not None else None
    if old_words is None or new_words is None:
        dropped.append(
            DroppedSetting(
                f"{EXEC_START}={' '.join(old_argv)}",
                "not an `-m sglang.launch_server` line, so its options were not compared",
            )
        )
        return
    subject = "the container's current unit"
    rendered = parse_command_line(table, new_words, subject=subject, complete=False)
    derived = {spec: why for spellings, why in DERIVED if (spec := table.find(*spellings))}
    owners = {spec: owner for spellings, owner in OWNED if (spec := table.find(*spellings))}
    old_line = parse_command_line(table, old_words, subject=subject, complete=False)
    for option in old_line.options:
        spec = _resolve(option, table)
        # Shown in findings and SUMMARY.md: a secret value (`--api-key V`) never is.
        text = " ".join(redact_argv(tuple(option.tokens)))
        if spec is not None and rendered.of(spec) is not None:
            if option.written not in spec.accepted:
                replaced.append((option.written, spec.canonical))
        elif spec is not None and spec in derived:
            retired.append((text, derived[spec]))
        elif spec is not None and spec in owners:
            dropped.append(DroppedSetting(text, f"serving.{owners[spec]}"))
        elif spec is not None and option.written not in spec.accepted:
            # A deprecation's own advice may hold a value too (`--attn-dp-size <dp-size>`).
            old_spec = option.spec
            advice = old_spec.deprecated_alias_of if old_spec and old_spec.deprecated else None
            dropped.append(DroppedSetting(text, f"{EXTRA_ARGS} as `{advice or spec.canonical}`"))
        elif spec is not None:
            dropped.append(DroppedSetting(text, EXTRA_ARGS))
        elif option.spec is not None:
            # Deprecated with no replacement the table can name: say so rather than
            # calling it unknown, since the version still parses it.
            instead = option.spec.deprecated_alias_of
            carry = f"deprecated in sglang {table.version}" + (f": {instead}" if instead else "")
            dropped.append(DroppedSetting(text, carry))
        else:
            dropped.append(DroppedSetting(text, f"not an option of sglang {table.version}"))


def _resolve(option: ParsedOption, table: OptionTable) -> OptionSpec | None:
    """The action of `table` an old option means: by prefix, alias, deprecation or rename."""
    spec = option.spec
    if spec is not None and spec.deprecated:
        instead = (spec.deprecated_alias_of or "").split(" ")[0].split("=")[0]
        return table.find(instead) if instead.startswith("--") else None
    if spec is not None:
        return spec
    for spellings in RENAMED:
        if option.written in spellings:
            return table.find(*spellings)
    # An older table may list the same action under more names (an alias the version
    # dropped); any of them the new table knows is the option's new name.
    for version in shipped_versions():
        other = load_table(version).option_strings.get(option.written)
        if other is not None and (found := table.find(*other.options)) is not None:
            return found
    return None


def _compare_environment(
    old: UnitFile,
    new: UnitFile,
    version: str,
    dropped: list[DroppedSetting],
    retired: list[tuple[str, str]],
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
        why = retired_variable(name, version)
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


def drops_message(comparison: UnitComparison, path: str) -> str | None:
    """The `serving-drops-settings` warning text, or None when nothing is dropped."""
    if not comparison.dropped:
        return None
    by_carry: dict[str, list[str]] = {}
    for item in comparison.dropped:
        by_carry.setdefault(item.carry, []).append(f"`{item.text}`")
    listed = "; ".join(f"{', '.join(texts)} ({carry})" for carry, texts in by_carry.items())
    return (
        f"the new unit drops what the container's current /{path} sets: {listed}. "
        "Fix: add them to serving.extra_args / serving.environment (or the field named) "
        "in the spec, or drop them knowingly"
    )
