"""Discovery over the committed fixture hosts, broken trees, and its independence of order."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from pvegpu.errors import DiscoveryError
from pvegpu.fixture_hosts import HOSTS
from pvegpu.host.discover import Trace, discover
from pvegpu.host.facts import HostFacts, IommuMode, KernelModuleFlavor
from pvegpu.host.facts_json import facts_to_json
from pvegpu.pci import CpuList, PciAddress

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"
NAMES = sorted(HOSTS)
DEV = "sys/bus/pci/devices"


@pytest.mark.parametrize("name", NAMES)
def test_facts_golden(name: str, golden: Callable[[str], SnapshotAssertion]) -> None:
    """The facts of every fixture host, as the JSON document, are pinned."""
    assert facts_to_json(discover(FIXTURES / name)) == golden("json")


def test_kpro6_topology(fixture_root: Callable[[str], Path]) -> None:
    """kpro6: 8 GPUs in PCI order, 4 per NUMA node, each with its audio and own group."""
    facts = discover(fixture_root("kpro6"))
    assert facts.node == "kpro6"
    by_node = {
        node: [g.address.short for g in facts.gpus if g.numa_node == node] for node in (0, 1)
    }
    assert by_node == {
        0: ["01:00.0", "11:00.0", "61:00.0", "71:00.0"],
        1: ["81:00.0", "91:00.0", "e1:00.0", "f1:00.0"],
    }
    assert [g.nvidia_minor for g in facts.gpus] == list(range(8))
    assert [g.iommu_group for g in facts.gpus] == [12, 13, 14, 15, 40, 41, 42, 43]
    for gpu in facts.gpus:
        assert [str(c.address) for c in gpu.companions] == [str(gpu.address.with_function(1))]
        group = facts.group(gpu.iommu_group or -1)
        assert group is not None
        assert group.members == (gpu.address, gpu.address.with_function(1))
    assert facts.numa_nodes[1].cpus == CpuList.parse("32-63,96-127")
    assert facts.iommu_mode is IommuMode.TRANSLATED and facts.iommu.vendor == "amd"
    assert facts.sev_snp is True
    assert facts.nvidia is not None and facts.nvidia.flavor is KernelModuleFlavor.OPEN
    assert facts.char_major("nvidia-uvm") == 509
    assert facts.cmdline.endswith("kvm_amd.sev=1")
    assert facts.file("etc/pve/lxc/129.conf") is not None
    assert [f.path for f in facts.files] == sorted(f.path for f in facts.files)


def test_split_host(fixture_root: Callable[[str], Path]) -> None:
    """kpro6-split: NUMA 1 on vfio-pci with overrides, minors only for the nvidia four."""
    facts = discover(fixture_root("kpro6-split"))
    gpu = facts.gpu(PciAddress.parse("0000:81:00.0"))
    assert gpu is not None
    assert [(f.driver, f.driver_override) for f in gpu.functions] == [("vfio-pci", "vfio-pci")] * 2
    assert gpu.nvidia_minor is None and gpu.model is None
    host_side = facts.gpu(PciAddress.parse("0000:01:00.0"))
    assert host_side is not None
    assert [f.driver_override for f in host_side.functions] == ["nvidia", "snd_hda_intel"]
    assert [g.nvidia_minor for g in facts.gpus if g.driver == "nvidia"] == [0, 1, 2, 3]


def test_small_hosts(fixture_root: Callable[[str], Path]) -> None:
    """Each small fixture shows the one situation it exists for."""
    ws = discover(fixture_root("workstation"))
    assert [s.source for s in ws.vfio_ids] == ["etc/modprobe.d/vfio.conf", "proc/cmdline"]
    assert ws.vfio_ids[1].ids == ("10de:24b0", "10de:228b")
    assert ws.gpus[1].numa_node is None and ws.iommu.vendor == "intel"
    assert ws.file("etc/pve/qemu-server/110.conf") is not None
    shared = discover(fixture_root("shared-group"))
    group = shared.group(shared.gpus[0].iommu_group or -1)
    assert group is not None and PciAddress.parse("0000:04:00.0") in group.members
    off = discover(fixture_root("no-iommu"))
    assert off.iommu_mode is IommuMode.OFF and off.iommu_groups == ()
    assert all(f.iommu_group is None for f in off.functions)
    mixed = discover(fixture_root("mixed"))
    assert [g.vendor_device for g in mixed.gpus] == ["10de:2bb5", "1002:744c"]
    assert mixed.iommu_mode is IommuMode.PASSTHROUGH


# -- order independence


class _Shuffled:
    """What os.scandir returns, but over a list we shuffled."""

    def __init__(self, entries: list[Any]) -> None:
        self.entries = entries

    def __iter__(self) -> Iterator[Any]:
        return iter(self.entries)

    def __enter__(self) -> _Shuffled:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        return None


@cache
def _baseline(name: str) -> HostFacts:
    return discover(FIXTURES / name)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(NAMES), rng=st.randoms(use_true_random=False))
def test_listing_order_does_not_matter(name: str, rng: random.Random) -> None:
    """Whatever order the filesystem lists entries in, the facts are the same."""
    real_listdir, real_scandir = os.listdir, os.scandir
    calls = 0

    def listdir(path: Any = ".") -> list[str]:
        nonlocal calls
        calls += 1
        names = real_listdir(path)
        rng.shuffle(names)
        return names

    def scandir(path: Any = ".") -> _Shuffled:
        nonlocal calls
        calls += 1
        with real_scandir(path) as it:
            entries = list(it)
        rng.shuffle(entries)
        return _Shuffled(entries)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "listdir", listdir)
        mp.setattr(os, "scandir", scandir)
        facts = discover(FIXTURES / name)
    assert calls > 0, "discovery listed no directory through os.listdir/os.scandir"
    assert facts == _baseline(name)


# -- broken trees


@pytest.fixture
def broken(tmp_path: Path) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        root = tmp_path / name
        shutil.copytree(FIXTURES / name, root, symlinks=True)
        return root

    return copy


def _relink(path: Path, target: str) -> None:
    path.unlink()
    path.symlink_to(target)


def _real(root: Path, rel: str) -> Path:
    return (root / rel).resolve()


def _replace_with_dir(root: Path, rel: str) -> None:
    path = _real(root, rel)
    path.unlink()
    path.mkdir()


BREAKS: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "missing vendor": (
        lambda r: _real(r, f"{DEV}/0000:81:00.0/vendor").unlink(),
        "missing-file",
        f"{DEV}/0000:81:00.0/vendor",
    ),
    "numa_node abc": (
        lambda r: _real(r, f"{DEV}/0000:91:00.0/numa_node").write_text("abc\n"),
        "bad-value",
        f"{DEV}/0000:91:00.0/numa_node",
    ),
    "vendor without 0x": (
        lambda r: _real(r, f"{DEV}/0000:91:00.1/vendor").write_text("10de\n"),
        "bad-value",
        f"{DEV}/0000:91:00.1/vendor",
    ),
    "dangling driver link": (
        lambda r: _relink(r / f"{DEV}/0000:e1:00.0/driver", "../../../../bus/pci/drivers/nouveau"),
        "dangling-link",
        f"{DEV}/0000:e1:00.0/driver",
    ),
    "iommu_group pointing nowhere": (
        lambda r: _relink(
            r / f"{DEV}/0000:f1:00.0/iommu_group", "../../../../kernel/iommu_groups/99"
        ),
        "dangling-link",
        f"{DEV}/0000:f1:00.0/iommu_group",
    ),
    "iommu_group not a number": (
        lambda r: _relink(r / f"{DEV}/0000:f1:00.0/iommu_group", "../../../../kernel/iommu_groups"),
        "bad-value",
        f"{DEV}/0000:f1:00.0/iommu_group",
    ),
    "group does not list member": (
        lambda r: (r / "sys/kernel/iommu_groups/40/devices/0000:81:00.1").unlink(),
        "iommu-group-mismatch",
        "sys/kernel/iommu_groups/40/devices",
    ),
    "unreadable class (a directory)": (
        lambda r: _replace_with_dir(r, f"{DEV}/0000:11:00.0/class"),
        "unreadable",
        f"{DEV}/0000:11:00.0/class",
    ),
    "not UTF-8": (
        lambda r: (r / "proc/cmdline").write_bytes(b"root=\xff\n"),
        "unreadable",
        "proc/cmdline",
    ),
    "missing etc/hostname": (
        lambda r: (r / "etc/hostname").unlink(),
        "missing-file",
        "etc/hostname",
    ),
    "sys/bus/pci/devices missing": (
        lambda r: shutil.rmtree(r / DEV),
        "missing-dir",
        DEV,
    ),
    "device link dangling": (
        lambda r: shutil.rmtree(_real(r, f"{DEV}/0000:c1:00.1")),
        "dangling-link",
        f"{DEV}/0000:c1:00.1",
    ),
    "symlink loop": (
        lambda r: _relink(r / f"{DEV}/0000:71:00.0", "0000:71:00.0"),
        "symlink-loop",
        f"{DEV}/0000:71:00.0",
    ),
    "bad entry name": (
        lambda r: (r / f"{DEV}/garbage").symlink_to("../../../devices/pci0000:00/0000:00:00.0"),
        "bad-value",
        f"{DEV}/garbage",
    ),
    "no Device Minor": (
        lambda r: (r / "proc/driver/nvidia/gpus/0000:61:00.0/information").write_text(
            "Model: \t\t X\n"
        ),
        "bad-value",
        "proc/driver/nvidia/gpus/0000:61:00.0/information",
    ),
    "information of another GPU": (
        lambda r: shutil.copy(
            r / "proc/driver/nvidia/gpus/0000:01:00.0/information",
            r / "proc/driver/nvidia/gpus/0000:11:00.0/information",
        ),
        "bad-value",
        "proc/driver/nvidia/gpus/0000:11:00.0/information",
    ),
    "unknown NVRM banner": (
        lambda r: (r / "proc/driver/nvidia/version").write_text("NVRM version: ???\n"),
        "bad-value",
        "proc/driver/nvidia/version",
    ),
    "sev_snp maybe": (
        lambda r: (r / "sys/module/kvm_amd/parameters/sev_snp").write_text("maybe\n"),
        "bad-value",
        "sys/module/kvm_amd/parameters/sev_snp",
    ),
    "missing node cpulist": (
        lambda r: (r / "sys/devices/system/node/node1/cpulist").unlink(),
        "missing-file",
        "sys/devices/system/node/node1/cpulist",
    ),
    "bad group type": (
        lambda r: (r / "sys/kernel/iommu_groups/12/type").write_text("dma\n"),
        "bad-value",
        "sys/kernel/iommu_groups/12/type",
    ),
    "missing proc/devices": (
        lambda r: (r / "proc/devices").unlink(),
        "missing-file",
        "proc/devices",
    ),
    "bad vfio ids in modprobe.d": (
        lambda r: (r / "etc/modprobe.d/vfio.conf").write_text("options vfio-pci ids=all\n"),
        "bad-value",
        "etc/modprobe.d/vfio.conf",
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_broken_tree(case: str, broken: Callable[[str], Path]) -> None:
    """Each kind of broken tree stops discovery with its code and the exact path."""
    breaker, code, subject = BREAKS[case]
    root = broken("kpro6")
    breaker(root)
    with pytest.raises(DiscoveryError) as info:
        discover(root)
    (problem,) = info.value.problems
    assert (problem.code, problem.subject) == (code, subject), str(problem)
    assert problem.fix
    assert info.value.exit_code == 3


def test_missing_module_taint(broken: Callable[[str], Path]) -> None:
    """Without proc's banner the version comes from sys/module, the flavor from its taint."""
    root = broken("workstation")
    (root / "proc/driver/nvidia/version").unlink()
    facts = discover(root)
    assert facts.nvidia is not None and facts.nvidia.version == "580.95.05"
    assert facts.nvidia.flavor is KernelModuleFlavor.PROPRIETARY
    (root / "sys/module/nvidia/taint").unlink()
    with pytest.raises(DiscoveryError) as info:
        discover(root)
    assert info.value.problems[0].subject == "sys/module/nvidia/taint"


