"""A spec's schema problems come in one refusal: wrong types, unknown and missing keys
and the value and cross-key rules together, in every table and every pool, in the
order of the spec, one problem per mistake (spec/salvage.py)."""

from __future__ import annotations

import copy
import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pvegpu.errors import SpecError
from pvegpu.pipeline import parse_spec, spec_from_data
from spec_toml import toml_text

# Ten mistakes: seven a wrong type or unknown key stops cattrs at, three that only the
# value rules see, which used to wait for the next run.
TEN = """\
node = "kpro6"

[host]
name = "kpro6"

[[pools]]
name = "sglang"
numa_node = 0
colour = "red"

[pools.lxc]
vmid = "129"
devices = "mknod"

[pools.lxc.serving]
model_path = "/models/q"
port = 0
tp = 4

[[pools]]
name = "vm"
gpus = ["81:00.0", "zz:00.0"]
mapping = { id = "pro6000-vm", descripton = "VMs" }

[pools.vfio]

[[pools]]
name = "ct"
count = -2

[pools.lxc]
vmid = 130
gid = "render"
"""

TEN_PROBLEMS = [
    ("spec-unknown-key", "host", 3),
    ("spec-unknown-key", "pools[0].colour", 9),
    ("spec-invalid-value", "pools[0].lxc.vmid", 12),
    ("spec-invalid-value", "pools[0].lxc.devices", 13),
    ("spec-invalid-value", "pools[0].lxc.serving.port", 17),
    ("spec-unknown-key", "pools[0].lxc.serving.tp", 18),
    ("spec-invalid-address", "pools[1].gpus[1]", 22),
    ("spec-unknown-key", "pools[1].mapping.descripton", 23),
    ("spec-invalid-value", "pools[2].count", 29),
    ("spec-invalid-value", "pools[2].lxc.gid", 33),
]


def refused(text: str) -> list[tuple[str, str, int | None]]:
    with pytest.raises(SpecError) as err:
        parse_spec(text)
    return [(p.code, p.subject, p.line) for p in err.value.problems]


def test_every_schema_problem_comes_in_one_refusal_in_spec_order() -> None:
    """Types, unknown keys and value rules of every table and pool, by code and line,
    in the order the spec sets them."""
    assert refused(TEN) == TEN_PROBLEMS


VALID = """\
node = "kpro6"

[[pools]]
name = "sglang"
numa_node = 0

[pools.lxc]
vmid = 129

[pools.lxc.serving]
model_path = "/models/q"

[[pools]]
name = "vm"
gpus = ["81:00.0"]
mapping = { id = "pro6000-vm" }

[pools.vfio]

[[pools]]
name = "ct"
count = 2

[pools.lxc]
vmid = 130
"""


def test_the_valid_spec_loads() -> None:
    assert [p.name for p in parse_spec(VALID).pools] == ["sglang", "vm", "ct"]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # A broken selector is still a selector: no "selects by none of" as well.
        ("count = 2", 'count = "two"', ("spec-invalid-value", "pools[2].count")),
        ('gpus = ["81:00.0"]', 'gpus = "81:00.0"', ("spec-invalid-value", "pools[1].gpus")),
        ('gpus = ["81:00.0"]', "gpus = [81]", ("spec-invalid-value", "pools[1].gpus[0]")),
        # A broken consumer is still a consumer.
        ("vmid = 130\n", "", ("spec-missing-key", "pools[2].lxc.vmid")),
        ("[pools.lxc]\nvmid = 130", "lxc = 5", ("spec-invalid-value", "pools[2].lxc")),
        ("[pools.vfio]", "vfio = []", ("spec-invalid-value", "pools[1].vfio")),
        # A vfio pool's broken mapping is still a mapping.
        (
            'mapping = { id = "pro6000-vm" }',
            "mapping = 5",
            ("spec-invalid-value", "pools[1].mapping"),
        ),
        (
            'mapping = { id = "pro6000-vm" }',
            "mapping = {}",
            ("spec-missing-key", "pools[1].mapping.id"),
        ),
        # A broken serving table or required key: nothing inside it judged again.
        (
            'model_path = "/models/q"',
            "model_path = 1",
            ("spec-invalid-value", "pools[0].lxc.serving.model_path"),
        ),
        (
            'model_path = "/models/q"',
            "port = 80",
            ("spec-missing-key", "pools[0].lxc.serving.model_path"),
        ),
        # A broken name or guest id clashes with no other pool's.
        ('name = "ct"', "name = 7", ("spec-invalid-value", "pools[2].name")),
        ('name = "ct"\n', "", ("spec-missing-key", "pools[2].name")),
        ("vmid = 130", 'vmid = "129"', ("spec-invalid-value", "pools[2].lxc.vmid")),
        # A broken node list is not "the spec names no node".
        ('node = "kpro6"', 'nodes = "kpro6"', ("spec-invalid-value", "nodes")),
        ('node = "kpro6"', "node = 6", ("spec-invalid-value", "node")),
    ],
)
def test_a_broken_key_is_one_problem_not_a_cascade(
    old: str, new: str, expected: tuple[str, str]
) -> None:
    """One mistake, one problem: the keys and checks that depend on a broken key (a
    pool's selector, consumer, mapping, name; the spec's nodes) are not refused too."""
    assert old in VALID
    assert [p[:2] for p in refused(VALID.replace(old, new, 1))] == [expected]


