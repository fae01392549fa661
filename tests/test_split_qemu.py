"""The rendered split on a real Linux kernel under QEMU/TCG, planned by pvegpu itself.

A probe boot captures the guest's own sysfs; pvegpu discovers, plans (the spec below)
and renders from that capture, exactly as on a host. The rendered script, unit and
modprobe.d file go into a second root file system, and each scenario boots it: the
unit's `ExecStart=` runs as PID 1 would at boot, before any driver module is loaded,
then drivers load by modalias as udev's coldplug loads them. After every step the table
of every PCI function's driver and driver_override is compared with what should be:
the planned functions moved and nothing else did.

The kernel upgrade (tests/qemu/upgrade.py): a Debian 13 system with the same kernel (A)
and the rendered files, the initramfs-tools hook included, is upgraded by apt to Debian
13's kernel (B), whose package builds B's initramfs with the system's hooks; both
kernels boot their own initramfs (Debian's /init and udev) and mount the system as root,
and the same table is checked, from the first moment on the root.

Slow (nine boots of 10-30 s, two at a time: about 3 minutes on two cores; the upgrade
about 2.5 minutes more, 2 more the first time) and needs apt packages plus a Debian
kernel package, downloaded once into PVEGPU_KERNEL_CACHE (default
~/.cache/pvegpu-kernel); the upgrade also root and a Debian 13 chroot (debootstrap).
Opt-in: `make test-kernel`, or pytest -m slow tests/test_split_qemu.py (-k upgrade for
that scenario alone). Under CI=true a missing tool, kernel or chroot fails instead of
skipping.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NoReturn

import attrs
import pytest

from pvegpu.errors import PlanError
from pvegpu.hardware import VFIO_DRIVER
from pvegpu.host.discover import discover
from pvegpu.model.artifact import APPLY_BUNDLE, HOST
from pvegpu.model.facts import HostFacts
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.rendering.split import INITRAMFS_HOOK_PATH, MODPROBE_PATH, SCRIPT_PATH, UNIT_PATH
from pvegpu.spec.load import parse_spec
from qemu import guest, initramfs, kernel, scenarios, upgrade
from qemu.guest import Run, Table
from qemu.machine import Change, Iommu, Machine, boot

pytestmark = pytest.mark.slow

CACHE = Path(os.environ.get("PVEGPU_KERNEL_CACHE", Path.home() / ".cache/pvegpu-kernel"))
APT = "apt-get install qemu-system-x86 busybox-static kmod cpio dash"

# The kpro6 split on the guest: the GPUs (and with them their audio functions) of NUMA
# node 1 go to vfio-pci. Node 0's GPUs stay: an LXC pool needs NVIDIA device nodes,
# which no emulated card has, so the host side has no pins here.
SPEC = f"""
node = "{guest.HOSTNAME}"

[[pools]]
name = "vm"
numa_node = 1
mapping = {{ id = "qemu-vm", description = "the NUMA 1 GPUs of the test machine" }}

[pools.vfio]
"""
# Behind the NUMA 1 expander: a switch's downstream port 62:00.0 above 63:00, a PCI
# bridge 64:00.0 above 65:01 (machine.SWITCHED, machine.PCI_BRIDGED).
VM_SLOTS = scenarios.ALL_SLOTS[2:]
VM_BRIDGES = ("0000:62:00.0", "0000:64:00.0")


def unavailable(reason: str) -> NoReturn:
    """Skip, except under CI: there a kernel test that did not run is a failure."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"CI=true: the kernel test must run, but {reason}")
    pytest.skip(reason)


@attrs.frozen
class Bed:
    kernel: kernel.Kernel
    initrd: Path
    """The scenario boots' root file system: the rendered files installed."""
    files: dict[str, tuple[str, int]]
    """The split's rendered files (path -> (content, mode)) from the probe's capture."""
    facts: HostFacts
    identity: HostFacts
    """Discovery of the same machine booted with iommu=pt."""
    probe: Table
    """Every function as the probe boot found it, host drivers loaded by coldplug."""
    work: Path

    @property
    def vm(self) -> frozenset[str]:
        """The functions that should move: the NUMA 1 GPUs and their audio functions."""
        return frozenset(a for a in self.probe if a.startswith(VM_SLOTS))

    def run(self, name: str, machine: Machine, scenario: str) -> Run:
        log = boot(machine, self.kernel.vmlinux, self.initrd, scenario=scenario)
        (self.work / f"{name}.log").write_text(log)  # kept for a failure's post-mortem
        return guest.read_run(log)


