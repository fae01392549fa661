"""The rendered split script, run under dash against a simulated kernel (tests/sysfs_sim.py).

The plan is pvegpu's own for the kpro6 fixture (NUMA 0 stays on nvidia for LXC 129,
NUMA 1 goes to vfio-pci); the script runs on a copy of that host's sys/ tree, and every
write it makes is recorded in order. The workstation (an A4000 that vfio-pci.ids= binds
before any split) and the mixed host (a Radeon on amdgpu) run their examples/ plans.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bundled import example_plan
from linters import needs_shellcheck, shellcheck
from pvegpu.model.plan import Plan
from pvegpu.rendering.split import SCRIPT_PATH, render_split
from sysfs_sim import (
    NAP_S,
    KernelSim,
    Write,
    copy_host,
    iommu_off,
    move_to_group,
    natural_drivers,
    remove_device,
    set_attr,
    unload_driver,
)

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("dash") is None,
    reason="needs Linux (inotify, FIFOs) and dash",
)

VM_SLOTS = ("0000:81:00", "0000:91:00", "0000:e1:00", "0000:f1:00")
HOST_SLOTS = ("0000:01:00", "0000:11:00", "0000:61:00", "0000:71:00")
HOST_DRIVER = {0: "nvidia", 1: "snd_hda_intel"}
VM = tuple(f"{slot}.{fn}" for slot in VM_SLOTS for fn in (0, 1))
HOST = tuple(f"{slot}.{fn}" for slot in HOST_SLOTS for fn in (0, 1))
UNBIND_TRIES = 100
"""The script's bound on naps while an unbind is pending (10 s in production)."""


def host_driver_of(address: str) -> str:
    return HOST_DRIVER[int(address[-1])]


def override(address: str, value: str) -> Write:
    return Write(f"devices/{address}/driver_override", f"{value}\n")


MODPROBE = Write("modprobe", "vfio-pci\n")
HOST_PINS = [override(a, host_driver_of(a)) for a in HOST]
HOST_UNPINS = [override(a, "") for a in HOST]


def to_vfio(address: str) -> list[Write]:
    """Per function, the kernel's only safe order: pin, unbind, probe."""
    return [
        override(address, "vfio-pci"),
        Write(f"drivers/{host_driver_of(address)}/unbind", f"{address}\n"),
        Write("drivers_probe", f"{address}\n"),
    ]


def from_vfio(address: str) -> list[Write]:
    return [
        override(address, ""),
        Write("drivers/vfio-pci/unbind", f"{address}\n"),
        Write("drivers_probe", f"{address}\n"),
    ]


BIND = [MODPROBE, *HOST_PINS, *(w for a in VM for w in to_vfio(a))]
REVERT = [*(w for a in VM for w in from_vfio(a)), *HOST_UNPINS]
SPLIT_STATE = {
    **{a: ("vfio-pci", "vfio-pci") for a in VM},
    **{a: (host_driver_of(a), host_driver_of(a)) for a in HOST},
}


@pytest.fixture(scope="module")
def script(kpro6_plan: Plan, tmp_path_factory: pytest.TempPathFactory) -> Path:
    artifact = next(a for a in render_split(kpro6_plan) if a.path == SCRIPT_PATH)
    path = tmp_path_factory.mktemp("sbin") / "pvegpu-vfio-split"
    path.write_text(artifact.content)
    path.chmod(artifact.mode)
    return path


def _example(name: str) -> tuple[Plan, str]:
    plan = example_plan(name)
    artifact = next(a for a in render_split(plan) if a.path == SCRIPT_PATH)
    return plan, artifact.content


@pytest.fixture
def example_script(tmp_path: Path) -> Callable[[str], tuple[Plan, Path]]:
    """`example_script(name)`: the plan for examples/<name>.toml and its script, on disk."""

    def make(name: str, edit: Callable[[str], str] = lambda text: text) -> tuple[Plan, Path]:
        plan, content = _example(name)
        path = tmp_path / f"{name}-pvegpu-vfio-split"
        path.write_text(edit(content))
        path.chmod(0o755)
        return plan, path

    return make


