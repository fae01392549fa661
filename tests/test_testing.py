"""The fixture-host builder: committed trees are its output, in the kernel's exact layout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

import fixture_hosts
from fixture_hosts import HOSTS
from pvegpu import testing
from pvegpu.testing import (
    DeviceSpec,
    HostSpec,
    HostSpecError,
    IommuUnit,
    NvidiaInfo,
    NvidiaModule,
    tree_entries,
    write_host,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"
GPU_81 = "sys/devices/pci0000:80/0000:80:01.1/0000:81:00.0"


def _link(path: Path) -> str:
    return str(path.readlink())


@pytest.fixture(scope="module")
def kpro6(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("build") / "kpro6"
    write_host(HOSTS["kpro6"](), root)
    return root


def test_committed_hosts_are_the_registry() -> None:
    """fixtures/sysfs holds exactly the registered hosts, no stale or hand-made tree."""
    assert sorted(p.name for p in FIXTURES.iterdir()) == sorted(HOSTS)


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_committed_tree_is_builder_output(name: str, tmp_path: Path) -> None:
    """Every committed file and symlink equals a fresh build byte for byte, exec bit too."""
    write_host(HOSTS[name](), tmp_path / name)
    fresh = tree_entries(tmp_path / name)
    committed = tree_entries(FIXTURES / name)
    assert sorted(committed) == sorted(fresh), "run: python tests/fixture_hosts.py regenerate"
    different = [path for path in fresh if fresh[path] != committed[path]]
    assert different == []


def test_output_is_deterministic(tmp_path: Path) -> None:
    """Two builds of one spec agree on every entry, directories and modes included."""
    for name in ("a", "b"):
        write_host(HOSTS["kpro6-split"](), tmp_path / name)

    def listing(root: Path) -> list[tuple[str, int, str]]:
        return sorted(
            (
                p.relative_to(root).as_posix(),
                p.lstat().st_mode,
                str(p.readlink()) if p.is_symlink() else "",
            )
            for p in root.rglob("*")
        )

    assert listing(tmp_path / "a") == listing(tmp_path / "b")


def test_device_attributes_have_kernel_format(kpro6: Path) -> None:
    """Attribute files hold what the kernel prints: 0x-hex, newline, (null) override."""
    expected = {
        "vendor": "0x10de\n",
        "device": "0x2bb5\n",
        "subsystem_vendor": "0x10de\n",
        "subsystem_device": "0x204b\n",
        "class": "0x030200\n",
        "revision": "0xa1\n",
        "numa_node": "1\n",
        "local_cpulist": "32-63,96-127\n",
        "current_link_speed": "32.0 GT/s PCIe\n",
        "max_link_speed": "32.0 GT/s PCIe\n",
        "current_link_width": "16\n",
        "max_link_width": "16\n",
        "driver_override": "(null)\n",
        "enable": "1\n",
    }
    for name, text in expected.items():
        assert (kpro6 / GPU_81 / name).read_text() == text, name
    assert (kpro6 / GPU_81 / "irq").read_text().strip().isdigit()


def test_links_are_relative_like_the_kernel(kpro6: Path) -> None:
    """bus/pci/devices, driver and iommu_group links have the kernel's relative texts."""
    assert _link(kpro6 / "sys/bus/pci/devices/0000:81:00.0") == f"../../../{GPU_81[4:]}"
    assert _link(kpro6 / GPU_81 / "driver") == "../../../../bus/pci/drivers/nvidia"
    assert _link(kpro6 / GPU_81 / "iommu_group") == "../../../../kernel/iommu_groups/40"
    back = kpro6 / "sys/kernel/iommu_groups/40/devices/0000:81:00.1"
    assert back.resolve() == (kpro6 / GPU_81).resolve().with_name("0000:81:00.1")
    assert (kpro6 / "sys/kernel/iommu_groups/40/type").read_text() == "DMA-FQ\n"
    assert (kpro6 / "sys/bus/pci/drivers/nvidia/0000:81:00.0").resolve() == (
        kpro6 / GPU_81
    ).resolve()
    assert (kpro6 / "sys/devices/pci0000:80/0000:80:01.1/pci_bus/0000:81").is_dir()
    assert (kpro6 / "sys/class/iommu/ivhd0").resolve().is_dir()


def test_nvidia_information_format(kpro6: Path) -> None:
    """information uses nv-procfs.c's `Key: \\t value` lines, minors in PCI order."""
    text = (kpro6 / "proc/driver/nvidia/gpus/0000:81:00.0/information").read_text()
    assert "Model: \t\t NVIDIA RTX PRO 6000 Blackwell Server Edition\n" in text
    assert "Device Minor: \t 4\n" in text
    assert "Bus Location: \t 0000:81:00.0\n" in text
    assert text.startswith("Model:") and "GPU UUID: \t GPU-" in text


