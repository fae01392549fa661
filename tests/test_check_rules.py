"""`pvegpu check` has no rules of its own: on the same facts it answers as the planner.

Each test is a host where check's old second set of rules disagreed with the plan (P2P
judged on any IOMMU group of the host, drop-ins concatenated, TP flags of its own, pci.cfg
paths built as `"0000:" + path`) and shows check following the planner.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from bundled import FIXTURES, copy_tree, example_spec, spec_path
from pvegpu.apply.bundle import bundle_from_files
from pvegpu.apply.check import check
from pvegpu.cli import main
from pvegpu.diagnostic import Severity
from pvegpu.engines.common.dropins import effective_dropins
from pvegpu.errors import PlanError
from pvegpu.host.discover import discover
from pvegpu.model.facts import ConfigFile
from pvegpu.pipeline import (
    check_host,
    discover_for,
    plan_and_render,
    render_bundle,
    running_unit,
)
from pvegpu.planning.findings import host_findings, plan_findings
from pvegpu.planning.planner import plan
from pvegpu.planning.unit_gpus import unit_demand
from pvegpu.serving.p2p import facts_p2p
from pvegpu.serving.unitfile import merge_units
from pvegpu.spec.load import load_spec

CT = 129
ROOTFS = "rpool/data/subvol-129-disk-0"
UNIT = "sglang-qwen"
UNIT_FILE = f"{ROOTFS}/etc/systemd/system/{UNIT}.service"
PCI_CFG = "etc/pve/mapping/pci.cfg"
SEV_SNP = "sys/module/kvm_amd/parameters/sev_snp"


def kpro6(tmp_path: Path, name: str = "host") -> Path:
    return copy_tree(FIXTURES / "kpro6", tmp_path / name)


def codes(root: Path) -> set[str]:
    return {f.code for f in check(root, None).findings}


def _planned_p2p(root: Path) -> bool:
    """What plan() decides for kpro6's container pool on this root's facts."""
    spec = example_spec("kpro6")
    decided = plan(discover_for(spec, root), spec)
    (pool,) = [p for p in decided.pools if p.serving is not None]
    assert pool.serving is not None
    return pool.serving.p2p.facts_enabled


def _identity(root: Path, groups: set[int]) -> None:
    for group in groups:
        (root / f"sys/kernel/iommu_groups/{group}/type").write_text("identity\n")


def test_p2p_is_judged_on_the_containers_groups_as_the_plan_does(tmp_path: Path) -> None:
    """The container's GPUs in identity groups, other devices' groups translating, no
    SEV-SNP: the plan turns P2P on, so a TP 8 server with P2P on is no finding (the old
    rule looked at every group of the host and reported it)."""
    root = kpro6(tmp_path)
    assert "p2p-under-translation" in codes(root)
    assert _planned_p2p(root) is False
    (root / SEV_SNP).write_text("N\n")
    container_gpus = [g for g in discover(root).gpus if g.node_minor in range(8)]
    _identity(root, {g.iommu_group for g in container_gpus if g.iommu_group is not None})
    facts = discover(root)
    assert any(g.type is not None and g.type.translates for g in facts.iommu_groups)
    assert facts_p2p(facts, container_gpus)[0] is True
    assert _planned_p2p(root) is True
    assert "p2p-under-translation" not in codes(root)


def test_p2p_under_sev_snp_is_off_as_the_plan_decides(tmp_path: Path) -> None:
    """Every group in identity but SEV-SNP on: the plan turns P2P off, so check reports
    the server with P2P on (the old rule saw no translating group and said nothing)."""
    root = kpro6(tmp_path)
    _identity(root, {g.id for g in discover(root).iommu_groups})
    facts = discover(root)
    assert facts.sev_snp
    assert not any(g.type is not None and g.type.translates for g in facts.iommu_groups)
    assert _planned_p2p(root) is False
    assert "p2p-under-translation" in codes(root)


def _dropin(root: Path, directory: str, name: str, text: str) -> None:
    path = root / ROOTFS / directory / f"{UNIT}.service.d" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_dropin_name_is_taken_once_first_directory_first(tmp_path: Path) -> None:
    """/etc's p2p.conf hides /run's of the same name (systemd, and the planner's
    `effective_dropins`); the old check applied both, /run's last."""
    root = kpro6(tmp_path)
    _dropin(root, "etc/systemd/system", "p2p.conf", "[Service]\nEnvironment=NCCL_P2P_DISABLE=1\n")
    _dropin(root, "run/systemd/system", "p2p.conf", "[Service]\nEnvironment=NCCL_P2P_DISABLE=0\n")
    running = running_unit(check_host(root, {CT: [UNIT]})[1], CT, UNIT)
    assert running is not None and running.p2p_disabled
    assert "p2p-under-translation" not in codes(root)
    files = [
        ConfigFile(
            f"{ROOTFS}/{d}/{UNIT}.service.d/p2p.conf",
            (root / ROOTFS / d / f"{UNIT}.service.d/p2p.conf").read_text(),
        )
        for d in ("etc/systemd/system", "run/systemd/system")
    ]
    (chosen,) = effective_dropins(files, ROOTFS, UNIT)
    assert chosen.path == f"etc/systemd/system/{UNIT}.service.d/p2p.conf"


