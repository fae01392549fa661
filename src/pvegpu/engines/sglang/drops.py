"""What the rendered SGLang unit leaves out of the container's current one.

`compare_units(old, new, table)` is pure: two unit texts and the option table of the new
unit's SGLang version. The three lists (kept, replaced or retired, dropped) and the
environment and unit settings are every engine's (`engines.common.drops`); SGLang's own
is its command line: the options after `-m sglang.launch_server`, each resolved by
prefix, alias, deprecation or rename against the new version's table.
"""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.engines.common import drops
from pvegpu.engines.common.deprecations import FlagDeprecation
from pvegpu.engines.common.drops import (
    EXTRA_ARGS,
    Changes,
    DroppedSetting,
    UnitComparison,
    exec_start,
)
from pvegpu.engines.sglang import versions
from pvegpu.engines.sglang.command import DERIVED, OWNED, RENAMED
from pvegpu.engines.sglang.environment import retired_variable
from pvegpu.engines.sglang.option_check import ParsedOption, parse_command_line
from pvegpu.engines.sglang.options import OptionSpec, OptionTable, load_table, shipped_versions
from pvegpu.redact import redact_argv
from pvegpu.serving.unitfile import EXEC_START, UnitFile, merge_units


def launch_options(argv: tuple[str, ...]) -> tuple[str, ...] | None:
    """The words after `-m sglang.launch_server`, or None when argv does not run it."""
    for i, word in enumerate(argv):
        if word == "sglang.launch_server" and i > 0 and argv[i - 1] == "-m":
            return argv[i + 1 :]
    return None


def compare_units(old: str, new: str, table: OptionTable) -> UnitComparison:
    """The settings of unit text `old` that unit text `new` (for `table`'s version) drops."""
    return compare_services((old,), (new,), table)


def compare_services(old: Sequence[str], new: Sequence[str], table: OptionTable) -> UnitComparison:
    """`compare_units` for a unit and its drop-ins on each side, merged as systemd does."""

    def compare_command(
        old: UnitFile,
        new: UnitFile,
        dropped: list[DroppedSetting],
        replaced: Changes,
        retired: Changes,
    ) -> None:
        _compare_command(old, new, table, dropped, replaced, retired)

    return drops.compare_services(
        old, new, compare_command, lambda name: retired_variable(name, table.version)
    )


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


def deprecated_flags(
    old: Sequence[str], table: OptionTable
) -> tuple[tuple[str, FlagDeprecation], ...]:
    """The options of the old unit's (merged) launch_server line that SGLang's release
    table deprecates, as written, with the deprecation (`versions.RULES.deprecations`)."""
    argv = exec_start(merge_units(old))
    words = launch_options(argv) if argv is not None else None
    if words is None:
        return ()
    line = parse_command_line(table, words, subject="", complete=False)
    found = ((o, versions.RULES.deprecation(o.written)) for o in line.options)
    return tuple((" ".join(redact_argv(o.tokens)), gone) for o, gone in found if gone)


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
