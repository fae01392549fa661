"""Writing a bundle directory: manifests, and what happens to an existing --out."""

from __future__ import annotations

from pathlib import Path

import pytest

from pvegpu.errors import RenderError
from pvegpu.model.artifact import REVIEW, Artifact
from pvegpu.rendering.bundle import write_bundle


def test_rerender_removes_files_of_the_previous_bundle(tmp_path: Path) -> None:
    """A file the previous render wrote but this one does not is gone, not left stale."""
    old = Artifact("snippets/qemu-server/200.conf", "hostpci0: mapping=x\n", "old", target=REVIEW)
    keep = Artifact("SUMMARY.md", "# new\n", "summary", target=REVIEW)
    write_bundle([old, keep], tmp_path)
    assert (tmp_path / old.path).is_file()
    write_bundle([keep], tmp_path)
    assert not (tmp_path / old.path).exists()
    assert (tmp_path / "SUMMARY.md").read_text() == "# new\n"


def test_foreign_directory_is_refused_untouched(tmp_path: Path) -> None:
    """--out pointing at a directory of other files is refused and nothing is written."""
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(RenderError) as err:
        write_bundle([Artifact("SUMMARY.md", "x\n", "s", target=REVIEW)], tmp_path)
    assert err.value.problems[0].code == "output-not-empty"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