def test_dropins_apply_sorted_by_name_across_directories(tmp_path: Path) -> None:
    """/run's a.conf applies before /etc's b.conf, so b.conf's setting wins."""
    root = kpro6(tmp_path)
    _dropin(root, "etc/systemd/system", "b.conf", "[Service]\nEnvironment=NCCL_P2P_DISABLE=1\n")
    _dropin(root, "run/systemd/system", "a.conf", "[Service]\nEnvironment=NCCL_P2P_DISABLE=0\n")
    assert "p2p-under-translation" not in codes(root)


def test_tp_is_read_as_the_planner_reads_a_unit(tmp_path: Path) -> None:
    """`--tp ${TP}` with TP=8 in Environment=: TP 8, as `unit_demand` reads it (the old
    check's own flag parser saw no number and took TP 1, so no P2P finding)."""
    root = kpro6(tmp_path)
    unit = root / UNIT_FILE
    text = unit.read_text().replace("--tp 8", "--tp ${TP}")
    unit.write_text(text.replace("ExecStart=", "Environment=TP=8\nExecStart=", 1))
    (server,) = unit_demand(merge_units((unit.read_text(),))).servers
    size = server.option("tp")
    assert size is not None and size.value == 8
    running = running_unit(check_host(root, {CT: [UNIT]})[1], CT, UNIT)
    assert running is not None and running.tp == 8
    assert "p2p-under-translation" in codes(root)


def _map_line(root: Path, path: str, group: str = "iommugroup=12,") -> None:
    cfg = root / PCI_CFG
    old = "map id=10de:2bb5,iommugroup=12,node=kpro6,path=0000:01:00,subsystem-id=10de:204b"
    new = f"map id=10de:2bb5,{group}node=kpro6,path={path},subsystem-id=10de:204b"
    text = cfg.read_text()
    assert old in text
    cfg.write_text(text.replace(old, new))


def test_a_mapping_path_list_is_read_as_pcicfg_spells_it(tmp_path: Path) -> None:
    """`path=0000:01:00;0000:11:00` names two GPUs on the bus (the old check glued the
    list into one address and found no such device); Proxmox checks the group of the
    first only, so group 12 passes although 11:00 is in 13."""
    root = kpro6(tmp_path)
    assert "mapping-stale" not in codes(root)
    _map_line(root, "0000:01:00;0000:11:00")
    assert "mapping-stale" not in codes(root)


def test_a_mapping_line_without_its_group_is_stale(tmp_path: Path) -> None:
    """The old check skipped a line without `iommugroup`; Proxmox refuses it ("missing
    expected property") where the device has a group, as the planner's rule does."""
    root = kpro6(tmp_path)
    _map_line(root, "0000:01:00", group="")
    (stale,) = [f for f in check(root, None).findings if f.code == "mapping-stale"]
    assert stale.subject == f"{PCI_CFG} line 6"
    assert "the line has no iommugroup, sysfs says 12" in stale.message


def test_a_mapping_path_list_with_a_device_gone_is_stale(tmp_path: Path) -> None:
    root = kpro6(tmp_path)
    _map_line(root, "0000:01:00;0000:05:00")
    stale = [f for f in check(root, None).findings if f.code == "mapping-stale"]
    assert [f.subject for f in stale] == [f"{PCI_CFG} line 6"]
    assert "no device 0000:05:00.0 is on the host" in stale[0].message


