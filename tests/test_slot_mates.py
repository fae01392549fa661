"""A GPU whose PCI slot holds devices of other IOMMU groups: the split takes only the plan's.

On an AMD APU the GPU's slot (here c5:00) also holds the host's two xHCI controllers
(keyboard, USB), the security processor (fTPM) and two audio functions, each in an IOMMU
group of its own; an NVIDIA card with a USB-C port can have its xHCI in another group
than the GPU. What goes to vfio-pci, and what the host side pins, is the plan's set,
and every artifact and the script itself take exactly that set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from pvegpu.cli import main
from pvegpu.host.discover import discover
from pvegpu.model.plan import Plan
from pvegpu.planning.planner import plan
from pvegpu.rendering.split import MODPROBE_PATH, SCRIPT_PATH, UNIT_PATH, render_split
from pvegpu.spec.load import parse_spec
from pvegpu.testing import DeviceSpec, HostSpec, IommuUnit, NvidiaInfo, NvidiaModule, write_host
from sysfs_sim import KernelSim, natural_drivers

APU_SLOT = {  # c5:00.N: (vendor, device, class, driver, IOMMU group), as on a Ryzen 8845HS
    0: (0x1002, 0x1900, 0x030000, "amdgpu", 11),
    1: (0x1002, 0x1640, 0x040300, "snd_hda_intel", 12),
    2: (0x1022, 0x15C7, 0x108000, "ccp", 13),
    3: (0x1022, 0x15B9, 0x0C0330, "xhci_hcd", 14),
    4: (0x1022, 0x15BA, 0x0C0330, "xhci_hcd", 15),
    5: (0x1022, 0x15E2, 0x048000, "snd_pci_acp6x", 16),
    6: (0x1022, 0x15E3, 0x040300, "snd_hda_intel", 17),
}
APU_GPU = "0000:c5:00.0"
RTX_3090 = "NVIDIA GeForce RTX 3090"
NVIDIA_SLOT = {  # 01:00.N of an RTX card with a USB-C port whose xHCI has its own group
    0: (0x10DE, 0x2204, 0x030000, "nvidia", 2),
    1: (0x10DE, 0x1AEF, 0x040300, "snd_hda_intel", 2),
    2: (0x10DE, 0x1AF0, 0x0C0330, "xhci_hcd", 3),
}
SPEC = """\
node = "minipc"

[[pools]]
name = "rtx"
gpus = ["01:00.0"]

[pools.lxc]
vmid = 110

[[pools]]
name = "apu"
gpus = ["c5:00.0"]
mapping = { id = "apu-vm", description = "the APU for a VM" }

[pools.vfio.vm]
vmid = 120
"""


def _slot(
    bus: int, parent: str, functions: dict[int, tuple[int, int, int, str, int]]
) -> list[DeviceSpec]:
    return [
        DeviceSpec(
            address=f"0000:{bus:02x}:00.{fn}", parent=parent, vendor=vendor, device=device,
            pci_class=pci_class, driver=driver, iommu_group=group, numa_node=0,
            nvidia=NvidiaInfo(model=RTX_3090, minor=0) if driver == "nvidia" else None,
        )
        for fn, (vendor, device, pci_class, driver, group) in functions.items()
    ]  # fmt: skip


def minipc() -> HostSpec:
    devices = [
        DeviceSpec(address="0000:00:01.1", vendor=0x1022, device=0x14ED, pci_class=0x060400,
                   driver="pcieport", iommu_group=1, numa_node=0),
        DeviceSpec(address="0000:00:08.1", vendor=0x1022, device=0x14EB, pci_class=0x060400,
                   driver="pcieport", iommu_group=10, numa_node=0),
        *_slot(0x01, "0000:00:01.1", NVIDIA_SLOT),
        *_slot(0xC5, "0000:00:08.1", APU_SLOT),
    ]  # fmt: skip
    return HostSpec(
        hostname="minipc",
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/mapper/pve-root amd_iommu=on",
        numa=("0-15",),
        iommu_units=(IommuUnit("ivhd0"),),
        nvidia=NvidiaModule(version="580.95.05", open=True),
        devices=tuple(devices),
        files={"etc/pve/lxc/110.conf": "arch: amd64\nhostname: media\n"},
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("minipc") / "root"
    write_host(minipc(), path)
    return path


@pytest.fixture(scope="module")
def minipc_plan(root: Path) -> Plan:
    return plan(discover(root), parse_spec(SPEC, "minipc.toml"))


def _pool(split_plan: Plan, name: str) -> set[str]:
    return {str(f.address) for p in split_plan.pools if p.name == name for f in p.functions}


def _script(split_plan: Plan) -> str:
    return next(a.content for a in render_split(split_plan) if a.path == SCRIPT_PATH)


def _data_rows(script: str, table: str) -> set[str]:
    """The addresses of the script's VFIO or HOST table: what it pins."""
    section = re.search(rf"^{table}='\n(.*?)^'$", script, re.M | re.S)
    assert section is not None, f"no {table} table"
    rows = (line.split() for line in section.group(1).splitlines())
    return {row[0] for row in rows if row and not row[0].startswith("#")}


