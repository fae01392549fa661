"""Issue 32, item 4: one Diagnostic for refusals and findings, printed and written as the
old `Problem` and `Finding` were, and errors that hold errors only."""

from __future__ import annotations

import json

import pytest

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.errors import PlanError, PvegpuError, SpecError


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
