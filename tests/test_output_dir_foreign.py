"""render --out never deletes what is not a previous bundle's own file (issue 17, item 3).

The previous bundle in OUT is replaced only when its MANIFEST.json is a regular pvegpu
manifest and every entry of OUT is a file it lists or a directory one of those is in.
Each odd OUT is refused with a Diagnostic naming the path, and OUT is left as it was, byte
for byte, with nothing written beside it. Before the fix a MANIFEST.json that was an
empty directory, or any empty directory in OUT, was deleted and render exited 0.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest

from bundled import REPO
from pvegpu.cli import main
from pvegpu.errors import RenderError
from pvegpu.model.artifact import REVIEW, Artifact
from pvegpu.rendering import cluster, outdir
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.bundle_layout import MANIFEST, MANIFEST_SCHEMA

SUMMARY = Artifact("SUMMARY.md", "# summary\n", "summary", target=REVIEW)
SNIPPET = Artifact("snippets/qemu-server/200.conf", "hostpci0: mapping=x\n", "vm", target=REVIEW)
BUNDLE_DOC = {"schema": MANIFEST_SCHEMA, "artifacts": [{"file": "SUMMARY.md"}]}


def _state(root: Path) -> dict[str, str]:
    """Every entry under `root`, directories included: kind and content or link text."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = f"link -> {path.readlink()}"
            elif path.is_dir():
                found[rel] = "dir"
            elif path.is_file():
                found[rel] = "file " + path.read_bytes().hex()
            else:
                found[rel] = "other"
    return found


def _manifest_dir(out: Path) -> None:
    (out / MANIFEST).mkdir()


def _manifest_dir_with_a_file(out: Path) -> None:
    (out / MANIFEST).mkdir()
    (out / MANIFEST / "notes.txt").write_text("mine\n")


def _manifest_link_to_a_real_manifest(out: Path) -> None:
    # A link to a genuine manifest elsewhere is still not this OUT's own file.
    elsewhere = out.parent / "elsewhere.json"
    elsewhere.write_text(json.dumps(BUNDLE_DOC))
    (out / "SUMMARY.md").write_text("not pvegpu's\n")
    (out / MANIFEST).symlink_to(elsewhere)


def _manifest_dangling_link(out: Path) -> None:
    (out / MANIFEST).symlink_to("/nonexistent/MANIFEST.json")


def _manifest_fifo(out: Path) -> None:
    os.mkfifo(out / MANIFEST)


def _manifest_not_json(out: Path) -> None:
    (out / MANIFEST).write_text("{ this is not json\n")


def _manifest_not_utf8(out: Path) -> None:
    (out / MANIFEST).write_bytes(b'{"schema": "\xff\xfe"}')


def _manifest_other_schema(out: Path) -> None:
    (out / MANIFEST).write_text(json.dumps({"schema": "other.manifest/1", "artifacts": []}))


def _manifest_artifacts_not_a_list(out: Path) -> None:
    (out / MANIFEST).write_text(json.dumps({"schema": MANIFEST_SCHEMA, "artifacts": {}}))


ODD_MANIFESTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "directory": (_manifest_dir, "is a directory"),
    "directory-with-file": (_manifest_dir_with_a_file, "is a directory"),
    "link-to-manifest": (_manifest_link_to_a_real_manifest, "is a symbolic link"),
    "dangling-link": (_manifest_dangling_link, "is a symbolic link"),
    "fifo": (_manifest_fifo, "is a named pipe"),
    "not-json": (_manifest_not_json, "is not a pvegpu bundle's manifest"),
    "not-utf8": (_manifest_not_utf8, "is not a pvegpu bundle's manifest"),
    "other-schema": (_manifest_other_schema, "is not a pvegpu bundle's manifest"),
    "artifacts-not-a-list": (_manifest_artifacts_not_a_list, "is not a pvegpu bundle's manifest"),
}


@pytest.mark.parametrize("case", sorted(ODD_MANIFESTS))
def test_odd_manifest_is_refused_naming_it_and_nothing_changes(tmp_path: Path, case: str) -> None:
    make, says = ODD_MANIFESTS[case]
    out = tmp_path / "out"
    out.mkdir()
    make(out)
    before = _state(tmp_path)
    with pytest.raises(RenderError) as err:
        write_bundle([SUMMARY], out)
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("output-not-empty", str(out / MANIFEST))
    assert problem.message.startswith(says)
    assert problem.fix == "move it out of --out, or choose a new --out directory"
    assert _state(tmp_path) == before


def test_unreadable_manifest_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read error (EACCES for another user's file; root reads anything, so it is
    injected) is its own code: the file may well be pvegpu's, but cannot be checked."""
    out = tmp_path / "out"
    write_bundle([SUMMARY], out)
    before = _state(tmp_path)

    def denied(path: Path) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(outdir, "_read_text", denied)
    with pytest.raises(RenderError) as err:
        write_bundle([SUMMARY], out)
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("output-unreadable", str(out / MANIFEST))
    assert "Permission denied" in problem.message
    assert _state(tmp_path) == before


