"""What `pvegpu plan` and `pvegpu render` print first (cli/brief.py): the summary with the
warnings in full and the infos counted, then the diffs or the files; colour only where
it is wanted (a terminal, no NO_COLOR, no TERM=dumb, or --color=always)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from bundled import FIXTURES, spec_path
from pvegpu.cli import main
from pvegpu.cli.brief import Painter, colour_wanted

KPRO6 = FIXTURES / "kpro6"
KPRO6_SPEC = spec_path("kpro6")
ESC = "\033["
Golden = Callable[[str], SnapshotAssertion]


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    assert main([str(a) for a in argv]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def test_plan_output(capsys: pytest.CaptureFixture[str], golden: Golden) -> None:
    """The summary first, then the diffs, then one line pointing back up."""
    out = _run(capsys, "plan", "--root", KPRO6, "--spec", KPRO6_SPEC, "--color=never")
    assert ESC not in out
    summary, _, rest = out.partition("\n\n")
    assert summary.splitlines()[0] == "plan for node kpro6: 9 files (3 patched, 6 new)"
    assert rest.startswith("--- a/etc/pve/lxc/129.conf\n")
    assert "[snapshot-grants-pool-gpus]" in summary  # the warning, before any diff
    assert out == golden("txt")


def test_plan_output_in_colour(capsys: pytest.CaptureFixture[str], golden: Golden) -> None:
    out = _run(capsys, "plan", "--root", KPRO6, "--spec", KPRO6_SPEC, "--color=always")
    warning = next(line for line in out.splitlines() if "[snapshot-grants-pool-gpus]" in line)
    assert warning.startswith("\033[33m  warning: ") and warning.endswith("\033[0m")
    assert "\n\033[31m-dev4: /dev/nvidia4,mode=0666\033[0m\n" in out
    assert out == golden("txt")


def test_render_output(capsys: pytest.CaptureFixture[str], tmp_path: Path, golden: Golden) -> None:
    """The summary, the files written, the pointer to SUMMARY.md; OUT stands for the
    directory, which is new each run."""
    out_dir = tmp_path / "out"
    out = _run(capsys, "render", "--root", KPRO6, "--spec", KPRO6_SPEC, "--out", out_dir)
    assert ESC not in out  # captured: not a terminal
    assert out.index("[snapshot-grants-pool-gpus]") < out.index("rendered 17 files")
    assert out.replace(str(out_dir), "OUT") == golden("txt")


def test_render_json_carries_the_findings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = _run(capsys, "render", "--root", KPRO6, "--spec", KPRO6_SPEC, "--out", tmp_path / "o")
    doc = json.loads(
        _run(
            capsys,
            "render",
            "--root",
            KPRO6,
            "--spec",
            KPRO6_SPEC,
            "--out",
            tmp_path / "j",
            "--json",
        )
    )
    findings = doc["findings"]
    assert {"severity", "code", "subject", "message"} <= set(findings[0])
    assert [f["code"] for f in findings if f["severity"] == "warning"] == [
        "snapshot-grants-pool-gpus"
    ]
    assert len(findings) == 6
    assert all(f["code"] in out for f in findings)  # and the text output names every one


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("choice", "tty", "environ", "wanted"),
    [
        ("auto", True, {}, True),
        ("auto", False, {}, False),
        ("auto", True, {"NO_COLOR": "1"}, False),
        ("auto", True, {"NO_COLOR": ""}, True),  # no-color.org: set and not empty
        ("auto", True, {"TERM": "dumb"}, False),
        ("auto", False, {"FORCE_COLOR": "1"}, True),
        ("auto", False, {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
        ("always", False, {"NO_COLOR": "1"}, True),  # the command line wins
        ("never", True, {"FORCE_COLOR": "1"}, False),
    ],
)
def test_when_colour_is_wanted(
    choice: str, tty: bool, environ: dict[str, str], wanted: bool
) -> None:
    stream = _Tty() if tty else io.StringIO()
    assert colour_wanted(choice, stream, environ) is wanted


def test_painter_off_leaves_text_alone() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n"
    assert Painter(False).diff(diff) == diff
    assert Painter(False)("warning", "w") == "w"
    painted = Painter(True).diff(diff)
    assert "\033[32m+new\033[0m\n" in painted and "\033[31m-old\033[0m\n" in painted


def _console(*argv: str, **env: str) -> str:
    script = Path(sys.executable).parent / "pvegpu"
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    result = subprocess.run(
        [str(script), *argv],
        capture_output=True,
        text=True,
        check=False,
        env={**environ, **env},
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")
    return result.stdout


def test_a_pipe_and_no_color_get_no_escape_codes() -> None:
    args = ("plan", "--root", str(KPRO6), "--spec", str(KPRO6_SPEC))
    assert ESC not in _console(*args)  # stdout is a pipe
    assert ESC not in _console(*args, NO_COLOR="1", TERM="xterm")
    assert ESC in _console(*args, FORCE_COLOR="1")  # the same run can colour


def test_cluster_plan_prints_its_summary_first(capsys: pytest.CaptureFixture[str]) -> None:
    roots = [f"--root={n}={FIXTURES / n}" for n in ("kpro6", "kpro7", "pve-ws")]
    out = _run(capsys, "plan", "--spec", spec_path("cluster"), *roots)
    summary = out[: out.index("## node kpro6")]
    assert summary.startswith("plan for the cluster kpro6, kpro7, pve-ws")
    assert summary.count("[vm-new-needs-phys-bits]") == 2
    assert "1 info: mapping-subsystem-differs" in summary
    assert ESC not in out
