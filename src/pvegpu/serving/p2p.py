"""Whether the pool's GPUs may DMA to each other: the IOMMU and SEV-SNP facts, or the spec."""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.diagnostic import Severity
from pvegpu.model.decision import P2PDecision, P2PSource
from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.schema import P2PSetting
from pvegpu.serving.checks import Checks


def facts_p2p(facts: HostFacts, gpus: Sequence[GPU]) -> tuple[bool, str]:
    """Whether the facts let these GPUs DMA to each other, and why: the one judgement
    the plan makes for a pool and `pvegpu check` for a container's GPUs."""
    reasons: list[str] = []
    if facts.sev_snp:
        reasons.append("SEV-SNP is on (the IOMMU must translate; P2P DMA is unreliable)")
    if facts.iommu.enabled:
        translating, unknown = [], []
        for gpu in gpus:
            group = facts.group(gpu.iommu_group) if gpu.iommu_group is not None else None
            if group is None or group.type is None:
                unknown.append(str(gpu.address))
            elif group.type.translates:
                translating.append(f"{group.id} ({group.type})")
        if translating:
            groups = list(dict.fromkeys(translating))
            one = len(groups) == 1
            reasons.append(
                f"IOMMU group{'' if one else 's'} {', '.join(groups)} "
                f"translate{'s' if one else ''} GPU DMA (P2P corrupts or hangs under translation)"
            )
        if unknown:
            reasons.append(
                "the IOMMU is on but the domain type of " + ", ".join(unknown) + " is "
                "unknown, so P2P is not trusted"
            )
    if reasons:
        return False, "; ".join(reasons)
    if facts.iommu.enabled:
        return True, "every GPU's IOMMU group is in passthrough (identity)"
    return True, "no IOMMU: GPU DMA is not translated"


def decide_p2p(checks: Checks) -> P2PDecision:
    """P2P as the facts say, unless the spec overrides them (which needs a reason)."""
    spec = checks.spec
    facts_on, facts_reason = facts_p2p(checks.facts, checks.pool.gpus)
    if spec.p2p is P2PSetting.AUTO or (spec.p2p is P2PSetting.ON) == facts_on:
        return P2PDecision(facts_on, facts_reason, P2PSource.FACTS, facts_on)
    wanted = spec.p2p is P2PSetting.ON
    if not spec.p2p_reason:
        checks.problem(
            "p2p-override-without-reason",
            f"p2p = {spec.p2p.value} overrides the facts ({facts_reason}) without a reason",
            'add p2p_reason = "..." saying why (e.g. the nccl-tests run that proved it), '
            'or set p2p = "auto"',
            subject=f"{checks.where}.p2p",
        )
    if wanted:
        checks.finding(
            Severity.WARNING,
            "serving-p2p-forced-on",
            f"P2P forced on against the facts ({facts_reason}): {spec.p2p_reason}. "
            "Prove it with nccl-tests `all_reduce_perf -c 1` on these GPUs",
        )
    return P2PDecision(wanted, spec.p2p_reason or "", P2PSource.SPEC, facts_on)
