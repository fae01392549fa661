"""vLLM's version rules as one table: what pvegpu writes for each release where they differ.

The option tables (`data/tables.json.gz`) say what a release *accepts*; this table says
what pvegpu *writes* for it, so that code asks `RULES` and never compares versions itself.
A release that changes how MTP is asked for is a new row here, not an `if` elsewhere; the
test that renders kpro6 for every shipped release checks each row against each table.

MTP: `--speculative-config` takes JSON (`{"method": ..., "num_speculative_tokens": N}`).
0.8 added the option; 0.9 named the first MTP method, `deepseek_mtp` (DeepSeek V3/R1
only); 0.10 added `qwen3_next_mtp`; 0.11 made `mtp` the method for any model with MTP
layers (the model-specific names became deprecated aliases that 0.11-0.33 rewrite to it).

Context parallelism: vLLM's world size (the GPUs one server opens) is PP x TP x PCP,
`ParallelConfig.world_size` in `vllm/config/parallel.py` of vLLM 0.12.0 to 0.33.0 (0.10.2:
PP x TP, before `--prefill-context-parallel-size` existed). Decode context parallelism
reuses the TP ranks and adds no GPUs; which sizes a release takes is `dcp` below.
"""

from __future__ import annotations

import json

import attrs

from pvegpu.engines.common.releases import Versions
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class MtpRule:
    """The `--speculative-config` method for MTP in `versions`, for `model_types`."""

    versions: Versions
    method: str
    model_types: frozenset[str] | None
    """The config.json `model_type`s it serves; None: any model with MTP layers."""
    why: str

    def serves(self, version: str, model_type: str | None) -> bool:
        return version in self.versions and (
            self.model_types is None or (model_type is not None and model_type in self.model_types)
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class ParallelLayout:
    """The parallel sizes of one server: the GPUs it opens are TP x PP x PCP."""

    tp: int
    pp: int = 1
    pcp: int = 1
    dcp: int = 1

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.pcp


@value_class
@attrs.frozen(eq=False, repr=False)
class DcpRule:
    """Which `--decode-context-parallel-size` values the releases of `versions` take."""

    versions: Versions
    spans_pcp: bool
    """With PCP > 1, DCP is 1, PCP or TP x PCP; False: DCP divides TP, whatever PCP."""
    source: str
    """The release file the rule is read from."""

    def sizes(self, layout: ParallelLayout) -> tuple[int, ...]:
        """The DCP sizes the release takes with `layout`'s TP and PCP."""
        if self.spans_pcp and layout.pcp > 1:
            return tuple(sorted({1, layout.pcp, layout.tp * layout.pcp}))
        return tuple(d for d in range(1, layout.tp + 1) if layout.tp % d == 0)

    def text(self, layout: ParallelLayout) -> str:
        """The rule in vLLM's words, for `layout`."""
        if self.spans_pcp and layout.pcp > 1:
            return (
                f"with prefill context parallelism ({layout.pcp}) DCP is disabled (1), spans "
                f"the PCP axis ({layout.pcp}) or the whole TP x PCP block "
                f"({layout.tp * layout.pcp})"
            )
        return f"DCP reuses the TP ranks, so it divides TP ({layout.tp})"


@value_class
@attrs.frozen(eq=False, repr=False)
class VersionRules:
    mtp: tuple[MtpRule, ...]
    draft_tokens: int
    """`num_speculative_tokens`: the MTP head drafts this many tokens per step."""
    dcp: tuple[DcpRule, ...] = ()

    def dcp_rule(self, version: str) -> DcpRule | None:
        """The row for `version`; None before any release had decode context parallelism."""
        return next((r for r in self.dcp if version in r.versions), None)

    def mtp_rule(self, version: str, model_type: str | None) -> MtpRule | None:
        """The first row that serves `model_type` in `version`, or None (MTP refused)."""
        return next((r for r in self.mtp if r.serves(version, model_type)), None)

    def speculative_config(self, rule: MtpRule) -> str:
        """The `--speculative-config` value: compact JSON, keys in a fixed order."""
        doc = {"method": rule.method, "num_speculative_tokens": self.draft_tokens}
        return json.dumps(doc, separators=(",", ":"))


RULES = VersionRules(
    mtp=(
        MtpRule(
            Versions(since="0.9", before="0.11"),
            "deepseek_mtp",
            frozenset({"deepseek_v3"}),
            "0.9-0.10 name MTP per model; DeepSeek V3/R1's is deepseek_mtp",
        ),
        MtpRule(
            Versions(since="0.10", before="0.11"),
            "qwen3_next_mtp",
            frozenset({"qwen3_next"}),
            "0.10 added Qwen3-Next's MTP head under its own method name",
        ),
        MtpRule(
            Versions(since="0.11"),
            "mtp",
            None,
            "from 0.11 `mtp` is the one method; vLLM picks the model's MTP head itself",
        ),
    ),
    # Three drafted tokens, as SGLang's unit drafts three steps: the model's own head
    # accepts most of them, and more only add verification work.
    draft_tokens=3,
    dcp=(
        DcpRule(
            Versions(since="0.10", before="0.26"),
            False,
            "the tp_size % dcp_size check of vllm/engine/arg_utils.py (vLLM 0.10.2, 0.12.0), "
            "in vllm/config/parallel.py from 0.22.1 to 0.25.1",
        ),
        DcpRule(
            Versions(since="0.26"),
            True,
            "ParallelConfig's DCP check in vllm/config/parallel.py (vLLM 0.26.0, 0.27.1, 0.28.0, "
            "0.33.0): with PCP > 1, DCP must be 1, PCP or TP x PCP",
        ),
    ),
)
"""The table in force. Read as `versions.RULES` at call time (tests swap it)."""
