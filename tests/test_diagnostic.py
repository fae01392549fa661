"""Issue 32, item 4: one Diagnostic for refusals and findings, printed and written as
refusals and findings always were, and errors that hold errors only."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

import pvegpu.cli.check
from bundled import example_plan, fixture_root
from pvegpu.apply.check import EXIT_WARNINGS, CheckReport
from pvegpu.cli import main
from pvegpu.cli.brief import Painter, finding_lines
from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.engines.common.server import refusal
from pvegpu.errors import PlanError, PvegpuError, SpecError
from pvegpu.rendering.cluster_summary import cluster_summary
from pvegpu.rendering.registry import render
from pvegpu.serving.checks import Checks
from test_cluster import cluster


def test_str_without_fix_and_line() -> None:
    d = Diagnostic.error("gpu-in-two-pools", "pools[1].gpus[0]", "0000:01:00.0 is in pool a")
    assert str(d) == "pools[1].gpus[0]: 0000:01:00.0 is in pool a [gpu-in-two-pools]"


def test_str_with_fix_and_line() -> None:
    d = Diagnostic.error("gpu-in-two-pools", "pools[1].gpus[0]", "in pool a", "drop it", 12)
    assert str(d) == "pools[1].gpus[0] (line 12): in pool a [gpu-in-two-pools]\n  fix: drop it"


def test_a_warning_prints_its_fix_too() -> None:
    d = Diagnostic(Severity.WARNING, "vm-x", "VM 101", "stops", fix="qm stop 101")
    assert str(d) == "VM 101: stops [vm-x]\n  fix: qm stop 101"


def test_document_leaves_an_empty_fix_out() -> None:
    """A finding without a fix is written as findings always were (the goldens hold it)."""
    d = Diagnostic(Severity.INFO, "p2p-off", "pool a", "P2P is off", reboot_first=True)
    assert json.dumps(d.document()) == (
        '{"severity": "info", "code": "p2p-off", "subject": "pool a", "message": "P2P is off"}'
    )


def test_document_carries_a_fix() -> None:
    d = Diagnostic(Severity.WARNING, "vm-x", "VM 101", "stops", "qm stop 101")
    assert d.document() == {
        "severity": "warning",
        "code": "vm-x",
        "subject": "VM 101",
        "message": "stops",
        "fix": "qm stop 101",
    }


def test_error_is_an_error() -> None:
    d = Diagnostic.error("c", "s", "m")
    assert d.severity is Severity.ERROR
    assert (d.fix, d.line, d.reboot_first) == ("", None, False)


@pytest.mark.parametrize("severity", [Severity.WARNING, Severity.INFO])
@pytest.mark.parametrize("error", [PvegpuError, PlanError, SpecError])
def test_an_error_refuses_anything_but_errors(error: type[PvegpuError], severity: Severity) -> None:
    warning = Diagnostic(severity, "c", "s", "m")
    with pytest.raises(ValueError, match="severity error"):
        error([Diagnostic.error("c", "s", "m"), warning])


def test_an_error_refuses_an_empty_list() -> None:
    with pytest.raises(ValueError, match="at least one"):
        PlanError([])


def test_an_error_prints_its_diagnostics() -> None:
    err = PlanError.one("c", "pools[0]", "m", "f")
    assert err.problems == (Diagnostic.error("c", "pools[0]", "m", "f"),)
    assert str(err) == "pools[0]: m [c]\n  fix: f"


def _checks() -> Checks:
    plan = example_plan("kpro6")
    index, spec = next((i, p) for i, p in enumerate(plan.spec.pools) if p.lxc and p.lxc.serving)
    assert spec.lxc is not None and spec.lxc.serving is not None
    pool = next(p for p in plan.pools if p.name == spec.name)
    where = f"pools[{index}].lxc.serving"
    return Checks(plan.facts, plan.pools, pool, spec.lxc.serving, where, engine_label="SGLang")


def test_checks_keeps_one_list_and_where_each_error_belongs() -> None:
    """One list in the order found; an option table's error is refused as a spec error
    (exit 4) unless the host refuses the plan too, then the plan error holds both, the
    plan's first, as before the list was one."""
    checks = _checks()
    option = Diagnostic.error("sglang-option-unknown", "x.extra_args", "no --foo", "drop it")
    checks.add_spec_errors([option])
    checks.finding(Severity.WARNING, "serving-secrets-moved", "moved", "chmod 600 env")
    assert checks.findings == [checks.diagnostics[1]]
    assert str(checks.findings[0]).endswith("[serving-secrets-moved]\n  fix: chmod 600 env")
    assert (checks.plan_errors, checks.spec_errors) == ([], [option])
    only_spec = refusal(checks)
    assert isinstance(only_spec, SpecError) and only_spec.problems == (option,)
    checks.problem("serving-tp-indivisible", "TP 3", "use TP 2")
    plan_error = checks.diagnostics[2]
    assert [d.code for d in checks.diagnostics] == [
        "sglang-option-unknown",
        "serving-secrets-moved",
        "serving-tp-indivisible",
    ]
    both = refusal(checks)
    assert isinstance(both, PlanError) and both.problems == (plan_error, option)
    assert both.exit_code == 5 and only_spec.exit_code == 4


