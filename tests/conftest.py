"""Fixtures shared by the test modules: golden files, fixture hosts, plans; test settings.

Plans and facts come from bundled.py, computed once per session: they are frozen, so
sharing them cannot leak one test's changes into another (attrs.evolve makes copies).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from syrupy.assertion import SnapshotAssertion

import bundled
import depth
from golden_ext import golden_extension
from pvegpu.model.plan import Plan

# tmp_path on tmpfs where there is room: many tests copy a fixture host (~1500 entries),
# and a copy on disk costs ten times the CPU (0.6 s against 0.07 s). pytest's numbered
# directories under it stay safe for concurrent runs, and passing tests' directories go
# (pyproject's tmp_path_retention_policy). A small /dev/shm (a container's 64 MB, a CI
# runner's few GB) would fill up mid-run, so below SHM_NEEDED the system's temp stays.
SHM_NEEDED = 4 << 30


def _shm_has_room() -> bool:
    try:
        return os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free >= SHM_NEEDED
    except OSError:
        return False


if "PYTEST_DEBUG_TEMPROOT" not in os.environ and _shm_has_room():
    os.environ["PYTEST_DEBUG_TEMPROOT"] = "/dev/shm"

# Hypothesis' timing checks (the 200 ms deadline, "input generation is slow") measure the
# machine, not the code: on a shared two-core box running two workers they fail at random.
# Example counts stay as each test sets them.
# Example counts: tests/depth.py (quick by default, PVEGPU_THOROUGH=1 for the full ones).
settings.register_profile(
    "pvegpu",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=depth.examples(100),
)
settings.load_profile("pvegpu")


@pytest.fixture
def golden(snapshot: SnapshotAssertion) -> Callable[[str], SnapshotAssertion]:
    """`golden("conf")` is a snapshot stored as tests/golden/<module>/<test>.conf."""

    def use(ext: str) -> SnapshotAssertion:
        return snapshot.use_extension(golden_extension(ext))

    return use


@pytest.fixture
def fixture_root() -> Callable[[str], Path]:
    """`fixture_root(name)`: fixtures/sysfs/<name>, asserted to exist."""
    return bundled.fixture_root


@pytest.fixture(scope="session")
def kpro6() -> Plan:
    """kpro6 as examples/kpro6.toml splits it (NUMA 0 to LXC 129 with SGLang, NUMA 1 to
    VM 200), discovered with its serving files and planned once."""
    return bundled.example_plan("kpro6")


@pytest.fixture(scope="session")
def kpro6_plan() -> Plan:
    """kpro6 split by bundled.KPRO6_SPEC: the same GPUs, no serving."""
    return bundled.spec_plan("kpro6", bundled.KPRO6_SPEC)


@pytest.fixture(scope="session")
def workstation() -> Plan:
    """The workstation's A4000 to VM 110 (bundled.WORKSTATION_VM)."""
    return bundled.spec_plan("workstation", bundled.WORKSTATION_VM)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The quick run leaves out the cases marked `thorough` (tests/depth.py)."""
    if depth.THOROUGH:
        return
    dropped = [item for item in items if item.get_closest_marker("thorough") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker("thorough") is None]
