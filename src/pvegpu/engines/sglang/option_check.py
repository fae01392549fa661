"""SGLang's `launch_server` command lines, checked against the option table of one version.

The checker is every engine's (`engines.common.option_check`): stricter than argparse on
purpose, so that a unit file relying on a prefix (`--tp` -> `--tp-size`) or an alias does
not break silently when a later version adds an option with the same prefix (0.5.20 made
`--cuda-graph-max-bs` ambiguous) or drops the alias. What is SGLang's is here: its
converters, the advice of its deprecations, the fix naming the releases that have an
option, and that `launch_server` takes no positional.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pvegpu.engines.common import option_check
from pvegpu.engines.common.option_check import ParserRules, Table, close_names
from pvegpu.engines.sglang import versions
from pvegpu.engines.sglang.options import OptionSpec, OptionTable, load_table, shipped_versions
from pvegpu.jsontext import load_json

ParsedOption = option_check.ParsedOption[OptionSpec]
ParsedCommandLine = option_check.ParsedCommandLine[OptionSpec]


def releases_taking(option: str) -> tuple[str, ...]:
    """The shipped releases whose launch_server takes `option` as written (not as a
    deprecated or alias spelling, which the checker would refuse there too)."""
    return option_check.releases_taking(option, shipped_versions(), load_table)


def releases_text(versions: Sequence[str]) -> str:
    """`0.5.1 to 0.5.4, 0.5.9`: runs of consecutive shipped releases as ranges."""
    index = {v: i for i, v in enumerate(shipped_versions())}
    runs: list[list[str]] = []
    for version in versions:
        if runs and index[version] == index[runs[-1][-1]] + 1:
            runs[-1].append(version)
        else:
            runs.append([version])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]} to {run[-1]}" for run in runs)


def unknown_option_fix(
    written: str, table: Table[OptionSpec], *, in_extra_args: bool = True
) -> str:
    """What to do about an option `table`'s release lacks: the shipped releases that take
    it, else that none does and the closest names this release (failing that, any shipped
    one) knows. `in_extra_args`: the spec's extra_args has it, not a line pvegpu wrote."""
    import difflib  # only when a problem is reported: not every render pays its import

    remove = "remove it from extra_args" if in_extra_args else "remove what asks for it"
    close = close_names(written, table)
    meant = ("did you mean " + " or ".join(f"`{c}`" for c in close) + "?") if close else ""
    having = releases_taking(written)
    if having:
        # An option of other releases is often renamed in this one: the close names too.
        return (
            f"`{written}` is an option of sglang {releases_text(having)} only: run one of "
            f"those releases (serving.version), or {remove}" + (f" ({meant})" if close else "")
        )
    shipped = shipped_versions()
    none = f"no shipped release of SGLang ({shipped[0]} to {shipped[-1]}) has `{written}`"
    if close:
        return f"{none}: {meant}"
    # Nothing close in this release: a close name of another release, with where it is.
    known = sorted({s.canonical for v in shipped for s in load_table(v).args if not s.deprecated})
    close = difflib.get_close_matches(written, known, n=3)
    nearest = ", ".join(f"`{c}` ({releases_text(releases_taking(c))})" for c in close)
    return f"{none}: {remove}" + (f"; close names in other releases: {nearest}" if close else "")


def _convert(type_name: str | None, value: str) -> Any:
    """What argparse's `type=` would make of the value; ValueError when it refuses it."""
    if type_name == "int":
        return int(value)
    if type_name == "float":
        return float(value)
    if type_name in ("loads", "json_list_type"):
        try:
            loaded = load_json(value)
        except ValueError as err:
            raise ValueError(f"not JSON: {err}") from None
        if type_name == "json_list_type" and not isinstance(loaded, list):
            raise ValueError("expected a JSON list")
        return loaded
    # str, nullable_str and SGLang's own converters (human_readable_int, ...) accept text
    # we cannot judge without importing SGLang; they stay unchecked beyond choices.
    return value


def _deprecated_fix(spec: OptionSpec, written: str, table: Table[OptionSpec]) -> str:
    instead = spec.deprecated_alias_of
    fix = f"use {instead}" if instead else f"remove `{written}`"
    # When the release says the flag goes (engines/sglang/versions.py), if it says.
    gone = versions.RULES.deprecation(written)
    return fix + (f" (SGLang removes `{written}` {gone.removal})" if gone else "")


RULES: ParserRules[OptionSpec] = ParserRules(
    name="sglang",
    title="SGLang",
    help_action="_HelpAction",
    convert=_convert,
    deprecated_fix=_deprecated_fix,
    unknown_fix=lambda written, table, in_extra_args: unknown_option_fix(
        written, table, in_extra_args=in_extra_args
    ),
    no_positional=lambda table: f"sglang {table.version} has no positional arguments",
)


def parse_command_line(
    table: OptionTable, args: Sequence[str], *, subject: str, complete: bool = True
) -> ParsedCommandLine:
    """Group `args` into options as argparse would, and list everything wrong with them.

    `complete`: `args` is the whole command line (required options must be present);
    otherwise a fragment such as a spec's extra_args.
    """
    return option_check.parse_command_line(table, args, RULES, subject=subject, complete=complete)


def check_command_line(
    table: OptionTable, args: Sequence[str], *, subject: str, complete: bool = True
) -> None:
    """Raise SpecError listing every problem of the command line, if any (exit 4)."""
    option_check.check_command_line(table, args, RULES, subject=subject, complete=complete)
