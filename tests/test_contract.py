"""The apply contract (MANIFEST.json's `apply` key): written by one function, read back by
one function, and reading what was written gives the same value; anything else is refused
as `bundle-invalid` before apply changes anything."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, get_args

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import bundled
from pvegpu.apply.bundle import bundle_from_files
from pvegpu.errors import BundleError
from pvegpu.rendering.bundle_layout import MANIFEST, bundle_files
from pvegpu.rendering.registry import render
from pvegpu.rendering.review.actions import Action
from pvegpu.rendering.review.apply_doc import apply_contract, manifest_header
from pvegpu.rendering.review.contract import (
    NO_APPLY_STEPS,
    ApplyContract,
    ContractStep,
    contract_from_json,
    contract_to_json,
)

EXAMPLES = ["kpro6", "kpro6-raw", "workstation", "mixed", "driver-upgrade"]


def _through_json(doc: dict[str, Any]) -> Any:
    return json.loads(json.dumps(doc))


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_examples_contract_reads_back_as_written(name: str) -> None:
    plan = bundled.example_plan(name)
    artifacts = render(plan)
    contract = apply_contract(plan, artifacts)
    assert contract.steps
    doc = _through_json(contract_to_json(contract))
    assert contract_from_json(doc) == contract
    assert contract_to_json(contract_from_json(doc)) == doc
    # The bundle apply reads carries the same value as the one render wrote.
    files = bundle_files(artifacts, **manifest_header(plan, artifacts, f"{name}.toml"))
    assert bundle_from_files(files).contract == contract


# --- any contract -----------------------------------------------------------

_FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "str": st.text(),
    "int": st.integers(),
    "bool": st.booleans(),
    "tuple[str, ...]": st.lists(st.text(), max_size=3).map(tuple),
    "str | None": st.none() | st.text(),
}


def _action_strategy(cls: type[Action]) -> st.SearchStrategy[Action]:
    fields = {f.name: _FIELD_VALUES[str(f.type)] for f in attrs.fields(cls)}
    return st.builds(cls, **fields)


actions: st.SearchStrategy[Action] = st.one_of(*(_action_strategy(c) for c in get_args(Action)))
_json_objects = st.lists(
    st.dictionaries(st.text(max_size=8), st.none() | st.booleans() | st.integers() | st.text()),
    max_size=3,
).map(tuple)
contracts = st.builds(
    ApplyContract,
    digest=st.text(),
    functions=_json_objects,
    split_unit=st.none() | st.text(),
    serving=_json_objects,
    findings=_json_objects,
    steps=st.lists(
        st.builds(
            ContractStep,
            title=st.text(),
            expect=st.text(),
            output=st.lists(st.text(), max_size=3).map(tuple),
            actions=st.lists(actions, max_size=4).map(tuple),
        ),
        max_size=4,
    ).map(tuple),
    boot_units=st.lists(st.text(), max_size=2).map(tuple),
)


@given(contracts)
def test_any_contract_reads_back_as_written(contract: ApplyContract) -> None:
    assert contract_from_json(_through_json(contract_to_json(contract))) == contract


# --- refused ----------------------------------------------------------------


def _spoiled(change: Callable[[dict[str, Any]], None]) -> dict[str, tuple[str, int]]:
    plan = bundled.example_plan("kpro6")
    artifacts = render(plan)
    files = bundle_files(artifacts, **manifest_header(plan, artifacts, "kpro6.toml"))
    doc = json.loads(files[MANIFEST][0])
    change(doc)
    return {**files, MANIFEST: (json.dumps(doc), 0o644)}


def _set(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["apply"].__setitem__(key, value)


def _first_step(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["apply"]["steps"][0].__setitem__(key, value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda doc: doc.pop("apply"), NO_APPLY_STEPS),
        (_set("schema", "pvegpu.apply/0"), NO_APPLY_STEPS),
        (lambda doc: doc.__setitem__("apply", []), NO_APPLY_STEPS),
        (lambda doc: doc["apply"].pop("steps"), "apply.steps: 'steps'"),
        (_set("steps", 3), "apply.steps: 'int' object is not iterable"),
        (lambda doc: doc["apply"]["steps"][0].pop("title"), "apply.steps: 'title'"),
        (_first_step("actions", [{"kind": "rm-rf"}]), "apply.steps: unknown action kind 'rm-rf'"),
        (
            _first_step("actions", [{"kind": "manual", "line": 3}]),
            "apply.steps: manual.line: expected a string",
        ),
        (
            _set("boot_units", "pvegpu-device-nodes.service"),
            "apply.boot_units: expected a list of unit names, got 'pvegpu-device-nodes.service'",
        ),
    ],
)
def test_a_malformed_contract_is_refused_as_bundle_invalid(
    change: Callable[[dict[str, Any]], None], message: str
) -> None:
    with pytest.raises(BundleError) as err:
        bundle_from_files(_spoiled(change))
    (problem,) = err.value.problems
    assert (problem.code, problem.subject, problem.message) == ("bundle-invalid", MANIFEST, message)


# --- what a bundle without boot units or the host's userspace reads as ----------------


def test_boot_units_and_the_staged_tool_are_in_the_contract_only_where_used() -> None:
    """A plan with boot units lists them; one without leaves the key out, and a GPU check
    run from the container's own userspace has no `driver_dir` key: such bundles read as
    before both existed. With `userspace = "host"` the check runs the staged tool."""
    upgraded = bundled.example_plan("driver-upgrade")
    doc = contract_to_json(apply_contract(upgraded, render(upgraded)))
    assert doc["boot_units"] == ["pvegpu-device-nodes.service", "pvegpu-driver-userspace.service"]
    checks = [a for s in doc["steps"] for a in s["actions"] if a["kind"] == "check-gpus"]
    assert [c["driver_dir"] for c in checks] == ["/opt/pvegpu/driver"]
    workstation = bundled.example_plan("workstation")  # a VM pool only: no container nodes
    assert "boot_units" not in contract_to_json(apply_contract(workstation, render(workstation)))
    kpro6 = bundled.example_plan("kpro6")
    doc = contract_to_json(apply_contract(kpro6, render(kpro6)))
    checks = [a for s in doc["steps"] for a in s["actions"] if a["kind"] == "check-gpus"]
    assert checks and all("driver_dir" not in c for c in checks)