def render_from(root: Path) -> dict[str, tuple[str, int]]:
    """discover -> plan -> render, as `pvegpu render --root` does: the split's files."""
    artifacts = render(plan(discover(root), parse_spec(SPEC)))
    split = (SCRIPT_PATH, UNIT_PATH, MODPROBE_PATH, INITRAMFS_HOOK_PATH)
    return {
        a.path: (a.content, a.mode)
        for a in artifacts
        if a.path in split and a.target == HOST and a.bundle == APPLY_BUNDLE
    }


def capture_of(run: Run, dest: Path) -> Path:
    assert len(run.captures) == 1, run.text
    return guest.unpack_capture(*run.captures[0], dest)


@pytest.fixture(scope="module")
def testbed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Bed:
    # The marker is documented as opt-in, but nothing deselects it by default: a plain
    # `pytest` on a machine that has QEMU must not boot kernels.
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("QEMU boots are opt-in: pytest -m slow")
    missing = initramfs.missing_tools()
    if missing:
        unavailable(f"the QEMU testbed needs {', '.join(missing)}: {APT}")
    try:
        kern = kernel.fetch(CACHE)
    except (subprocess.CalledProcessError, OSError, LookupError) as exc:
        unavailable(f"no Debian kernel package in {CACHE} and apt-get download failed: {exc}")
    work = tmp_path_factory.mktemp("qemu")
    probe_initrd = initramfs.build(work / "probe", kern, scenarios.probe_files())

    def probe(iommu: Iommu) -> Run:
        log = boot(Machine(iommu), kern.vmlinux, probe_initrd, scenario="probe")
        (work / f"probe-{iommu.value}.log").write_text(log)
        return guest.read_run(log)

    with ThreadPoolExecutor(BOOTS_AT_ONCE) as pool:
        translated, identity = pool.map(probe, (Iommu.TRANSLATED, Iommu.IDENTITY))
    root = capture_of(translated, work / "capture-translated")
    root_identity = capture_of(identity, work / "capture-identity")
    files = render_from(root)
    initrd = initramfs.build(work / "split", kern, scenarios.split_files(files))
    return Bed(
        kern, initrd, files, discover(root), discover(root_identity),
        translated.states["probe"], work,
    )  # fmt: skip


# Every scenario boot: (machine, guest scenario). Booted BOOTS_AT_ONCE at a time, each
# QEMU being mostly one busy thread; only those the selected tests use.
BOOTS = {
    "unit-translated": (Machine(Iommu.TRANSLATED), "unit"),
    "unit-identity": (Machine(Iommu.IDENTITY), "unit"),
    "hook": (Machine(), "hook"),
    "no-iommu": (Machine(Iommu.OFF), "refused"),
    "foreign-in-group": (Machine(change=Change.FOREIGN_IN_GROUP), "refused"),
    "other-card": (Machine(change=Change.OTHER_CARD), "refused"),
    "numa-swapped": (Machine(change=Change.NUMA_SWAPPED), "refused"),
}
BOOTS_AT_ONCE = 2


@pytest.fixture(scope="module")
def runs(testbed: Bed, request: pytest.FixtureRequest) -> Iterator[dict[str, Future[Run]]]:
    wanted = {
        item.callspec.params["boot"]
        for item in request.session.items
        if hasattr(item, "callspec") and "boot" in item.callspec.params
    }
    with ThreadPoolExecutor(BOOTS_AT_ONCE) as pool:
        yield {
            name: pool.submit(testbed.run, name, *BOOTS[name]) for name in BOOTS if name in wanted
        }


def split_table(bed: Bed) -> Table:
    """After the split: the planned functions on vfio-pci by override, the rest as found."""
    return {
        a: attrs.evolve(f, driver=VFIO_DRIVER, override=VFIO_DRIVER) if a in bed.vm else f
        for a, f in bed.probe.items()
    }


def _unmoved(table: Table) -> list[str]:
    """Functions on vfio-pci or with any override: after a refusal there must be none."""
    return [a for a, f in table.items() if f.driver == VFIO_DRIVER or f.override is not None]