def test_stops_at_first_problem(broken: Callable[[str], Path]) -> None:
    """A fatal problem ends reading at once: nothing after it is read, no facts come back."""
    root = broken("kpro6")
    _real(root, f"{DEV}/0000:00:00.0/vendor").unlink()
    trace = Trace()
    with pytest.raises(DiscoveryError):
        discover(root, trace=trace)
    assert not any(p.startswith(("proc/", "sys/kernel/")) for p in trace.files)
    assert not any("0000:01:00.0" in p for p in trace.files)


def test_links_never_leave_the_root(broken: Callable[[str], Path], tmp_path: Path) -> None:
    """Absolute links mean root/...; `..` stops at the root, so outside files are never read."""
    root = broken("kpro6")
    (root / "etc/hostname").unlink()
    (root / "etc/hostname").symlink_to("/node-name")
    (root / "node-name").write_text("inside\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/cmdline").write_text("escaped\n")
    (root / "proc/cmdline").unlink()
    (root / "proc/cmdline").symlink_to(os.path.relpath(tmp_path / "outside/cmdline", root / "proc"))
    with pytest.raises(DiscoveryError) as info:
        discover(root)
    assert (info.value.problems[0].code, info.value.problems[0].subject) == (
        "missing-file",
        "proc/cmdline",
    )
    (root / "outside").mkdir()
    (root / "outside/cmdline").write_text("inside cmdline\n")
    facts = discover(root)
    assert (facts.node, facts.cmdline) == ("inside", "inside cmdline")


def test_absolute_pmxcfs_link(broken: Callable[[str], Path]) -> None:
    """An absolute etc/pve/lxc link resolves inside the root, paths stay as accessed."""
    root = broken("kpro6")
    _relink(root / "etc/pve/lxc", "/etc/pve/nodes/kpro6/lxc")
    assert discover(root).file("etc/pve/lxc/129.conf") is not None


def test_missing_optional_parts(broken: Callable[[str], Path]) -> None:
    """No nvidia, no kvm_amd, no NUMA dirs, no /etc/pve: facts say so instead of failing."""
    root = broken("kpro6")
    for rel in ("proc/driver/nvidia", "sys/module", "sys/devices/system/node", "etc/pve"):
        shutil.rmtree(root / rel)
    facts = discover(root)
    assert facts.nvidia is None and facts.sev_snp is False and facts.numa_nodes == ()
    assert all(g.nvidia_minor is None for g in facts.gpus)
    assert [f.path for f in facts.files if f.path.startswith("etc/pve")] == []
