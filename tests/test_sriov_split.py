"""Late SR-IOV VFs: the rendered split script and udev rule, run against the simulated
kernel (tests/sysfs_sim.py) on the Intel iGPU host of tests/sriov_host.py.

The plan gives VF 0000:00:02.1 to VM 200 and leaves the PF and its other six VFs on
i915. The VFs do not exist when the boot unit runs: the PF's driver creates them later.
The kernel simulator creates them as the kernel does when sriov_numvfs is written (no
driver probes them while the PF's sriov_drivers_autoprobe is 0, unless their
driver_override names one), and the test then runs what the udev rule runs for each.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from linters import needs_shellcheck, shellcheck
from pvegpu.host.discover import discover
from pvegpu.model.artifact import Artifact
from pvegpu.model.paths import SPLIT_UDEV_RULE
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.rendering.split import SCRIPT_PATH, UNIT_PATH, render_split
from pvegpu.spec.load import parse_spec
from sriov_host import PF, SPEC, TOTAL_VFS, vf_address, write_igpu_host
from sysfs_sim import NAP_S, KernelSim, Result, Write, unload_driver

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("dash") is None,
    reason="needs Linux (inotify, FIFOs) and dash",
)

VF = vf_address(0)
SIBLINGS = tuple(vf_address(i) for i in range(1, TOTAL_VFS))
NATURAL = {PF: "i915", "0000:00:14.0": "xhci_hcd", "0000:00:00.0": None}
AUTOPROBE = f"devices/{PF}/sriov_drivers_autoprobe"


def override(address: str, value: str) -> Write:
    return Write(f"devices/{address}/driver_override", f"{value}\n")


def probe(address: str) -> Write:
    return Write("drivers_probe", f"{address}\n")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Artifact]:
    """The bundle's split files for the live host: PF and 7 VFs on i915."""
    root = write_igpu_host(tmp_path_factory.mktemp("live") / "host")
    return {a.path: a for a in render_split(plan(discover(root), parse_spec(SPEC)))}


@pytest.fixture(scope="module")
def script(artifacts: dict[str, Artifact], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sbin") / "pvegpu-vfio-split"
    path.write_text(artifacts[SCRIPT_PATH].content)
    path.chmod(0o755)
    return path


def udev_argv(artifacts: dict[str, Artifact], script: Path, address: str) -> list[str]:
    """What udev runs for the add event of `address`: the rule's RUN, $kernel expanded."""
    match = re.search(r'RUN\+="([^"]+)"', artifacts[SPLIT_UDEV_RULE].content)
    assert match is not None
    program, *args = match.group(1).split()
    assert program == "/" + SCRIPT_PATH
    return ["dash", str(script), *(address if a == "$kernel" else a for a in args)]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Callable[..., KernelSim]]:
    """`host(vfs, boot=..., edit=..., **igpu_host options)`: the host tree (changed by
    `edit`) behind a simulated kernel."""
    sims: list[KernelSim] = []

    def make(
        vfs: int = TOTAL_VFS,
        *,
        boot: bool = False,
        edit: Callable[[Path], object] | None = None,
        **options: object,
    ) -> KernelSim:
        root = write_igpu_host(tmp_path / f"host{len(sims)}", vfs, **options)
        if edit is not None:
            edit(root)
        if boot:
            # Early boot: no GPU driver and no vfio-pci loaded yet.
            unload_driver(root, "vfio-pci")
        natural = NATURAL | {vf_address(i): "i915" for i in range(vfs)}
        sim = KernelSim(root, natural)
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        sim.close()


def assert_clean(sim: KernelSim) -> None:
    assert sim.errors == []
    assert sim.unexplained_changes() == []


def run_udev(sim: KernelSim, argv: list[str]) -> Result:
    result = sim.run_command(argv)
    assert result.rc == 0, result.stderr
    return result


