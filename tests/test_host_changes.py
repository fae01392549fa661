"""The Plan records what the renderers once decided (`Plan.host_changes`, model/host_changes.py;
`Pool.vgpu_source`; `CurrentSplit.poolable`), and the renderers format the record.

Each decision is checked twice: plan() records what planning decides (the same answer
the rule gives), and a renderer given a plan whose record says otherwise writes the
record, so it cannot be deciding again on the side.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from bundled import FIXTURES, example_plan
from hgx_host import WHOLE_BOARD, hgx_host
from pvegpu.hardware import VFIO_DRIVER, host_driver
from pvegpu.host.discover import discover
from pvegpu.model.facts import DriverctlOverride
from pvegpu.model.host_changes import HostChanges
from pvegpu.model.paths import SPLIT_UDEV_RULE
from pvegpu.model.plan import Plan
from pvegpu.planning.current import current_split
from pvegpu.planning.planner import plan
from pvegpu.planning.split import revert_driver
from pvegpu.rendering.init_spec import render_current
from pvegpu.rendering.registry import render
from pvegpu.rendering.review.apply_steps import Step, runbook
from pvegpu.rendering.review.manual_revert import revert_steps
from pvegpu.rendering.split import SCRIPT_PATH, render_split
from pvegpu.spec.load import parse_spec
from pvegpu.testing import write_host
from pvegpu.vendors.nvidia import NVIDIA
from sriov_host import PF, SPEC, vf_address, write_igpu_host


def _changed(plan: Plan, **changes: Any) -> Plan:
    return attrs.evolve(plan, host_changes=attrs.evolve(plan.host_changes, **changes))


def _script(plan: Plan) -> str:
    return next(a.content for a in render_split(plan) if a.path == SCRIPT_PATH)


def _commands(steps: Sequence[Step]) -> list[str]:
    return [c for s in steps for c in s.commands]


def test_each_vfio_group_is_recorded_with_its_members_drivers(kpro6_plan: Plan) -> None:
    """Every non-bridge function the split moves is a member of one recorded group, with
    its driver now, after (vfio-pci) and at revert as the rules say."""
    groups = kpro6_plan.host_changes.vfio_groups
    members = [m for g in groups for m in g.members]
    moved = sorted(
        f.address
        for p in kpro6_plan.split_pools
        for f in p.functions
        if not f.is_bridge and f.physfn is None
    )
    assert sorted(m.function.address for m in members) == moved
    for member in members:
        function = member.function
        assert member.now == function.driver
        assert member.after == VFIO_DRIVER
        assert member.revert_driver == revert_driver(kpro6_plan.facts, function)
        assert member.host_driver == host_driver(function)
    gpus = {g.address for p in kpro6_plan.split_pools for g in p.gpus}
    assert {g.gpu for g in groups} == gpus


def test_the_split_script_writes_the_recorded_revert_driver(kpro6_plan: Plan) -> None:
    """The script's revert column is the record's, not worked out again from the facts."""
    first, *rest = kpro6_plan.host_changes.vfio_groups
    member = first.members[0]
    changed = attrs.evolve(first, members=(attrs.evolve(member, revert_driver="recorded"),))
    script = _script(_changed(kpro6_plan, vfio_groups=(changed, *rest)))
    assert f"{member.function.address} {member.function.vendor_device} " in script
    address = str(member.function.address)
    row = next(line for line in script.splitlines() if line.startswith(address))
    assert row.endswith(" recorded")
    assert not _script(kpro6_plan).count(" recorded\n")


def test_late_vf_pfs_and_their_udev_rule_are_recorded(tmp_path: Path) -> None:
    """A VF a vfio pool moves: its PF, the VF's revert driver and the udev rule that pins
    it when it appears are on the plan; the runbook reloads udevd because the record says
    so, not because it spotted the rule's path."""
    facts = discover(write_igpu_host(tmp_path / "host"))
    planned = plan(facts, parse_spec(SPEC))
    (late,) = planned.host_changes.late_vf_pfs
    assert str(late.function.address) == PF
    (vf,) = late.vfs
    assert str(vf.function.address) == vf_address(0)
    assert vf.revert_driver == revert_driver(facts, vf.function)
    assert planned.host_changes.udev_rules == (SPLIT_UDEV_RULE,)
    reload = "udevadm control --reload"
    artifacts = render(planned)
    assert reload in _commands(runbook(planned, artifacts))
    assert reload in _commands(revert_steps(planned, artifacts))
    unrecorded = _changed(planned, udev_rules=())
    assert reload not in _commands(runbook(unrecorded, artifacts))
    assert reload not in _commands(revert_steps(unrecorded, artifacts))