# --- a finding that names a fix: every place a finding is printed shows it

_FIXABLE = Diagnostic(Severity.WARNING, "vm-stops", "VM 101", "it stops", "qm stop 101")


def test_the_cli_prints_a_findings_fix() -> None:
    lines = finding_lines([_FIXABLE], Painter(False), pointer="SUMMARY.md")
    assert lines == ["  warning: VM 101: it stops [vm-stops]", "    fix: qm stop 101"]
    plain = Diagnostic(Severity.WARNING, "vm-stops", "VM 101", "it stops")
    assert finding_lines([plain], Painter(False), pointer="SUMMARY.md") == [lines[0]]


def _summary_with(finding: Diagnostic) -> str:
    plan = example_plan("kpro6")
    artifacts = render(attrs.evolve(plan, findings=(*plan.findings, finding)))
    return next(a for a in artifacts if a.path.endswith("SUMMARY.md")).content


def test_summary_md_prints_a_findings_fix() -> None:
    """On the finding's line, after the message; every other byte as without a fix."""
    plain = _summary_with(attrs.evolve(_FIXABLE, fix=""))
    line = "- **vm-stops** (VM 101): it stops"
    assert plain.count(f"{line}\n") == 1
    expected = plain.replace(f"{line}\n", f"{line} Fix: qm stop 101\n")
    assert _summary_with(_FIXABLE) == expected
    # Each finding keeps its own line (the template's blocks eat the newline after them).
    for f in example_plan("kpro6").findings:
        assert f"- **{f.code}** ({f.subject}): {f.message}\n" in plain


def test_check_prints_a_findings_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def found(root: Path, *_: object) -> CheckReport:
        return CheckReport("pve", (_FIXABLE,))

    monkeypatch.setattr(pvegpu.cli.check, "check", found)
    root = str(fixture_root("kpro6"))
    assert main(["check", "--root", root]) == EXIT_WARNINGS
    out = capsys.readouterr().out
    assert out.startswith("warning: VM 101: it stops [vm-stops]\n  fix: qm stop 101\n")
    assert main(["check", "--root", root, "--json"]) == EXIT_WARNINGS
    assert json.loads(capsys.readouterr().out)["findings"] == [_FIXABLE.document()]


def test_the_cluster_summary_prints_a_findings_fix() -> None:
    planned, rendered, _ = cluster()
    with_fix = attrs.evolve(planned, findings=(*planned.findings, _FIXABLE))
    text = cluster_summary(with_fix, rendered)
    assert "- `VM 101`: it stops [vm-stops] Fix: qm stop 101\n" in text