def test_unlistable_directory_in_out_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory that cannot be listed may hold anything: refused, not deleted unseen."""
    out = tmp_path / "out"
    write_bundle([SUMMARY, SNIPPET], out)
    hidden = out / "snippets"
    before = _state(tmp_path)
    real = os.scandir

    def scandir(path: str) -> object:
        if Path(path) == hidden:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(RenderError) as err:
        write_bundle([SUMMARY], out)
    monkeypatch.undo()
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("output-unreadable", str(hidden))
    assert _state(tmp_path) == before


def _empty_dir_in_a_bundle(out: Path) -> str:
    write_bundle([SUMMARY], out)
    (out / "keep").mkdir()
    return "keep/"


def _revert_manifest_is_a_directory(out: Path) -> str:
    write_bundle([SUMMARY], out)
    (out / "revert/MANIFEST.json").mkdir(parents=True)
    return "revert/MANIFEST.json/"


def _listed_file_is_a_directory(out: Path) -> str:
    write_bundle([SUMMARY], out)
    (out / "SUMMARY.md").unlink()
    (out / "SUMMARY.md").mkdir()
    return "SUMMARY.md/"


def _empty_dir_beside_an_emptied_bundle_dir(out: Path) -> str:
    # snippets/ is the bundle's (its file is listed); snippets/old/ is not.
    write_bundle([SUMMARY, SNIPPET], out)
    (out / "snippets/old").mkdir()
    return "snippets/old/"


FOREIGN_DIRS: dict[str, Callable[[Path], str]] = {
    "empty-dir": _empty_dir_in_a_bundle,
    "revert-manifest-dir": _revert_manifest_is_a_directory,
    "listed-file-is-a-dir": _listed_file_is_a_directory,
    "nested-empty-dir": _empty_dir_beside_an_emptied_bundle_dir,
}


@pytest.mark.parametrize("case", sorted(FOREIGN_DIRS))
def test_directory_no_listed_file_is_in_is_refused_not_deleted(tmp_path: Path, case: str) -> None:
    out = tmp_path / "out"
    shown = FOREIGN_DIRS[case](out)
    before = _state(tmp_path)
    with pytest.raises(RenderError) as err:
        write_bundle([SUMMARY], out)
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("output-not-empty", str(out))
    assert f"does not list ({shown})" in problem.message
    assert _state(tmp_path) == before


def test_empty_directory_alone_is_refused_not_deleted(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "mine").mkdir(parents=True)
    with pytest.raises(RenderError) as err:
        write_bundle([SUMMARY], out)
    (problem,) = err.value.problems
    assert problem.code == "output-not-empty"
    assert problem.message.startswith("holds mine/ but no pvegpu MANIFEST.json")
    assert _state(tmp_path) == {"out": "dir", "out/mine": "dir"}


def test_rerender_still_removes_the_previous_bundle_and_its_emptied_dirs(tmp_path: Path) -> None:
    """Control: a real previous bundle, directories and all, is replaced as before."""
    out = tmp_path / "out"
    write_bundle([SUMMARY, SNIPPET], out)
    write_bundle([SUMMARY], out)
    assert _state(tmp_path) == {
        "out": "dir",
        "out/MANIFEST.json": _state(tmp_path)["out/MANIFEST.json"],
        "out/SUMMARY.md": "file " + b"# summary\n".hex(),
    }


def test_file_put_into_out_while_rendering_is_refused_not_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OUT is checked again just before the swap: a file that appears while the new
    bundle is written fails the render, and the previous bundle stays whole."""
    out = tmp_path / "out"
    write_bundle([SUMMARY], out)
    real = outdir._write_new

    def write_and_meddle(directory: Path, rel: PurePosixPath, content: str, mode: int) -> None:
        real(directory, rel, content, mode)
        (out / "late.txt").write_text("written meanwhile\n")

    monkeypatch.setattr(outdir, "_write_new", write_and_meddle)
    with pytest.raises(RenderError) as err:
        write_bundle([SUMMARY, SNIPPET], out)
    monkeypatch.undo()
    assert "late.txt" in err.value.problems[0].message
    assert (out / "late.txt").read_text() == "written meanwhile\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no .pvegpu-new- left
    assert sorted(p.name for p in out.iterdir()) == ["MANIFEST.json", "SUMMARY.md", "late.txt"]


def test_swap_deletes_only_the_files_the_check_allowed(tmp_path: Path) -> None:
    """What the last check did not list (only a race can put it there) outlives the
    swap in the set-aside directory: the old OUT is not deleted recursively."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "old.txt").write_text("old\n")
    (out / "sub/stranger.txt").write_text("stranger\n")
    allowed = frozenset({PurePosixPath("old.txt")})
    outdir.replace_directory(out, {"new.txt": ("new\n", 0o644)}, check=lambda _: allowed)
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]
    (kept,) = (p for p in tmp_path.iterdir() if p.name.startswith(outdir.OLD_PREFIX))
    assert _state(kept) == {"sub": "dir", "sub/stranger.txt": "file " + b"stranger\n".hex()}


def test_cluster_out_with_a_manifest_directory_is_refused(tmp_path: Path) -> None:
    """The cluster bundle's check shares the rule: its MANIFEST.json as a directory stays."""
    out = tmp_path / "out"
    (out / MANIFEST).mkdir(parents=True)
    with pytest.raises(RenderError) as err:
        cluster._check_out(out)
    assert err.value.problems[0].code == "output-not-empty"
    assert "MANIFEST.json/" in err.value.problems[0].message
    assert (out / MANIFEST).is_dir()


def test_cli_render_into_out_whose_manifest_is_a_directory_exits_6(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case at the command line: exit 6, the path and fix on stderr, OUT and
    its parent exactly as they were."""
    out = tmp_path / "out"
    (out / MANIFEST).mkdir(parents=True)
    before = _state(tmp_path)
    code = main(
        [
            "render",
            "--root",
            str(REPO / "fixtures/sysfs/kpro6"),
            "--spec",
            str(REPO / "examples/kpro6.toml"),
            "--out",
            str(out),
        ]
    )
    assert code == RenderError.exit_code == 6
    err = capsys.readouterr().err
    assert f"{out / MANIFEST}: is a directory" in err
    assert "[output-not-empty]" in err
    assert "fix: move it out of --out" in err
    assert "Traceback" not in err
    assert _state(tmp_path) == before
