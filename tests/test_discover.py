"""Discovery over the committed fixture hosts, broken trees, and its independence of order."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import stat
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from depth import examples
from fixture_hosts import HOSTS
from pvegpu.errors import DiscoveryError
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_to_json
from pvegpu.host.reader import Trace
from pvegpu.model.facts import GpuDriver, HostFacts, IommuMode, KernelModuleFlavor
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
    assert [g.node_minor for g in facts.gpus] == list(range(8))
    assert [g.iommu_group for g in facts.gpus] == [12, 13, 14, 15, 40, 41, 42, 43]
    for gpu in facts.gpus:
        assert [str(c.address) for c in gpu.companions] == [str(gpu.address.with_function(1))]
        group = facts.group(gpu.iommu_group or -1)
        assert group is not None
        assert group.members == (gpu.address, gpu.address.with_function(1))
    assert facts.numa_nodes[1].cpus == CpuList.parse("32-63,96-127")
    assert facts.iommu_mode is IommuMode.TRANSLATED and facts.iommu.vendor == "amd"
    assert facts.sev_snp is True
    nvidia = facts.gpu_driver("nvidia")
    assert nvidia is not None and nvidia.flavor is KernelModuleFlavor.OPEN
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
    assert gpu.node_minor is None and gpu.model is None
    host_side = facts.gpu(PciAddress.parse("0000:01:00.0"))
    assert host_side is not None
    assert [f.driver_override for f in host_side.functions] == ["nvidia", "snd_hda_intel"]
    assert [g.node_minor for g in facts.gpus if g.driver == "nvidia"] == [0, 1, 2, 3]


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


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


def _attr(root: Path, rel: str) -> Path:
    """A device's id attribute (vendor, class...) as read without its `uevent`: the
    fallback of older snapshots. With a uevent the ids come from it, not these files."""
    path = _real(root, rel)
    (path.parent / "uevent").unlink(missing_ok=True)
    return path


def _replace_with_dir(root: Path, rel: str) -> None:
    path = _real(root, rel)
    path.unlink()
    path.mkdir()


def _class_is_a_directory(root: Path) -> None:
    _attr(root, f"{DEV}/0000:11:00.0/class")
    _replace_with_dir(root, f"{DEV}/0000:11:00.0/class")


def _vendor_links_outside(root: Path) -> None:
    (root.parent / "outside-vendor").write_text("0x10de\n")
    vendor = _attr(root, f"{DEV}/0000:11:00.0/vendor")
    _replace(vendor, lambda p: p.symlink_to("../" * 12 + "outside-vendor"))


def _replace(path: Path, make: Callable[[Path], object]) -> None:
    """Put what `make` creates where `path` is (a file, link or directory)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    make(path)


def _bind_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))


def _char_device(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod of a device node needs root")
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))


def _arabic_group(root: Path, address: str, group: int) -> None:
    """Group N renamed to N in Arabic-Indic digits, which isdigit() and int() accept."""
    arabic = "".join(chr(0x0660 + int(d)) for d in str(group))
    groups = root / "sys/kernel/iommu_groups"
    (groups / str(group)).rename(groups / arabic)
    _relink(root / f"{DEV}/{address}/iommu_group", f"../../../../kernel/iommu_groups/{arabic}")


