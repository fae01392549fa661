"""Late SR-IOV VFs on a real Linux kernel under QEMU/TCG: the split pins VFs that appear
after the boot unit ran.

No emulated GPU has SR-IOV, so an emulated NVMe controller with SR-IOV (QEMU's `nvme`
with `sriov_max_vfs=2`, on a root port of its own; PF 0000:01:00.0, VFs 01:00.1 and
01:00.2, each in an IOMMU group of its own) stands in for an SR-IOV GPU. A probe boot
creates the VFs and captures the guest's sysfs; pvegpu discovers that capture. The one
change before planning: the NVMe's functions are reclassified as display controllers in
the facts, so that a pool may name its VF (the rendered script checks vendor:device,
NUMA node, physfn and IOMMU group, never the class, so it runs unchanged on the real
device). The scenario boot then does what a host does: the unit's ExecStart before any
driver, coldplug (nvme binds the PF), something writes sriov_numvfs, and for each new VF
what the udev rule runs. Checked on the kernel itself: with autoprobe off a new VF binds
nothing, the planned VF ends on vfio-pci by override, its sibling is pinned to the PF's
driver, the PF stays, and revert gives it all back.

Slow (two boots of 20-30 s), opt-in like tests/test_split_qemu.py: pytest -m slow
tests/test_sriov_qemu.py (make test-kernel runs both). Under CI=true a missing tool or
kernel fails instead of skipping.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import NoReturn

import attrs
import pytest

from pvegpu.hardware import VFIO_DRIVER
from pvegpu.host.discover import discover
from pvegpu.model.artifact import APPLY_BUNDLE, HOST
from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.paths import SPLIT_UDEV_RULE
from pvegpu.pci import PciAddress
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.rendering.split import MODPROBE_PATH, SCRIPT_PATH, UNIT_PATH
from pvegpu.spec.load import parse_spec
from qemu import guest, initramfs, kernel, scenarios
from qemu.guest import Run
from qemu.machine import Machine, boot

pytestmark = pytest.mark.slow

CACHE = Path(os.environ.get("PVEGPU_KERNEL_CACHE", Path.home() / ".cache/pvegpu-kernel"))
APT = "apt-get install qemu-system-x86 busybox-static kmod cpio dash"
PF = "0000:01:00.0"
VF, SIBLING = "0000:01:00.1", "0000:01:00.2"
NVME_ID = ("0x1b36", "0x0010")
SPEC = f"""
node = "{guest.HOSTNAME}"

[[pools]]
name = "vf"
gpus = ["{VF}"]
mapping = {{ id = "qemu-vf", description = "the NVMe's first VF standing in for a GPU VF" }}

[pools.vfio]
"""
# QEMU's constraints for an NVMe with SR-IOV: a subsystem, and flexible queue and
# interrupt resources for the VFs (vq >= 2 per VF, vi >= 1 per VF, 2 of each kept).
NVME = [
    "-device", "pcie-root-port,id=rpn,bus=pcie.0,chassis=30,addr=6.0",
    "-device", "nvme-subsys,id=nvmesubsys,nqn=pvegpu-sriov",
    "-device", "nvme,serial=pvegpusriov,subsys=nvmesubsys,bus=rpn,sriov_max_vfs=2,"
    "sriov_vq_flexible=4,sriov_vi_flexible=2,max_ioqpairs=6,msix_qsize=4",
]  # fmt: skip
DEV = f"/sys/bus/pci/devices/{PF}"

# The probe: a running host whose PF's driver has created its two VFs. They are created
# with autoprobe off, then autoprobe goes back on: the capture shows the VFs unbound
# (nvme would bind a VF, then fail on it asynchronously: a capture that depends on timing).
PROBE = f"""
coldplug
echo 0 > {DEV}/sriov_drivers_autoprobe
echo 2 > {DEV}/sriov_numvfs; rc numvfs $?
echo 1 > {DEV}/sriov_drivers_autoprobe
state probe
capture
"""

# A boot of the split host: the unit before any driver, coldplug, then the VFs appear.
LATE = f"""
state boot
run_unit; rc unit $?
say autoprobe-unit cat {DEV}/sriov_drivers_autoprobe
state unit
coldplug
state coldplug
echo 2 > {DEV}/sriov_numvfs; rc numvfs $?
state created
udev_add {VF}; rc udev-vf $?
udev_add {SIBLING}; rc udev-sibling $?
state late
say status $SPLIT status; rc status $?
$SPLIT revert; rc revert $?
say autoprobe-revert cat {DEV}/sriov_drivers_autoprobe
state revert
"""


@attrs.frozen
class SriovMachine(Machine):
    """The testbed's machine plus the NVMe with SR-IOV on a root port of its own."""

    def args(self) -> list[str]:
        return [*super().args(), *NVME]


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"CI=true: the kernel test must run, but {reason}")
    pytest.skip(reason)


def as_gpu_host(facts: HostFacts) -> HostFacts:
    """The NVMe PF and its VFs as display controllers, the PF one of the GPUs."""
    nvme = {PciAddress.parse(a) for a in (PF, VF, SIBLING)}
    functions = tuple(
        attrs.evolve(f, pci_class=0x030000) if f.address in nvme else f for f in facts.functions
    )
    pf = next(f for f in functions if str(f.address) == PF)
    gpus = tuple(sorted((*facts.gpus, GPU(pf))))
    return attrs.evolve(facts, functions=functions, gpus=gpus)


