"""What `pvegpu apply` and `pvegpu check` need from a plan, as the `apply` key of MANIFEST.json.

A rendered directory is applied without planning again: the host has changed by then
(half of it, after an interrupted apply), so a new plan would differ. Instead the
bundle carries:
- `facts`: each PCI function the plan rests on, as discovery saw it (ids, group,
  driver) with the driver the plan puts it on, and a digest of the lot;
- `serving`: what each planned server must run with (TP, the GPUs, P2P);
- `boot_units`: the units that ready the containers' GPUs at every boot, which `check`
  finds installed and enabled (left out while none);
- `steps`: the runbook, step by step, as typed actions (rendering/review/actions.py),
  the same values SUMMARY.md prints.
This module decides the contract's values (`apply_contract`); `contract.py` writes and
reads them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pvegpu.engines import health_url
from pvegpu.model.artifact import Artifact
from pvegpu.model.facts import PciFunction
from pvegpu.model.paths import SPLIT_UNIT_NAME
from pvegpu.model.plan import Plan
from pvegpu.rendering.review.apply_steps import Step, runbook
from pvegpu.rendering.review.boot_steps import installed_boot_units
from pvegpu.rendering.review.contract import ApplyContract, ContractStep, contract_to_json
from pvegpu.rendering.review.gpu_layout import driver_after, pools_by_gpu


def function_facts(function: PciFunction) -> dict[str, Any]:
    """The facts of one function the plan rests on, in the facts JSON's value forms."""
    return {
        "address": str(function.address),
        "vendor": f"{function.vendor:04x}",
        "device": f"{function.device:04x}",
        "subsystem_vendor": f"{function.subsystem_vendor:04x}",
        "subsystem_device": f"{function.subsystem_device:04x}",
        "class": f"{function.pci_class:06x}",
        "iommu_group": function.iommu_group,
        "driver": function.driver,
    }


def facts_digest(functions: Sequence[dict[str, Any]]) -> str:
    """sha256 of the functions' facts (not the planned drivers), in address order."""
    keys = ("address", "vendor", "device", "subsystem_vendor", "subsystem_device", "class")
    rows = sorted(
        ({k: f[k] for k in (*keys, "iommu_group", "driver")} for f in functions),
        key=lambda f: str(f["address"]),
    )
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def _functions(plan: Plan) -> list[dict[str, Any]]:
    by_gpu = pools_by_gpu(plan)
    rows: dict[str, dict[str, Any]] = {}
    for pool in plan.pools:
        for function in pool.functions:
            gpu_pool = by_gpu.get(function.address, pool)
            rows[str(function.address)] = {
                **function_facts(function),
                "driver_after": driver_after(gpu_pool, function),
            }
    return [rows[a] for a in sorted(rows)]


def contract_step(step: Step) -> ContractStep:
    """A runbook step as the contract carries it: its actions, not their printed lines."""
    return ContractStep(step.title, step.expect, step.output, step.actions)


def apply_contract(plan: Plan, artifacts: Sequence[Artifact]) -> ApplyContract:
    """What `pvegpu apply` and `pvegpu check` need of this plan and its rendered artifacts."""
    functions = _functions(plan)
    serving = [
        {
            "vmid": p.serving.vmid,
            "unit": p.serving.unit,
            "unit_path": p.serving.unit_path,
            "tp_size": p.serving.tp_size,
            # Named by the variable (`cuda_visible_devices`, `hip_visible_devices`): check
            # reads that one from the running unit.
            p.serving.runtime.visible_devices.lower(): ",".join(
                str(i) for i in p.serving.visible_devices
            ),
            "p2p_disabled": not p.serving.p2p.enabled,
            "health_url": health_url(p.serving),
        }
        for p in plan.pools
        if p.serving is not None
    ]
    return ApplyContract(
        digest=facts_digest(functions),
        functions=tuple(functions),
        split_unit=SPLIT_UNIT_NAME if plan.split_pools else None,
        boot_units=installed_boot_units(artifacts),
        serving=tuple(serving),
        findings=tuple(f.document() for f in plan.findings),
        steps=tuple(contract_step(s) for s in runbook(plan, artifacts)),
    )


def apply_document(plan: Plan, artifacts: Sequence[Artifact]) -> dict[str, Any]:
    """The `apply` key of MANIFEST.json for this plan and its rendered artifacts."""
    return contract_to_json(apply_contract(plan, artifacts))


def manifest_header(plan: Plan, artifacts: Sequence[Artifact], spec: str) -> dict[str, Any]:
    """Everything `render` puts at the top of MANIFEST.json: node, spec, the apply data."""
    return {"node": plan.facts.node, "spec": spec, "apply": apply_document(plan, artifacts)}