@pytest.fixture
def host(tmp_path: Path, kpro6_plan: Plan) -> Iterator[Callable[..., KernelSim]]:
    """`host(name, edit=..., **sim_options)`: a copy of a fixture host, changed by `edit`,
    behind a simulated kernel."""
    sims: list[KernelSim] = []

    def make(
        name: str = "kpro6",
        edit: Callable[[Path], None] | None = None,
        plan: Plan | None = None,
        **options: Any,
    ) -> KernelSim:
        root = copy_host(name, tmp_path / f"host{len(sims)}")
        if edit is not None:
            edit(root)
        sim = KernelSim(root, natural_drivers(plan or kpro6_plan), **options)
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        sim.close()


def assert_clean(sim: KernelSim) -> None:
    """The simulated kernel saw no invalid write and nothing changed behind its back."""
    assert sim.errors == []
    assert sim.unexplained_changes() == []


@needs_shellcheck
def test_shellcheck_posix_mode_catches_bashisms(tmp_path: Path) -> None:
    """Control for the shellcheck runs of test_end_to_end: the same call rejects `local`
    and `[[`, so clean means POSIX."""
    bashy = tmp_path / "bashy"
    bashy.write_text("#!/bin/sh\nf() { local x=1; [[ $x == 1 ]]; }\nf\n")
    result = shellcheck(bashy)
    assert result.returncode != 0
    assert "SC3043" in result.stdout  # local
    assert "SC3010" in result.stdout  # [[ ]]


def test_bind_moves_whole_groups_in_kernel_order(
    host: Callable[..., KernelSim], script: Path
) -> None:
    """bind: modprobe, host pins, then per VM function override -> unbind -> probe."""
    sim = host()
    before = sim.state()
    result = sim.run(script, "bind")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == BIND
    assert_clean(sim)
    assert sim.state() == {**before, **SPLIT_STATE}
    assert "0000:81:00.0: nvidia -> vfio-pci" in result.stdout
    assert "0000:81:00.1: snd_hda_intel -> vfio-pci" in result.stdout


def test_bind_is_the_default_mode(host: Callable[..., KernelSim], script: Path) -> None:
    """No argument means bind, the runtime path."""
    sim = host()
    result = sim.run(script)
    assert result.rc == 0, result.stderr
    assert list(result.writes) == BIND


def test_bind_rerun_writes_nothing(host: Callable[..., KernelSim], script: Path) -> None:
    """A second bind only asks modprobe (a no-op) and says every function is in place."""
    sim = host()
    assert sim.run(script, "bind").rc == 0
    again = sim.run(script, "bind")
    assert again.rc == 0, again.stderr
    assert list(again.writes) == [MODPROBE]
    assert again.stdout.count("already on vfio-pci") == len(VM)
    assert "nothing to do" in again.stdout
    assert_clean(sim)


def test_bind_on_split_host_writes_nothing(host: Callable[..., KernelSim], script: Path) -> None:
    """Run on kpro6-split (the state bind produces), bind has nothing to write."""
    sim = host("kpro6-split")
    result = sim.run(script, "bind")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == [MODPROBE]
    assert_clean(sim)


def test_status_tells_planned_from_actual(host: Callable[..., KernelSim], script: Path) -> None:
    """status: 1 with NOT AS PLANNED lines before bind, 0 after; it never writes."""
    sim = host()
    before = sim.run(script, "status")
    assert before.rc == 1
    assert before.writes == ()
    assert (
        "vm   0000:81:00.0 10de:2bb5 numa 1: planned vfio-pci, is nvidia (override none): "
        "NOT AS PLANNED"
    ) in before.stdout
    assert sim.run(script, "bind").rc == 0
    after = sim.run(script, "status")
    assert after.rc == 0, after.stdout + after.stderr
    assert after.writes == ()
    assert after.stdout.count(": ok\n") == len(VM) + len(HOST)


