"""`pvegpu apply --reconcile` and the drift `pvegpu check` names: after an upgrade, the
files the applied spec plans now that differ from the host, split in two.

A driver, kernel or LXC upgrade changes what the same spec plans without anyone
changing the spec: nvidia-uvm's major in a raw container's rules, the nodes and the
staged userspace the boot units ready, the cgroup key LXC applies, the numbers of the
GPUs a container keeps. Reconcile writes exactly those: the files of the boot units, a
pool's container config while the split moves no GPU (its GPUs stay the same ones, so
only their lines change), and another container's config whose lines only move to new
numbers. Everything else that differs (a GPU that moves, a guest that gains or loses
GPUs, the split script, pci.cfg, a VM, a server's unit) is left, as a diff, to a
reviewed `pvegpu render`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from pvegpu.model.artifact import APPLY_BUNDLE, HOST, REVIEW, Artifact
from pvegpu.model.paths import (
    NODES_SCRIPT,
    NODES_UNIT,
    NODES_UNIT_NAME,
    USERSPACE_SCRIPT,
    USERSPACE_UNIT,
    USERSPACE_UNIT_NAME,
)
from pvegpu.model.plan import Plan
from pvegpu.rendering.review.actions import (
    Action,
    CheckBase,
    CheckNode,
    EnableUnit,
    HostCommand,
    InstallFile,
    RestartUnit,
    WritePveFile,
)
from pvegpu.rendering.review.apply_doc import apply_contract, contract_step
from pvegpu.rendering.review.apply_steps import Step
from pvegpu.rendering.review.changes import in_bundle
from pvegpu.rendering.review.contract import ApplyContract, contract_to_json
from pvegpu.values import value_class

_LXC_CONFIG = re.compile(r"^etc/pve/lxc/([0-9]+)\.conf$")
_BOOT_UNITS = {
    NODES_SCRIPT: NODES_UNIT_NAME,
    NODES_UNIT: NODES_UNIT_NAME,
    USERSPACE_SCRIPT: USERSPACE_UNIT_NAME,
    USERSPACE_UNIT: USERSPACE_UNIT_NAME,
}
"""The files of the boot units that ready the containers' GPUs, by the unit they are."""


@value_class
@attrs.frozen(eq=False, repr=False)
class Left:
    """A changed file reconcile does not write, and why."""

    artifact: Artifact
    why: str


@value_class
@attrs.frozen(eq=False, repr=False)
class Reconciliation:
    writes: tuple[Artifact, ...] = ()
    """The changed files reconcile writes."""
    left: tuple[Left, ...] = ()
    """The changed files it leaves to a reviewed render."""
    moved: tuple[str, ...] = ()
    """How the split the host has differs from the one planned now (`81:00.0: vfio-pci
    -> nvidia`); any such move leaves every container config to a reviewed render."""

    @property
    def units(self) -> tuple[str, ...]:
        """The boot units whose files it writes, to be run again."""
        return tuple(
            dict.fromkeys(_BOOT_UNITS[a.path] for a in self.writes if a.path in _BOOT_UNITS)
        )


def changed(artifacts: Iterable[Artifact]) -> list[Artifact]:
    """The files of the apply bundle that differ from the host as discovered."""
    return [
        a
        for a in artifacts
        if a.bundle == APPLY_BUNDLE
        and not a.delete
        and a.target != REVIEW  # SUMMARY.md, the picture, snippets: installed nowhere
        and (a.base is None or a.base.content != a.content)
    ]


def split_moves(applied: Sequence[dict[str, Any]], now: Sequence[dict[str, Any]]) -> list[str]:
    """Each function whose planned driver differs between the applied contract and the
    plan now, or that only one of them plans."""
    before = {str(f["address"]): str(f["driver_after"]) for f in applied}
    after = {str(f["address"]): str(f["driver_after"]) for f in now}
    moves = []
    for address in sorted(before.keys() | after.keys()):
        was, will = before.get(address), after.get(address)
        if was != will:
            moves.append(f"{address}: {was or 'not planned'} -> {will or 'not planned'}")
    return moves


