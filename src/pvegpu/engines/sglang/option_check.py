"""A checker for `launch_server` command lines, against the option table of one version.

The checker is stricter than argparse on purpose. argparse expands any unambiguous prefix
(`--tp` -> `--tp-size`) and accepts every alias; a unit file that relies on either breaks
silently when a later version adds a second option with the same prefix (0.5.20 made
`--cuda-graph-max-bs` ambiguous) or drops the alias. Only canonical option strings pass:
the first long option of each entry (plus the `--no-` twin of a BooleanOptionalAction).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs

from pvegpu.engines.sglang.options import OptionSpec, OptionTable, load_table, shipped_versions
from pvegpu.errors import Problem, SpecError
from pvegpu.jsontext import load_json

# argparse only takes `-5` or `-.5` as a value when no option looks like a negative
# number (true for SGLang); everything else starting with `-` is an option string.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@attrs.frozen
class ParsedOption:
    """One option of a command line with the values it took, as argparse would group them."""

    written: str
    """The option string as written (`--tp`), before any `=value`."""
    tokens: tuple[str, ...]
    """Exactly the command-line words of this option and its values."""
    values: tuple[str, ...]
    spec: OptionSpec | None
    """The action argparse would run (prefixes resolved); None when there is none."""


@attrs.frozen
class _UnknownOption:
    """`sglang-option-unknown`, worded only when reported.

    Its fix reads the tables of every shipped release and searches option names; most
    parsed lines (an old unit read for its options) never report their problems, so it
    waits.
    """

    written: str
    subject: str
    table: OptionTable

    def problem(self) -> Problem:
        return Problem(
            "sglang-option-unknown",
            self.subject,
            f"sglang {self.table.version} has no option `{self.written}`",
            unknown_option_fix(
                self.written, self.table, in_extra_args=self.subject.endswith(".extra_args")
            ),
        )


def releases_taking(option: str) -> tuple[str, ...]:
    """The shipped releases whose launch_server takes `option` as written (not as a
    deprecated or alias spelling, which the checker would refuse there too)."""
    having = []
    for version in shipped_versions():
        spec = load_table(version).option_strings.get(option)
        if spec is not None and not spec.deprecated and option in spec.accepted:
            having.append(version)
    return tuple(having)


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


def unknown_option_fix(written: str, table: OptionTable, *, in_extra_args: bool = True) -> str:
    """What to do about an option `table`'s release lacks: the shipped releases that take
    it, else that none does and the closest names this release (failing that, any shipped
    one) knows. `in_extra_args`: the spec's extra_args has it, not a line pvegpu wrote."""
    import difflib  # only when a problem is reported: not every render pays its import

    remove = "remove it from extra_args" if in_extra_args else "remove what asks for it"
    canon = sorted({s.canonical for s in table.args if not s.deprecated})
    close = difflib.get_close_matches(written, canon, n=3)
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


@attrs.frozen
class ParsedCommandLine:
    options: tuple[ParsedOption, ...]
    issues: tuple[Problem | _UnknownOption, ...]
    """What is wrong with the line, in order; `problems` words them."""

    @property
    def problems(self) -> tuple[Problem, ...]:
        return tuple(i if isinstance(i, Problem) else i.problem() for i in self.issues)

    def of(self, spec: OptionSpec | None) -> ParsedOption | None:
        """The option of the line that runs the action `spec`, if any."""
        if spec is None:
            return None
        return next((o for o in self.options if o.spec == spec), None)