def test_proc_files(kpro6: Path) -> None:
    """/proc/devices lists char majors "%3d name" before the block section; cmdline ends in \\n."""
    devices = (kpro6 / "proc/devices").read_text().splitlines()
    assert devices[0] == "Character devices:"
    assert "195 nvidia" in devices and "509 nvidia-uvm" in devices
    assert devices.index("509 nvidia-uvm") < devices.index("Block devices:")
    assert devices[1] == "  1 mem"
    version = (kpro6 / "proc/driver/nvidia/version").read_text()
    assert version.startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01")
    assert (kpro6 / "proc/cmdline").read_text().endswith("kvm_amd.sev=1\n")
    assert (kpro6 / "sys/module/kvm_amd/parameters/sev_snp").read_text() == "Y\n"
    assert (kpro6 / "sys/module/nvidia/version").read_text() == "590.48.01\n"


def test_proprietary_banner(fixture_root: Callable[[str], Path]) -> None:
    """The proprietary module's banner names the architecture, not "Open"."""
    text = (fixture_root("workstation") / "proc/driver/nvidia/version").read_text()
    assert text.startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  ")


def test_only_nvidia_bound_gpus_have_information(fixture_root: Callable[[str], Path]) -> None:
    """After the split only the four NUMA 0 GPUs appear under proc/driver/nvidia/gpus."""
    gpus = fixture_root("kpro6-split") / "proc/driver/nvidia/gpus"
    assert sorted(p.name for p in gpus.iterdir()) == [
        "0000:01:00.0",
        "0000:11:00.0",
        "0000:61:00.0",
        "0000:71:00.0",
    ]
    vfio = fixture_root("kpro6-split") / "sys/bus/pci/devices/0000:81:00.1"
    assert (vfio / "driver_override").read_text() == "vfio-pci\n"
    assert _link(vfio / "driver").endswith("/vfio-pci")


def test_iommu_off_has_no_groups(tmp_path: Path) -> None:
    """With the IOMMU off the kernel shows sys/class/iommu empty and no iommu_group links."""
    write_host(HOSTS["no-iommu"](), tmp_path / "h")
    assert list((tmp_path / "h/sys/class/iommu").iterdir()) == []
    assert list((tmp_path / "h/sys/kernel/iommu_groups").iterdir()) == []
    assert not (tmp_path / "h/sys/bus/pci/devices/0000:01:00.0/iommu_group").is_symlink()


def test_pmxcfs_links_and_extra_files(kpro6: Path) -> None:
    """etc/pve/lxc is pmxcfs's link to nodes/<node>/lxc; extra files land behind it."""
    assert _link(kpro6 / "etc/pve/lxc") == "nodes/kpro6/lxc"
    assert (kpro6 / "etc/pve/nodes/kpro6/lxc/129.conf").is_file()
    ct = kpro6 / "rpool/data/subvol-129-disk-0"
    assert "--tp 8" in (ct / "etc/systemd/system/sglang-qwen.service").read_text()
    lib = ct / "usr/lib/x86_64-linux-gnu"
    assert _link(lib / "libcuda.so.1") == "libcuda.so.590.48.01"
    assert (lib / "libnvidia-ml.so.590.48.01").is_file()
    assert "Version: 590.48.01-0ubuntu1" in (ct / "var/lib/dpkg/status").read_text()


def test_pci_cfg_matches_sysfs(kpro6: Path) -> None:
    """Every pci.cfg map line names the iommugroup and subsystem-id sysfs shows."""
    lines = (kpro6 / "etc/pve/mapping/pci.cfg").read_text().splitlines()
    maps = [line for line in lines if line.startswith("\tmap ")]
    assert len(maps) == 9
    for line in maps:
        keys = dict(kv.split("=", 1) for kv in line.split(" ", 1)[1].split(","))
        fn = keys["path"] if keys["path"].count(".") else keys["path"] + ".0"
        dev = kpro6 / "sys/bus/pci/devices" / fn
        assert _link(dev / "iommu_group").endswith(f"/{keys['iommugroup']}")
        sub = (dev / "subsystem_vendor").read_text()[2:6] + ":"
        sub += (dev / "subsystem_device").read_text()[2:6]
        assert keys["subsystem-id"] == sub
        assert keys["node"] == "kpro6"


