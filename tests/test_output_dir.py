"""render --out writes only inside --out, all or nothing, and never through a symlink."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pvegpu.cli import main
from pvegpu.errors import RenderError
from pvegpu.model.artifact import REVIEW, Artifact
from pvegpu.rendering import outdir
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.bundle_layout import MANIFEST, MANIFEST_SCHEMA

SUMMARY = Artifact("SUMMARY.md", "# summary\n", "summary", target=REVIEW)
SNIPPET = Artifact("snippets/qemu-server/200.conf", "hostpci0: mapping=x\n", "vm", target=REVIEW)


def _listing(root: Path) -> dict[str, str]:
    """Every file and link under `root`, with content or link text."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *dirnames]:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = "-> " + str(path.readlink())
            elif path.is_file():
                found[rel] = path.read_text()
    return found


def _code(err: pytest.ExceptionInfo[RenderError]) -> str:
    return err.value.problems[0].code


def test_failure_mid_write_keeps_the_previous_bundle_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    write_bundle([SUMMARY, SNIPPET], out, node="a")
    before = _listing(tmp_path)
    calls = {"n": 0}
    real = outdir._write_new

    def fail_on_second(directory: Path, rel: object, content: str, mode: int) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        real(directory, rel, content, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(outdir, "_write_new", fail_on_second)
    new_summary = Artifact("SUMMARY.md", "# changed\n", "summary", target=REVIEW)
    with pytest.raises(RenderError) as err:
        write_bundle([new_summary, SNIPPET], out, node="b")
    assert _code(err) == "output-unwritable"
    assert _listing(tmp_path) == before  # old bundle intact, no temporary left beside it


def test_previous_manifest_naming_a_path_outside_is_refused_and_nothing_deleted(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim.conf"
    victim.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    for bad in (str(victim), "../victim.conf"):
        doc = {"schema": MANIFEST_SCHEMA, "artifacts": [{"file": bad}]}
        (out / MANIFEST).write_text(json.dumps(doc))
        with pytest.raises(RenderError) as err:
            write_bundle([SUMMARY], out)
        assert _code(err) == "manifest-path"
        assert victim.read_text() == "keep me\n"


def test_symlink_inside_out_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    out = tmp_path / "out"
    write_bundle([SUMMARY], out)
    (out / "SUMMARY.md").unlink()
    (out / "SUMMARY.md").symlink_to(outside)  # listed in the manifest, now a link
    with pytest.raises(RenderError) as err:
        write_bundle([SUMMARY], out)
    assert _code(err) == "output-not-empty"
    assert outside.read_text() == "precious\n"
    assert (out / "SUMMARY.md").is_symlink()


def test_out_that_is_a_link_a_file_or_too_long_is_a_clear_error(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    file = tmp_path / "file"
    file.write_text("x\n")
    cases = {
        link: "output-is-symlink",
        file: "output-not-a-directory",
        file / "sub": "output-unwritable",
        tmp_path / ("x" * 300): "output-path-too-long",
    }
    for out, code in cases.items():
        with pytest.raises(RenderError) as err:
            write_bundle([SUMMARY], out)
        assert _code(err) == code, out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "link", "real"]
    assert not any(real.iterdir())


def test_unlisted_file_in_a_previous_bundle_is_refused_not_deleted(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_bundle([SUMMARY], out)
    (out / "notes.txt").write_text("mine\n")
    with pytest.raises(RenderError) as err:
        write_bundle([SUMMARY], out)
    assert _code(err) == "output-not-empty"
    assert "notes.txt" in err.value.problems[0].message
    assert (out / "notes.txt").read_text() == "mine\n"


def test_rerender_writes_only_inside_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_bundle([SUMMARY, SNIPPET], out)
    write_bundle([SUMMARY], out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(_listing(out)) == ["MANIFEST.json", "SUMMARY.md"]


def test_cli_render_into_a_file_exits_6_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = Path(__file__).resolve().parent.parent
    target = tmp_path / "out"
    target.write_text("not a directory\n")
    code = main(
        [
            "render",
            "--root",
            str(repo / "fixtures/sysfs/kpro6"),
            "--spec",
            str(repo / "examples/kpro6.toml"),
            "--out",
            str(target),
        ]
    )
    assert code == 6
    assert "output-not-a-directory" in capsys.readouterr().err
    assert target.read_text() == "not a directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