def test_discovery_reads_the_guest(testbed: Bed) -> None:
    """The capture, discovered, is the guest as it saw itself: drivers, GPUs, groups."""
    facts = testbed.facts
    assert {str(f.address): f.driver for f in facts.functions} == {
        a: f.driver for a, f in testbed.probe.items()
    }
    assert [str(g.address) for g in facts.gpus] == [f"{s}0" for s in scenarios.ALL_SLOTS]
    assert [g.numa_node for g in facts.gpus] == [0, 0, 1, 1]
    assert {g.driver for g in facts.gpus} == {"bochs-drm"}
    assert [c.driver for g in facts.gpus for c in g.companions] == ["snd_hda_intel"] * 4
    assert {g.type for g in facts.iommu_groups} <= {"DMA", "DMA-FQ"}
    assert {g.type for g in testbed.identity.iommu_groups} == {"identity"}
    # Each VM GPU's group: the GPU, its audio and a bridge, which the split leaves alone.
    groups = [facts.group(g.iommu_group) for g in facts.gpus[2:] if g.iommu_group is not None]
    assert [[str(a) for a in g.members] for g in groups if g] == [
        [bridge, f"{slot}0", f"{slot}1"] for bridge, slot in zip(VM_BRIDGES, VM_SLOTS, strict=True)
    ]


def test_rendered_split(testbed: Bed) -> None:
    """The plan moves the NUMA 1 GPUs with their audio; the hook has audio's softdep."""
    script = testbed.files[SCRIPT_PATH][0]
    assert sorted(a for a in testbed.vm if a in script) == sorted(testbed.vm)
    assert not any(a in script for a in testbed.probe if a not in testbed.vm)
    modprobe = testbed.files[MODPROBE_PATH][0]
    # bochs-drm's module is `bochs`, which pvegpu does not know: no softdep for it.
    assert "softdep snd_hda_intel pre: vfio-pci" in modprobe.splitlines()
    assert "# no softdep for bochs-drm" in modprobe
    # The same files from the machine booted with iommu=pt: the domain type plays no part.
    assert render_from(testbed.work / "capture-identity") == testbed.files


@pytest.mark.parametrize("boot", ["unit-translated", "unit-identity"])
def test_unit_at_boot_then_coldplug(testbed: Bed, runs: dict[str, Future[Run]], boot: str) -> None:
    """The unit's ExecStart before any driver, coldplug, status, revert, runtime bind."""
    run = runs[boot].result()
    states, rcs, outs = run.states, run.rcs, run.outs
    assert _unmoved(states["boot"]) == [], run.text
    # The unit wrote the VM functions' overrides and nothing else; no driver was loaded.
    assert rcs["unit"] == 0, run.text
    assert states["unit"] == {
        a: attrs.evolve(f, override=VFIO_DRIVER) if a in testbed.vm else f
        for a, f in states["boot"].items()
    }, run.text
    # Coldplug loads bochs and snd_hda_intel by modalias: they take only the other functions.
    expected = split_table(testbed)
    assert states["coldplug"] == expected, run.text
    assert rcs["status"] == 0, run.text
    groups = {str(f.iommu_group) for f in testbed.facts.functions if str(f.address) in testbed.vm}
    assert set(outs["vfio-nodes"].split("|")) == {"vfio", *groups}, run.text
    assert (rcs["bind-again"], "nothing to do" in outs["bind-again"]) == (0, True), run.text
    # revert: every function back as the probe found it, no override left.
    assert rcs["revert"] == 0, run.text
    assert states["revert"] == testbed.probe, run.text
    assert rcs["status-reverted"] == 1, run.text
    # bind at runtime moves the same functions; a rerun writes nothing.
    assert rcs["bind"] == 0, run.text
    assert states["bind"] == expected, run.text
    assert (rcs["bind-rerun"], "nothing to do" in outs["bind-rerun"]) == (0, True), run.text
    assert states["bind-rerun"] == expected, run.text


@pytest.mark.parametrize("boot", ["hook"])
def test_modprobe_hook_alone_pins(testbed: Bed, runs: dict[str, Future[Run]], boot: str) -> None:
    """Without the unit, loading drivers by modalias runs the install hook first."""
    run = runs[boot].result()
    assert _unmoved(run.states["boot"]) == [], run.text
    # The board's audio (00:1b.0) comes first: snd_hda_intel's softdep loads vfio-pci,
    # its install line writes the overrides, vfio-pci binds the VM functions; bochs,
    # loaded after, finds only the NUMA 0 GPUs free. Nothing but the hook wrote them.
    assert run.states["coldplug"] == split_table(testbed), run.text
    assert run.rcs["status"] == 0, run.text