def _tiny(**changes: object) -> HostSpec:
    host = HostSpec(
        hostname="tiny",
        cmdline="quiet",
        iommu_units=(IommuUnit("dmar0"),),
        devices=(
            DeviceSpec(
                address="0000:00:01.0",
                vendor=0x8086,
                device=0x352A,
                pci_class=0x060400,
                iommu_group=1,
            ),
            DeviceSpec(
                address="0000:01:00.0",
                parent="0000:00:01.0",
                vendor=0x10DE,
                device=0x2204,
                pci_class=0x030000,
                iommu_group=2,
            ),
        ),
    )
    return attrs.evolve(host, **changes)  # type: ignore[arg-type]


def test_tiny_host_writes(tmp_path: Path) -> None:
    """A minimal description gives a tree with the device behind its bridge."""
    write_host(_tiny(), tmp_path / "t")
    link = _link(tmp_path / "t/sys/bus/pci/devices/0000:01:00.0")
    assert link == "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    assert (tmp_path / "t/sys/devices/pci0000:00/0000:00:01.0/pci_bus/0000:01").is_dir()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"iommu_units": ()}, "need iommu_units"),
        ({"files": {"../escape": "x"}}, "outside the root"),
    ],
)
def test_host_spec_errors(changes: dict[str, object], match: str, tmp_path: Path) -> None:
    """Descriptions no kernel could produce are refused with the offending part named."""
    with pytest.raises(HostSpecError, match=match):
        write_host(_tiny(**changes), tmp_path / "t")


def test_device_errors(tmp_path: Path) -> None:
    """Duplicates, parents that are not bridges and nvidia without its facts are refused."""
    bridge, gpu = _tiny().devices
    cases: list[tuple[tuple[DeviceSpec, ...], str]] = [
        ((bridge, bridge), "described twice"),
        ((attrs.evolve(gpu, parent="0000:00:02.0"),), "not a bridge"),
        ((bridge, attrs.evolve(gpu, driver="nvidia")), "needs NvidiaInfo"),
        ((attrs.evolve(gpu, address="0000:1:00.0"),), "not a PCI address|like the kernel"),
        ((attrs.evolve(gpu, parent=None, numa_node=3),), "no NUMA node 3"),
    ]
    for index, (devices, match) in enumerate(cases):
        with pytest.raises((HostSpecError, ValueError), match=match):
            write_host(_tiny(devices=devices), tmp_path / str(index))


def test_nvidia_needs_module(tmp_path: Path) -> None:
    """A GPU on nvidia with NvidiaInfo but no loaded module is not a real host."""
    bridge, gpu = _tiny().devices
    info = NvidiaInfo(model="NVIDIA GeForce RTX 3090", minor=0)
    host = _tiny(devices=(bridge, attrs.evolve(gpu, driver="nvidia", nvidia=info)))
    with pytest.raises(HostSpecError, match="NvidiaModule"):
        write_host(host, tmp_path / "a")
    write_host(attrs.evolve(host, nvidia=NvidiaModule(version="580.95.05")), tmp_path / "b")
    assert (tmp_path / "b/proc/driver/nvidia/gpus/0000:01:00.0/information").is_file()


def test_refuses_non_empty_root(tmp_path: Path) -> None:
    """write_host never writes over an existing tree."""
    (tmp_path / "keep").write_text("x")
    with pytest.raises(FileExistsError):
        write_host(_tiny(), tmp_path)


def test_regenerate_entry_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python tests/fixture_hosts.py regenerate DEST NAME` rewrites that tree, old files gone."""
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "stale").write_text("old")
    assert fixture_hosts.main(["regenerate", str(tmp_path), "mixed"]) == 0
    assert not (tmp_path / "mixed" / "stale").exists()
    assert tree_entries(tmp_path / "mixed") == tree_entries(FIXTURES / "mixed")
    assert "wrote" in capsys.readouterr().out
    assert fixture_hosts.main(["bogus"]) == 2
    with pytest.raises(KeyError, match="no fixture host nope"):
        fixture_hosts.regenerate(tmp_path, ["nope"])


def test_installed_package_has_no_test_hosts() -> None:
    """The descriptions of this project's test hosts live with the tests, not in pvegpu."""
    assert not hasattr(testing, "fixture_hosts")
    assert not (Path(testing.__file__).parent.parent / "fixture_hosts.py").exists()


def test_docstring_example_runs(tmp_path: Path) -> None:
    """The example in pvegpu.testing's docstring builds a host that discovery reads."""
    from pvegpu.host.discover import discover

    doc = testing.__doc__ or ""
    example = doc[doc.index("Example::") + len("Example::") :]
    code = "\n".join(line[4:] for line in example.splitlines())
    exec(code, {"tmp_path": tmp_path})
    facts = discover(tmp_path / "lab1")
    assert [(str(g.address), g.node_minor) for g in facts.gpus] == [("0000:01:00.0", 0)]
