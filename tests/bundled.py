"""The committed fixture hosts and example specs, read and planned once per test session.

Discovery and planning are pure, and what they return is frozen (attrs frozen classes and
tuples), so one result serves every test that reads the same host or example: modules
ask here instead of discovering fixtures/sysfs/kpro6 again per test. conftest.py wraps
the common ones as fixtures; module-level code (parametrize lists, helpers) calls these.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

from pvegpu.host.discover import discover
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.model.schema import Spec
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.spec.load import load_spec, parse_spec

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures" / "sysfs"
EXAMPLES = REPO / "examples"
CP = shutil.which("cp")
EXAMPLE_HOSTS = {"kpro6": "kpro6", "kpro6-raw": "kpro6", "workstation": "workstation"}
"""examples/<name>.toml -> the fixture host it is written for (default: the same name)."""


def fixture_root(name: str) -> Path:
    """fixtures/sysfs/<name>, which must exist."""
    path = FIXTURES / name
    assert path.is_dir(), f"no fixture host {name} under {FIXTURES}"
    return path


def copy_tree(source: Path, dest: Path) -> Path:
    """A writable copy of `source` at `dest`, links copied as links: cp -R -P where there
    is one, at half the CPU of shutil.copytree (fixture hosts hold ~1500 entries)."""
    # cp would copy into an existing dest; copytree refuses one, and so does this.
    assert not dest.exists(), f"{dest} exists"
    if CP is None:
        shutil.copytree(source, dest, symlinks=True)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([CP, "-R", "-P", str(source), str(dest)], check=True)
    return dest


def spec_path(name: str) -> Path:
    return EXAMPLES / f"{name}.toml"


@cache
def host_facts(name: str) -> HostFacts:
    """discover(fixtures/sysfs/<name>): the host without any spec's serving files."""
    return discover(fixture_root(name))


@cache
def example_spec(name: str) -> Spec:
    """examples/<name>.toml, loaded."""
    return load_spec(spec_path(name))


@cache
def example_facts(name: str, host: str | None = None) -> HostFacts:
    """The facts the CLI reads for examples/<name>.toml on its fixture host (or `host`):
    discovery with the serving files the spec names."""
    return discover_for(example_spec(name), fixture_root(host or EXAMPLE_HOSTS.get(name, name)))


@cache
def example_plan(name: str, host: str | None = None) -> Plan:
    """plan() for examples/<name>.toml on its fixture host (or `host`), as the CLI makes it."""
    return plan(example_facts(name, host), example_spec(name))


@cache
def spec_plan(host: str, spec: str) -> Plan:
    """plan() for a spec given as TOML text on a fixture host (discovery without serving
    files: the spec must not need any)."""
    return plan(host_facts(host), parse_spec(spec))


_KPRO6_LXC_POOL = """\
node = "kpro6"

[[pools]]
name = "pro6000"
numa_node = 0
mapping = { id = "pro6000" }
lxc = { vmid = 129 }
"""
KPRO6_LXC_ONLY = _KPRO6_LXC_POOL
"""kpro6's NUMA 0 GPUs to LXC 129, nothing to vfio-pci."""
KPRO6_SPEC = (
    _KPRO6_LXC_POOL
    + """
[[pools]]
name = "pro6000-vm"
numa_node = 1
mapping = { id = "pro6000-vm" }
vfio = { vm = { vmid = 200 } }
"""
)
"""kpro6's split without serving: NUMA 0 GPUs stay on nvidia for LXC 129, NUMA 1 go to
VM 200 (the split script's tests use it: no model files needed on host copies)."""

WORKSTATION_VM = """
node = "pve-ws"
[[pools]]
name = "vm"
gpus = ["39:00.0"]
mapping = { id = "ws-gpu" }
[pools.vfio]
vm = { vmid = 110 }
"""
"""The workstation's A4000 to VM 110 by address, no serving."""