def test_boot_then_late_vfs_reach_their_drivers(
    host: Callable[..., KernelSim], script: Path, artifacts: dict[str, Artifact]
) -> None:
    """The whole boot: the unit's `override` switches autoprobe off before i915 loads,
    i915 creates 7 VFs that bind nothing, and udev's `vf ADDR` for each sends the planned
    one to vfio-pci and the others to i915. The PF is never written to but for autoprobe."""
    sim = host(0, boot=True, pf_driver=None)
    boot = sim.run(script, "override")
    assert boot.rc == 0, boot.stderr
    assert list(boot.writes) == [Write(AUTOPROBE, "0\n")]
    sim.load_driver("i915")
    assert sim.driver(PF) == "i915"
    created = sim.create_vfs(PF, TOTAL_VFS, "i915")
    assert created == [VF, *SIBLINGS]
    assert all(sim.driver(a) is None for a in created), "autoprobe off: nothing binds them"
    first = run_udev(sim, udev_argv(artifacts, script, VF))
    assert list(first.writes) == [
        Write("modprobe", "vfio-pci\n"),
        override(VF, "vfio-pci"),
        probe(VF),
    ]
    for address in SIBLINGS:
        late = run_udev(sim, udev_argv(artifacts, script, address))
        assert list(late.writes) == [override(address, "i915"), probe(address)]
    state = sim.state()
    assert state[VF] == ("vfio-pci", "vfio-pci")
    assert all(state[a] == ("i915", "i915") for a in SIBLINGS)
    assert state[PF] == ("i915", None), "the PF stays where it is"
    status = sim.run(script, "status")
    assert status.rc == 0, status.stdout + status.stderr
    assert f"vf   {VF} 8086:a7a0 numa -1: planned vfio-pci, is vfio-pci" in status.stdout
    assert_clean(sim)


def test_without_autoprobe_off_the_host_driver_wins_the_race(
    host: Callable[..., KernelSim], script: Path, artifacts: dict[str, Artifact]
) -> None:
    """Control: with autoprobe on (the boot unit never ran) i915 binds every new VF
    before udev can act, so `vf ADDR` has to take the planned one back from it."""
    sim = host(0, pf_driver="i915")
    sim.create_vfs(PF, 2, "i915")
    assert sim.driver(VF) == "i915"
    result = run_udev(sim, udev_argv(artifacts, script, VF))
    assert list(result.writes) == [
        Write("modprobe", "vfio-pci\n"),
        override(VF, "vfio-pci"),
        Write("drivers/i915/unbind", f"{VF}\n"),
        probe(VF),
    ]
    assert sim.state()[VF] == ("vfio-pci", "vfio-pci")
    sibling = run_udev(sim, udev_argv(artifacts, script, vf_address(1)))
    assert list(sibling.writes) == [], "a sibling already bound is left alone"
    assert_clean(sim)


def test_bind_on_the_live_host_moves_only_the_vf(
    host: Callable[..., KernelSim], script: Path
) -> None:
    """bind with the VFs already there: autoprobe off first, then the planned VF moves;
    the PF and its six siblings are never written to."""
    sim = host()
    before = sim.state()
    result = sim.run(script, "bind")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == [
        Write("modprobe", "vfio-pci\n"),
        Write(AUTOPROBE, "0\n"),
        override(VF, "vfio-pci"),
        Write("drivers/i915/unbind", f"{VF}\n"),
        probe(VF),
    ]
    assert sim.state() == {**before, VF: ("vfio-pci", "vfio-pci")}
    again = sim.run(script, "bind")
    assert list(again.writes) == [Write("modprobe", "vfio-pci\n")]
    assert_clean(sim)


def test_revert_gives_everything_back(host: Callable[..., KernelSim], script: Path) -> None:
    """revert: autoprobe back on first (with it off no driver takes the VF back), the
    VF back to i915, the siblings' pins cleared."""
    sim = host(0, boot=True, pf_driver=None)
    assert sim.run(script, "override").rc == 0
    sim.load_driver("i915")
    sim.create_vfs(PF, 3, "i915")
    for address in (VF, vf_address(1), vf_address(2)):
        assert sim.run(script, "vf", address).rc == 0
    result = sim.run(script, "revert")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == [
        Write(AUTOPROBE, "1\n"),
        override(VF, ""),
        Write("drivers/vfio-pci/unbind", f"{VF}\n"),
        probe(VF),
        override(vf_address(1), ""),
        override(vf_address(2), ""),
    ]
    state = sim.state()
    assert [state[a] for a in (VF, vf_address(1), vf_address(2))] == [("i915", None)] * 3
    assert_clean(sim)


