"""Golden files: one syrupy single-file text snapshot per artifact, with its real extension.

Snapshots land in tests/golden/<test module>/<test name>.<ext>, so a golden 129.conf can
be opened, linted and reviewed like the file it stands for.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

if TYPE_CHECKING:
    from syrupy.location import PyTestLocation

GOLDEN_DIR = "golden"


class GoldenExtension(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT

    # syrupy's single-file dirname() reads the base class's `__snapshots__` regardless of
    # snapshot_dirname, so the location is spelled out here.
    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        return str(Path(test_location.filepath).parent / GOLDEN_DIR / test_location.basename)

    @classmethod
    def discovery_dirname(cls, *, test_location: PyTestLocation) -> str:
        return str(Path(test_location.filepath).parent / GOLDEN_DIR)


@cache
def golden_extension(ext: str) -> type[SingleFileSnapshotExtension]:
    """A snapshot extension writing text files ending in `.ext` under tests/golden/."""
    # `_file_extension`: the same setting under syrupy 4's name (Debian 13 ships 4.9),
    # which would otherwise look for every golden as .raw and find none.
    names = {"file_extension": ext, "_file_extension": ext}
    return type(f"Golden_{ext.replace('.', '_')}", (GoldenExtension,), names)