def test_revert_returns_functions_to_host_drivers(
    host: Callable[..., KernelSim], script: Path
) -> None:
    """revert after bind: clear override, unbind vfio-pci, probe; unpin; host as before."""
    sim = host()
    before = sim.state()
    assert sim.run(script, "bind").rc == 0
    result = sim.run(script, "revert")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == REVERT
    assert sim.state() == before
    assert_clean(sim)
    again = sim.run(script, "revert")
    assert again.rc == 0
    assert again.writes == ()


def test_revert_on_split_host(host: Callable[..., KernelSim], script: Path) -> None:
    """On kpro6-split, revert brings the VM GPUs back to nvidia and audio to snd_hda_intel."""
    sim = host("kpro6-split")
    result = sim.run(script, "revert")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == REVERT
    assert all(sim.state()[a] == (host_driver_of(a), None) for a in VM + HOST)
    assert_clean(sim)


# The workstation's A4000 (39:00.0) and its audio are on vfio-pci before any split:
# vfio-pci.ids= on the kernel command line binds them, with no driver_override.
A4000 = ("0000:39:00.0", "0000:39:00.1")


@pytest.mark.parametrize("name", ["kpro6", "workstation", "mixed"])
def test_revert_restores_what_discovery_saw(
    host: Callable[..., KernelSim],
    example_script: Callable[..., tuple[Plan, Path]],
    name: str,
) -> None:
    """bind then revert leaves every function on the driver discovery saw, no override;
    a second revert writes nothing."""
    plan, script = example_script(name)
    sim = host(name, plan=plan)
    before = sim.state()
    assert {str(f.address): f.driver for f in plan.facts.functions} == {
        a: drv for a, (drv, _) in before.items()
    }
    bound = sim.run(script, "bind")
    assert bound.rc == 0, bound.stderr
    result = sim.run(script, "revert")
    assert result.rc == 0, result.stderr
    assert sim.state() == before
    assert_clean(sim)
    again = sim.run(script, "revert")
    assert (again.rc, again.writes) == (0, ())


def test_workstation_revert_leaves_ids_bound_functions_on_vfio_pci(
    host: Callable[..., KernelSim], example_script: Callable[..., tuple[Plan, Path]]
) -> None:
    """A4000 + audio were on vfio-pci before the split: bind only pins them, revert only
    clears the pins (no unbind, no probe) and checks they are still on vfio-pci."""
    plan, script = example_script("workstation")
    assert "\n0000:39:00.0 10de:24b0 -1 6 vfio-pci\n0000:39:00.1 10de:228b -1 6 vfio-pci\n" in (
        script.read_text()
    )
    sim = host("workstation", plan=plan)
    bound = sim.run(script, "bind")
    assert bound.rc == 0, bound.stderr
    assert list(bound.writes) == [MODPROBE, *(override(a, "vfio-pci") for a in A4000)]
    assert "0000:39:00.0: on vfio-pci, override set" in bound.stdout
    result = sim.run(script, "revert")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == [override(a, "") for a in A4000]
    assert all(sim.state()[a] == ("vfio-pci", None) for a in A4000)
    assert "0000:39:00.0: on vfio-pci without override, as before the split" in result.stdout
    assert_clean(sim)


def test_workstation_revert_probes_an_unbound_function_back_to_vfio_pci(
    host: Callable[..., KernelSim], example_script: Callable[..., tuple[Plan, Path]]
) -> None:
    """Left unbound with its pin (an unbind finished late), the A4000 is probed and lands
    on vfio-pci again, where ids= takes it."""
    plan, script = example_script("workstation")

    def split_then_unbound(root: Path) -> None:
        for address in A4000:
            set_attr(root, address, "driver_override", "vfio-pci")
        (root / "sys/bus/pci/devices/0000:39:00.0/driver").unlink()
        (root / "sys/bus/pci/drivers/vfio-pci/0000:39:00.0").unlink()

    sim = host("workstation", edit=split_then_unbound, plan=plan)
    result = sim.run(script, "revert")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == [
        override(A4000[0], ""),
        Write("drivers_probe", f"{A4000[0]}\n"),
        override(A4000[1], ""),
    ]
    assert all(sim.state()[a] == ("vfio-pci", None) for a in A4000)
    assert_clean(sim)


