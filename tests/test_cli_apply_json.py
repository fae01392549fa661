"""`--json` on apply, revert and snapshot, `revert --dry-run`, and revert's own words.

apply and revert run through `pvegpu.cli.main` on a copy of kpro6 whose commands
tests/apply_fake.py answers (the CLI's LiveHost replaced by the FakeHost); every JSON
document is parsed, refusals included, and a dry run must leave every byte under the
root as it was and start no command.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from apply_fake import FakeHost
from bundled import FIXTURES, REPO
from pvegpu.apply.host import Completed, LiveHost
from pvegpu.cli import REFUSAL_SCHEMA, main
from test_apply import Setup
from test_apply_off_node import everything

KPRO6_SPEC = REPO / "examples/kpro6.toml"
LXC_CONF = "etc/pve/nodes/kpro6/lxc/129.conf"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.kernel.close()


@pytest.fixture
def bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "out"
    argv = ["render", "--root", str(FIXTURES / "kpro6"), "--spec", str(KPRO6_SPEC)]
    assert main([*argv, "--out", str(out)]) == 0
    capsys.readouterr()
    return out


Cli = Callable[..., tuple[int, Any, str]]


class _Failing(FakeHost):
    """A node whose initramfs rebuild fails (step 7 of kpro6's runbook)."""

    def _execute(self, argv: tuple[str, ...]) -> Completed:
        if argv[0] == "update-initramfs":
            self.commands.append(argv)
            return Completed(argv, 1, "", "update-initramfs: no space left on /boot")
        return super()._execute(argv)


@pytest.fixture
def cli(setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """cli(host, "apply", ...) -> (exit code, stdout parsed as JSON or None, stderr), with
    `host` standing for the node the CLI's LiveHost would be."""

    def call(host: LiveHost, *argv: str | Path) -> tuple[int, Any, str]:
        monkeypatch.setattr("pvegpu.cli.apply.LiveHost", lambda root: host)
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, json.loads(captured.out) if captured.out else None, captured.err

    return call


def _statuses(doc: dict[str, Any]) -> set[str]:
    return {a["status"] for a in doc["actions"]}


def test_apply_dry_run_json_lists_every_action_and_changes_nothing(
    setup: Setup, bundle: Path, cli: Cli
) -> None:
    host = setup.host()
    before, kernel = everything(setup.root), setup.kernel.state()
    code, doc, err = cli(host, "apply", "--bundle", bundle, "--dry-run", "--json")
    assert (code, err) == (0, "")
    assert (doc["schema"], doc["dry_run"], doc["result"]) == ("pvegpu.apply/1", True, "dry-run")
    assert doc["node"] == "kpro6" and doc["bundle"]
    assert "would-run" in _statuses(doc) and "done" not in _statuses(doc)
    assert {"step", "title", "commands", "status", "detail"} == set(doc["actions"][0])
    assert "dry run: nothing was changed" in doc["messages"]
    assert everything(setup.root) == before and setup.kernel.state() == kernel
    assert host.mutating() == []


def test_apply_json_then_revert_dry_run_then_revert(setup: Setup, bundle: Path, cli: Cli) -> None:
    host = setup.host()
    code, doc, _ = cli(host, "apply", "--bundle", bundle, "--yes", "--json")
    assert code == 0
    assert (doc["result"], doc["dry_run"]) == ("applied", False)
    assert "done" in _statuses(doc) and "failed" not in _statuses(doc)
    applied, kernel = everything(setup.root), setup.kernel.state()

    # revert --dry-run: every step it would undo, newest first; not a byte changed, no command.
    host.commands.clear()
    code, doc, err = cli(host, "revert", "--dry-run", "--json")
    assert (code, err) == (0, "")
    assert (doc["schema"], doc["result"], doc["dry_run"]) == ("pvegpu.revert/1", "dry-run", True)
    assert doc["bundle"]
    undo = [a for a in doc["actions"] if a["status"] == "would-undo"]
    assert undo and {a["status"] for a in doc["actions"]} <= {"would-undo", "would-redo"}
    # The container's files first, then the rest newest step first.
    later = [a["step"] for a in undo[1:]]
    assert later[-1] == min(later)
    assert everything(setup.root) == applied and setup.kernel.state() == kernel
    assert host.commands == []

    code, doc, _ = cli(host, "revert", "--yes", "--json")
    assert (code, doc["result"]) == (0, "reverted")
    assert [(a["step"], a["title"]) for a in doc["actions"] if a["status"] == "undone"] == [
        (a["step"], a["title"]) for a in undo
    ]
    assert doc["messages"][-1].startswith("reverted apply ")
    code, doc, _ = cli(host, "revert", "--dry-run", "--json")
    assert (code, doc["result"], doc["actions"]) == (0, "already-reverted", [])


def test_revert_dry_run_as_text(
    setup: Setup,
    bundle: Path,
    cli: Cli,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = setup.host()
    assert cli(host, "apply", "--bundle", bundle, "--yes", "--json")[0] == 0
    applied = everything(setup.root)
    host.commands.clear()
    monkeypatch.setattr("pvegpu.cli.apply.LiveHost", lambda root: host)
    assert main(["revert", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("revert would undo apply ")
    assert "would undo step 13 (Start the server in CT 129): " in out
    assert out.endswith("dry run: nothing was changed\n")
    assert everything(setup.root) == applied and host.commands == []


def test_revert_dry_run_reads_a_tree_off_the_node(setup: Setup, bundle: Path, cli: Cli) -> None:
    """A copy of a node's `/` with its journal: read, never acted on (LiveHost refuses
    every command under a root other than `/`)."""
    assert cli(setup.host(), "apply", "--bundle", bundle, "--yes", "--json")[0] == 0
    applied = everything(setup.root)
    code, doc, err = cli(LiveHost(setup.root), "revert", "--dry-run", "--json")
    assert (code, err, doc["result"]) == (0, "", "dry-run")
    assert everything(setup.root) == applied


def test_json_without_yes_or_dry_run_is_a_usage_error(setup: Setup, bundle: Path, cli: Cli) -> None:
    for argv in (("apply", "--bundle", bundle, "--json"), ("revert", "--json")):
        code, doc, err = cli(setup.host(), *argv)
        assert (code, doc) == (2, None)
        assert "--json needs --yes or --dry-run" in err and err.startswith(f"pvegpu {argv[0]}:")


def _refusal(doc: dict[str, Any], command: str, exit_code: int) -> list[dict[str, Any]]:
    assert (doc["schema"], doc["command"], doc["exit_code"]) == (REFUSAL_SCHEMA, command, exit_code)
    problems: list[dict[str, Any]] = doc["problems"]
    assert problems and all(p["fix"] for p in problems)
    return problems


def test_a_failed_step_under_json_is_the_refusal_with_the_outcomes_so_far(
    setup: Setup, bundle: Path, cli: Cli
) -> None:
    host = _Failing(setup.root, setup.kernel, {129: "rpool/data/subvol-129-disk-0"})
    code, doc, err = cli(host, "apply", "--bundle", bundle, "--yes", "--json")
    assert code == 7
    [problem] = _refusal(doc, "apply", 7)
    assert problem["code"] == "command-failed" and "no space left" in problem["message"]
    assert "pvegpu apply again" in problem["fix"]  # the rollback note: resume, or revert
    assert doc["written"] is True
    assert doc["actions"][-1]["status"] == "failed"
    assert doc["actions"][-1]["commands"] == ["update-initramfs -u -k all"]
    assert "done" in _statuses(doc)
    assert "[command-failed]" in err


def test_refusals_of_apply_and_revert_under_json(
    setup: Setup, bundle: Path, cli: Cli, tmp_path: Path
) -> None:
    code, doc, _ = cli(setup.host(), "apply", "--bundle", tmp_path / "none", "--json", "--yes")
    assert (code, _refusal(doc, "apply", 4)[0]["code"]) == (4, "bundle-missing")
    code, doc, _ = cli(setup.host(), "revert", "--yes", "--json")
    [problem] = _refusal(doc, "revert", 7)
    assert (code, problem["code"]) == (7, "nothing-applied")
    code, doc, _ = cli(setup.host(), "revert", "--dry-run", "--json")
    assert (code, _refusal(doc, "revert", 7)[0]["code"]) == (7, "nothing-applied")
    assert (doc["actions"], doc["written"]) == ([], False)


def test_revert_says_revert(setup: Setup, bundle: Path, cli: Cli, tmp_path: Path) -> None:
    """Its question, its refusals and the fix of a step that fails name revert, never
    `pvegpu apply` (which would redo what revert undoes)."""
    host = setup.host()
    # stdin is not a terminal under pytest: revert cannot ask.
    code, doc, err = cli(host, "revert")
    assert code == 7 and "revert cannot ask" in err and "pvegpu revert --dry-run" in err
    # Off the node: refused, pointing at revert's own dry run.
    code, doc, _ = cli(LiveHost(tmp_path), "revert", "--yes", "--json")
    [problem] = _refusal(doc, "revert", 7)
    assert problem["code"] == "apply-not-live"
    assert (
        problem["fix"].startswith("run revert on the node itself") and "--dry-run" in problem["fix"]
    )
    assert cli(host, "apply", "--bundle", bundle, "--yes", "--json")[0] == 0
    conf = setup.root / LXC_CONF
    conf.write_text(conf.read_text() + "onboot: 1\n")  # edited after apply wrote it
    code, doc, _ = cli(host, "revert", "--yes", "--json")
    problems = _refusal(doc, "revert", 7)
    changed = [p for p in problems if p["code"] == "file-changed"]
    assert changed and "since pvegpu apply wrote it" in changed[0]["message"]
    assert "pvegpu apply" not in changed[0]["fix"] and "pvegpu revert" in changed[0]["fix"]
    assert doc["actions"]  # what it undid before it stopped


# --- snapshot


def test_snapshot_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "kpro6.tar.gz"
    assert main(["snapshot", "--root", str(FIXTURES / "kpro6"), "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "pvegpu.snapshot/1"
    assert doc["archive"] == str(out) and out.is_file()
    assert doc["entries"] > 100 and doc["redacted"] == []


def test_snapshot_of_a_broken_root_under_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The archive is written up to the first problem: the refusal says so (`written`)
    and where it is."""
    out = tmp_path / "broken.tar.gz"
    assert main(["snapshot", "--root", str(tmp_path), "--out", str(out), "--json"]) == 3
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    problems = _refusal(doc, "snapshot", 3)
    assert problems[0]["code"]
    assert (doc["written"], doc["archive"]) == (True, str(out)) and out.is_file()
    assert "discovery failed" in captured.err


def test_every_schema_is_documented() -> None:
    from pvegpu.cli.apply import APPLY_SCHEMA, REVERT_SCHEMA
    from pvegpu.cli.snapshot import SNAPSHOT_SCHEMA

    text = (REPO / "docs/cli.md").read_text()
    for schema in (APPLY_SCHEMA, REVERT_SCHEMA, SNAPSHOT_SCHEMA, "pvegpu.render/1"):
        assert f"`{schema}`" in text, schema


def test_apply_spec_dry_run_json_holds_the_diffs(setup: Setup, cli: Cli) -> None:
    """`apply --spec` prints the host files' diffs: under --json they go into the document,
    never before it on stdout (the output must parse)."""
    code, doc, err = cli(
        setup.host(), "apply", "--spec", KPRO6_SPEC, "--root", setup.root, "--dry-run", "--json"
    )
    assert (code, err, doc["result"]) == (0, "", "dry-run")
    paths = [d["path"] for d in doc["diffs"]]
    assert "etc/pve/lxc/129.conf" in paths
    conf = next(d["diff"] for d in doc["diffs"] if d["path"] == "etc/pve/lxc/129.conf")
    assert "\n-dev4: /dev/nvidia4,mode=0666\n" in conf
