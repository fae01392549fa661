"""SGLang's own option tables, per version, and a checker for `launch_server` command lines.

Each shipped table (`pvegpu/data/sglang/sglang-<version>.json`) is every option of the
real `launch_server` argument parser of that version, dumped from the installed wheel:
option strings, dest, action, type, nargs, choices, required and deprecation. A command
line pvegpu renders is checked against the table of the version the spec names, offline,
so a flag the version lacks is a render-time error and not a crash-looping unit.

The checker is stricter than argparse on purpose. argparse expands any unambiguous prefix
(`--tp` -> `--tp-size`) and accepts every alias; a unit file that relies on either breaks
silently when a later version adds a second option with the same prefix (0.5.20 made
`--cuda-graph-max-bs` ambiguous) or drops the alias. Only canonical option strings pass:
the first long option of each entry (plus the `--no-` twin of a BooleanOptionalAction).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import attrs

from pvegpu.errors import Problem, RenderError

TABLE_PACKAGE = "pvegpu.data.sglang"
_TABLE_NAME = re.compile(r"^sglang-(?P<version>[0-9][0-9A-Za-z.+-]*)\.json$")
_RELEASE = re.compile(r"^(\d+(?:\.\d+)*)")
# argparse only takes `-5` or `-.5` as a value when no option looks like a negative
# number (true for SGLang); everything else starting with `-` is an option string.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_NARGS_WORDS = ("?", "*", "+")


def version_key(version: str) -> tuple[int, ...]:
    """`0.5.10.post1` -> (0, 5, 10): the release numbers the version matrix compares."""
    match = _RELEASE.match(version)
    if match is None:
        raise ValueError(f"{version!r} is not a version (expected e.g. 0.5.23)")
    return tuple(int(part) for part in match.group(1).split("."))


@attrs.frozen
class OptionSpec:
    """One argparse action of `launch_server`, as the table records it."""

    options: tuple[str, ...]
    dest: str
    action: str
    type: str | None
    """Name of the converter argparse calls (`int`, `float`, `str`, `loads`, ...)."""
    nargs: int | str | None
    choices: tuple[str, ...] | None
    required: bool
    deprecated_alias_of: str | None
    primary: str | None = None
    """A spelling of this action that a newer shipped version made its first name."""

    @property
    def canonical(self) -> str:
        """The name pvegpu writes and the only one it accepts for this action.

        The first long option, unless a newer SGLang made another of this action's
        spellings its first name (0.5.9's `--tensor-parallel-size, --tp-size` became
        `--tp-size, --tensor-parallel-size`): then that one, so a unit file reads the
        same across upgrades.
        """
        if self.primary in self.options:
            return self.primary
        return next((o for o in self.options if o.startswith("--")), self.options[0])

    @property
    def accepted(self) -> tuple[str, ...]:
        """Option strings a rendered line may use for this action."""
        if self.action == "BooleanOptionalAction":
            # `--no-x` is not an alias of `--x`: it is the switch's other position.
            return tuple(o for o in self.options if o.startswith("--"))
        return (self.canonical,)

    @property
    def deprecated(self) -> bool:
        return self.deprecated_alias_of is not None or self.action.startswith("Deprecated")

    @property
    def takes_values(self) -> bool:
        return self.nargs != 0


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
class ParsedCommandLine:
    options: tuple[ParsedOption, ...]
    problems: tuple[Problem, ...]

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
            loaded = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"not JSON: {err}") from None
        if type_name == "json_list_type" and not isinstance(loaded, list):
            raise ValueError("expected a JSON list")
        return loaded
    # str, nullable_str and SGLang's own converters (human_readable_int, ...) accept text
    # we cannot judge without importing SGLang; they stay unchecked beyond choices.
    return value


@attrs.frozen
class OptionTable:
    version: str
    allow_abbrev: bool
    args: tuple[OptionSpec, ...]
    option_strings: dict[str, OptionSpec] = attrs.field(init=False, eq=False, repr=False)
    """Every option string (aliases too) -> its action."""

    def __attrs_post_init__(self) -> None:
        index = {o: spec for spec in self.args for o in spec.options}
        object.__setattr__(self, "option_strings", index)

    @classmethod
    def from_json(cls, text: str, *, source: str) -> OptionTable:
        """Parse one table; any deviation from the format is a `sglang-table-invalid`."""
        try:
            doc = json.loads(text)
            version = doc["sglang_version"]
            allow_abbrev = doc["allow_abbrev"]
            if not isinstance(version, str) or not isinstance(allow_abbrev, bool):
                raise TypeError("sglang_version must be a string, allow_abbrev a boolean")
            args = tuple(_option_spec(entry) for entry in doc["args"])
        except (ValueError, KeyError, TypeError) as err:
            raise RenderError.one(
                "sglang-table-invalid",
                source,
                f"not an SGLang option table: {err}",
                "regenerate it from the installed sglang (docs/serving.md, adding a version)",
            ) from None
        return cls(version=version, allow_abbrev=allow_abbrev, args=args)

    def find(self, *spellings: str) -> OptionSpec | None:
        """The action any of `spellings` names exactly (not deprecated), if the version has it.

        Options are looked up by the spellings SGLang has used, not by dest: dests get
        renamed too (0.5.9's tensor_parallel_size is 0.5.23's tp_size).
        """
        for spelling in spellings:
            spec = self.option_strings.get(spelling)
            if spec is not None and not spec.deprecated:
                return spec
        return None

    def _resolve(self, written: str, where: str) -> tuple[OptionSpec | None, list[Problem]]:
        """The action for an option string, and what is wrong with how it is written."""
        exact = self.option_strings.get(written)
        name = f"sglang {self.version}"
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
            prefixed = sorted({o for o in self.option_strings if o.startswith(written)})
            specs = {id(self.option_strings[o]): self.option_strings[o] for o in prefixed}
            if len(specs) == 1:
                spec = next(iter(specs.values()))
                how = "expands" if self.allow_abbrev else "would expand"
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
        canon = sorted({s.canonical for s in self.args if not s.deprecated})
        close = difflib.get_close_matches(written, canon, n=3)
        return None, [
            Problem(
                "sglang-option-unknown",
                where,
                f"{name} has no option `{written}`",
                ("did you mean " + " or ".join(f"`{c}`" for c in close) + "?")
                if close
                else f"remove it, or pick a version that has it ({', '.join(shipped_versions())})",
            )
        ]

    def _check_values(self, option: ParsedOption, where: str) -> list[Problem]:
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
                    )
                )
                continue
            if spec.choices is not None and str(converted) not in spec.choices:
                problems.append(
                    Problem(
                        "sglang-value-choice",
                        where,
                        f"`{option.written} {value}` is not a choice of sglang {self.version}",
                        "one of " + ", ".join(spec.choices),
                    )
                )
        return problems

    def parse(
        self, args: Sequence[str], *, subject: str, complete: bool = True
    ) -> ParsedCommandLine:
        """Group `args` into options as argparse would, and list everything wrong with them.

        `complete`: `args` is the whole command line (required options must be present);
        otherwise a fragment such as a spec's extra_args.
        """
        options: list[ParsedOption] = []
        problems: list[Problem] = []
        i = 0
        while i < len(args):
            token = args[i]
            if not _option_like(token):
                problems.append(
                    Problem(
                        "sglang-argument-unexpected",
                        subject,
                        f"`{token}` is not an option and no option before it takes it "
                        f"(sglang {self.version} has no positional arguments)",
                    )
                )
                i += 1
                continue
            # `--opt=value` is one word; short options (`-h`) never take `=`.
            written, eq, explicit = (
                token.partition("=") if token.startswith("--") else (token, "", "")
            )
            spec, resolve_problems = self._resolve(written, subject)
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
            problems.extend(self._check_values(option, subject))
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
            for spec in self.args:
                if spec.required and spec.dest not in seen:
                    problems.append(
                        Problem(
                            "sglang-option-required",
                            subject,
                            f"sglang {self.version} requires `{spec.canonical}`",
                        )
                    )
        return ParsedCommandLine(tuple(options), tuple(problems))

    def check(self, args: Sequence[str], *, subject: str, complete: bool = True) -> None:
        """Raise RenderError listing every problem of the command line, if any."""
        problems = self.parse(args, subject=subject, complete=complete).problems
        if problems:
            raise RenderError(problems)


def _option_spec(entry: Any) -> OptionSpec:
    if not isinstance(entry, dict):
        raise TypeError(f"each args entry must be an object, got {entry!r}")
    options = entry["options"]
    if not (isinstance(options, list) and options and all(isinstance(o, str) for o in options)):
        raise TypeError(f"options must be a non-empty list of strings, got {options!r}")
    nargs = entry["nargs"]
    if not (nargs is None or isinstance(nargs, int) or nargs in _NARGS_WORDS):
        raise TypeError(f"{options[0]}: nargs {nargs!r} is not an argparse nargs")
    choices = entry["choices"]
    if choices is not None and not isinstance(choices, list):
        raise TypeError(f"{options[0]}: choices must be a list or null")
    alias = entry["deprecated_alias_of"]
    return OptionSpec(
        options=tuple(options),
        dest=str(entry["dest"]),
        action=str(entry["action"]),
        type=None if entry["type"] is None else str(entry["type"]),
        nargs=nargs,
        choices=None if choices is None else tuple(str(c) for c in choices),
        required=bool(entry["required"]),
        deprecated_alias_of=None if alias is None else str(alias),
    )


@cache
def shipped_versions() -> tuple[str, ...]:
    """Versions with a table in the package, oldest first."""
    names = (entry.name for entry in resources.files(TABLE_PACKAGE).iterdir())
    found = [m.group("version") for m in map(_TABLE_NAME.match, names) if m]
    return tuple(sorted(found, key=lambda v: (version_key(v), v)))


@cache
def load_table(version: str) -> OptionTable:
    """The option table of `version`; RenderError naming the shipped ones if there is none."""
    if version not in shipped_versions():
        raise RenderError.one(
            "sglang-version-unknown",
            f"sglang {version}",
            f"pvegpu has no option table for SGLang {version}, so it cannot check the "
            f"command line; it ships {', '.join(shipped_versions())}",
            f"use one of {', '.join(shipped_versions())}, or add "
            f"src/pvegpu/data/sglang/sglang-{version}.json (docs/serving.md)",
        )
    name = f"sglang-{version}.json"
    text = resources.files(TABLE_PACKAGE).joinpath(name).read_text(encoding="utf-8")
    table = OptionTable.from_json(text, source=f"{TABLE_PACKAGE}/{name}")
    if table.version != version:
        raise RenderError.one(
            "sglang-table-invalid",
            f"{TABLE_PACKAGE}/{name}",
            f"the file is named for {version} but says sglang_version {table.version}",
            "rename the file or regenerate it",
        )
    newest = shipped_versions()[-1]
    if version == newest:
        return table
    names = {spec.canonical for spec in load_table(newest).args}
    args = tuple(
        attrs.evolve(spec, primary=primary)
        if (primary := next((o for o in spec.options if o in names), None)) is not None
        and primary != spec.canonical
        else spec
        for spec in table.args
    )
    return attrs.evolve(table, args=args)