def test_workstation_revert_to_vendor_driver_fails(
    host: Callable[..., KernelSim], example_script: Callable[..., tuple[Plan, Path]]
) -> None:
    """Control: naming nvidia as the A4000's revert target (the old data) unbinds it, the
    probe puts it back on vfio-pci by ids=, and the script exits 5."""
    plan, script = example_script(
        "workstation", lambda text: text.replace(" -1 6 vfio-pci\n", " -1 6 nvidia\n", 1)
    )
    sim = host("workstation", plan=plan)
    assert sim.run(script, "bind").rc == 0
    result = sim.run(script, "revert")
    assert result.rc == 5
    assert "0000:39:00.0: did not come back to nvidia (driver now: vfio-pci)" in result.stderr


def test_mixed_moves_the_radeon_from_amdgpu_and_back(
    host: Callable[..., KernelSim], example_script: Callable[..., tuple[Plan, Path]]
) -> None:
    """mixed: the Radeon's data names amdgpu; bind unbinds it from amdgpu, revert returns
    it there and its audio to snd_hda_intel."""
    plan, script = example_script("mixed")
    assert "\n0000:04:00.0 1002:744c 0 7 amdgpu\n0000:04:00.1 1002:ab30 0 7 snd_hda_intel\n" in (
        script.read_text()
    )
    sim = host("mixed", plan=plan)
    bound = sim.run(script, "bind")
    assert bound.rc == 0, bound.stderr
    assert Write("drivers/amdgpu/unbind", "0000:04:00.0\n") in bound.writes
    assert "0000:04:00.0: amdgpu -> vfio-pci" in bound.stdout
    result = sim.run(script, "revert")
    assert result.rc == 0, result.stderr
    assert "0000:04:00.0: vfio-pci -> amdgpu" in result.stdout
    assert sim.state()["0000:04:00.0"] == ("amdgpu", None)
    assert sim.state()["0000:04:00.1"] == ("snd_hda_intel", None)


CHANGED_HOSTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "vm gpu is another card": (
        lambda r: set_attr(r, "0000:91:00.0", "device", "0x2bb4"),
        "0000:91:00.0: is 10de:2bb4, planned 10de:2bb5",
    ),
    "vm audio is another vendor": (
        lambda r: set_attr(r, "0000:e1:00.1", "vendor", "0x1002"),
        "0000:e1:00.1: is 1002:22e8, planned 10de:22e8",
    ),
    "vm gpu moved to numa 0": (
        lambda r: set_attr(r, "0000:f1:00.0", "numa_node", "0"),
        "0000:f1:00.0: on NUMA node 0, planned 1",
    ),
    "vm gpu lost its node": (
        lambda r: set_attr(r, "0000:81:00.0", "numa_node", "-1"),
        "0000:81:00.0: on NUMA node -1, planned 1",
    ),
    "vm audio missing": (
        lambda r: remove_device(r, "0000:e1:00.1"),
        "0000:e1:00.1: missing",
    ),
    "host gpu missing": (
        lambda r: remove_device(r, "0000:11:00.0"),
        "0000:11:00.0: missing",
    ),
    "host gpu moved to numa 1": (
        lambda r: set_attr(r, "0000:61:00.0", "numa_node", "1"),
        "0000:61:00.0: on NUMA node 1, planned 0",
    ),
}


def assert_refused(sim: KernelSim, script: Path, modes: list[str], rc: int, message: str) -> None:
    """Each mode, run in turn on the same host (a refusal writes nothing, so each run sees
    the host as changed), exits `rc` with `message` and leaves every device as it was."""
    before = sim.state()
    for mode in modes:
        result = sim.run(script, mode)
        assert (mode, result.rc, result.writes) == (mode, rc, ())
        assert message in result.stderr, mode
        assert "nothing was changed" in result.stderr, mode
        assert sim.state() == before, mode
    assert_clean(sim)


