"""The GPUs an SGLang command line opens, by SGLang's own count, against the pool's.

pvegpu writes `--tp-size` = the pool's GPU count; extra_args may add data or pipeline
parallelism, and SGLang counts them as its releases do:

- the GPUs are dp x tp x pp (`compute_world_size` in `sglang/srt/server_args.py` of
  SGLang 0.5.21 and 0.5.23): `--dp-size N` alone launches N replicas of the whole TP
  group, N times the pool;
- attention data parallelism runs inside the TP group and adds no GPUs, but its size
  divides TP (`tp_size % attn_dp_size`, `handle_data_parallelism` in
  `sglang/srt/arg_groups/parallel_hook.py` of 0.5.23; `tp_size % dp_size` with
  `--enable-dp-attention` before, `sglang/srt/server_args.py` of 0.5.3 and 0.5.21). From
  0.5.22 it is `--attn-dp-size N`; the deprecated `--dp-size N --enable-dp-attention`
  is read as `--attn-dp-size N --dp-size 1` (`handle_deprecated_dp_attention`, same file),
  which is how releases before 0.5.22 counted it too (their world size leaves dp out
  with `--enable-dp-attention`).

The same count reads an old unit's line (`planning/unit_gpus.py`). A `--config` file in
extra_args counts too, its options before the line's own (`engines.common.config_file`):
pvegpu's `--tp-size` overrides the file's, its `--dp-size` does not.
"""

from __future__ import annotations

import attrs

from pvegpu.engines.common.config_file import ExtraConfig
from pvegpu.engines.sglang.option_check import ParsedCommandLine, ParsedOption, parse_command_line
from pvegpu.engines.sglang.options import OptionSpec, OptionTable
from pvegpu.serving.checks import Checks
from pvegpu.values import value_class

DP_SIZE = ("--dp-size", "--data-parallel-size")
PP_SIZE = ("--pp-size", "--pipeline-parallel-size")
ATTN_DP_SIZE = ("--attn-dp-size", "--attention-data-parallel-size")
DP_ATTENTION = "--enable-dp-attention"
_SOURCE = "compute_world_size, sglang/srt/server_args.py"


@value_class
@attrs.frozen(eq=False, repr=False)
class ParallelSizes:
    """The sizes a line sets besides TP, after SGLang's own rewrite of the deprecated flag."""

    dp: int = 1
    pp: int = 1
    attn_dp: int = 1
    written: tuple[str, ...] = ()
    """The options that set them, as written (`--dp-size 2`)."""

    def world_size(self, tp: int) -> int:
        return self.dp * tp * self.pp


def parallel_sizes(table: OptionTable, line: ParsedCommandLine) -> ParallelSizes:
    """The data, pipeline and attention-DP sizes of `line`, the last of each winning."""
    dp, pp, attn_dp = (_last(table, line, s) for s in (DP_SIZE, PP_SIZE, ATTN_DP_SIZE))
    flag = table.option_strings.get(DP_ATTENTION)
    dp_attention = flag is not None and any(o.spec is flag for o in line.options)
    sizes = {"dp": _number(dp), "pp": _number(pp), "attn_dp": _number(attn_dp)}
    if dp_attention and sizes["attn_dp"] == 1:
        sizes["attn_dp"], sizes["dp"] = sizes["dp"], 1
    written = tuple(
        " ".join(o.tokens)
        for o in line.options
        if o in (dp, pp, attn_dp) or (flag is not None and o.spec is flag)
    )
    return ParallelSizes(written=written, **sizes)


SIZE_OPTIONS = frozenset({*DP_SIZE, *PP_SIZE, *ATTN_DP_SIZE, DP_ATTENTION})
"""The option strings whose value the count reads (a `--config` key that sets one as more
than a plain value leaves it unchecked)."""


def check_parallel_sizes(
    checks: Checks,
    table: OptionTable,
    tp: int,
    extra: ParsedCommandLine | None,
    config: ExtraConfig | None = None,
) -> None:
    """Refuse extra_args whose sizes make SGLang open other than the pool's GPUs, or an
    attention-DP size that does not divide TP; each names SGLang's own rule. `config`:
    the `--config` file extra_args pass, its options counted before theirs."""
    if extra is None:
        return
    line = extra
    where = "extra_args"
    if config is not None and config.config.problem is None:
        where = f"extra_args or `--config {config.path}`"
        words = [*config.config.words(), *(w for o in extra.options for w in o.tokens)]
        # The file's own mistakes are SGLang's to report; only its sizes count here.
        line = parse_command_line(table, words, subject="", complete=False)
    sizes = parallel_sizes(table, line)
    version = table.version
    subject = f"{checks.where}.extra_args"
    note = f" (extra_args with the options of `--config {config.path}`)" if config else ""
    shown = " ".join(f"`{w}`" for w in sizes.written) + (note if where != "extra_args" else "")
    removed = " ".join(f"`{w}`" for w in sizes.written)
    world = sizes.world_size(tp)
    if world != tp:
        inside = table.find(*ATTN_DP_SIZE)
        instead = (
            f"`{inside.canonical} N` (N dividing {tp})"
            if inside is not None
            else f"`--dp-size N {DP_ATTENTION}` (N dividing {tp})"
        )
        checks.problem(
            "sglang-parallel-size-mismatch",
            f"{shown} make SGLang {version} open dp x tp x pp = {sizes.dp} x {tp} x "
            f"{sizes.pp} = {world} GPUs ({_SOURCE}); the pool has {tp}, so the server "
            "fails to start",
            f"remove {removed} from {where} (a pool is one TP group: one pool per replica), "
            f"or for attention data parallelism inside TP use {instead}",
            subject=subject,
        )
    if sizes.attn_dp > 1 and tp % sizes.attn_dp:
        checks.problem(
            "sglang-attn-dp-does-not-divide",
            f"{shown} make the attention data-parallel size {sizes.attn_dp}, which does "
            f"not divide TP ({tp}): SGLang {version} requires tp_size % attn_dp_size == 0 "
            "(sglang/srt/arg_groups/parallel_hook.py) and refuses to start",
            f"use an attention data-parallel size that divides {tp}",
            subject=subject,
        )


def _last(
    table: OptionTable, line: ParsedCommandLine, spellings: tuple[str, ...]
) -> ParsedOption | None:
    spec: OptionSpec | None = table.find(*spellings)
    if spec is None:
        return None
    # argparse keeps the last occurrence.
    return next((o for o in reversed(line.options) if o.spec == spec), None)


def _number(option: ParsedOption | None) -> int:
    if option is None or not option.values:
        return 1
    value = option.values[0]
    # Not a number: the table check of the line refuses it already.
    return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else 1