def _option_like(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NEGATIVE_NUMBER.match(token)


def _nargs_text(nargs: int | str | None) -> str:
    words = {None: "one value", 0: "no value", "?": "at most one value"}
    words |= {"+": "one or more values", "*": "any number of values"}
    return words.get(nargs, f"{nargs} values")


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


def _resolve(
    table: OptionTable, written: str, where: str
) -> tuple[OptionSpec | None, list[Problem | _UnknownOption]]:
    """The action for an option string, and what is wrong with how it is written."""
    exact = table.option_strings.get(written)
    name = f"sglang {table.version}"
    if exact is not None:
        if exact.action == "_HelpAction":
            return exact, [
                Problem(
                    "sglang-option-help",
                    where,
                    f"`{written}` makes {name} print its help and exit",
                    f"remove `{written}`",
                )
            ]
        if exact.deprecated:
            instead = exact.deprecated_alias_of
            return exact, [
                Problem(
                    "sglang-option-deprecated",
                    where,
                    f"`{written}` is deprecated in {name}",
                    f"use {instead}" if instead else f"remove `{written}`",
                )
            ]
        if written not in exact.accepted:
            return exact, [
                Problem(
                    "sglang-option-alias",
                    where,
                    f"`{written}` is an alias in {name}; unit files use the canonical name",
                    f"write `{exact.canonical}`",
                )
            ]
        return exact, []
    if written.startswith("--"):
        prefixed = sorted({o for o in table.option_strings if o.startswith(written)})
        specs = {id(table.option_strings[o]): table.option_strings[o] for o in prefixed}
        if len(specs) == 1:
            spec = next(iter(specs.values()))
            how = "expands" if table.allow_abbrev else "would expand"
            return spec, [
                Problem(
                    "sglang-option-abbreviated",
                    where,
                    f"`{written}` is not an option of {name}; argparse {how} it only as "
                    f"a prefix of `{spec.canonical}`, which breaks when a later option "
                    "shares the prefix",
                    f"write `{spec.canonical}`",
                )
            ]
        if len(specs) > 1:
            names = ", ".join(f"`{s.canonical}`" for s in specs.values())
            return None, [
                Problem(
                    "sglang-option-ambiguous",
                    where,
                    f"`{written}` is not an option of {name} and is an ambiguous prefix "
                    f"of {names}: SGLang refuses to start",
                    f"write one of {names}",
                )
            ]
    return None, [_UnknownOption(written, where, table)]


def _check_values(table: OptionTable, option: ParsedOption, where: str) -> list[Problem]:
    spec = option.spec
    if spec is None:
        return []
    count, nargs = len(option.values), spec.nargs
    wrong = (
        (nargs is None and count != 1)
        or (nargs == "?" and count > 1)
        or (nargs == "+" and count == 0)
        or (isinstance(nargs, int) and count != nargs)
    )
    if wrong:
        return [
            Problem(
                "sglang-value-count",
                where,
                f"`{option.written}` takes {_nargs_text(nargs)}, got {count}: "
                + " ".join(option.tokens),
                f"give `{option.written}` {_nargs_text(nargs)} in serving.extra_args",
            )
        ]
    problems: list[Problem] = []
    for value in option.values:
        try:
            converted = _convert(spec.type, value)
        except ValueError as err:
            problems.append(
                Problem(
                    "sglang-value-type",
                    where,
                    f"`{option.written} {value}`: {spec.type} expected ({err})",
                    f"write a {spec.type} value after `{option.written}` in serving.extra_args",
                )
            )
            continue
        if spec.choices is not None and str(converted) not in spec.choices:
            problems.append(
                Problem(
                    "sglang-value-choice",
                    where,
                    f"`{option.written} {value}` is not a choice of sglang {table.version}",
                    "one of " + ", ".join(spec.choices),
                )
            )
    return problems


def parse_command_line(
    table: OptionTable, args: Sequence[str], *, subject: str, complete: bool = True
) -> ParsedCommandLine:
    """Group `args` into options as argparse would, and list everything wrong with them.

    `complete`: `args` is the whole command line (required options must be present);
    otherwise a fragment such as a spec's extra_args.
    """
    options: list[ParsedOption] = []
    problems: list[Problem | _UnknownOption] = []
    i = 0
    while i < len(args):
        token = args[i]
        if not _option_like(token):
            problems.append(
                Problem(
                    "sglang-argument-unexpected",
                    subject,
                    f"`{token}` is not an option and no option before it takes it "
                    f"(sglang {table.version} has no positional arguments)",
                    "put the option it belongs to before it in serving.extra_args, or remove it",
                )
            )
            i += 1
            continue
        # `--opt=value` is one word; short options (`-h`) never take `=`.
        written, eq, explicit = token.partition("=") if token.startswith("--") else (token, "", "")
        spec, resolve_problems = _resolve(table, written, subject)
        problems.extend(resolve_problems)
        i += 1
        values: list[str] = []
        if eq:
            values.append(explicit)
        elif spec is not None and spec.takes_values:
            limit = 1 if spec.nargs in (None, "?") else None
            if isinstance(spec.nargs, int):
                limit = spec.nargs
            while i < len(args) and not _option_like(args[i]):
                if limit is not None and len(values) >= limit:
                    break
                values.append(args[i])
                i += 1
        elif spec is None:
            # Unknown option: take what follows as its values rather than reporting
            # each of them again as a stray argument.
            while i < len(args) and not _option_like(args[i]):
                values.append(args[i])
                i += 1
        consumed = (token,) if eq else (token, *values)
        option = ParsedOption(written, consumed, tuple(values), spec)
        problems.extend(_check_values(table, option, subject))
        options.append(option)
    seen: dict[str, ParsedOption] = {}
    for option in options:
        if option.spec is None:
            continue
        earlier = seen.get(option.spec.dest)
        if earlier is not None:
            problems.append(
                Problem(
                    "sglang-option-repeated",
                    subject,
                    f"`{option.written}` repeats `{earlier.written}`; argparse silently "
                    "keeps the last one",
                    "keep one of them",
                )
            )
        seen[option.spec.dest] = option
    if complete:
        for spec in table.args:
            if spec.required and spec.dest not in seen:
                problems.append(
                    Problem(
                        "sglang-option-required",
                        subject,
                        f"sglang {table.version} requires `{spec.canonical}`",
                        f"add `{spec.canonical} <value>` to serving.extra_args",
                    )
                )
    return ParsedCommandLine(tuple(options), tuple(problems))


def check_command_line(
    table: OptionTable, args: Sequence[str], *, subject: str, complete: bool = True
) -> None:
    """Raise SpecError listing every problem of the command line, if any: the line comes
    from the spec (its extra_args and the values pvegpu writes from it), so it is the spec
    that has to change, as with any other spec error (exit 4)."""
    problems = parse_command_line(table, args, subject=subject, complete=complete).problems
    if problems:
        raise SpecError(problems)
