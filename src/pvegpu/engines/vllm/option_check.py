"""vLLM's `vllm serve` command lines, checked against the option table of one release.

The checker is every engine's (`engines.common.option_check`): stricter than vLLM's parser
on purpose, as for SGLang. argparse expands any unambiguous prefix and accepts every
alias, and vLLM's `FlexibleArgumentParser` also reads `--max_model_len` as
`--max-model-len`; a unit that relies on any of those breaks silently when a later release
adds an option with the same prefix or drops the alias. What is vLLM's is here: the
underscores and glued short values its parser takes, its converters, the actions that
collect repeats, and that the line starts with the model, `vllm serve`'s one positional.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pvegpu.diagnostic import Diagnostic
from pvegpu.engines.common import option_check
from pvegpu.engines.common.option_check import ParserRules, Table, close_names
from pvegpu.engines.vllm.options import OptionSpec, OptionTable, load_table, shipped_versions
from pvegpu.jsontext import load_json

_HUMAN_INT = re.compile(r"^-?\d+$|^\d+(\.\d+)?[kKmMgGtT]$")
_JSON_TYPES = frozenset({"loads", "parse_dataclass", "union_dict_and_str"})

ParsedOption = option_check.ParsedOption[OptionSpec]
ParsedCommandLine = option_check.ParsedCommandLine[OptionSpec]


def releases_taking(option: str) -> tuple[str, ...]:
    """The shipped releases whose `vllm serve` takes `option` as written."""
    return option_check.releases_taking(option, shipped_versions(), load_table)


def _unknown_fix(written: str, table: Table[OptionSpec], in_extra_args: bool) -> str:
    remove = "remove it from extra_args" if in_extra_args else "remove what asks for it"
    close = close_names(written, table)
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


RULES: ParserRules[OptionSpec] = ParserRules(
    name="vllm",
    title="vLLM",
    help_action="help",
    convert=_convert,
    deprecated_fix=lambda spec, written, table: (
        f"remove `{written}` (see `vllm serve --help` of {table.version})"
    ),
    unknown_fix=_unknown_fix,
    no_positional=lambda table: "the model is `vllm serve`'s only positional, written first",
    positional_missing=Diagnostic.error(
        "vllm-model-missing",
        "",
        "the line names no model (`vllm serve MODEL`)",
        "set serving.model_path",
    ),
    underscores=True,
    glued_short_values=True,
    repeatable=frozenset({"append", "LoRAParserAction"}),
)


def parse_command_line(
    table: OptionTable, args: Sequence[str], *, subject: str, complete: bool = True
) -> ParsedCommandLine:
    """Group `args` (the words after `vllm serve`) as argparse would, listing what is wrong.

    `complete`: `args` is the whole line, the model first; otherwise a fragment such as
    the spec's extra_args, which may hold no positional.
    """
    return option_check.parse_command_line(table, args, RULES, subject=subject, complete=complete)
