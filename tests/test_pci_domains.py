"""PCI domains beyond 0000 (issue 17, item 3): a GPU behind Intel VMD, two domains alike.

The kernel names a function `%04x:%02x:%02x.%d`, so a domain above ffff has five or more
digits: Intel VMD puts the devices behind it in 10000 and up (`10000:e1:00.0`, root bus
`pci10000:e0`). Such a host is discovered, planned and rendered like any other, and
Proxmox's own parsers take the long domain (pci.cfg `path`, hostpci ids). A short
address (`e1:00.0`) names that bus/device/function in whichever domain has it; where two
domains have it, it is refused naming both. The hosts are built with pvegpu.testing in
tmp dirs: both are about addresses only, so no committed tree or discover golden.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fixture_hosts import (
    GEN5,
    NVIDIA_590_OPEN,
    PRO6000,
    PRO6000_AUDIO,
    PRO6000_MODEL,
    STORAGE_LVM,
    _slot,
)
from pvegpu.cli import main
from pvegpu.errors import DiscoveryError, PlanError, SpecError
from pvegpu.host.discover import discover
from pvegpu.pci import PciAddress
from pvegpu.pipeline import plan_and_render
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import pcicfg
from pvegpu.rendering.split import SCRIPT_PATH
from pvegpu.spec.load import load_spec, parse_spec
from pvegpu.testing import DeviceSpec, HostSpec, IommuUnit, NvidiaInfo, write_host

CT129 = """\
arch: amd64
cores: 8
hostname: ml
memory: 65536
ostype: ubuntu
rootfs: local-lvm:vm-129-disk-0,size=64G
"""
VM200 = "cores: 8\nmachine: q35\nmemory: 65536\nname: vm\nostype: l26\n"
VMD_GPU = "10000:e1:00.0"


def _host(hostname: str, devices: list[DeviceSpec]) -> HostSpec:
    return HostSpec(
        hostname=hostname,
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro intel_iommu=on",
        numa=("0-15",),
        iommu_units=(IommuUnit("dmar0"),),
        nvidia=NVIDIA_590_OPEN,
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_LVM,
            "etc/pve/lxc/129.conf": CT129,
            "etc/pve/qemu-server/200.conf": VM200,
        },
    )


def _port(address: str, group: int) -> DeviceSpec:
    return DeviceSpec(
        address=address, vendor=0x8086, device=0x352A, pci_class=0x060400,
        driver="pcieport", iommu_group=group, link=GEN5,
    )  # fmt: skip


def _gpu(address: str, parent: str, group: int, minor: int) -> list[DeviceSpec]:
    return _slot(
        address, parent, PRO6000, PRO6000_AUDIO, iommu_group=group, link=GEN5,
        driver="nvidia", nvidia=NvidiaInfo(model=PRO6000_MODEL, minor=minor),
        audio_driver="snd_hda_intel",
    )  # fmt: skip


def vmd_host() -> HostSpec:
    """An Intel host with VMD on: one GPU on domain 0000, one behind the VMD controller
    (0000:00:0e.0) in domain 10000. The groups are the test's: on real hardware the
    devices behind VMD may share the controller's."""
    return _host(
        "pve-vmd",
        [
            DeviceSpec(
                address="0000:00:00.0", vendor=0x8086, device=0x09A2, pci_class=0x060000,
                iommu_group=0,
            ),
            DeviceSpec(
                address="0000:00:0e.0", vendor=0x8086, device=0x28C0, pci_class=0x010400,
                driver="vmd", iommu_group=1,
            ),
            _port("0000:16:02.0", 2),
            *_gpu("0000:17:00.0", "0000:16:02.0", 3, 0),
            _port("10000:e0:06.0", 4),
            *_gpu(VMD_GPU, "10000:e0:06.0", 5, 1),
        ],
    )  # fmt: skip


