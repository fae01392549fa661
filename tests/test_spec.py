from __future__ import annotations

from pathlib import Path

import pytest

from pvegpu.errors import SpecError
from pvegpu.model.schema import DeviceStyle, P2PSetting
from pvegpu.spec.load import load_spec, parse_spec

REPO = Path(__file__).resolve().parent.parent

BASE = """
node = "kpro6"
[[pools]]
name = "ct"
numa_node = 0
[pools.lxc]
vmid = 129
"""


def codes(err: SpecError) -> list[tuple[str, str]]:
    return [(p.subject, p.code) for p in err.problems]


def test_example_spec_loads() -> None:
    """examples/kpro6.toml is a valid spec: NUMA 0 to LXC 129, NUMA 1 to pro6000-vm."""
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    ct, vm = spec.pools
    assert (ct.numa_node, ct.lxc and ct.lxc.vmid, ct.lxc and ct.lxc.devices) == (
        0,
        129,
        DeviceStyle.DEV,
    )
    assert ct.lxc is not None and ct.lxc.serving is not None
    assert ct.lxc.serving.p2p is P2PSetting.AUTO
    assert vm.numa_node == 1 and vm.vfio is not None
    assert vm.mapping is not None and vm.mapping.id == "pro6000-vm"
    assert spec.source.endswith("kpro6.toml")


def test_bad_address_names_its_path() -> None:
    """A malformed address is reported at its exact spec path with the text given."""
    text = BASE.replace("numa_node = 0", 'gpus = ["0000:01:00.0", "81:00"]')
    with pytest.raises(SpecError) as err:
        parse_spec(text)
    assert codes(err.value) == [("pools[0].gpus[1]", "spec-invalid-address")]
    assert "'81:00' is not a PCI address" in str(err.value)


def test_type_errors_and_unknown_keys_reported_together() -> None:
    """Wrong types and unknown keys anywhere are all reported, each with its path."""
    text = BASE.replace("vmid = 129", 'vmid = "129"\ndevice = "dev"')
    with pytest.raises(SpecError) as err:
        parse_spec(text)
    assert sorted(codes(err.value)) == [
        ("pools[0].lxc.device", "spec-unknown-key"),
        ("pools[0].lxc.vmid", "spec-invalid-value"),
    ]


def test_bool_is_not_an_integer() -> None:
    """TOML `true` where a number belongs is refused, not read as 1."""
    with pytest.raises(SpecError, match=r"pools\[0\]\.numa_node \(line \d+\): expected an integer"):
        parse_spec(BASE.replace("numa_node = 0", "numa_node = true"))


def test_enum_choices_listed() -> None:
    """An unknown device style lists the valid ones."""
    with pytest.raises(SpecError, match="'cgroup' is not one of dev, raw"):
        parse_spec(BASE.replace("vmid = 129", 'vmid = 129\ndevices = "cgroup"'))


def test_missing_required_key() -> None:
    """A pool without a name says which key is missing where."""
    with pytest.raises(SpecError) as err:
        parse_spec(BASE.replace('name = "ct"\n', ""))
    assert codes(err.value) == [("pools[0].name", "spec-missing-key")]


@pytest.mark.parametrize(
    ("old", "new", "code"),
    [
        ("numa_node = 0", "numa_node = 0\ncount = 2", "spec-pool-selector"),
        ("numa_node = 0", "", "spec-pool-selector"),
        ("[pools.lxc]\nvmid = 129", "[pools.vfio]", "spec-vfio-needs-mapping"),
        ("[pools.lxc]\nvmid = 129", "", "spec-pool-consumer"),
        ("numa_node = 0", "count = 0", "spec-invalid-value"),
        ("numa_node = 0", 'numa_node = 0\nmapping = { id = "9bad" }', "spec-invalid-value"),
        (
            "numa_node = 0",
            'numa_node = 0\nmapping = { id = "a1", description = "x,y" }',
            "spec-invalid-value",
        ),
        ("vmid = 129", 'vmid = 129\nmode = "rw"', "spec-invalid-value"),
    ],
)
def test_semantic_refusals(old: str, new: str, code: str) -> None:
    """Each structural rule of a pool is enforced with its own code."""
    with pytest.raises(SpecError) as err:
        parse_spec(BASE.replace(old, new))
    assert code in [p.code for p in err.value.problems]


def test_duplicates_across_pools() -> None:
    """Two pools may not share a name, a guest or a mapping id."""
    text = BASE + BASE.split("\n", 2)[2].replace("numa_node = 0", "numa_node = 1")
    with pytest.raises(SpecError) as err:
        parse_spec(text)
    assert {p.code for p in err.value.problems} == {
        "spec-duplicate-pool",
        "spec-duplicate-guest",
    }


def test_toml_syntax_error_names_source() -> None:
    """Broken TOML is reported against the file it came from."""
    with pytest.raises(SpecError) as err:
        parse_spec("node = ", source="site.toml")
    assert codes(err.value) == [("site.toml", "spec-syntax")]


def test_unreadable_spec_file(tmp_path: Path) -> None:
    """A missing spec file is a SpecError naming the path, not a traceback."""
    with pytest.raises(SpecError) as err:
        load_spec(tmp_path / "nope.toml")
    assert err.value.problems[0].code == "spec-unreadable"
    assert err.value.exit_code == 4


def test_environment_table() -> None:
    """serving.environment is a TOML table of strings, kept in order."""
    text = BASE + (
        '[pools.lxc.serving]\nversion = "0.5.23"\nmodel_path = "/m"\n'
        '[pools.lxc.serving.environment]\nHF_HOME = "/shared/hf"\nOMP_NUM_THREADS = "8"\n'
    )
    spec = parse_spec(text)
    serving = spec.pools[0].lxc.serving if spec.pools[0].lxc else None
    assert serving is not None
    assert serving.environment == (("HF_HOME", "/shared/hf"), ("OMP_NUM_THREADS", "8"))
