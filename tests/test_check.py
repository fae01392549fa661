"""`pvegpu check` on kpro6: as the seeds found it after the driver upgrade, and after a
correct apply (run with the fake host of tests/apply_fake.py on a copy of the fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from bundled import FIXTURES, copy_tree, example_plan, example_spec
from pvegpu.apply.check import EXIT_ERRORS, EXIT_WARNINGS, CheckReport, check
from pvegpu.cli import main
from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.artifact import REVERT_BUNDLE
from pvegpu.model.facts import ConfigFile
from pvegpu.planning import planner
from pvegpu.rendering.registry import render
from test_apply import CT, ROOTFS, Setup

LIBS = f"{ROOTFS}/usr/lib/x86_64-linux-gnu"
CT129 = "etc/pve/lxc/129.conf"


def after_the_upgrade(root: Path) -> None:
    """The host module went to 590.48.01; the container kept 565.57.01 (libraries and
    dpkg status), its unit still `--tp 8` with P2P on."""
    libs = root / LIBS
    for name in ("libcuda", "libnvidia-ml"):
        (libs / f"{name}.so.590.48.01").rename(libs / f"{name}.so.565.57.01")
        (libs / f"{name}.so.1").unlink()
        (libs / f"{name}.so.1").symlink_to(f"{name}.so.565.57.01")
    status = root / ROOTFS / "var/lib/dpkg/status"
    status.write_text(status.read_text().replace("590", "565").replace("48.01", "57.01"))


def codes(root: Path, setup: Setup | None = None) -> set[str]:
    report = check(root, setup.bundle if setup else None)
    return {f.code for f in report.findings if f.severity != Severity.INFO}


def test_after_the_upgrade_all_three_are_reported(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        after_the_upgrade(setup.root)
        found = codes(setup.root, setup)
        assert {"container-driver-mismatch", "serving-tp", "serving-p2p-on"} <= found
        # Without a plan, the host as it is: the same driver and P2P problems.
        assert {"container-driver-mismatch", "p2p-under-translation"} <= codes(setup.root)
    finally:
        setup.kernel.close()


def test_after_a_correct_apply_nothing_is_reported(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        host = setup.host()
        setup.apply(host)
        report = check(setup.root, setup.bundle)
        assert [f for f in report.findings if f.severity != Severity.INFO] == []
        assert report.exit_code == 0
        # The reviewer's findings are repeated for the record, as info.
        assert any(f.code.startswith("plan:") for f in report.findings)
    finally:
        setup.kernel.close()


def test_stale_mapping_is_reported(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        cfg = setup.root / "etc/pve/mapping/pci.cfg"
        cfg.write_text(cfg.read_text().replace("iommugroup=", "iommugroup=9", 1))
        assert "mapping-stale" in codes(setup.root)
    finally:
        setup.kernel.close()


def test_cli_json_exit_code_and_prometheus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = Setup(tmp_path)
    try:
        after_the_upgrade(setup.root)
        metrics = tmp_path / "pvegpu.prom"
        rc = main(["check", "--root", str(setup.root), "--json", "--prometheus", str(metrics)])
        doc = json.loads(capsys.readouterr().out)
        assert rc == EXIT_ERRORS == doc["exit_code"]
        assert doc["schema"] == "pvegpu.check/1"
        assert "container-driver-mismatch" in {f["code"] for f in doc["findings"]}
        # Each finding in its one JSON form, the plan's, severity as its plain value.
        assert doc["findings"] == [f.document() for f in check(setup.root, None).findings]
        assert list(doc["findings"][0]) == ["severity", "code", "subject", "message"]
        assert doc["findings"][0]["severity"] == "error"
        text = metrics.read_text()
        assert 'pvegpu_check_findings{node="kpro6",severity="error"} 2' in text
        assert f'code="container-driver-mismatch",subject="CT {CT}"' in text
    finally:
        setup.kernel.close()


def test_raw_container_with_a_stale_uvm_major_is_reported(tmp_path: Path) -> None:
    """Raw lines allow nvidia-uvm by the major it had at render time (509): once the
    module comes back with another (a driver update), check names the container."""
    root = copy_tree(FIXTURES / "kpro6", tmp_path / "host")
    artifacts = render(example_plan("kpro6-raw"))
    (config,) = [a for a in artifacts if a.path == CT129 and a.bundle != REVERT_BUNDLE]
    assert "c 509:0 rwm" in config.content
    (root / CT129).unlink()
    (root / CT129).write_text(config.content)
    assert "container-uvm-major-stale" not in codes(root)
    devices = root / "proc/devices"
    devices.write_text(devices.read_text().replace("509 nvidia-uvm", "508 nvidia-uvm"))
    stale = [f for f in check(root, None).findings if f.code == "container-uvm-major-stale"]
    assert [(f.severity, f.subject) for f in stale] == [(Severity.ERROR, CT129)]
    assert "nvidia-uvm's major is 508 now" in stale[0].message


def test_plans_report_a_stale_uvm_major_the_plan_does_not_fix() -> None:
    """The rule is the planner's (check repeats it): a plan names a raw-style container
    whose uvm rule is stale unless the plan writes that container's lines anew."""
    plan = example_plan("kpro6-raw")
    (config,) = [a for a in render(plan) if a.path == CT129 and a.bundle != REVERT_BUNDLE]
    other = ConfigFile("etc/pve/lxc/131.conf", config.content)
    upgraded = attrs.evolve(
        plan.facts,
        files=(*plan.facts.files, other),
        char_majors=tuple(
            attrs.evolve(c, major=508) if c.name == "nvidia-uvm" else c
            for c in plan.facts.char_majors
        ),
    )
    own = attrs.evolve(upgraded, files=tuple(
        attrs.evolve(f, content=config.content) if f.path == CT129 else f for f in upgraded.files
    ))  # fmt: skip
    findings = planner.plan(own, example_spec("kpro6-raw")).findings
    stale = [f.subject for f in findings if f.code == "container-uvm-major-stale"]
    assert stale == ["etc/pve/lxc/131.conf"]


def test_check_reports_the_plans_finding_type(tmp_path: Path) -> None:
    """The live host's findings and the plan's repeated ones are one type, `Diagnostic`
    with a `Severity`, so plan, SUMMARY.md and check print them alike."""
    setup = Setup(tmp_path)
    try:
        after_the_upgrade(setup.root)
        findings = check(setup.root, setup.bundle).findings
        assert findings
        assert all(type(f) is Diagnostic and type(f.severity) is Severity for f in findings)
        assert {Severity.ERROR, Severity.INFO} <= {f.severity for f in findings}
    finally:
        setup.kernel.close()


@pytest.mark.parametrize(
    ("severities", "exit_code"),
    [
        ((), 0),
        ((Severity.INFO,), 0),
        ((Severity.INFO, Severity.WARNING), EXIT_WARNINGS),
        ((Severity.WARNING, Severity.ERROR, Severity.INFO), EXIT_ERRORS),
        ((Severity.ERROR,), EXIT_ERRORS),
    ],
)
def test_exit_code_follows_the_worst_severity(
    severities: tuple[Severity, ...], exit_code: int
) -> None:
    findings = tuple(
        Diagnostic(s, f"code-{i}", "subject", "message") for i, s in enumerate(severities)
    )
    assert CheckReport("kpro6", findings).exit_code == exit_code