def test_a_vf_that_is_not_the_planned_one_is_refused(
    host: Callable[..., KernelSim], script: Path
) -> None:
    """A new VF at the planned address with another device id (a different card, a
    firmware that renumbered): refused, left unbound, nothing written."""

    def other_vf_id(root: Path) -> None:
        (root / "sys/bus/pci/devices" / PF / "sriov_vf_device").write_text("a7a8\n")

    sim = host(0, pf_driver="i915", autoprobe=False, edit=other_vf_id)
    sim.create_vfs(PF, 1, "i915")
    result = sim.run(script, "vf", VF)
    assert result.rc == 3
    assert f"{VF}: is 8086:a7a8, planned 8086:a7a0" in result.stderr
    assert list(result.writes) == []
    assert sim.driver(VF) is None


def test_vf_of_another_pf_is_left_alone(host: Callable[..., KernelSim], script: Path) -> None:
    sim = host(1)
    for argv in (["vf", "0000:00:14.0"], ["vf", "0000:07:00.1"]):
        result = sim.run(script, *argv)
        assert (result.rc, list(result.writes)) == (0, [])
    assert sim.run(script, "vf").rc == 2
    assert sim.run(script, "vf", "../../etc").rc == 2


def test_status_before_the_vfs_exist(host: Callable[..., KernelSim], script: Path) -> None:
    sim = host(0, pf_driver="i915", autoprobe=False)
    result = sim.run(script, "status")
    assert result.rc == 1
    assert f"pf   {PF} 8086:a7a0 numa -1: planned sriov_drivers_autoprobe 0, is 0: ok" in (
        result.stdout
    )
    assert f"vf   {VF} 8086:a7a0 numa -1: planned vfio-pci, not created yet" in result.stdout


@needs_shellcheck
def test_sriov_script_passes_shellcheck(script: Path) -> None:
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout


def test_the_boot_unit_still_runs_before_any_driver(artifacts: dict[str, Artifact]) -> None:
    """autoprobe must be off before the PF's driver can create VFs: the unit that runs
    `override` is ordered before modules-load and udev coldplug, which load i915."""
    unit = artifacts[UNIT_PATH].content
    assert "Before=systemd-modules-load.service systemd-udev-trigger.service" in unit
    assert "ExecStart=/usr/local/sbin/pvegpu-vfio-split override" in unit


def test_golden_udev_rule(
    artifacts: dict[str, Artifact], golden: Callable[[str], SnapshotAssertion]
) -> None:
    assert artifacts[SPLIT_UDEV_RULE].content == golden("rules")


def test_golden_script(
    artifacts: dict[str, Artifact], golden: Callable[[str], SnapshotAssertion]
) -> None:
    assert artifacts[SCRIPT_PATH].content == golden("sh")


def test_no_udev_rule_without_vfs_to_pin(tmp_path: Path) -> None:
    """A plan that moves no VF renders the split as before: no rule, no SR-IOV code."""
    root = write_igpu_host(tmp_path / "host", 2, vf_driver=None)
    spec = SPEC.replace('gpus = ["00:02.1"]', 'gpus = ["00:02.0"]')
    files = {a.path: a for a in render_split(plan(discover(root), parse_spec(spec)))}
    assert SPLIT_UDEV_RULE not in files
    assert "sriov_drivers_autoprobe" not in files[SCRIPT_PATH].content


assert NAP_S < 0.1  # the simulator's naps keep these runs fast


def test_the_bundle_installs_the_rule_and_reloads_udev(tmp_path: Path) -> None:
    """The whole render: the layout shows the VF as the pool's device, the runbook has
    udevd read the rule once installed, and both reverts remove it and reload again."""
    root = write_igpu_host(tmp_path / "host")
    files = {a.path: a for a in render(plan(discover(root), parse_spec(SPEC)))}
    summary = files["SUMMARY.md"].content
    assert f"`/{SPLIT_UDEV_RULE}`" in summary
    install = summary.index(f" {SPLIT_UDEV_RULE} /{SPLIT_UDEV_RULE}")
    removal = summary.index(f"rm /{SPLIT_UDEV_RULE}")
    # In the install step itself, and again in the manual revert's.
    assert "udevadm control --reload" in summary[install : summary.index("```", install)]
    assert "udevadm control --reload" in summary[removal : summary.index("```", removal)]
    revert = files["revert.sh"].content
    assert revert.index("run udevadm control --reload") > revert.index(
        f'rm -f "$ROOT/{SPLIT_UDEV_RULE}"'
    )
