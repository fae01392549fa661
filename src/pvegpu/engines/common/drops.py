"""What the rendered unit leaves out of the container's current one: the settings it drops.

The old unit is what someone tuned by hand (a reasoning parser, CUDA paths, a file
limit); the new one is rendered from the spec, so whatever the spec does not say silently
disappears. Each old setting ends up in one of three lists:

- kept: the new unit sets it too (its value may change: `--tp 8` -> `--tp-size 4`);
- replaced or retired: pvegpu knows why it goes (a renamed option is written by its new
  name, a variable the release removed, an option pvegpu decides from the facts);
- dropped: nothing explains it; the `serving-drops-settings` warning names it and where
  in the spec it would go.

The environment and the other unit settings are compared the same way for every engine,
here; the command line option by option is the engine's own (its launcher, its flags,
its release's table), handed in as a `CommandComparison`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from pvegpu.redact import MARK, is_secret_name, redact_line
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
from pvegpu.values import value_class

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


@value_class
@attrs.frozen(eq=False, repr=False)
class DroppedSetting:
    """One setting of the old unit the new one lacks, and where the spec would carry it."""

    text: str
    """As the old unit says it: `--reasoning-parser qwen3`, `NCCL_DEBUG=WARN`, `User=root`."""
    carry: str
    """The spec field that would bring it back, or why it cannot be."""


@value_class
@attrs.frozen(eq=False, repr=False)
class UnitComparison:
    dropped: tuple[DroppedSetting, ...]
    replaced: tuple[tuple[str, str], ...]
    """(old spelling, new spelling) of options both units set: (`--tp`, `--tp-size`)."""
    retired: tuple[tuple[str, str], ...]
    """(old setting, why) of settings pvegpu leaves out on purpose."""


Changes = list[tuple[str, str]]
CommandComparison = Callable[[UnitFile, UnitFile, list[DroppedSetting], Changes, Changes], None]
"""An engine's comparison of the two units' command lines: it appends to the dropped,
replaced and retired lists it is handed."""


def compare_services(
    old: Sequence[str],
    new: Sequence[str],
    compare_command: CommandComparison,
    retired_variable: Callable[[str], str | None],
) -> UnitComparison:
    """The settings of the old unit (and its drop-ins) that the new one (with the same
    drop-ins as the bundle leaves them) drops, merged as systemd does.

    `retired_variable`: why the new release no longer reads an environment variable, if
    it is one the engine retired.
    """
    old_unit, new_unit = merge_units(old), merge_units(new)
    dropped: list[DroppedSetting] = []
    replaced: Changes = []
    retired: Changes = []
    compare_command(old_unit, new_unit, dropped, replaced, retired)
    _compare_environment(old_unit, new_unit, retired_variable, dropped, retired)
    _compare_settings(old_unit, new_unit, dropped)
    return UnitComparison(tuple(dropped), tuple(replaced), tuple(retired))


def exec_start(unit: UnitFile) -> tuple[str, ...] | None:
    """The words of the unit's ExecStart (the last one, as systemd runs), None if unset."""
    values = unit.values(SERVICE, EXEC_START)
    return exec_words(values[-1]) if values else None


def _compare_environment(
    old: UnitFile,
    new: UnitFile,
    retired_variable: Callable[[str], str | None],
    dropped: list[DroppedSetting],
    retired: Changes,
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
