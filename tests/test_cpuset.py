"""The container's CPU pin (`lxc.cgroup2.cpuset.cpus`) is the spec's `lxc.cpuset` setting.

`"numa"` (the default, the behaviour before the setting existed): a container whose
server is pinned to one NUMA node gets that node's CPUs. `"keep"`: pvegpu never writes
the line, and warns when the container's own set cannot hold the server's affinity.
"""

from __future__ import annotations

import attrs
import pytest

from bundled import EXAMPLES, FIXTURES
from pvegpu.errors import SpecError
from pvegpu.model.artifact import REVERT_BUNDLE
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.plan import Plan
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.spec.load import parse_spec

CT129 = "etc/pve/lxc/129.conf"
KPRO6 = (EXAMPLES / "kpro6.toml").read_text()


def _spec(cpuset: str | None) -> str:
    line = f'cpuset = "{cpuset}"\n' if cpuset is not None else ""
    assert "[pools.lxc]\nvmid = 129\n" in KPRO6
    return KPRO6.replace("[pools.lxc]\nvmid = 129\n", f"[pools.lxc]\nvmid = 129\n{line}")


def _plan(cpuset: str | None, facts: HostFacts | None = None) -> Plan:
    spec = parse_spec(_spec(cpuset), "kpro6.toml")
    return plan(facts or discover_for(spec, FIXTURES / "kpro6"), spec)


def _config(result: Plan) -> str:
    (config,) = [a for a in render(result) if a.path == CT129 and a.bundle != REVERT_BUNDLE]
    return config.content


def _codes(result: Plan) -> set[str]:
    return {f.code for f in result.findings}


def test_numa_is_the_default_and_pins_the_server_node() -> None:
    for cpuset in (None, "numa"):
        result = _plan(cpuset)
        assert str(GuestConfig(ConfigFile(CT129, _config(result))).cpuset) == "0-31,64-95"
        assert "lxc-cpuset-kept" not in _codes(result)


def test_keep_writes_no_cpuset_and_warns() -> None:
    result = _plan("keep")
    (container,) = [p.lxc for p in result.pools if p.lxc is not None]
    assert container.cpuset is None
    assert GuestConfig(ConfigFile(CT129, _config(result))).cpuset is None
    (finding,) = [f for f in result.findings if f.code == "lxc-cpuset-kept"]
    assert finding.subject == CT129 and "NUMA node 0 (0-31,64-95)" in finding.message


def test_keep_leaves_an_existing_line_and_is_quiet_when_it_holds_the_node() -> None:
    spec = parse_spec(_spec("keep"), "kpro6.toml")
    facts = discover_for(spec, FIXTURES / "kpro6")
    base = facts.file(CT129)
    assert base is not None
    for held, warned in (("0-127", False), ("0-15", True)):
        text = base.content.replace(
            "arch: amd64\n", f"arch: amd64\nlxc.cgroup2.cpuset.cpus: {held}\n"
        )
        files = tuple(ConfigFile(f.path, text) if f.path == CT129 else f for f in facts.files)
        result = _plan("keep", attrs.evolve(facts, files=files))
        assert str(GuestConfig(ConfigFile(CT129, _config(result))).cpuset) == held
        assert ("lxc-cpuset-kept" in _codes(result)) is warned


def test_unknown_cpuset_value_is_a_spec_error() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(_spec("pinned"), "kpro6.toml")
    (problem,) = err.value.problems
    assert problem.subject == "pools[0].lxc.cpuset"