def test_companions_share_the_gpus_group(root: Path) -> None:
    """Discovery: slot functions of other groups are not companions (nothing moves with
    the GPU that the IOMMU does not move with it)."""
    facts = discover(root)
    by_address = {str(g.address): g for g in facts.gpus}
    assert [str(c.address) for c in by_address[APU_GPU].companions] == []
    assert [str(c.address) for c in by_address["0000:01:00.0"].companions] == ["0000:01:00.1"]


def test_plan_moves_the_gpus_groups_only(minipc_plan: Plan) -> None:
    assert _pool(minipc_plan, "apu") == {APU_GPU}
    assert _pool(minipc_plan, "rtx") == {"0000:01:00.0", "0000:01:00.1"}


def test_script_tables_are_the_plans_sets(minipc_plan: Plan) -> None:
    script = _script(minipc_plan)
    assert _data_rows(script, "VFIO") == _pool(minipc_plan, "apu")
    assert _data_rows(script, "HOST") == _pool(minipc_plan, "rtx")


def test_script_takes_the_plans_set_even_over_stale_companions(minipc_plan: Plan) -> None:
    """The renderer adds nothing to the plan's set: a GPU value that still lists its
    slot's xHCI (facts from elsewhere) does not put the xHCI into the script."""
    xhci = next(f for f in minipc_plan.facts.functions if str(f.address) == "0000:c5:00.3")
    pools = tuple(
        attrs.evolve(
            p, gpus=tuple(attrs.evolve(g, companions=(*g.companions, xhci)) for g in p.gpus)
        )
        for p in minipc_plan.pools
    )
    stale = attrs.evolve(minipc_plan, pools=pools)
    script = _script(stale)
    assert _data_rows(script, "VFIO") == {APU_GPU}
    assert "0000:c5:00.3" not in script


def test_unit_and_modprobe_name_only_the_moved_drivers(minipc_plan: Plan) -> None:
    """The boot unit orders itself before the drivers of the moved functions only: not
    xhci_hcd or ccp, whose devices stay on the host."""
    files = {a.path: a.content for a in render_split(minipc_plan)}
    for path in (UNIT_PATH, MODPROBE_PATH):
        assert "amdgpu" in files[path]
        for other in ("xhci", "ccp", "snd_pci_acp6x"):
            assert other not in files[path], f"{path} names {other}"


@pytest.fixture
def sim(tmp_path: Path, minipc_plan: Plan) -> Iterator[KernelSim]:
    root = tmp_path / "root"
    write_host(minipc(), root)
    with KernelSim(root, natural_drivers(minipc_plan)) as kernel:
        yield kernel


def test_bind_on_the_kernel_touches_only_the_plans_set(
    sim: KernelSim, minipc_plan: Plan, tmp_path: Path
) -> None:
    """Run for real against the simulated kernel: every device whose driver_override the
    script writes, or that it unbinds or probes, is in the set the plan prints."""
    script = tmp_path / "pvegpu-vfio-split"
    script.write_text(_script(minipc_plan))
    result = sim.run(script, "bind")
    assert result.rc == 0, result.stderr
    touched = {
        w.path.split("/")[1] if w.path.startswith("devices/") else w.value.strip()
        for w in result.writes
        if w.path != "modprobe"
    }
    planned = _pool(minipc_plan, "apu") | _pool(minipc_plan, "rtx")
    assert touched == planned
    state = sim.state()
    assert state[APU_GPU][0] == "vfio-pci"
    for fn in (1, 2, 3, 4, 5, 6):
        assert state[f"0000:c5:00.{fn}"] == (APU_SLOT[fn][3], None)
    assert state["0000:01:00.2"] == ("xhci_hcd", None)


def test_plan_json_and_summary_show_the_same_set(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a reviewer reads (plan --json, SUMMARY.md) is what the script pins."""
    spec = tmp_path / "minipc.toml"
    spec.write_text(SPEC)
    assert main(["plan", "--root", str(root), "--spec", str(spec), "--json"]) == 0
    pools = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pools"]}
    assert set(pools["apu"]["functions"]) == {APU_GPU}
    out = tmp_path / "out"
    assert main(["render", "--root", str(root), "--spec", str(spec), "--out", str(out)]) == 0
    summary = (out / "SUMMARY.md").read_text()
    script = (out / SCRIPT_PATH).read_text()
    assert _data_rows(script, "VFIO") == set(pools["apu"]["functions"])
    assert APU_GPU in summary
    for fn in (3, 4):
        # The USB controllers are not among what moves: named nowhere as moving.
        assert f"c5:00.{fn}" not in script