def test_pools_of_the_wrong_type_is_one_problem() -> None:
    """`pools` as a number is that, not also "the spec defines no pool"."""
    assert [p[:2] for p in refused('node = "kpro6"\npools = 6\n')] == [
        ("spec-invalid-value", "pools")
    ]
    assert [p[:2] for p in refused('node = "kpro6"\npools = [6]\n')] == [
        ("spec-invalid-value", "pools[0]")
    ]


def _pool(index: int) -> dict[str, Any]:
    """A valid pool of its own: name, NUMA node and guest id no other pool has."""
    serving = {"model_path": "/models/q"}
    return {
        "name": f"p{index}",
        "numa_node": index,
        "lxc": {"vmid": 200 + index, "serving": serving},
    }


def _set(*keys: str, value: Any, drop: str = "") -> Any:
    def mistake(pool: dict[str, Any]) -> None:
        table = pool
        for key in keys[:-1]:
            table = table[key]
        table[keys[-1]] = value
        if drop:
            del pool[drop]

    return mistake


def _drop(key: str) -> Any:
    return lambda pool: pool.pop(key)


# Independent mistakes, each with the one problem it makes: (code, path in its pool).
MISTAKES = [
    (_set("colour", value="red"), "spec-unknown-key", ".colour"),
    (_set("lxc", "vmid", value="200"), "spec-invalid-value", ".lxc.vmid"),
    (_set("lxc", "vmid", value=5), "spec-invalid-value", ".lxc.vmid"),
    (_set("lxc", "devices", value="mknod"), "spec-invalid-value", ".lxc.devices"),
    (_set("lxc", "mode", value="rw"), "spec-invalid-value", ".lxc.mode"),
    (_set("lxc", value=5), "spec-invalid-value", ".lxc"),
    (_set("gpus", value=["zz:00.0"], drop="numa_node"), "spec-invalid-address", ".gpus[0]"),
    (_set("count", value=-2, drop="numa_node"), "spec-invalid-value", ".count"),
    (_set("count", value="two", drop="numa_node"), "spec-invalid-value", ".count"),
    (_set("name", value="-p"), "spec-invalid-value", ".name"),
    (_drop("name"), "spec-missing-key", ".name"),
    (_set("lxc", "serving", "tp", value=4), "spec-unknown-key", ".lxc.serving.tp"),
    (_set("lxc", "serving", "port", value=0), "spec-invalid-value", ".lxc.serving.port"),
    (_set("lxc", "serving", "port", value="80"), "spec-invalid-value", ".lxc.serving.port"),
    (
        _set("lxc", "serving", "model_path", value="q"),
        "spec-invalid-value",
        ".lxc.serving.model_path",
    ),
    (
        _set("lxc", "serving", "environment", value={"HF_TOKEN": "hf_x"}),
        "spec-secret",
        ".lxc.serving.environment.HF_TOKEN",
    ),
    (
        _set("lxc", "serving", "pipeline_parallel_size", value=2),
        "spec-engine-key",
        ".lxc.serving.pipeline_parallel_size",
    ),
]


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(len(MISTAKES))), st.integers(1, len(MISTAKES)), st.booleans())
def test_independent_mistakes_make_one_problem_each_in_spec_order(
    order: list[int], many: int, as_text: bool
) -> None:
    """Any set of independent mistakes, one per pool, in any order: the one refusal holds
    exactly one problem per mistake, in the order of the pools."""
    pools = []
    expected = []
    for index, which in enumerate(order[:many]):
        pool = _pool(index)
        mistake, code, path = MISTAKES[which]
        mistake(pool)
        pools.append(pool)
        expected.append((code, f"pools[{index}]{path}"))
    doc = {"node": "kpro6", "pools": copy.deepcopy(pools)}
    with pytest.raises(SpecError) as err:
        if as_text:
            parse_spec(toml_text(doc))
        else:
            spec_from_data(doc)
    assert [(p.code, p.subject) for p in err.value.problems] == expected
    # The stand-ins went into a copy: data handed in (Ansible's spec) is left as it was.
    assert doc["pools"] == pools


def test_a_broken_key_nested_deep_is_refused_not_a_crash() -> None:
    """Standing in for a broken key copies only the tables and arrays on its way: a deep
    copy (or a recursive walk) of a value nested hundreds of arrays deep runs out of
    stack. As deep as tomllib reads, and deeper in a spec given as data (Ansible's)."""

    def spec(depth: int) -> str:
        return VALID.replace('gpus = ["81:00.0"]', "gpus = [" + "[" * depth + "]" * depth + "]")

    low, high = 1, 2000  # the deepest array tomllib reads, found as this Python has it
    while low < high:
        mid = (low + high + 1) // 2
        try:
            tomllib.loads(spec(mid))
            low = mid
        except RecursionError:
            high = mid - 1
    assert low > 100
    # A few levels less: the loader calls tomllib from a few frames deeper than this test.
    expected = [("spec-invalid-value", "pools[1].gpus[0]")]
    assert [p[:2] for p in refused(spec(low - 10))] == expected
    deep: list[Any] = []
    for _ in range(900):
        deep = [deep]
    doc = tomllib.loads(VALID)
    doc["pools"][1]["gpus"] = [deep]
    with pytest.raises(SpecError) as err:
        spec_from_data(doc)
    assert [(p.code, p.subject) for p in err.value.problems] == expected
