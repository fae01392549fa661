"""plan_cluster(facts by node, spec) -> ClusterPlan: every node of a cluster spec at once.

Each node is planned as a single node (planner.plan with `spec.for_node`), from its own
root, so everything a one-node plan checks holds on every node. What is cluster-wide is
decided here: which root is which node, that the roots agree on the one pci.cfg that
pmxcfs shares, and that file's content (cluster_mapping.py). Every problem of every
node is reported at once, its subject prefixed by the node and its spec path renumbered
to the cluster spec's own `pools[i]`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError, PvegpuError, SpecError
from pvegpu.model.facts import HostFacts
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.plan import ClusterPlan, Plan
from pvegpu.model.schema import Spec
from pvegpu.planning.cluster_mapping import shared_pci_cfg
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import pcicfg

_POOL_PATH = re.compile(r"^pools\[(\d+)\]")


def root_problems(spec: Spec, names: Collection[str]) -> Iterator[Diagnostic]:
    """A node of the spec without a root, a root for a node the spec does not name.

    Needs only the names given on the command line, so the CLI asks before reading any
    root."""
    wanted = spec.node_names
    for node in wanted:
        if node not in names:
            yield Diagnostic.error(
                "node-without-root",
                node,
                "the spec plans this node but no root was given for it",
                f"add --root {node}=DIR (/ on that node, or its unpacked `pvegpu snapshot`)",
            )
    for name in names:
        if name not in wanted:
            yield Diagnostic.error(
                "root-not-in-spec",
                name,
                f"a root is given for node {name!r}, which the spec does not plan",
                f"drop --root {name}=..., or add it to nodes: {', '.join(wanted)}",
            )


def _name_problems(facts: Mapping[str, HostFacts]) -> Iterator[Diagnostic]:
    for name, node_facts in facts.items():
        if node_facts.node != name:
            yield Diagnostic.error(
                "root-node-mismatch",
                name,
                f"the root given for {name!r} is host {node_facts.node!r} (its etc/hostname)",
                f"give the root of {name!r}, or name this one {node_facts.node}=DIR",
            )


def _pci_cfg_problems(facts: Mapping[str, HostFacts]) -> Iterator[Diagnostic]:
    """pmxcfs gives every node the same /etc/pve: roots that disagree on pci.cfg were taken
    at different times, and a file patched from one of them would undo the other's state."""
    copies: dict[str | None, list[str]] = {}
    for name, node_facts in facts.items():
        existing = pci_cfg(node_facts).file
        copies.setdefault(None if existing is None else existing.content, []).append(name)
    if len(copies) > 1:
        groups = "; ".join(
            f"{', '.join(names)}: {'none' if text is None else f'{len(text)} bytes'}"
            for text, names in copies.items()
        )
        yield Diagnostic.error(
            "pcicfg-differs",
            pcicfg.PATH,
            f"the roots hold different copies of the cluster's one file ({groups})",
            "snapshot every node again, one right after the other (pvegpu snapshot), "
            "and plan from those",
        )


def _renumbered(problem: Diagnostic, node: str, indexes: tuple[int, ...]) -> Diagnostic:
    """A node plan's problem, as the cluster spec names it: `kpro7: pools[3].count`."""
    subject = _POOL_PATH.sub(lambda m: f"pools[{indexes[int(m[1])]}]", problem.subject)
    return attrs.evolve(problem, subject=f"{node}: {subject}")


def plan_cluster(facts: Mapping[str, HostFacts], spec: Spec) -> ClusterPlan:
    """Plan every node of `spec` from its facts (by node name), or raise PlanError listing
    every problem of every node (SpecError when only engines' option tables object)."""
    problems = [*root_problems(spec, facts.keys()), *_name_problems(facts)]
    problems.extend(_pci_cfg_problems(facts))
    # A node without its own root cannot be planned; every other node still is, so one
    # refusal holds every node's problems.
    roots = {name for name, node_facts in facts.items() if node_facts.node == name}
    refusal: type[PvegpuError] = PlanError if problems else SpecError
    plans: list[Plan] = []
    for node in spec.node_names:
        if node not in roots:
            continue
        try:
            plans.append(plan(facts[node], spec.for_node(node)))
        except (PlanError, SpecError) as error:
            # A node refused for its option tables alone is a spec error (exit 4), as a
            # single node's plan is; any other problem makes the refusal a plan's.
            refusal = refusal if isinstance(error, SpecError) else PlanError
            indexes = spec.pool_indexes(node)
            problems.extend(_renumbered(p, node, indexes) for p in error.problems)
    if problems:
        raise refusal(problems)
    shared, mapping_problems, findings = shared_pci_cfg(plans)
    if mapping_problems:
        raise PlanError(mapping_problems)
    return ClusterPlan(
        spec=spec,
        plans=tuple(attrs.evolve(p, shared_pci_cfg=shared) for p in plans),
        shared=shared,
        findings=tuple(findings),
    )