@pytest.mark.parametrize("change", CHANGED_HOSTS, ids=list(CHANGED_HOSTS))
def test_changed_host_is_refused_before_any_write(
    host: Callable[..., KernelSim], script: Path, change: str
) -> None:
    """One function differing from the plan stops every mode with exit 3 and no write."""
    edit, message = CHANGED_HOSTS[change]
    assert_refused(host(edit=edit), script, ["bind", "override", "revert"], 3, message)


def test_uppercase_hex_in_sysfs_still_matches(host: Callable[..., KernelSim], script: Path) -> None:
    """IDs compare lowercase: 0x10DE reads as 10de, as Proxmox's own check treats it."""
    sim = host(edit=lambda r: set_attr(r, "0000:81:00.0", "vendor", "0x10DE"))
    result = sim.run(script, "bind")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == BIND


def test_group_with_unplanned_device_is_refused(
    host: Callable[..., KernelSim], script: Path
) -> None:
    """A NIC now sharing GPU 91's group would go to the VM with it: refuse, exit 3."""
    sim = host(edit=lambda r: move_to_group(r, "0000:c1:00.0", 41))
    message = "IOMMU group 41 also holds 0000:c1:00.0 (class 020000)"
    assert_refused(sim, script, ["bind", "override"], 3, message)


def test_bridge_in_group_is_allowed(host: Callable[..., KernelSim], script: Path) -> None:
    """A bridge sharing a VM group does not spoil it and is never written to."""
    sim = host(edit=lambda r: move_to_group(r, "0000:90:01.1", 41))
    before = sim.state()
    result = sim.run(script, "bind")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == BIND
    assert sim.state()["0000:90:01.1"] == before["0000:90:01.1"] == ("pcieport", None)


def test_iommu_off_is_refused(host: Callable[..., KernelSim], script: Path) -> None:
    """No iommu_group link means no IOMMU: exit 4, nothing written, status says so too."""
    sim = host(edit=iommu_off)
    message = "0000:81:00.0: no iommu_group link: the IOMMU is off"
    assert_refused(sim, script, ["bind", "override"], 4, message)
    assert sim.run(script, "status").rc == 1
    assert_clean(sim)


def early_boot(root: Path) -> None:
    """Before any GPU driver module loads: nothing bound to nvidia or snd_hda_intel."""
    unload_driver(root, "nvidia")
    unload_driver(root, "snd_hda_intel")


@pytest.mark.parametrize(
    "load_order",
    [
        ("vfio-pci", "nvidia", "snd_hda_intel"),
        ("nvidia", "snd_hda_intel", "vfio-pci"),
        ("snd_hda_intel", "nvidia", "vfio-pci"),
    ],
)
def test_override_mode_at_early_boot(
    host: Callable[..., KernelSim], script: Path, load_order: tuple[str, ...]
) -> None:
    """override writes only driver_override; drivers loading later, in any order, obey."""
    sim = host(edit=early_boot)
    result = sim.run(script, "override")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == [*HOST_PINS, *(override(a, "vfio-pci") for a in VM)]
    for driver in load_order:
        sim.load_driver(driver)
    state = sim.state()
    assert {a: state[a] for a in SPLIT_STATE} == SPLIT_STATE
    status = sim.run(script, "status")
    assert status.rc == 0, status.stdout + status.stderr
    assert_clean(sim)


def test_without_overrides_nvidia_takes_every_gpu(host: Callable[..., KernelSim]) -> None:
    """Control for the test above: with no override written, nvidia binds all eight."""
    sim = host(edit=early_boot)
    sim.load_driver("vfio-pci")
    sim.load_driver("nvidia")
    assert all(sim.driver(f"{slot}.0") == "nvidia" for slot in VM_SLOTS + HOST_SLOTS)


def test_override_mode_never_unbinds(host: Callable[..., KernelSim], script: Path) -> None:
    """override on a running host: overrides only, no modprobe, exit 1 asking for bind."""
    sim = host()
    result = sim.run(script, "override")
    assert result.rc == 1
    assert list(result.writes) == [*HOST_PINS, *(override(a, "vfio-pci") for a in VM)]
    assert "0000:81:00.0: already bound to nvidia; run: pvegpu-vfio-split bind" in result.stderr
    assert all(sim.driver(a) == host_driver_of(a) for a in VM)
    assert_clean(sim)


