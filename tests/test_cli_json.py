"""`--json` on every subcommand that has it: refusals as a JSON document, and `--version`.

A refusal prints the `pvegpu.refusal/1` document on stdout (the human lines stay on
stderr) with the same exit code; one test per kind of refusal each subcommand can meet.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import pvegpu
from bundled import FIXTURES, REPO, spec_path
from pvegpu.cli import REFUSAL_SCHEMA, main

KPRO6 = FIXTURES / "kpro6"
KPRO6_SPEC = spec_path("kpro6")
RunJson = Callable[..., tuple[int, Any, str]]


@pytest.fixture
def run_json(capsys: pytest.CaptureFixture[str]) -> RunJson:
    """run_json("plan", ...) -> (exit code, stdout parsed as JSON, stderr)."""

    def call(*argv: str | Path) -> tuple[int, Any, str]:
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, json.loads(captured.out), captured.err

    return call


def _refusal(doc: Any, command: str, exit_code: int) -> list[dict[str, str]]:
    assert doc["schema"] == REFUSAL_SCHEMA
    assert doc["command"] == command
    assert doc["exit_code"] == exit_code
    assert doc["written"] is False
    problems: list[dict[str, str]] = doc["problems"]
    assert problems
    for problem in problems:
        assert set(problem) == {"code", "subject", "message", "fix", "line"}
    return problems


def test_discover_refusal_of_a_broken_root(run_json: RunJson, tmp_path: Path) -> None:
    code, doc, err = run_json("discover", "--root", tmp_path / "missing", "--json")
    assert code == 3
    (problem,) = _refusal(doc, "discover", 3)
    assert problem["code"] == "missing-root"
    assert problem["subject"] == str(tmp_path / "missing")
    assert problem["fix"]
    assert "[missing-root]" in err  # the human lines are still there, on stderr


def test_plan_refusal_of_a_malformed_spec(run_json: RunJson, tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text('node = "kpro6"\n[[pools]]\nname = "a"\ngpus = ["81:00"]\nlxc = {vmid = 1}\n')
    code, doc, _ = run_json("plan", "--root", KPRO6, "--spec", spec, "--json")
    assert code == 4
    problems = _refusal(doc, "plan", 4)
    subjects = {p["subject"] for p in problems}
    assert {"pools[0].gpus[0]", "pools[0].lxc.vmid"} <= subjects


def test_plan_refusal_on_this_host(run_json: RunJson, tmp_path: Path) -> None:
    spec = tmp_path / "other.toml"
    spec.write_text(KPRO6_SPEC.read_text().replace('node = "kpro6"', 'node = "elsewhere"'))
    code, doc, _ = run_json("plan", "--root", KPRO6, "--spec", spec, "--json")
    assert code == 5
    assert any(p["subject"] for p in _refusal(doc, "plan", 5))


def test_render_refusal_writes_nothing(run_json: RunJson, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, doc, _ = run_json(
        "render", "--root", KPRO6, "--spec", tmp_path / "none.toml", "--out", out, "--json"
    )
    assert code == 4
    _refusal(doc, "render", 4)
    assert not out.exists()


def test_render_json_lists_the_files_written(run_json: RunJson, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, doc, _ = run_json("render", "--root", KPRO6, "--spec", KPRO6_SPEC, "--out", out, "--json")
    assert code == 0
    assert doc["schema"] == "pvegpu.render/1"
    assert doc["node"] == "kpro6"
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert set(doc["written"]) <= on_disk
    assert {"MANIFEST.json", "SUMMARY.md", "etc/pve/mapping/pci.cfg"} <= set(doc["written"])


def test_check_refusal_of_a_missing_bundle(run_json: RunJson, tmp_path: Path) -> None:
    code, doc, _ = run_json("check", "--root", KPRO6, "--bundle", tmp_path / "none", "--json")
    assert code == 4
    (problem,) = _refusal(doc, "check", 4)
    assert problem["code"] == "bundle-missing"


def test_without_json_a_refusal_prints_nothing_on_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["discover", "--root", str(tmp_path / "missing")]) == 3
    assert capsys.readouterr().out == ""


def test_version_is_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"pvegpu {pvegpu.__version__}\n"


def test_the_documented_refusal_example_is_what_pvegpu_prints(
    run_json: RunJson, tmp_path: Path
) -> None:
    """docs/cli.md shows a real refusal: the same keys, codes and shape."""
    doc_text = (REPO / "docs" / "cli.md").read_text()
    start = doc_text.index('{\n  "schema": "pvegpu.refusal/1"')
    example = json.loads(doc_text[start : doc_text.index("\n}\n", start) + 2])
    root = tmp_path / "root"
    shutil.copytree(KPRO6, root, symlinks=True)
    spec = tmp_path / "kpro6.toml"
    spec.write_text(KPRO6_SPEC.read_text().replace("vmid = 129", "vmid = 12"))
    code, doc, _ = run_json("plan", "--root", root, "--spec", spec, "--json")
    assert (code, doc["exit_code"]) == (example["exit_code"], example["exit_code"])
    assert [p["code"] for p in doc["problems"]] == [p["code"] for p in example["problems"]]
    assert [p["line"] for p in doc["problems"]] == [p["line"] for p in example["problems"]]
    assert set(doc) == set(example)
