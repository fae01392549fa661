"""A checker for an engine's command line, against the option table of one release.

The checker is stricter than argparse on purpose. argparse expands any unambiguous prefix
(`--tp` -> `--tp-size`) and accepts every alias; a unit file that relies on either breaks
silently when a later release adds a second option with the same prefix (SGLang 0.5.20
made `--cuda-graph-max-bs` ambiguous) or drops the alias. Only canonical option strings
pass: the first long option of each entry (plus the other position of a boolean switch).

Both engines parse with argparse, so the grouping of words into options and the problems
of each are one algorithm; what differs is the engine's `ParserRules`: its name in codes
and messages, its converters, its positionals, and what its parser adds to argparse.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import SpecError
from pvegpu.values import value_class

# argparse only takes `-5` or `-.5` as a value when no option looks like a negative
# number (true for both engines); everything else starting with `-` is an option string.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class Option(Protocol):
    """One argparse action, as an engine's option table records it."""

    @property
    def options(self) -> tuple[str, ...]: ...
    @property
    def dest(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def type(self) -> str | None: ...
    @property
    def nargs(self) -> int | str | None: ...
    @property
    def choices(self) -> tuple[str, ...] | None: ...
    @property
    def required(self) -> bool: ...
    @property
    def canonical(self) -> str: ...
    @property
    def accepted(self) -> tuple[str, ...]: ...
    @property
    def deprecated(self) -> bool: ...
    @property
    def takes_values(self) -> bool: ...


S = TypeVar("S", bound=Option)
S_co = TypeVar("S_co", bound=Option, covariant=True)


class Table(Protocol[S_co]):
    """An engine's option table of one release."""

    @property
    def version(self) -> str: ...
    @property
    def allow_abbrev(self) -> bool: ...
    @property
    def args(self) -> tuple[S_co, ...]: ...
    @property
    def option_strings(self) -> Mapping[str, S_co]: ...
    @property
    def positionals(self) -> tuple[str, ...]:
        """The positionals a whole line starts with, by name."""
        ...

    def find(self, *spellings: str) -> S_co | None:
        """The action any of `spellings` names exactly (not deprecated), if any."""
        ...


@value_class
@attrs.frozen(eq=False, repr=False)
class ParserRules(Generic[S]):
    """What an engine's parser does its own way, and how its problems are worded."""

    name: str
    """The engine in codes and messages: `sglang` (`sglang-option-unknown`, `sglang 0.5.9`)."""
    title: str
    """Its own spelling in prose: `SGLang refuses to start`."""
    help_action: str
    """The action name of `--help` in the table."""
    convert: Callable[[str | None, str], Any]
    """What argparse's `type=` would make of a value; ValueError when it refuses it."""
    deprecated_fix: Callable[[S, str, Table[S]], str]
    """The fix of a deprecated option as written, in a release's table."""
    unknown_fix: Callable[[str, Table[S], bool], str]
    """The fix of an option the release lacks (`in_extra_args`: the spec's extra_args has
    it, not a line pvegpu wrote). Worded only when reported: it reads every shipped table."""
    no_positional: Callable[[Table[S]], str] = lambda table: ""
    """Why a stray word cannot be a positional, in the problem that reports it."""
    positional_missing: Diagnostic | None = None
    """The problem (subject filled in) of a whole line without its positionals."""
    underscores: bool = False
    """The parser reads `--max_model_len` as `--max-model-len` (vLLM's)."""
    glued_short_values: bool = False
    """A short option's value may follow it in one word (`-O3`), as argparse allows."""
    repeatable: frozenset[str] = frozenset()
    """Actions that collect every occurrence, so a repeat is no problem."""


@value_class
@attrs.frozen(eq=False, repr=False)
class ParsedOption(Generic[S]):
    """One option of a command line with the values it took, as argparse would group them."""

    written: str
    """The option string as written (`--tp`), before any `=value`."""
    tokens: tuple[str, ...]
    """Exactly the command-line words of this option and its values."""
    values: tuple[str, ...]
    spec: S | None
    """The action argparse would run (prefixes resolved); None when there is none."""


@value_class
@attrs.frozen(eq=False, repr=False)
class _UnknownOption(Generic[S]):
    """`<engine>-option-unknown`, worded only when reported.

    Its fix reads the tables of every shipped release and searches option names; most
    parsed lines (an old unit read for its options) never report their problems, so it
    waits.
    """

    written: str
    subject: str
    table: Table[S]
    rules: ParserRules[S]

    def problem(self) -> Diagnostic:
        name = self.rules.name
        return Diagnostic.error(
            f"{name}-option-unknown",
            self.subject,
            f"{name} {self.table.version} has no option `{self.written}`",
            self.rules.unknown_fix(self.written, self.table, self.subject.endswith(".extra_args")),
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class ParsedCommandLine(Generic[S]):
    positionals: tuple[str, ...]
    options: tuple[ParsedOption[S], ...]
    issues: tuple[Diagnostic | _UnknownOption[S], ...]
    """What is wrong with the line, in order; `problems` words them."""

    @property
    def problems(self) -> tuple[Diagnostic, ...]:
        return tuple(i if isinstance(i, Diagnostic) else i.problem() for i in self.issues)

    def of(self, spec: S | None) -> ParsedOption[S] | None:
        """The option of the line that runs the action `spec`, if any."""
        if spec is None:
            return None
        return next((o for o in self.options if o.spec == spec), None)


def releases_taking(
    option: str, shipped: Sequence[str], load_table: Callable[[str], Table[S]]
) -> tuple[str, ...]:
    """The `shipped` releases whose parser takes `option` as written (not as a deprecated
    or alias spelling, which the checker would refuse there too)."""
    having = []
    for version in shipped:
        spec = load_table(version).option_strings.get(option)
        if spec is not None and not spec.deprecated and option in spec.accepted:
            having.append(version)
    return tuple(having)


def close_names(written: str, table: Table[S]) -> list[str]:
    """Up to three names of `table`'s release (not deprecated) close to `written`."""
    import difflib  # only when a problem is reported: not every render pays its import

    canon = sorted({s.canonical for s in table.args if not s.deprecated})
    return difflib.get_close_matches(written, canon, n=3)


def _option_like(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NEGATIVE_NUMBER.match(token)


def _nargs_text(nargs: int | str | None) -> str:
    words = {None: "one value", 0: "no value", "?": "at most one value"}
    words |= {"+": "one or more values", "*": "any number of values"}
    return words.get(nargs, f"{nargs} values")


def _resolve(
    table: Table[S], written: str, where: str, rules: ParserRules[S]
) -> tuple[S | None, list[Diagnostic | _UnknownOption[S]]]:
    """The action for an option string, and what is wrong with how it is written."""
    exact = table.option_strings.get(written)
    engine = rules.name
    name = f"{engine} {table.version}"
    if exact is None and rules.underscores and written.startswith("--") and "_" in written:
        dashed = table.option_strings.get(written.replace("_", "-"))
        if dashed is not None:
            return dashed, [
                Diagnostic.error(
                    f"{engine}-option-alias",
                    where,
                    f"`{written}` is read as `{dashed.canonical}` by {name} only because it "
                    "turns `_` into `-`; unit files use the canonical name",
                    f"write `{dashed.canonical}`",
                )
            ]
    if exact is not None:
        if exact.action == rules.help_action:
            return exact, [
                Diagnostic.error(
                    f"{engine}-option-help",
                    where,
                    f"`{written}` makes {name} print its help and exit",
                    f"remove `{written}`",
                )
            ]
        if exact.deprecated:
            return exact, [
                Diagnostic.error(
                    f"{engine}-option-deprecated",
                    where,
                    f"`{written}` is deprecated in {name}",
                    rules.deprecated_fix(exact, written, table),
                )
            ]
        if written not in exact.accepted:
            return exact, [
                Diagnostic.error(
                    f"{engine}-option-alias",
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
                Diagnostic.error(
                    f"{engine}-option-abbreviated",
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
                Diagnostic.error(
                    f"{engine}-option-ambiguous",
                    where,
                    f"`{written}` is not an option of {name} and is an ambiguous prefix "
                    f"of {names}: {rules.title} refuses to start",
                    f"write one of {names}",
                )
            ]
    return None, [_UnknownOption(written, where, table, rules)]


def _check_values(
    table: Table[S], option: ParsedOption[S], where: str, rules: ParserRules[S]
) -> list[Diagnostic]:
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
            Diagnostic.error(
                f"{rules.name}-value-count",
                where,
                f"`{option.written}` takes {_nargs_text(nargs)}, got {count}: "
                + " ".join(option.tokens),
                f"give `{option.written}` {_nargs_text(nargs)} in serving.extra_args",
            )
        ]
    problems: list[Diagnostic] = []
    for value in option.values:
        try:
            converted = rules.convert(spec.type, value)
        except ValueError as err:
            problems.append(
                Diagnostic.error(
                    f"{rules.name}-value-type",
                    where,
                    f"`{option.written} {value}`: {spec.type} expected ({err})",
                    f"write a {spec.type} value after `{option.written}` in serving.extra_args",
                )
            )
            continue
        if spec.choices is not None and str(converted) not in spec.choices:
            problems.append(
                Diagnostic.error(
                    f"{rules.name}-value-choice",
                    where,
                    f"`{option.written} {value}` is not a choice of {rules.name} {table.version}",
                    "one of " + ", ".join(spec.choices),
                )
            )
    return problems


def parse_command_line(
    table: Table[S],
    args: Sequence[str],
    rules: ParserRules[S],
    *,
    subject: str,
    complete: bool = True,
) -> ParsedCommandLine[S]:
    """Group `args` into options as argparse would, and list everything wrong with them.

    `complete`: `args` is the whole command line (its positionals first, required options
    present); otherwise a fragment such as a spec's extra_args, which holds no positional.
    """
    options: list[ParsedOption[S]] = []
    positionals: list[str] = []
    problems: list[Diagnostic | _UnknownOption[S]] = []
    limit = len(table.positionals) if complete else 0
    i = 0
    while i < len(args):
        token = args[i]
        if not _option_like(token):
            if len(positionals) < limit and not options:
                positionals.append(token)
            else:
                problems.append(
                    Diagnostic.error(
                        f"{rules.name}-argument-unexpected",
                        subject,
                        f"`{token}` is not an option and no option before it takes it "
                        f"({rules.no_positional(table)})",
                        "put the option it belongs to before it in serving.extra_args, "
                        "or remove it",
                    )
                )
            i += 1
            continue
        # `--opt=value` is one word; short options (`-h`) never take `=`.
        written, eq, explicit = token.partition("=") if token.startswith("--") else (token, "", "")
        short = None
        if rules.glued_short_values and not token.startswith("--"):
            short = table.option_strings.get(token[:2])
        if token not in table.option_strings and short is not None and short.takes_values:
            # argparse reads `-O3` as `-O 3`; a unit file spells the option out.
            written, eq, explicit = token[:2], "=", token[2:]
        spec, found = _resolve(table, written, subject, rules)
        problems.extend(found)
        i += 1
        values: list[str] = []
        if eq:
            values.append(explicit)
        elif spec is None or spec.takes_values:
            # An unknown option takes what follows as its values rather than reporting
            # each of them again as a stray argument.
            most = None if spec is None else (1 if spec.nargs in (None, "?") else None)
            if spec is not None and isinstance(spec.nargs, int):
                most = spec.nargs
            while i < len(args) and not _option_like(args[i]):
                if most is not None and len(values) >= most:
                    break
                values.append(args[i])
                i += 1
        option = ParsedOption(written, (token,) if eq else (token, *values), tuple(values), spec)
        problems.extend(_check_values(table, option, subject, rules))
        options.append(option)
    seen: dict[str, ParsedOption[S]] = {}
    for option in options:
        if option.spec is None:
            continue
        earlier = seen.get(option.spec.dest)
        if earlier is not None and option.spec.action not in rules.repeatable:
            problems.append(
                Diagnostic.error(
                    f"{rules.name}-option-repeated",
                    subject,
                    f"`{option.written}` repeats `{earlier.written}`; argparse silently "
                    "keeps the last one",
                    "keep one of them",
                )
            )
        seen[option.spec.dest] = option
    if complete:
        if not positionals and rules.positional_missing is not None:
            problems.append(attrs.evolve(rules.positional_missing, subject=subject))
        for spec in table.args:
            if spec.required and spec.dest not in seen:
                problems.append(
                    Diagnostic.error(
                        f"{rules.name}-option-required",
                        subject,
                        f"{rules.name} {table.version} requires `{spec.canonical}`",
                        f"add `{spec.canonical} <value>` to serving.extra_args",
                    )
                )
    return ParsedCommandLine(tuple(positionals), tuple(options), tuple(problems))


def check_command_line(
    table: Table[S],
    args: Sequence[str],
    rules: ParserRules[S],
    *,
    subject: str,
    complete: bool = True,
) -> None:
    """Raise SpecError listing every problem of the command line, if any: the line comes
    from the spec (its extra_args and the values pvegpu writes from it), so it is the spec
    that has to change, as with any other spec error (exit 4)."""
    problems = parse_command_line(table, args, rules, subject=subject, complete=complete).problems
    if problems:
        raise SpecError(problems)
