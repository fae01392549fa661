"""What an engine's command line takes from the spec the same way for every engine: the
spec's extra_args, read by the release's table, and what they may not set.

The options an engine writes (`OWNED`, by every spelling it has used) are the engine's;
refusing extra_args that set one, and reading the KV cache dtype they give the fit, are
not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pvegpu.engines.common.option_check import ParsedCommandLine, S, Table
from pvegpu.serving.checks import Checks

Owned = tuple[tuple[tuple[str, ...], str], ...]
"""(every spelling of an option, the spec field or fact pvegpu renders it from)."""
ParseLine = Callable[[Sequence[str], str], ParsedCommandLine[S]]
"""The engine's checker of a fragment of its command line (`complete=False`) for a subject."""


def extra_args(
    checks: Checks, table: Table[S] | None, parse: ParseLine[S], owned: Owned
) -> ParsedCommandLine[S] | None:
    """The spec's extra_args as `table` reads them; one setting an `owned` option is a
    problem, since the unit would say two things (argparse keeps the last) and the checks
    of what pvegpu writes would be wrong."""
    if table is None:
        return None
    subject = f"{checks.where}.extra_args"
    parsed = parse(checks.spec.extra_args, subject)
    checks.add_spec_errors(parsed.problems)
    for spellings, owner in owned:
        option = parsed.of(table.find(*spellings))
        if option is not None:
            checks.problem(
                "serving-extra-arg-owned",
                f"`{option.written}` is rendered from {owner}; extra_args may not set it",
                f"remove `{' '.join(option.tokens)}` from extra_args"
                + ("" if " " in owner else f" and set {owner} in the spec"),
                subject=subject,
            )
    return parsed


def kv_cache_bits(
    table: Table[S] | None,
    extra: ParsedCommandLine[S] | None,
    spellings: tuple[str, ...],
    bits: Mapping[str, int],
) -> int | None:
    """The element size extra_args' KV cache dtype option (`spellings`) gives, by the
    engine's `bits` of each dtype (None: the model's dtype)."""
    option = extra.of(table.find(*spellings)) if extra and table else None
    if option is None or not option.values:
        return None
    return bits.get(option.values[0])