@pytest.mark.parametrize(
    ("boot", "code", "plan_refusal"),
    [
        ("no-iommu", 4, "no-iommu"),
        ("foreign-in-group", 3, "foreign-device-in-group"),
        ("other-card", 3, None),
        ("numa-swapped", 3, None),
    ],
)
def test_changed_host_is_refused(
    testbed: Bed, runs: dict[str, Future[Run]], boot: str, code: int, plan_refusal: str | None
) -> None:
    """On a host unlike the plan's, unit, hook and bind refuse and nothing moves."""
    run = runs[boot].result()
    states, rcs = run.states, run.rcs
    assert (rcs["unit"], rcs["bind"]) == (code, code), run.text
    assert states["unit"] == states["boot"], run.text
    # The hook refused as well, and its `;` still loaded vfio-pci: it took nothing.
    assert rcs["vfio-pci-loaded"] == 0, run.text
    for step in ("boot", "coldplug", "bind"):
        assert _unmoved(states[step]) == [], (step, run.text)
    assert states["bind"] == states["coldplug"], run.text
    # Every function the probe saw, where the same card still sits, is as it found it.
    for address, function in states["coldplug"].items():
        before = testbed.probe.get(address)
        if before and (before.vendor, before.device) == (function.vendor, function.device):
            assert function == before, (address, run.text)
    # pvegpu on that host: the plan refuses it, or comes out different (render again).
    root = capture_of(run, testbed.work / f"capture-{boot}")
    if plan_refusal:
        with pytest.raises(PlanError) as refused:
            plan(discover(root), parse_spec(SPEC))
        assert plan_refusal in {p.code for p in refused.value.problems}
    else:
        assert render_from(root)[SCRIPT_PATH] != testbed.files[SCRIPT_PATH]


# The kernel upgrade (tests/qemu/upgrade.py): a Debian 13 system with kernel A and the
# rendered files, upgraded to Debian 13's kernel B by apt; both boot Debian's initramfs.
BOARD_DRIVERS = {"0000:00:1f.0": "lpc_ich", "0000:00:1f.2": "ahci", "0000:00:1f.3": "i801_smbus"}
"""q35's own functions, which the testbed's few modules leave driverless and a Debian
system's full module set binds (the AHCI holds the system's root disk)."""
VFIO_MODULES = ("vfio-pci", "vfio_iommu_type1")
BY_HOOKS = (SCRIPT_PATH, MODPROBE_PATH)
"""In an initramfs byte for byte: the script by pvegpu's hook, modprobe.d by initramfs-tools."""


@attrs.frozen
class Upgrade:
    kernels: dict[str, upgrade.Installed]
    """"old" (A, the testbed's kernel) and "new" (B, what the upgrade installed)."""
    apt: str
    """What `apt-get install linux-image-amd64` printed."""
    initramfs: dict[str, upgrade.Initramfs]
    runs: dict[str, Run]


@pytest.fixture(scope="module")
def upgraded(testbed: Bed, runs: dict[str, Future[Run]]) -> Upgrade:
    # The scenario boots run BOOTS_AT_ONCE at a time in the background: the upgrade's
    # chroot work and its two Debian boots wait for them, or four QEMUs share two cores
    # and the scenarios' boots run past their timeout.
    for started in runs.values():
        started.exception()
    if os.getuid() != 0:
        unavailable("the kernel upgrade needs root: its Debian system is a chroot")
    missing = [tool for tool in upgrade.TOOLS if shutil.which(tool) is None]
    if missing:
        unavailable(f"the kernel upgrade needs {', '.join(missing)}: {upgrade.APT}")
    deb = testbed.kernel.root.with_name(testbed.kernel.root.name + ".deb")
    try:
        base = upgrade.base(deb)
    except upgrade.UnavailableError as err:
        unavailable(f"no Debian 13 system to upgrade: {err}")
    wanted = (*BY_HOOKS, "usr/bin/tr")
    with upgrade.fresh_system(base) as (system, work):
        driver_hook = (upgrade.DRIVER_HOOK_TEXT, 0o755)
        system.install({**testbed.files, upgrade.DRIVER_HOOK: driver_hook})
        system.run("update-initramfs", "-u", "-k", "all")  # the runbook's install step
        apt = system.upgrade()
        installed = system.kernels(work)
        assert testbed.kernel.version in installed, installed
        if len(installed) != 2:
            # A Debian 13 host's apt gives the testbed Debian 13's kernel: nothing newer.
            unavailable(f"the upgrade installed no second kernel beside {installed}: {apt}")
        (new,) = (k for k in installed.values() if k.version != testbed.kernel.version)
        kernels = {"old": installed[testbed.kernel.version], "new": new}
        images = {which: system.initramfs(k.version, wanted) for which, k in kernels.items()}
        system.install(scenarios.system_files(testbed.files))
        image = system.image(work / "root.img")

        def run(which: str) -> Run:
            log = upgrade.boot(Machine(), kernels[which], image, scenario="upgrade")
            (testbed.work / f"upgrade-{which}.log").write_text(log)
            return guest.read_run(log)

        with ThreadPoolExecutor(BOOTS_AT_ONCE) as pool:
            booted = dict(zip(kernels, pool.map(run, kernels), strict=True))
    return Upgrade(kernels, apt, images, booted)


