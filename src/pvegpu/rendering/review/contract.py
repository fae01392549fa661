"""The apply contract: what MANIFEST.json's `apply` key promises `pvegpu apply` and `check`.

One typed value (`ApplyContract`), written by one function (`contract_to_json`) and read
back by one function (`contract_from_json`), so the writer (`pvegpu render`) and the reader
(apply/bundle.py) cannot disagree on a key: reading what was written gives the same value
back (tests/test_contract.py). The reader refuses anything else with a `ContractError`
whose message apply reports as `bundle-invalid`.

The facts, servers and findings stay JSON objects here: apply and check read them by key,
and their forms are those of the facts JSON and `Diagnostic.document()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from pvegpu.rendering.review.actions import ACTIONS, OMIT_DEFAULT, Action
from pvegpu.values import value_class

APPLY_SCHEMA = "pvegpu.apply/1"

NO_APPLY_STEPS = (
    "has no apply steps (rendered by an older pvegpu, or by write_bundle without plan=: "
    "docs/api.md)"
)


class ContractError(ValueError):
    """MANIFEST.json's `apply` key is not a contract this pvegpu wrote."""


@value_class
@attrs.frozen(eq=False, repr=False)
class ContractStep:
    """One runbook step as apply runs it: its actions, and what SUMMARY.md says to expect."""

    title: str
    expect: str
    output: tuple[str, ...]
    actions: tuple[Action, ...]


@value_class
@attrs.frozen(eq=False, repr=False)
class ApplyContract:
    digest: str
    """sha256 of the planned functions' facts (apply_doc.facts_digest)."""
    functions: tuple[dict[str, Any], ...]
    split_unit: str | None
    serving: tuple[dict[str, Any], ...]
    findings: tuple[dict[str, Any], ...]
    """The plan's findings (severity, code, subject, message): `pvegpu check` repeats them."""
    steps: tuple[ContractStep, ...]
    boot_units: tuple[str, ...] = ()
    """The boot units that ready the containers' GPUs (device nodes, the host's staged
    userspace): `check` finds each installed and enabled. Left out of the JSON while
    empty, so bundles without them read as before."""


# --- actions ----------------------------------------------------------------


def action_to_json(action: Action) -> dict[str, Any]:
    fields = {f.name: getattr(action, f.name) for f in attrs.fields(type(action))}
    for field in attrs.fields(type(action)):
        if field.metadata.get(OMIT_DEFAULT) and fields[field.name] == field.default:
            del fields[field.name]
    return {
        "kind": action.kind,
        **{k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()},
    }


def action_from_json(doc: object) -> Action:
    """The action a MANIFEST.json entry describes; ValueError for anything else."""
    if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
        raise ValueError(f"not an action: {doc!r}")
    cls = ACTIONS.get(doc["kind"])
    if cls is None:
        raise ValueError(f"unknown action kind {doc['kind']!r}")
    values: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.name not in doc:
            if field.default is attrs.NOTHING:
                raise ValueError(f"{cls.kind}: missing {field.name!r}")
            continue
        value = doc[field.name]
        expected = str(field.type)
        if expected.startswith("tuple"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{cls.kind}.{field.name}: expected a list of strings")
            value = tuple(value)
        elif expected == "int" and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"{cls.kind}.{field.name}: expected an integer")
        elif expected == "bool" and not isinstance(value, bool):
            raise ValueError(f"{cls.kind}.{field.name}: expected true or false")
        elif expected == "str" and not isinstance(value, str):
            raise ValueError(f"{cls.kind}.{field.name}: expected a string")
        values[field.name] = value
    extra = set(doc) - {"kind"} - {f.name for f in attrs.fields(cls)}
    if extra:
        raise ValueError(f"{cls.kind}: unknown keys {sorted(extra)}")
    return cls(**values)


# --- the contract -----------------------------------------------------------


def step_to_json(step: ContractStep) -> dict[str, Any]:
    return {
        "title": step.title,
        "expect": step.expect,
        "output": list(step.output),
        "actions": [action_to_json(a) for a in step.actions],
    }


def contract_to_json(contract: ApplyContract) -> dict[str, Any]:
    """The `apply` key of MANIFEST.json; its key order is part of the golden bytes."""
    return {
        "schema": APPLY_SCHEMA,
        "facts": {"digest": contract.digest, "functions": list(contract.functions)},
        "split_unit": contract.split_unit,
        **({"boot_units": list(contract.boot_units)} if contract.boot_units else {}),
        "serving": list(contract.serving),
        "findings": list(contract.findings),
        "steps": [step_to_json(s) for s in contract.steps],
    }


def _step_from_json(doc: Mapping[str, Any]) -> ContractStep:
    return ContractStep(
        doc["title"],
        doc.get("expect", ""),
        tuple(doc.get("output", ())),
        tuple(action_from_json(a) for a in doc["actions"]),
    )


def contract_from_json(doc: object) -> ApplyContract:
    """The contract `contract_to_json` wrote; ContractError for anything else.

    A contract of another schema (or none) says so first: a bundle rendered for review
    only has no `apply` key, and the fix is to render it again.
    """
    if not isinstance(doc, dict) or doc.get("schema") != APPLY_SCHEMA:
        raise ContractError(NO_APPLY_STEPS)
    try:
        steps = tuple(_step_from_json(s) for s in doc["steps"])
    except (KeyError, TypeError, ValueError) as err:
        raise ContractError(f"apply.steps: {err}") from err
    facts = doc.get("facts", {})
    boot_units = doc.get("boot_units", [])
    if not isinstance(boot_units, list) or not all(isinstance(u, str) for u in boot_units):
        raise ContractError(f"apply.boot_units: expected a list of unit names, got {boot_units!r}")
    return ApplyContract(
        digest=str(facts.get("digest", "")),
        functions=tuple(facts.get("functions", ())),
        split_unit=doc.get("split_unit"),
        serving=tuple(doc.get("serving", ())),
        findings=tuple(doc.get("findings", ())),
        steps=steps,
        boot_units=tuple(boot_units),
    )