def udev_add(rule: str, script: str) -> str:
    """`udev_add ADDR`: what udevd runs for the rule on the add event of ADDR, with
    systemd's PATH and nothing else in the environment."""
    match = re.search(r'RUN\+="([^"]+)"', rule)
    assert match is not None, rule
    argv = match.group(1).replace("$kernel", '"$1"')
    assert argv.startswith(script + " ")
    return f'udev_add() {{ (cd / && exec env -i PATH="$SYSTEMD_PATH" {argv}) </dev/null; }}\n'


@pytest.fixture(scope="module")
def late_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("QEMU boots are opt-in: pytest -m slow")
    missing = initramfs.missing_tools()
    if missing:
        unavailable(f"the QEMU testbed needs {', '.join(missing)}: {APT}")
    try:
        kern = kernel.fetch(CACHE)
    except (subprocess.CalledProcessError, OSError, LookupError) as exc:
        unavailable(f"no Debian kernel package in {CACHE} and apt-get download failed: {exc}")
    work = tmp_path_factory.mktemp("qemu-sriov")
    base = scenarios.split_files  # the scenario files' layout, with our own steps
    probe_files = {**scenarios.probe_files(), "lib/pvegpu-scenario-probe.sh": (PROBE, 0o644)}
    probe_log = boot(
        SriovMachine(), kern.vmlinux, initramfs.build(work / "probe", kern, probe_files),
        scenario="probe",
    )  # fmt: skip
    (work / "probe.log").write_text(probe_log)
    probe = guest.read_run(probe_log)
    assert probe.rcs.get("numvfs") == 0, probe.text
    assert len(probe.captures) == 1, probe.text
    root = guest.unpack_capture(*probe.captures[0], work / "capture")
    artifacts = render(plan(as_gpu_host(discover(root)), parse_spec(SPEC)))
    wanted = (SCRIPT_PATH, UNIT_PATH, MODPROBE_PATH, SPLIT_UDEV_RULE)
    rendered = {
        a.path: (a.content, a.mode)
        for a in artifacts
        if a.path in wanted and a.target == HOST and a.bundle == APPLY_BUNDLE
    }
    assert set(rendered) == set(wanted)
    files = base(rendered)
    lib, mode = files["lib/pvegpu-testbed.sh"]
    files["lib/pvegpu-testbed.sh"] = (
        lib + udev_add(rendered[SPLIT_UDEV_RULE][0], "/" + SCRIPT_PATH),
        mode,
    )
    files["lib/pvegpu-scenario-late.sh"] = (LATE, 0o644)
    log = boot(
        SriovMachine(), kern.vmlinux, initramfs.build(work / "late", kern, files),
        scenario="late",
    )  # fmt: skip
    (work / "late.log").write_text(log)  # kept for a failure's post-mortem
    return guest.read_run(log)


def test_late_vfs_on_the_real_kernel(late_run: Run) -> None:
    run = late_run
    states, rcs, outs = run.states, run.rcs, run.outs
    # The unit at boot: autoprobe off on the PF, no override written (no VF exists yet).
    assert rcs["unit"] == 0, run.text
    assert outs["autoprobe-unit"] == "0", run.text
    assert states["unit"] == states["boot"], run.text
    assert PF in states["coldplug"] and VF not in states["coldplug"], run.text
    assert states["coldplug"][PF].driver == "nvme", run.text
    # sriov_numvfs written after the PF's driver loaded: the kernel binds neither VF.
    assert rcs["numvfs"] == 0, run.text
    created = states["created"]
    assert [(created[a].driver, created[a].override) for a in (VF, SIBLING)] == [
        (None, None),
        (None, None),
    ], run.text
    # What the udev rule runs: the planned VF to vfio-pci, its sibling pinned to nvme.
    assert (rcs["udev-vf"], rcs["udev-sibling"]) == (0, 0), run.text
    late = states["late"]
    assert (late[VF].driver, late[VF].override) == (VFIO_DRIVER, VFIO_DRIVER), run.text
    # nvme binds the sibling, and may drop it again: QEMU keeps a VF's controller
    # offline until it is given resources, so the driver's asynchronous reset fails.
    assert late[SIBLING].override == "nvme", run.text
    assert late[SIBLING].driver in ("nvme", None), run.text
    assert (late[PF].driver, late[PF].override) == ("nvme", None), run.text
    others = {a: f for a, f in states["coldplug"].items()}
    assert {a: late[a] for a in others} == others, run.text
    assert all((late[a].vendor, late[a].device) == NVME_ID for a in (PF, VF, SIBLING))
    assert rcs["status"] == 0, run.text
    assert f"vf   {VF} 1b36:0010" in outs["status"], run.text
    # revert: autoprobe back on, the VF off vfio-pci, no override left on either VF.
    assert rcs["revert"] == 0, run.text
    assert outs["autoprobe-revert"] == "1", run.text
    after = states["revert"]
    assert after[VF].override is None and after[VF].driver != VFIO_DRIVER, run.text
    assert after[SIBLING].override is None, run.text
    assert (after[PF].driver, after[PF].override) == ("nvme", None), run.text