def two_domain_host() -> HostSpec:
    """Two PCI segments (domains 0000 and 0001), each with a GPU at 41:00.0."""
    return _host(
        "pve-seg",
        [
            _port("0000:40:01.0", 0),
            *_gpu("0000:41:00.0", "0000:40:01.0", 1, 0),
            _port("0001:40:01.0", 2),
            *_gpu("0001:41:00.0", "0001:40:01.0", 3, 1),
        ],
    )


@pytest.fixture
def vmd(tmp_path: Path) -> Path:
    write_host(vmd_host(), tmp_path / "vmd")
    return tmp_path / "vmd"


@pytest.fixture
def segments(tmp_path: Path) -> Path:
    write_host(two_domain_host(), tmp_path / "seg")
    return tmp_path / "seg"


def _lxc_spec(node: str, gpu: str) -> str:
    return f'node = "{node}"\n[[pools]]\nname = "ct"\ngpus = ["{gpu}"]\nlxc = {{ vmid = 129 }}\n'


def _vfio_spec(gpu: str) -> str:
    return (
        'node = "pve-vmd"\n[[pools]]\nname = "vm"\n'
        f'gpus = ["{gpu}"]\nmapping = {{ id = "vmd-gpu" }}\nvfio = {{ vm = {{ vmid = 200 }} }}\n'
    )