def system_table(bed: Bed) -> Table:
    """After the Debian system's boot: the split, q35's own functions on their drivers."""
    return {
        a: attrs.evolve(f, driver=BOARD_DRIVERS[a]) if a in BOARD_DRIVERS else f
        for a, f in split_table(bed).items()
    }


def test_upgrade_installs_a_newer_kernel(upgraded: Upgrade) -> None:
    """B came as an upgrade brings it: apt, a newer version, its postinst's initramfs."""
    old, new = upgraded.kernels["old"], upgraded.kernels["new"]
    assert kernel.compare_versions(new.package_version, old.package_version) == 1
    assert f"update-initramfs: Generating /boot/initrd.img-{new.version}" in upgraded.apt


@pytest.mark.parametrize("which", ["old", "new"])
def test_upgrade_initramfs_holds_the_split(testbed: Bed, upgraded: Upgrade, which: str) -> None:
    """Built by Debian's mkinitramfs with the system's hooks: pvegpu's hook put the script
    where modprobe.d's install line runs it; initramfs-tools copied the modprobe.d file,
    and with the host driver the stand-in package hook added, its softdep's vfio-pci."""
    image, version = upgraded.initramfs[which], upgraded.kernels[which].version
    found = {path: image.files.get(path, b"").decode(errors="replace") for path in BY_HOOKS}
    assert found == {path: testbed.files[path][0] for path in BY_HOOKS}
    modes = image.modes
    assert (modes[SCRIPT_PATH] & 0o111, modes["usr/bin/tr"] & 0o111) == (0o111, 0o111), modes
    modules = {
        re.sub(r"\.ko(\.\w+)?$", "", name.rsplit("/", 1)[1])
        for name in image.names
        if name.startswith(f"usr/lib/modules/{version}/") and ".ko" in name
    }
    assert {"snd-hda-intel", *VFIO_MODULES} <= modules
    assert "bochs" not in modules


@pytest.mark.parametrize("which", ["old", "new"])
def test_upgrade_boot_holds_the_split(testbed: Bed, upgraded: Upgrade, which: str) -> None:
    """Each kernel boots its Debian initramfs: the split is in place when the root's PID 1
    starts, the unit finds nothing to do, coldplug's drivers take only the rest."""
    run = upgraded.runs[which]
    states, rcs, outs = run.states, run.rcs, run.outs
    assert outs["kernel"] == upgraded.kernels[which].version, run.text
    # In the initramfs, udev loaded snd_hda_intel; its softdep loaded vfio-pci, whose
    # install line wrote the overrides first: the VM functions are on vfio-pci, the other
    # audio on snd_hda_intel, the host GPUs still without a driver (bochs is on the root).
    expected = system_table(testbed)
    host_gpus = {
        a for a, f in testbed.probe.items() if a not in testbed.vm and f.driver == "bochs-drm"
    }
    assert states["initramfs"] == {
        a: attrs.evolve(f, driver=None) if a in host_gpus else f for a, f in expected.items()
    }, run.text
    assert (rcs["unit"], "nothing to do" in outs["unit"]) == (0, True), run.text
    assert states["unit"] == states["initramfs"], run.text
    assert states["coldplug"] == expected, run.text
    assert rcs["status"] == 0, run.text
    groups = {str(f.iommu_group) for f in testbed.facts.functions if str(f.address) in testbed.vm}
    assert set(outs["vfio-nodes"].split("|")) == {"vfio", *groups}, run.text
