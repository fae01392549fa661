"""vLLM's version rules as one table: what pvegpu writes for each release where they differ.

The option tables (`data/tables.json.gz`) say what a release *accepts*; this table says
what pvegpu *writes* for it, so that code asks `RULES` and never compares versions itself.
A release that changes how MTP is asked for is a new row here, not an `if` elsewhere; the
test that renders kpro6 for every shipped release checks each row against each table.

MTP: `--speculative-config` takes JSON (`{"method": ..., "num_speculative_tokens": N}`).
0.8 added the option; 0.9 named the first MTP method, `deepseek_mtp` (DeepSeek V3/R1
only); 0.10 added `qwen3_next_mtp`; 0.11 made `mtp` the method for any model with MTP
layers (the model-specific names became deprecated aliases that 0.11-0.33 rewrite to it).
"""

from __future__ import annotations

import json

import attrs

from pvegpu.engines.sglang.versions import Versions
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
class VersionRules:
    mtp: tuple[MtpRule, ...]
    draft_tokens: int
    """`num_speculative_tokens`: the MTP head drafts this many tokens per step."""

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
)
"""The table in force. Read as `versions.RULES` at call time (tests swap it)."""