def _entries(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


# -- the address type


def test_long_domain_parses_and_prints_as_the_kernel_does() -> None:
    """`10000:e1:00.0` is one address; its slot and short form keep the whole domain
    (`e1:00.0` alone means domain 0000 to lspci)."""
    address = PciAddress.parse(VMD_GPU)
    assert (address.domain, address.bus, address.device, address.function) == (0x10000, 0xE1, 0, 0)
    assert str(address) == VMD_GPU
    assert address.slot == "10000:e1:00"
    assert address.short == VMD_GPU
    assert PciAddress.parse("0000:e1:00.0") < address < PciAddress.parse("10001:00:00.0")
    assert str(PciAddress.parse("ffffffff:00:00.0")) == "ffffffff:00:00.0"


def test_ordinary_domains_print_byte_identical() -> None:
    """Four digits stay four: `0000:01:00.0`, `0000:01:00`, `01:00.0`."""
    address = PciAddress(0, 1, 0, 0)
    assert (str(address), address.slot, address.short) == ("0000:01:00.0", "0000:01:00", "01:00.0")
    assert str(PciAddress(0xABCD, 1, 0, 0)) == "abcd:01:00.0"


@pytest.mark.parametrize("text", ["100000000:00:00.0", "000:01:00.0", "10000:e1:00", "1:00.0"])
def test_domain_of_wrong_length_is_refused(text: str) -> None:
    """Fewer than four digits or more than pci_domain_nr's eight are no kernel name."""
    with pytest.raises(ValueError, match="not a PCI address"):
        PciAddress.parse_lenient(text)


@given(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_any_domain_roundtrips(domain: int, bus: int, device: int, function: int) -> None:
    address = PciAddress(domain, bus, device, function)
    assert PciAddress.parse(str(address)) == address
    assert PciAddress.parse_lenient(str(address)) == address


def test_names_domain_tells_short_from_full() -> None:
    assert PciAddress.names_domain(VMD_GPU)
    assert PciAddress.names_domain("0000:41:00.0")
    assert not PciAddress.names_domain("41:00.0")


# -- discovery


def test_gpu_behind_vmd_is_discovered(vmd: Path) -> None:
    """The domain-10000 GPU, its audio, its group and its nvidia minor are all read."""
    facts = discover(vmd)
    assert [str(g.address) for g in facts.gpus] == ["0000:17:00.0", VMD_GPU]
    gpu = facts.gpu(PciAddress.parse(VMD_GPU))
    assert gpu is not None
    assert gpu.function.sysfs_path == f"sys/devices/pci10000:e0/10000:e0:06.0/{VMD_GPU}"
    assert [str(c.address) for c in gpu.companions] == ["10000:e1:00.1"]
    assert gpu.node_minor == 1
    assert gpu.iommu_group == 5
    group = facts.group(5)
    assert group is not None
    assert [str(m) for m in group.members] == [VMD_GPU, "10000:e1:00.1"]


def test_cli_discover_lists_the_vmd_gpu(vmd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--root", str(vmd)]) == 0
    assert VMD_GPU in capsys.readouterr().out


def test_domain_with_extra_leading_zeros_is_not_the_kernels(vmd: Path) -> None:
    """`00010000:e0:06.0` parses, but the kernel would have named it `10000:e0:06.0`."""
    devices = vmd / "sys/bus/pci/devices"
    (devices / "10000:e0:06.0").rename(devices / "00010000:e0:06.0")
    with pytest.raises(DiscoveryError) as err:
        discover(vmd)
    problem = err.value.problems[0]
    assert (problem.code, problem.subject) == ("bad-value", "sys/bus/pci/devices/00010000:e0:06.0")
    assert problem.message == "expected the kernel's form '10000:e0:06.0'"


# -- the spec


def test_spec_takes_a_long_domain(tmp_path: Path) -> None:
    spec = tmp_path / "vmd.toml"
    spec.write_text(_lxc_spec("pve-vmd", VMD_GPU))
    assert load_spec(spec).pools[0].gpus == (VMD_GPU,)


def test_spec_refuses_a_domain_no_kernel_prints(
    vmd: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nine digits is past pci_domain_nr's int: a spec error (exit 4), not a plan."""
    spec = tmp_path / "bad.toml"
    spec.write_text(_lxc_spec("pve-vmd", "100000000:e1:00.0"))
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    problem = err.value.problems[0]
    assert (problem.code, problem.subject) == ("spec-invalid-address", "pools[0].gpus[0]")
    assert main(["plan", "--root", str(vmd), "--spec", str(spec)]) == SpecError.exit_code
    assert "spec-invalid-address" in capsys.readouterr().err


# -- planning and rendering a VMD GPU


@pytest.mark.parametrize("written", ["e1:00.0", VMD_GPU, "10000:E1:00.0"])
def test_spec_names_the_vmd_gpu_short_or_full(vmd: Path, written: str) -> None:
    """`e1:00.0` is on this host only in domain 10000, so it names that GPU."""
    planned = plan(discover(vmd), parse_spec(_lxc_spec("pve-vmd", written), "vmd.toml"))
    assert [str(g.address) for g in planned.pools[0].gpus] == [VMD_GPU]


def test_lxc_pool_on_the_vmd_gpu_renders(vmd: Path) -> None:
    """The container gets the VMD GPU's own /dev/nvidia1; the review names it in full."""
    _, artifacts = plan_and_render(discover(vmd), parse_spec(_lxc_spec("pve-vmd", "e1:00.0"), "s"))
    files = {a.path: a.content for a in artifacts if not a.delete and a.bundle == "apply"}
    assert "dev0: /dev/nvidia1,mode=0666\n" in files["etc/pve/lxc/129.conf"]
    assert "/dev/nvidia0" not in files["etc/pve/lxc/129.conf"]
    assert f"`{VMD_GPU}`" in files["SUMMARY.md"]


def test_vfio_pool_on_the_vmd_gpu_writes_what_proxmox_reads(vmd: Path) -> None:
    """pci.cfg's path is the slot with its long domain (PVE::Mapping::PCI takes a
    domain of four digits or more) and reads back; the split script moves both
    functions by their kernel names."""
    _, artifacts = plan_and_render(discover(vmd), parse_spec(_vfio_spec("e1:00.0"), "s"))
    files = {a.path: a.content for a in artifacts if not a.delete and a.bundle == "apply"}
    cfg = files[pcicfg.PATH]
    assert "path=10000:e1:00," in cfg
    (mapping,) = pcicfg.parse_mappings(cfg)
    assert [m.path for m in mapping.maps] == ["10000:e1:00"]
    assert "hostpci0: mapping=vmd-gpu,pcie=1\n" in files["etc/pve/qemu-server/200.conf"]
    script = files[SCRIPT_PATH]
    assert "\n10000:e1:00.0 10de:2bb5 -1 5 nvidia\n10000:e1:00.1 10de:22e8 -1 5" in script


@pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("dash") is None,
    reason="needs Linux (inotify, FIFOs) and dash",
)
def test_split_script_moves_the_vmd_gpu_and_back(vmd: Path, tmp_path: Path) -> None:
    """The rendered script, under dash against the simulated kernel, binds the domain
    10000 functions to vfio-pci and reverts them, leaving domain 0000 on nvidia."""
    from sysfs_sim import KernelSim, natural_drivers

    planned, artifacts = plan_and_render(discover(vmd), parse_spec(_vfio_spec(VMD_GPU), "s"))
    script = tmp_path / "pvegpu-vfio-split"
    script.write_text(next(a.content for a in artifacts if a.path == SCRIPT_PATH))
    script.chmod(0o755)
    with KernelSim(vmd, natural_drivers(planned)) as sim:
        bound = sim.run(script, "bind")
        assert bound.rc == 0, bound.stderr
        state = sim.state()
        assert state[VMD_GPU][0] == state["10000:e1:00.1"][0] == "vfio-pci"
        assert state["0000:17:00.0"][0] == "nvidia"
        reverted = sim.run(script, "revert")
        assert reverted.rc == 0, reverted.stderr
        assert sim.state()[VMD_GPU][0] == "nvidia"
        assert sim.errors == []


# -- a short address two domains have


def test_short_address_in_two_domains_is_refused_naming_both(segments: Path) -> None:
    with pytest.raises(PlanError) as err:
        plan(discover(segments), parse_spec(_lxc_spec("pve-seg", "41:00.0"), "seg.toml"))
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("address-ambiguous", "pools[0].gpus[0]")
    assert problem.message == "'41:00.0' is a function in 2 PCI domains: 0000:41:00.0, 0001:41:00.0"
    assert problem.fix == 'write the one you mean in full: "0000:41:00.0" or "0001:41:00.0"'


@pytest.mark.parametrize("written", ["0000:41:00.0", "0001:41:00.0"])
def test_full_address_picks_one_of_the_two(segments: Path, written: str) -> None:
    planned = plan(discover(segments), parse_spec(_lxc_spec("pve-seg", written), "seg.toml"))
    assert [str(g.address) for g in planned.pools[0].gpus] == [written]


def test_absent_address_lists_the_gpus_in_full_on_a_two_domain_host(segments: Path) -> None:
    """Short names would be ambiguous here, so the fix line gives whole addresses."""
    with pytest.raises(PlanError) as err:
        plan(discover(segments), parse_spec(_lxc_spec("pve-seg", "42:00.0"), "seg.toml"))
    (problem,) = err.value.problems
    assert problem.code == "address-not-on-host"
    assert problem.fix == "GPUs here: 0000:41:00.0, 0001:41:00.0"


@pytest.mark.parametrize("command", ["plan", "render"])
def test_cli_refuses_the_ambiguous_address_and_writes_nothing(
    segments: Path, tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "seg.toml"
    spec.write_text(_lxc_spec("pve-seg", "41:00.0"))
    out = tmp_path / "out"
    argv = [command, "--root", str(segments), "--spec", str(spec)]
    before = _entries(tmp_path)
    code = main([*argv, "--out", str(out)] if command == "render" else argv)
    assert code == PlanError.exit_code
    err = capsys.readouterr().err
    assert "address-ambiguous" in err
    assert "0000:41:00.0" in err and "0001:41:00.0" in err
    assert "Traceback" not in err
    assert _entries(tmp_path) == before