def reconcile(
    plan: Plan, artifacts: Sequence[Artifact], applied: Sequence[dict[str, Any]]
) -> Reconciliation:
    """What of the plan now reconcile writes, given the applied bundle's functions."""
    moved = tuple(split_moves(applied, apply_contract(plan, artifacts).functions))
    pools = {p.lxc.vmid for p in plan.lxc_pools if p.lxc is not None}
    renumbered_only = {
        c.vmid for c in plan.containers_losing_gpus if not c.minors and c.mig_caps is None
    }
    writes: list[Artifact] = []
    left: list[Left] = []
    for artifact in changed(artifacts):
        why = _why_left(artifact, moved, pools, renumbered_only)
        if why is None:
            writes.append(artifact)
        else:
            left.append(Left(artifact, why))
    return Reconciliation(tuple(writes), tuple(left), moved)


def _why_left(
    artifact: Artifact, moved: tuple[str, ...], pools: set[int], renumbered_only: set[int]
) -> str | None:
    """None for a file reconcile writes, else why it leaves it."""
    if artifact.target != HOST:
        return "a file in a container (a server's unit): it changes what the server runs"
    if artifact.path in _BOOT_UNITS:
        return None
    config = _LXC_CONFIG.match(artifact.path)
    if config is None:
        return "it may move a GPU or change a guest's GPUs: " + artifact.reason
    vmid = int(config[1])
    if moved:
        return f"the split moves GPUs ({'; '.join(moved)}), so CT {vmid}'s GPUs may change"
    if vmid in pools or vmid in renumbered_only:
        return None
    return f"CT {vmid} gains or loses GPUs: " + artifact.reason


def reconcile_steps(plan: Plan, reconciliation: Reconciliation) -> tuple[Step, ...]:
    """The runbook of a reconcile: check the files are still as discovered, write the
    container configs, install the boot units' files and run those units again."""
    node = plan.facts.node
    writes = reconciliation.writes
    steps = [
        Step.of(
            f"Work on {node}, as root, in this reconcile's directory",
            (CheckNode(node),),
            "Prints `ready`.",
        )
    ]
    checks = [CheckBase(a.target, a.path, a.base.sha256) for a in writes if a.base is not None]
    if checks:
        steps.append(
            Step.of(
                "Check that the files are still as discovered",
                checks,
                "Every line ends in `OK`; `FAILED`: the file changed meanwhile, reconcile again.",
            )
        )
    configs = [a for a in writes if _LXC_CONFIG.match(a.path)]
    if configs:
        vmids = ", ".join(f"CT {_LXC_CONFIG.match(a.path)[1]}" for a in configs)  # type: ignore[index]
        steps.append(
            Step.of(
                "Write the containers' GPU lines as the host numbers them now",
                tuple(WritePveFile(in_bundle(a), a.path) for a in configs),
                f"{vmids} get them at their next start: restart a running one when it may "
                "(`pct reboot <vmid>`).",
            )
        )
    files = [a for a in writes if a.path in _BOOT_UNITS]
    if files:
        actions: list[Action] = [InstallFile(in_bundle(a), a.path, a.mode) for a in files]
        actions.append(HostCommand("systemctl daemon-reload", rerun_on_revert=True))
        for unit in reconciliation.units:
            actions += [EnableUnit(unit), RestartUnit(unit)]
        steps.append(
            Step.of(
                "Install the boot units' files and run them again",
                actions,
                "Each unit readies the containers' GPUs now, as it does at every boot.",
            )
        )
    return tuple(steps)


def reconcile_contract(
    plan: Plan, artifacts: Sequence[Artifact], reconciliation: Reconciliation
) -> ApplyContract:
    """The contract of a reconcile bundle: the plan's facts, its steps only."""
    contract = apply_contract(plan, artifacts)
    steps = tuple(contract_step(s) for s in reconcile_steps(plan, reconciliation))
    return attrs.evolve(contract, steps=steps)


def reconcile_document(
    plan: Plan, artifacts: Sequence[Artifact], reconciliation: Reconciliation
) -> dict[str, Any]:
    return contract_to_json(reconcile_contract(plan, artifacts, reconciliation))
