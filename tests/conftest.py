from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from golden_ext import golden_extension

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures" / "sysfs"


@pytest.fixture
def golden(snapshot: SnapshotAssertion) -> Callable[[str], SnapshotAssertion]:
    """`golden("conf")` is a snapshot stored as tests/golden/<module>/<test>.conf."""

    def use(ext: str) -> SnapshotAssertion:
        return snapshot.use_extension(golden_extension(ext))

    return use


@pytest.fixture
def fixture_root() -> Callable[[str], Path]:
    def root(name: str) -> Path:
        path = FIXTURES / name
        assert path.is_dir(), f"no fixture host {name} under {FIXTURES}"
        return path

    return root
