"""Another container that loses every GPU is shut down before the split and started
again by the revert only if it ran (rendering/review/emptied_steps.py).

nvidia-drm: CT 141 (Frigate) holds the render node of the 4090 that moves to VM 410,
and keeps no GPU after the plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from apply_fake import FakeHost
from bundled import FIXTURES, copy_tree, example_spec
from pvegpu.apply.bundle import bundle_from_files
from pvegpu.apply.run import apply_bundle
from pvegpu.apply.undo import revert
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.rendering.bundle_layout import bundle_files
from pvegpu.rendering.review.actions import StopContainer
from pvegpu.rendering.review.apply_doc import manifest_header
from sysfs_sim import KernelSim, natural_drivers

POOL_CT, EMPTIED_CT = 140, 141
SHUTDOWN = ("pct", "shutdown", "141", "--timeout", "120", "--forceStop", "1")


class Setup:
    def __init__(self, tmp: Path) -> None:
        spec = example_spec("nvidia-drm")
        self.root = copy_tree(FIXTURES / "nvidia-drm", tmp / "host")
        plan, artifacts = plan_and_render(discover_for(spec, self.root), spec)
        self.plan = plan
        files = bundle_files(artifacts, **manifest_header(plan, artifacts, "nvidia-drm.toml"))
        self.bundle = bundle_from_files(files)
        self.kernel = KernelSim(self.root, natural_drivers(plan))
        self.lines: list[str] = []

    def host(self, *, emptied_running: bool) -> FakeHost:
        return FakeHost(
            self.root,
            self.kernel,
            {POOL_CT: "rpool/data/subvol-140-disk-0", EMPTIED_CT: "rpool/data/subvol-141-disk-0"},
            running={POOL_CT: True, EMPTIED_CT: emptied_running},
        )


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.kernel.close()


def test_the_runbook_shuts_it_down_before_the_split(setup: Setup) -> None:
    steps = [a for s in setup.bundle.steps for a in s.actions]
    stops = [a for a in steps if isinstance(a, StopContainer)]
    assert [(a.vmid, a.shutdown_s) for a in stops] == [(POOL_CT, 0), (EMPTIED_CT, 120)]
    host = setup.host(emptied_running=True)
    apply_bundle(host, setup.bundle, setup.lines.append)
    order = host.mutating()
    assert order.index(SHUTDOWN) < order.index(("/usr/local/sbin/pvegpu-vfio-split", "bind"))
    # Left stopped: starting it again is the admin's step (it ran without GPUs then).
    assert not host.running[EMPTIED_CT] and host.running[POOL_CT]
    revert(host, setup.lines.append)
    assert host.running[EMPTIED_CT], "it ran before apply: the revert starts it again"


def test_the_warning_says_the_runbook_shuts_it_down(setup: Setup) -> None:
    (finding,) = [f for f in setup.plan.findings if f.code == "container-loses-gpus"]
    assert finding.subject == "etc/pve/lxc/141.conf"
    assert "the runbook shuts CT 141 down before the split" in finding.message


def test_a_stopped_one_is_left_stopped_by_apply_and_revert(setup: Setup) -> None:
    host = setup.host(emptied_running=False)
    apply_bundle(host, setup.bundle, setup.lines.append)
    assert SHUTDOWN not in host.mutating()
    assert any("CT 141 is stopped" in line for line in setup.lines)
    revert(host, setup.lines.append)
    assert not host.running[EMPTIED_CT]
    assert ("pct", "start", "141") not in host.mutating()
