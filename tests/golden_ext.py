"""Golden files: one syrupy single-file text snapshot per artifact, with its real extension.

Snapshots land in tests/golden/<test module>/<test name>.<ext>, so a golden 129.conf can
be opened, linted and reviewed like the file it stands for.
"""

from __future__ import annotations

from functools import cache

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode


@cache
def golden_extension(ext: str) -> type[SingleFileSnapshotExtension]:
    """A snapshot extension writing text files ending in `.ext` under tests/golden/."""
    return type(
        f"Golden_{ext.replace('.', '_')}",
        (SingleFileSnapshotExtension,),
        {"file_extension": ext, "_write_mode": WriteMode.TEXT, "snapshot_dirname": "golden"},
    )