def test_the_fabric_manager_stop_is_recorded(tmp_path: Path) -> None:
    """The whole board to a VM on a host running Fabric Manager: the plan says the
    runbook stops it, and the runbook has the step exactly when the plan says so."""
    write_host(hgx_host(), tmp_path / "hgx")
    whole = plan(discover(tmp_path / "hgx"), parse_spec(WHOLE_BOARD))
    assert whole.host_changes.stops_fabric_manager
    stop = "Stop Fabric Manager on the host: the NVSwitches go to the VM"
    assert stop in [s.title for s in runbook(whole, render(whole))]
    kept = _changed(whole, stops_fabric_manager=False)
    assert stop not in [s.title for s in runbook(kept, render(kept))]


def test_the_manual_revert_names_the_recorded_driverctl_overrides(kpro6_plan: Plan) -> None:
    """driverctl binds a reverted function again at boot: the manual revert says so for
    each override on the record (kpro6 has none, so the record is the only source)."""
    assert kpro6_plan.host_changes.boot_overrides == ()
    gpu = kpro6_plan.split_pools[0].gpus[0].address
    said = " ".join(s.expect for s in revert_steps(kpro6_plan, render(kpro6_plan)))
    assert "driverctl binds" not in said
    recorded = _changed(kpro6_plan, boot_overrides=(DriverctlOverride(gpu, VFIO_DRIVER),))
    said = " ".join(s.expect for s in revert_steps(recorded, render(recorded)))
    assert f"driverctl binds {gpu} to {VFIO_DRIVER} again" in said


def test_a_plan_without_a_split_records_no_host_changes() -> None:
    """Container pools only: nothing moves, nothing to stop or reload."""
    facts = discover(FIXTURES / "kpro6")
    spec = parse_spec('node = "kpro6"\n\n[[pools]]\nname = "ct"\ngpus = ["01:00.0"]\n\n'
                      "[pools.lxc]\nvmid = 129\n")  # fmt: skip
    assert plan(facts, spec).host_changes == HostChanges()


def test_the_poolable_gpus_are_recorded_and_written_as_recorded() -> None:
    """init's split lists the GPUs a pool may name (not the BMC's display); its comments
    count the record's GPUs, not a rule of their own."""
    facts = discover(FIXTURES / "intel-arc")
    split = current_split(facts)
    bmc = next(g for g in facts.gpus if g.bmc_display)
    assert bmc.address not in split.poolable
    assert set(split.poolable) == {g.address for g in facts.gpus if not g.bmc_display}
    models = f"#   {bmc.vendor_device}  "
    assert models not in render_current(facts, split)
    with_bmc = attrs.evolve(split, poolable=(*split.poolable, bmc.address))
    assert models in render_current(facts, with_bmc)


def test_a_vgpu_pool_records_its_vendors_vgpu_files() -> None:
    """Each vGPU pool carries its vendor's vGPU files (where the VM start writes the
    type), every other pool none; SUMMARY.md's start step names the recorded file."""
    example = example_plan("vgpu-l40s")
    vgpu = [p for p in example.pools if p.vgpu_type is not None]
    assert vgpu and all(p.vgpu_source == NVIDIA.vgpu for p in vgpu)
    assert all(p.vgpu_source is None for p in example.pools if p.vgpu_type is None)
