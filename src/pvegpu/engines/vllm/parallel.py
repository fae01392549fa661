"""vLLM's parallel sizes for a pool: TP, PP, PCP and DCP, counted as vLLM counts the GPUs
it opens (its world size, `versions`), and the sizes a `--config` file sets.

vLLM puts a `--config` file's options before the command line's own
(`FlexibleArgumentParser._pull_args_from_config`, `vllm/utils/argparse_utils.py` of
0.33.0, `vllm/utils/__init__.py` of 0.10.2; `engines.common.config_file`), so the sizes
the rendered line writes override the file's. PP, PCP and DCP are written only above 1,
and data parallelism never: one of those set in the file stands, and the server opens
other GPUs than the pool's.
"""

from __future__ import annotations

from pvegpu.engines.common.config_file import ExtraConfig
from pvegpu.engines.vllm import versions
from pvegpu.engines.vllm.command import DCP_SIZE, DP_LOCAL, DP_SIZE, PCP_SIZE, PP_SIZE, TP_SIZE
from pvegpu.engines.vllm.option_check import parse_command_line
from pvegpu.engines.vllm.options import OptionTable
from pvegpu.engines.vllm.spec_keys import DCP, PCP, PP, size
from pvegpu.engines.vllm.versions import ParallelLayout
from pvegpu.serving.checks import Checks

_SIZES = (
    (TP_SIZE, None),
    (PP_SIZE, "pipeline_parallel_size"),
    (PCP_SIZE, "prefill_context_parallel_size"),
    (DCP_SIZE, "decode_context_parallel_size"),
    (DP_SIZE, None),
    (DP_LOCAL, None),
)
SIZE_OPTIONS = frozenset(
    f"--{name.lstrip('-')}" for spellings, _ in _SIZES for name in spellings
) | frozenset(f"--{n.lstrip('-').replace('-', '_')}" for spellings, _ in _SIZES for n in spellings)
"""The option strings of the sizes, as `--key` of a config file may give them."""


def parallel_layout(checks: Checks, gpus: int, version: str) -> ParallelLayout:
    """TP, PP, PCP and DCP for the pool's `gpus`: vLLM opens PP x TP x PCP GPUs
    (`versions`), so TP is the GPU count over PP x PCP; a size that does not fit is a
    problem naming vLLM's rule, and counts as 1 for the checks that follow."""
    spec = checks.spec
    pp = size(spec, PP) or 1
    if gpus % pp:
        checks.problem(
            "vllm-pipeline-does-not-divide",
            f"pipeline_parallel_size {pp} does not divide the pool's {gpus} GPUs: vLLM "
            "needs TP x PP = the GPUs it is given",
            "set pipeline_parallel_size to a divisor of the pool's GPU count",
            subject=f"{checks.where}.pipeline_parallel_size",
        )
        pp = 1
    pcp = size(spec, PCP) or 1
    if (gpus // pp) % pcp:
        checks.problem(
            "vllm-context-parallel-does-not-divide",
            f"prefill_context_parallel_size {pcp} x pipeline_parallel_size {pp} does not "
            f"divide the pool's {gpus} GPUs: vLLM opens TP x PP x PCP GPUs (its world "
            "size), so TP would not be a whole number",
            "set prefill_context_parallel_size so that PP x PCP divides the pool's GPU count",
            subject=f"{checks.where}.prefill_context_parallel_size",
        )
        pcp = 1
    layout = ParallelLayout(tp=gpus // (pp * pcp), pp=pp, pcp=pcp)
    dcp = size(spec, DCP) or 1
    rule = versions.RULES.dcp_rule(version)
    if dcp > 1 and rule is not None and dcp not in (sizes := rule.sizes(layout)):
        checks.problem(
            "vllm-decode-context-parallel-invalid",
            f"decode_context_parallel_size {dcp} is not one vLLM {version} takes: "
            f"{rule.text(layout)}",
            "set decode_context_parallel_size to one of " + ", ".join(map(str, sizes)),
            subject=f"{checks.where}.decode_context_parallel_size",
        )
        dcp = 1
    return ParallelLayout(tp=layout.tp, pp=pp, pcp=pcp, dcp=dcp)


def check_config_sizes(
    checks: Checks, table: OptionTable, layout: ParallelLayout, config: ExtraConfig | None
) -> None:
    """Refuse a size the `--config` file sets that the rendered line does not override."""
    if config is None or config.config.problem is not None:
        return
    line = parse_command_line(table, config.config.words(), subject="", complete=False)
    written = {TP_SIZE: True, PP_SIZE: layout.pp > 1, PCP_SIZE: layout.pcp > 1}
    written[DCP_SIZE] = layout.dcp > 1
    for spellings, key in _SIZES:
        spec = table.find(*spellings)
        option = next((o for o in reversed(line.options) if spec and o.spec == spec), None)
        if option is None or written.get(spellings, False) or option.values in ((), ("1",)):
            continue
        instead = f"set {key} in the spec" if key else "a pool is one data-parallel rank"
        checks.problem(
            "vllm-config-sets-parallel-size",
            f"`--config {config.path}` (extra_args) sets `{' '.join(option.tokens)}`, which "
            "the rendered line does not override (vLLM puts the file's options first), so "
            "the server would not run the layout pvegpu decided for the pool's "
            f"{layout.world_size} GPUs (TP x PP x PCP, DCP within TP)",
            f"remove it from {config.path}; {instead}",
            subject=f"{checks.where}.extra_args",
        )
