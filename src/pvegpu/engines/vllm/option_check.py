"""A checker for `vllm serve` command lines, against the option table of one release.

Stricter than vLLM's parser on purpose, as SGLang's checker is: argparse expands any
unambiguous prefix and accepts every alias, and vLLM's `FlexibleArgumentParser` also
reads `--max_model_len` as `--max-model-len`; a unit that relies on any of those breaks
silently when a later release adds an option with the same prefix or drops the alias.
Only canonical option strings pass (plus the other position of a boolean switch). The
line starts with the model, `vllm serve`'s one positional.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs

from pvegpu.engines.vllm.options import OptionSpec, OptionTable, load_table, shipped_versions
from pvegpu.errors import Problem
from pvegpu.jsontext import load_json

# argparse takes `-5` or `-.5` as a value when no option looks like a negative number.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_HUMAN_INT = re.compile(r"^-?\d+$|^\d+(\.\d+)?[kKmMgGtT]$")
_JSON_TYPES = frozenset({"loads", "parse_dataclass", "union_dict_and_str"})


@attrs.frozen
class ParsedOption:
    """One option of a command line with the values it took, as argparse would group them."""

    written: str
    tokens: tuple[str, ...]
    """Exactly the command-line words of this option and its values."""
    values: tuple[str, ...]
    spec: OptionSpec | None
    """The action argparse would run (prefixes and underscores resolved); None if none."""


@attrs.frozen
class ParsedCommandLine:
    positionals: tuple[str, ...]
    options: tuple[ParsedOption, ...]
    problems: tuple[Problem, ...]

    def of(self, spec: OptionSpec | None) -> ParsedOption | None:
        """The option of the line that runs the action `spec`, if any."""
        if spec is None:
            return None
        return next((o for o in self.options if o.spec == spec), None)


def releases_taking(option: str) -> tuple[str, ...]:
    """The shipped releases whose `vllm serve` takes `option` as written."""
    having = []
    for version in shipped_versions():
        spec = load_table(version).option_strings.get(option)
        if spec is not None and not spec.deprecated and option in spec.accepted:
            having.append(version)
    return tuple(having)


def _unknown_fix(written: str, table: OptionTable, in_extra_args: bool) -> str:
    import difflib  # only when a problem is reported

    remove = "remove it from extra_args" if in_extra_args else "remove what asks for it"
    canon = sorted({s.canonical for s in table.args if not s.deprecated})
    close = difflib.get_close_matches(written, canon, n=3)
    meant = ("did you mean " + " or ".join(f"`{c}`" for c in close) + "?") if close else ""
    having = releases_taking(written)
    if having:
        span = having[0] if len(having) == 1 else f"{having[0]} to {having[-1]}"
        return (
            f"`{written}` is an option of vllm {span} (of the shipped releases): run one "
            f"of those (serving.version), or {remove}" + (f" ({meant})" if close else "")
        )
    shipped = shipped_versions()
    none = f"no shipped release of vLLM ({shipped[0]} to {shipped[-1]}) has `{written}`"
    return f"{none}: {meant}" if close else f"{none}: {remove}"


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
    if type_name == "human_readable_int":
        if not _HUMAN_INT.match(value) and value.lower() != "auto":
            raise ValueError("not an integer such as 32768 or 32k")
        return value
    if type_name in _JSON_TYPES and value.lstrip()[:1] in ("{", "["):
        # A dict option also takes `key=value` text in later releases; JSON is checked.
        try:
            return load_json(value)
        except ValueError as err:
            raise ValueError(f"not JSON: {err}") from None
    return value


def _resolve(
    table: OptionTable, written: str, where: str
) -> tuple[OptionSpec | None, list[Problem]]:
    """The action for an option string, and what is wrong with how it is written."""
    name = f"vllm {table.version}"
    exact = table.option_strings.get(written)
    if exact is None and written.startswith("--") and "_" in written:
        # FlexibleArgumentParser reads `--max_model_len` as `--max-model-len`.
        dashed = table.option_strings.get(written.replace("_", "-"))
        if dashed is not None:
            return dashed, [
                Problem(
                    "vllm-option-alias",
                    where,
                    f"`{written}` is read as `{dashed.canonical}` by {name} only because it "
                    "turns `_` into `-`; unit files use the canonical name",
                    f"write `{dashed.canonical}`",
                )
            ]
    if exact is not None:
        if exact.action == "help":
            return exact, [
                Problem(
                    "vllm-option-help",
                    where,
                    f"`{written}` makes {name} print its help and exit",
                    f"remove `{written}`",
                )
            ]
        if exact.deprecated:
            return exact, [
                Problem(
                    "vllm-option-deprecated",
                    where,
                    f"`{written}` is deprecated in {name}",
                    f"remove `{written}` (see `vllm serve --help` of {table.version})",
                )
            ]
        if written not in exact.accepted:
            return exact, [
                Problem(
                    "vllm-option-alias",
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
            return spec, [
                Problem(
                    "vllm-option-abbreviated",
                    where,
                    f"`{written}` is not an option of {name}; argparse expands it only as a "
                    f"prefix of `{spec.canonical}`, which breaks when a later option shares "
                    "the prefix",
                    f"write `{spec.canonical}`",
                )
            ]
        if len(specs) > 1:
            names = ", ".join(f"`{s.canonical}`" for s in specs.values())
            return None, [
                Problem(
                    "vllm-option-ambiguous",
                    where,
                    f"`{written}` is not an option of {name} and is an ambiguous prefix of "
                    f"{names}: vLLM refuses to start",
                    f"write one of {names}",
                )
            ]
    return None, [
        Problem(
            "vllm-option-unknown",
            where,
            f"{name} has no option `{written}`",
            _unknown_fix(written, table, where.endswith(".extra_args")),
        )
    ]


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
                "vllm-value-count",
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
                    "vllm-value-type",
                    where,
                    f"`{option.written} {value}`: {spec.type} expected ({err})",
                    f"write a {spec.type} value after `{option.written}` in serving.extra_args",
                )
            )
            continue
        if spec.choices is not None and str(converted) not in spec.choices:
            problems.append(
                Problem(
                    "vllm-value-choice",
                    where,
                    f"`{option.written} {value}` is not a choice of vllm {table.version}",
                    "one of " + ", ".join(spec.choices),
                )
            )
    return problems


def parse_command_line(
    table: OptionTable, args: Sequence[str], *, subject: str, complete: bool = True
) -> ParsedCommandLine:
    """Group `args` (the words after `vllm serve`) as argparse would, listing what is wrong.

    `complete`: `args` is the whole line, the model first; otherwise a fragment such as
    the spec's extra_args, which may hold no positional.
    """
    options: list[ParsedOption] = []
    positionals: list[str] = []
    problems: list[Problem] = []
    limit = len(table.positionals) if complete else 0
    i = 0
    while i < len(args):
        token = args[i]
        if not _option_like(token):
            if len(positionals) < limit and not options:
                positionals.append(token)
            else:
                problems.append(
                    Problem(
                        "vllm-argument-unexpected",
                        subject,
                        f"`{token}` is not an option and no option before it takes it "
                        "(the model is `vllm serve`'s only positional, written first)",
                        "put the option it belongs to before it in serving.extra_args, "
                        "or remove it",
                    )
                )
            i += 1
            continue
        written, eq, explicit = token.partition("=") if token.startswith("--") else (token, "", "")
        short = table.option_strings.get(token[:2]) if not token.startswith("--") else None
        if token not in table.option_strings and short is not None and short.takes_values:
            # argparse reads `-O3` as `-O 3`; a unit file spells the option out.
            written, eq, explicit = token[:2], "=", token[2:]
        spec, found = _resolve(table, written, subject)
        problems.extend(found)
        i += 1
        values: list[str] = []
        if eq:
            values.append(explicit)
        elif spec is None or spec.takes_values:
            most = None if spec is None else (1 if spec.nargs in (None, "?") else None)
            if spec is not None and isinstance(spec.nargs, int):
                most = spec.nargs
            while i < len(args) and not _option_like(args[i]):
                if most is not None and len(values) >= most:
                    break
                values.append(args[i])
                i += 1
        option = ParsedOption(written, (token,) if eq else (token, *values), tuple(values), spec)
        problems.extend(_check_values(table, option, subject))
        options.append(option)
    seen: dict[str, ParsedOption] = {}
    for option in options:
        if option.spec is None:
            continue
        earlier = seen.get(option.spec.dest)
        if earlier is not None and option.spec.action not in ("append", "LoRAParserAction"):
            problems.append(
                Problem(
                    "vllm-option-repeated",
                    subject,
                    f"`{option.written}` repeats `{earlier.written}`; argparse silently keeps "
                    "the last one",
                    "keep one of them",
                )
            )
        seen[option.spec.dest] = option
    if complete:
        if not positionals:
            problems.append(
                Problem(
                    "vllm-model-missing",
                    subject,
                    "the line names no model (`vllm serve MODEL`)",
                    "set serving.model_path",
                )
            )
        for spec in table.args:
            if spec.required and spec.dest not in seen:
                problems.append(
                    Problem(
                        "vllm-option-required",
                        subject,
                        f"vllm {table.version} requires `{spec.canonical}`",
                        f"add `{spec.canonical} <value>` to serving.extra_args",
                    )
                )
    return ParsedCommandLine(tuple(positionals), tuple(options), tuple(problems))