def test_hanging_unbind_times_out_with_holder_hint(
    host: Callable[..., KernelSim], script: Path
) -> None:
    """An unbind from nvidia that never returns: bounded wait, hint, exit 6, no probe."""
    assert f"\nUNBIND_TRIES={UNBIND_TRIES}\n" in script.read_text()
    assert "\nPVEGPU_NAP=${PVEGPU_NAP:-0.1}\n" in script.read_text()  # 10 s in production
    sim = host(hang={"nvidia"})
    started = time.monotonic()
    result = sim.run(script, "bind")
    elapsed = time.monotonic() - started
    assert result.rc == 6
    assert list(result.writes) == [MODPROBE, *HOST_PINS, override("0000:81:00.0", "vfio-pci")]
    assert "0000:81:00.0: unbind from nvidia did not return in time" in result.stderr
    assert "systemctl stop nvidia-persistenced" in result.stderr
    assert "dcgm-exporter" in result.stderr
    # The wait is bounded by UNBIND_TRIES naps: it waited them all, and not much longer.
    assert UNBIND_TRIES * NAP_S <= elapsed < UNBIND_TRIES * NAP_S + 10
    assert sim.driver("0000:81:00.0") == "nvidia"


def test_probe_that_does_not_bind_fails(host: Callable[..., KernelSim], script: Path) -> None:
    """vfio-pci never binding is caught by the verify loop: exit 5, the move stops there."""
    sim = host(refuse={"vfio-pci"})
    result = sim.run(script, "bind")
    assert result.rc == 5
    assert list(result.writes) == [MODPROBE, *HOST_PINS, *to_vfio("0000:81:00.0")]
    assert "0000:81:00.0: did not bind to vfio-pci (driver now: none)" in result.stderr


def test_modprobe_failure_stops_bind(host: Callable[..., KernelSim], script: Path) -> None:
    """No vfio-pci module: exit 7 before any sysfs write."""
    sim = host(missing_modules={"vfio-pci"})
    result = sim.run(script, "bind")
    assert result.rc == 7
    assert list(result.writes) == [MODPROBE]


def proxmox_new_id_bound(root: Path) -> None:
    """Proxmox's VM start bound 91:00.0 to vfio-pci by new_id: no override set."""
    set_attr(root, "0000:91:00.0", "driver_override", "(null)")


def unbound_with_override(root: Path) -> None:
    """e1:00.0 left unbound with its override set (an unbind finished after a timeout)."""
    (root / "sys/bus/pci/devices/0000:e1:00.0/driver").unlink()
    (root / "sys/bus/pci/drivers/vfio-pci/0000:e1:00.0").unlink()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (proxmox_new_id_bound, [override("0000:91:00.0", "vfio-pci")]),
        (unbound_with_override, [Write("drivers_probe", "0000:e1:00.0\n")]),
    ],
    ids=["bound-by-new-id", "unbound-with-override"],
)
def test_bind_finishes_half_done_states(
    host: Callable[..., KernelSim],
    script: Path,
    edit: Callable[[Path], None],
    expected: list[Write],
) -> None:
    """From a half-split host, bind writes exactly what is missing and nothing else."""
    sim = host("kpro6-split", edit=edit)
    result = sim.run(script, "bind")
    assert result.rc == 0, result.stderr
    assert list(result.writes) == [MODPROBE, *expected]
    assert {a: sim.state()[a] for a in SPLIT_STATE} == SPLIT_STATE
    assert_clean(sim)


@pytest.mark.parametrize("args", [("unbind",), ("bind", "0000:81:00.0")])
def test_usage_error(host: Callable[..., KernelSim], script: Path, args: tuple[str, ...]) -> None:
    """An unknown mode or an extra argument: exit 2, nothing written."""
    sim = host()
    result = sim.run(script, *args)
    assert result.rc == 2
    assert result.writes == ()
    assert "usage: pvegpu-vfio-split [bind|override|revert|status]" in result.stderr