BREAKS: dict[str, tuple[Callable[[Path], object], str, str]] = {
    "missing vendor": (
        lambda r: _attr(r, f"{DEV}/0000:81:00.0/vendor").unlink(),
        "missing-file",
        f"{DEV}/0000:81:00.0/vendor",
    ),
    "numa_node abc": (
        lambda r: _real(r, f"{DEV}/0000:91:00.0/numa_node").write_text("abc\n"),
        "bad-value",
        f"{DEV}/0000:91:00.0/numa_node",
    ),
    "vendor without 0x": (
        lambda r: _attr(r, f"{DEV}/0000:91:00.1/vendor").write_text("10de\n"),
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
    "class is a directory": (
        lambda r: _class_is_a_directory(r),
        "not-a-file",
        f"{DEV}/0000:11:00.0/class",
    ),
    # The ids come from `uevent` when it is there (one read instead of five).
    "uevent without PCI_ID": (
        lambda r: _real(r, f"{DEV}/0000:81:00.0/uevent").write_text(
            "DRIVER=nvidia\nPCI_CLASS=30200\nPCI_SUBSYS_ID=10DE:204B\nPCI_SLOT_NAME=0000:81:00.0\n"
        ),
        "bad-value",
        f"{DEV}/0000:81:00.0/uevent",
    ),
    "uevent in lowercase hex": (
        lambda r: _real(r, f"{DEV}/0000:81:00.0/uevent").write_text(
            "PCI_CLASS=30200\nPCI_ID=10de:2bb5\nPCI_SUBSYS_ID=10DE:204B\nPCI_SLOT_NAME=0000:81:00.0\n"
        ),
        "bad-value",
        f"{DEV}/0000:81:00.0/uevent",
    ),
    "uevent of another device": (
        lambda r: _real(r, f"{DEV}/0000:81:00.0/uevent").write_bytes(
            _real(r, f"{DEV}/0000:91:00.0/uevent").read_bytes()
        ),
        "bad-value",
        f"{DEV}/0000:81:00.0/uevent",
    ),
    "FIFO as uevent": (
        lambda r: _replace(_real(r, f"{DEV}/0000:11:00.0/uevent"), os.mkfifo),
        "not-a-file",
        f"{DEV}/0000:11:00.0/uevent",
    ),
    # Device attributes are read from one listing of the device directory (its d_types
    # instead of an lstat per file): the same refusals hold there.
    "FIFO as a device attribute": (
        lambda r: _replace(_real(r, f"{DEV}/0000:11:00.0/numa_node"), os.mkfifo),
        "not-a-file",
        f"{DEV}/0000:11:00.0/numa_node",
    ),
    "device attribute not UTF-8": (
        lambda r: _real(r, f"{DEV}/0000:11:00.0/local_cpulist").write_bytes(b"0-3\xff\n"),
        "not-utf8",
        f"{DEV}/0000:11:00.0/local_cpulist",
    ),
    # A valid vendor waits outside the root: read through the link, it would pass.
    "device attribute links out of the root": (
        lambda r: _vendor_links_outside(r),
        "missing-file",
        f"{DEV}/0000:11:00.0/vendor",
    ),
    "not UTF-8": (
        lambda r: (r / "proc/cmdline").write_bytes(b"root=\xff\n"),
        "not-utf8",
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
    "empty vendor": (
        lambda r: _attr(r, f"{DEV}/0000:81:00.0/vendor").write_text(""),
        "bad-value",
        f"{DEV}/0000:81:00.0/vendor",
    ),
    "empty proc/devices": (
        lambda r: (r / "proc/devices").write_text(""),
        "bad-value",
        "proc/devices",
    ),
    "garbage bytes in class": (
        lambda r: _attr(r, f"{DEV}/0000:81:00.0/class").write_bytes(bytes(range(256))),
        "not-utf8",
        f"{DEV}/0000:81:00.0/class",
    ),
    "huge pve config": (
        lambda r: os.truncate(r / "etc/pve/nodes/kpro6/lxc/129.conf", 64 * 1024 * 1024 + 1),
        "file-too-large",
        "etc/pve/lxc/129.conf",
    ),
    "FIFO as a pve config": (
        lambda r: _replace(r / "etc/pve/nodes/kpro6/lxc/129.conf", os.mkfifo),
        "not-a-file",
        "etc/pve/lxc/129.conf",
    ),
    "socket as proc/cmdline": (
        lambda r: _replace(r / "proc/cmdline", _bind_socket),
        "not-a-file",
        "proc/cmdline",
    ),
    "device node as proc/devices": (
        lambda r: _replace(r / "proc/devices", _char_device),
        "not-a-file",
        "proc/devices",
    ),
    "modprobe.d is a file": (
        lambda r: _replace(r / "etc/modprobe.d", lambda p: p.write_text("options a b=1\n")),
        "not-a-directory",
        "etc/modprobe.d",
    ),
    "sys/bus/pci/devices is a file": (
        lambda r: _replace(r / DEV, lambda p: p.write_text("")),
        "not-a-directory",
        DEV,
    ),
    "device link to a file": (
        lambda r: _relink(r / f"{DEV}/0000:81:00.0", "../../../../proc/cmdline"),
        "not-a-directory",
        f"{DEV}/0000:81:00.0",
    ),
    "uppercase device name": (
        lambda r: (r / f"{DEV}/0000:0A:00.0").symlink_to(
            "../../../devices/pci0000:00/0000:00:00.0"
        ),
        "bad-value",
        f"{DEV}/0000:0A:00.0",
    ),
    "group directory with a Unicode digit": (
        lambda r: (r / "sys/kernel/iommu_groups/4\u00b2/devices").mkdir(parents=True),
        "bad-value",
        "sys/kernel/iommu_groups/4\u00b2",
    ),
    "iommu_group link to an Arabic-Indic digit": (
        lambda r: _arabic_group(r, "0000:f1:00.0", 43),
        "bad-value",
        f"{DEV}/0000:f1:00.0/iommu_group",
    ),
    "bad vfio ids in modprobe.d": (
        lambda r: (r / "etc/modprobe.d/vfio.conf").write_text("options vfio-pci ids=all\n"),
        "bad-value",
        "etc/modprobe.d/vfio.conf",
    ),
}


def _hung(signum: int, frame: object) -> None:
    raise TimeoutError("discovery blocked")


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_broken_tree(case: str, broken: Callable[[str], Path]) -> None:
    """Each kind of broken tree stops discovery with its code and the exact path."""
    breaker, code, subject = BREAKS[case]
    root = broken("kpro6")
    breaker(root)
    # A FIFO without a writer blocks open() forever: turn a hang into a failure.
    signal.signal(signal.SIGALRM, _hung)
    signal.alarm(20)
    try:
        with pytest.raises(DiscoveryError) as info:
            discover(root)
    finally:
        signal.alarm(0)
    (problem,) = info.value.problems
    assert (problem.code, problem.subject) == (code, subject), str(problem)
    assert problem.fix
    assert info.value.exit_code == 3


def test_missing_module_taint(broken: Callable[[str], Path]) -> None:
    """Without proc's banner the version comes from sys/module, the flavor from its taint."""
    root = broken("workstation")
    (root / "proc/driver/nvidia/version").unlink()
    facts = discover(root)
    assert facts.gpu_drivers == (GpuDriver("nvidia", "580.95.05", KernelModuleFlavor.PROPRIETARY),)
    (root / "sys/module/nvidia/taint").unlink()
    with pytest.raises(DiscoveryError) as info:
        discover(root)
    assert info.value.problems[0].subject == "sys/module/nvidia/taint"


def test_stops_at_first_problem(broken: Callable[[str], Path]) -> None:
    """A fatal problem ends reading at once: nothing after it is read, no facts come back."""
    root = broken("kpro6")
    _attr(root, f"{DEV}/0000:00:00.0/vendor").unlink()
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
    assert facts.gpu_drivers == () and facts.sev_snp is False and facts.numa_nodes == ()
    assert all(g.node_minor is None for g in facts.gpus)
    assert [f.path for f in facts.files if f.path.startswith("etc/pve")] == []


def test_unicode_digit_node_directory_is_not_a_node(broken: Callable[[str], Path]) -> None:
    """`node\u00b2` passes str.isdigit() but is no NUMA node (int() refuses it): ignored."""
    root = broken("kpro6")
    (root / "sys/devices/system/node/node\u00b2").mkdir()
    (root / "sys/devices/system/node/node\u0661").mkdir()
    assert [n.id for n in discover(root).numa_nodes] == [0, 1]


def test_device_attribute_through_a_link(broken: Callable[[str], Path]) -> None:
    """A device attribute that is a symlink is followed inside the root like any path."""
    root = broken("kpro6")
    expected = discover(root)
    vendor = _attr(root, f"{DEV}/0000:11:00.0/vendor")
    (vendor.parent / "vendor.real").write_bytes(vendor.read_bytes())
    _replace(vendor, lambda p: p.symlink_to("vendor.real"))
    assert discover(root) == expected


def test_ids_from_uevent_or_the_attribute_files(broken: Callable[[str], Path]) -> None:
    """With a `uevent` the ids come from it and the five id files are not read; without
    one (older snapshots) the files give the same facts."""
    root = broken("kpro6")
    expected = discover(root)
    gpu = _real(root, f"{DEV}/0000:81:00.0")
    (gpu / "vendor").write_text("garbage\n")
    trace = Trace()
    assert discover(root, trace=trace) == expected
    assert not any(p.endswith(("/vendor", "/class", "/subsystem_device")) for p in trace.files)
    (gpu / "vendor").write_text("0x10de\n")
    for uevent in (root / "sys/devices").rglob("uevent"):
        uevent.unlink()
    assert discover(root) == expected