def test_vfio_ids_on_identical_gpus_is_one_rule_of_plan_and_check(tmp_path: Path) -> None:
    """A host rule with no plan counterpart lives in planning (`host_findings`): plan()
    reports it, and check reports the same finding of the host as it is."""
    root = kpro6(tmp_path)
    assert "vfio-ids-identical" not in codes(root)
    conf = root / "etc/modprobe.d/vfio.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("options vfio-pci ids=10de:2bb5\n")
    facts = discover(root)
    (finding,) = host_findings(facts)
    assert finding.code == "vfio-ids-identical"
    assert finding.subject == "etc/modprobe.d/vfio.conf"
    assert "takes all 8 GPUs 10de:2bb5" in finding.message
    assert finding in list(plan_findings(facts, ()))
    assert [f for f in check(root, None).findings if f.code == "vfio-ids-identical"] == [finding]


def _p2p_on_spec(tmp_path: Path) -> Path:
    """examples/kpro6.toml with P2P forced on, with the reason the planner asks for."""
    text = spec_path("kpro6").read_text()
    forced = 'mtp = true\np2p = "on"\np2p_reason = "nccl-tests all_reduce_perf -c 1 passed"\n'
    assert "mtp = true\n" in text
    path = tmp_path / "p2p-on.toml"
    path.write_text(text.replace("mtp = true\n", forced, 1))
    return path


def _check_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, str]]:
    main(["check", *args, "--json"])
    findings: list[dict[str, str]] = json.loads(capsys.readouterr().out)["findings"]
    return findings


def test_p2p_on_with_a_reason_is_accepted_by_plan_and_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spec turns P2P on against translating IOMMU groups, with a reason: plan accepts
    it (a warning), and check of the host running the plan's unit (TP 4, P2P on) judges
    that unit by the plan's decision, not by the facts alone (it used to report
    `p2p-under-translation` as an error)."""
    root = kpro6(tmp_path)
    spec_file = _p2p_on_spec(tmp_path)
    spec = load_spec(spec_file)
    decided, artifacts = plan_and_render(discover_for(spec, root), spec)
    (pool,) = [p for p in decided.pools if p.serving is not None]
    assert pool.serving is not None
    assert pool.serving.p2p.enabled and not pool.serving.p2p.facts_enabled
    assert "serving-p2p-forced-on" in {f.code for f in decided.findings}
    for artifact in artifacts:
        if artifact.target == f"ct:{CT}" and artifact.bundle == "apply" and not artifact.delete:
            (root / ROOTFS / artifact.path).parent.mkdir(parents=True, exist_ok=True)
            (root / ROOTFS / artifact.path).write_text(artifact.content)
    running = running_unit(check_host(root, {CT: [UNIT]})[1], CT, UNIT)
    assert running is not None and (running.tp, running.p2p_disabled) == (4, False)
    found = _check_json(capsys, "--root", str(root), "--spec", str(spec_file))
    by_code = {f["code"]: f for f in found}
    assert "p2p-under-translation" not in by_code
    assert "serving-p2p-on" not in by_code
    # The plan's own warning, repeated for the record.
    assert by_code["plan:serving-p2p-forced-on"]["severity"] == "info"
    # With no plan deciding it, the unit is judged by the facts as plan's `auto` does;
    # so too with a plan made for another node (check says `wrong-node` as well).
    assert "p2p-under-translation" in {f.code for f in check(root, None).findings}
    _, files = render_bundle(discover_for(spec, root), spec, str(spec_file))
    bundle = bundle_from_files(files)
    assert "p2p-under-translation" not in {f.code for f in check(root, bundle).findings}
    elsewhere = {f.code for f in check(root, attrs.evolve(bundle, node="kpro7")).findings}
    assert {"wrong-node", "p2p-under-translation"} <= elsewhere


def test_container_driver_mismatch_is_the_planners_refusal(tmp_path: Path) -> None:
    """check's `container-driver-mismatch` is the planner's (`container_driver_problems`):
    the same versions found, the same message and the install command it names."""
    root = kpro6(tmp_path)
    libs = root / ROOTFS / "usr/lib/x86_64-linux-gnu"
    (libs / "libcuda.so.590.48.01").rename(libs / "libcuda.so.565.57.01")
    spec = example_spec("kpro6")
    with pytest.raises(PlanError) as refused:
        plan(discover_for(spec, root), spec)
    (problem,) = [p for p in refused.value.problems if p.code == "container-driver-mismatch"]
    (found,) = [f for f in check(root, None).findings if f.code == "container-driver-mismatch"]
    assert found.severity is Severity.ERROR
    assert found.subject == f"CT {CT}"
    assert found.message == f"{problem.message}. Fix: {problem.fix}"
    assert "565.57.01" in found.message and f"pct exec {CT} --" in found.message
