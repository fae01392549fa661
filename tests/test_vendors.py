"""The GPU vendor plug-in point: a vendor is one module under vendors/, and the rest of
pvegpu asks it instead of naming the vendor."""

from __future__ import annotations

import ast
import io
import re
import shutil
import tokenize
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from pvegpu.hardware import GPU_DRIVER_MODULES, HOST_GPU_DRIVERS, binding_modules, host_driver
from pvegpu.host import discover as discovery
from pvegpu.host import gpus as gpus_module
from pvegpu.model.schema import DeviceStyle
from pvegpu.pvefiles import lxcconf
from pvegpu.pvefiles.guestconf import ConfLine
from pvegpu.vendors import (
    CONTAINER_NODES,
    VENDORS,
    DeviceNodes,
    DynamicNode,
    nvidia,
    vendor_by_driver,
    vendor_of,
)
from pvegpu.vendors.amd import AMD
from pvegpu.vendors.intel import INTEL
from pvegpu.vendors.nvidia import NVIDIA
from pvegpu.vendors.vendor import GpuInformation, GpuNodeSource
from strategies import kpro6

SRC = Path(__file__).resolve().parent.parent / "src" / "pvegpu"

STILL_NAMING_NVIDIA = {
    # The facts JSON keeps the key `nvidia_minor` for `GPU.node_minor` (documents and
    # snapshots already written read the same).
    "host/facts_dump.py",
    # Wording: messages, fixes and help text that name NVIDIA's modules and tools
    # (nvidia-uvm, nvidia-modprobe, nvidia-smi, libnvidia-compute-N). Their bytes are in
    # goldens; they move into the vendor as message parts in a later step.
    "cli/arguments.py",
    "planning/findings.py",
    "serving/container.py",
    # The drawings' colour per driver name (NVIDIA green for nvidia, shared by topology.svg
    # and discover --svg).
    "rendering/drawing.py",
    # The fake host builder writes an NVIDIA host's /proc and /sys (tests' fixtures).
    "testing/__init__.py",
    "testing/hostspec.py",
    "testing/synthetic.py",
    "testing/writer.py",
    "testing/partitions.py",  # its MIG capabilities and vGPU manager files too
    "testing/kernels.py",  # and NVIDIA's DKMS builds (module nvidia, nvidia.ko)
    "testing/userspace.py",  # and its driver userspace in the host root
}
"""Modules outside vendors/ that still name NVIDIA in code (comments and docstrings do
not count), each with why. The set only shrinks: a module that stops naming it must
leave the set, and a new one fails the test."""


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Expr):
            continue
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def names_nvidia(text: str) -> bool:
    """Does the code (names, strings; not comments or docstrings) say `nvidia`, any case?"""
    docstrings = _docstring_lines(ast.parse(text))
    kinds = {tokenize.NAME, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    return any(
        tok.type in kinds and "nvidia" in tok.string.lower() and tok.start[0] not in docstrings
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
    )


def test_names_nvidia_skips_comments_and_docstrings() -> None:
    assert not names_nvidia('"""NVIDIA."""\nx = 1  # nvidia\n')
    assert names_nvidia('x = "nvidia-smi"\n')
    assert names_nvidia("x = gpu.nvidia_minor\n")
    assert names_nvidia('x = f"/dev/nvidia{m}"\n')


def test_only_vendor_modules_name_nvidia() -> None:
    """Outside vendors/, only the pinned modules name NVIDIA, and each of them still does."""
    naming = {
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if "vendors" not in path.relative_to(SRC).parts
        and names_nvidia(path.read_text(encoding="utf-8"))
    }
    assert naming - STILL_NAMING_NVIDIA == set(), "name the vendor through vendors/ instead"
    gone = {p for p in STILL_NAMING_NVIDIA - naming if (SRC / p).exists()}
    assert gone == set(), "these no longer name NVIDIA: take them out of STILL_NAMING_NVIDIA"


def test_a_gpu_finds_its_vendor() -> None:
    gpu = kpro6().gpus[0]
    assert vendor_of(gpu.function) is NVIDIA is gpu.vendor
    assert vendor_by_driver("nvidia") is NVIDIA
    assert vendor_of(attrs.evolve(gpu.function, vendor=0x1002)) is AMD
    assert vendor_of(attrs.evolve(gpu.function, vendor=0x8086)) is INTEL
    assert vendor_by_driver("xe") is None  # not the host driver: i915 is
    aspeed = attrs.evolve(gpu.function, vendor=0x1A03)  # a BMC's display: no module here
    assert vendor_of(aspeed) is None


def test_driver_tables_come_from_the_vendors() -> None:
    """hardware.py's tables hold every vendor module's driver and modules."""
    for vendor in VENDORS:
        assert HOST_GPU_DRIVERS[vendor.pci_vendor] == vendor.host_driver
        assert GPU_DRIVER_MODULES[vendor.pci_vendor] == vendor.driver_modules
    function = attrs.evolve(kpro6().gpus[0].function, driver="vfio-pci")
    assert host_driver(function) == NVIDIA.host_driver
    assert NVIDIA.driver_modules <= binding_modules(function)


def test_majors_are_the_fixed_one_and_the_stack_s_dynamic_ones() -> None:
    proc_devices = [(195, "nvidia-frontend"), (509, "nvidia-uvm"), (510, "nvidia-caps"), (4, "tty")]
    assert CONTAINER_NODES.majors(proc_devices) == {195, 509, 510}
    assert CONTAINER_NODES.majors([]) == {195}


# A vendor pvegpu has no module of: the container config codec must handle its nodes from
# its `DeviceNodes` alone.
OTHER = DeviceNodes(
    gpu_path="/dev/accel{minor}",
    gpu_node=re.compile(r"^/dev/accel(\d+)$"),
    any_node=re.compile(r"^/dev/accel(?:\d+|ctl|-mem)$"),
    shared=("/dev/accelctl", "/dev/accel-mem"),
    major=240,
    gpu_minors=range(255),
    control_minor=255,
    dynamic=DynamicNode("accel-mem", "/dev/accel-mem", (0,), "modprobe accel", "the accel runtime"),
    stack_prefix="accel",
)


def test_the_container_codec_knows_no_vendor() -> None:
    """Lines are written, recognised and removed by the nodes passed in, not NVIDIA's."""
    raw = lxcconf.raw_style(OTHER, [2], 300)
    assert [v for _, v in raw.raw[:3]] == ["c 240:2 rwm", "c 240:255 rwm", "c 300:0 rwm"]
    dev = lxcconf.gpu_lines(OTHER, kpro6().gpus[:1], DeviceStyle.DEV)
    assert dev.devices == (
        "/dev/accel0,mode=0666",
        "/dev/accelctl,mode=0666",
        "/dev/accel-mem,mode=0666",
    )
    text = "arch: amd64\ndev0: /dev/nvidia0\n"
    patched = lxcconf.patch_gpu_lines(text, OTHER, raw)
    assert "dev0: /dev/nvidia0\n" in patched  # another vendor's node is not OTHER's line
    assert "lxc.mount.entry: /dev/accel2 dev/accel2 none bind,optional,create=file\n" in patched
    line = ConfLine.parse("lxc.cgroup2.devices.allow: c 240:2 rwm\n")
    assert lxcconf.gpu_minor(line, OTHER) == 2
    assert lxcconf.gpu_minor(line, CONTAINER_NODES) is None
    assert lxcconf.grants_every_gpu(
        ConfLine.parse("lxc.cgroup2.devices.allow: c 240:* rwm\n"), OTHER
    )
    assert lxcconf.remove_gpu_nodes(patched, OTHER, [2], {240, 300}) == text


def test_nvidia_banners() -> None:
    """Both NVRM banners give the version; only the open one says "Open Kernel Module"."""
    open_ = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build  "
        "(dvs-builder@U22)  Mon Dec  1 00:43:35 UTC 2025\nGCC version:  gcc 14\n"
    )
    closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 2025\n"
    assert nvidia.banner_version(open_) == ("590.48.01", True)
    assert nvidia.banner_version(closed) == ("580.95.05", False)
    with pytest.raises(ValueError, match="NVRM version"):
        nvidia.banner_version("NVRM: something else\n")
    assert nvidia.module_version("590.48.01\n") == "590.48.01"
    for bad in ("590\n", "590.48.01\n\n", "\u0665\u0669\u0660.48\n"):
        with pytest.raises(ValueError, match="expected"):
            nvidia.module_version(bad)


def test_nvidia_information() -> None:
    """`Key: \\t value` lines split on the first colon, so Bus Location keeps its colons."""
    info = nvidia.gpu_information(
        "Model: \t\t NVIDIA RTX PRO 6000\nBus Location: \t 0000:81:00.0\nDevice Minor: \t 4\n"
    )
    assert info == GpuInformation(4, "NVIDIA RTX PRO 6000", "0000:81:00.0")
    assert nvidia.gpu_information("Device Minor: 0\n") == GpuInformation(0, None, None)
    with pytest.raises(ValueError, match="Device Minor"):
        nvidia.gpu_information("Model: x\n")
    with pytest.raises(ValueError, match="Key: value"):
        nvidia.gpu_information("garbage\n")


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"


def test_discovery_reads_the_files_the_vendor_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery reads each GPU's node minor from where its vendor says, not a path of its own."""
    want = discovery.discover(FIXTURES / "kpro6")
    root = tmp_path / "kpro6"
    shutil.copytree(FIXTURES / "kpro6", root, symlinks=True)
    (root / "proc/driver/nvidia/gpus").rename(root / "proc/driver/moved")
    moved = GpuNodeSource("proc/driver/moved/{address}/information", nvidia.gpu_information)
    monkeypatch.setattr(gpus_module, "_GPU_INFORMATION", (moved,))
    assert discovery.discover(root).gpus == want.gpus
    monkeypatch.setattr(gpus_module, "_GPU_INFORMATION", ())
    assert {g.node_minor for g in discovery.discover(root).gpus} == {None}


def test_discovery_records_the_driver_the_vendor_shows(
    monkeypatch: pytest.MonkeyPatch, fixture_root: Callable[[str], Path]
) -> None:
    """The facts' driver versions are read where each vendor says; a vendor showing none
    leaves it unknown."""
    loaded = discovery.discover(fixture_root("kpro6")).gpu_drivers
    assert [(d.driver, d.version) for d in loaded] == [("nvidia", "590.48.01")]
    blind = attrs.evolve(NVIDIA, driver_version=None)
    monkeypatch.setattr(discovery, "DRIVER_VERSION_VENDORS", (blind,))
    assert discovery.discover(fixture_root("kpro6")).gpu_drivers == ()


def test_each_dynamic_node_is_made_by_the_command_its_messages_name() -> None:
    """The command a message tells the admin to run for a missing dynamic node (nvidia-uvm,
    kfd) is the one the bundle's nodes unit runs at boot, and each vendor with a node
    nothing else makes (NVIDIA's) has a maker for every node a container gets."""
    for vendor in VENDORS:
        nodes = vendor.nodes
        if nodes is None or nodes.dynamic is None:
            continue
        command = nodes.make_command(nodes.dynamic.node)
        assert command is not None and " ".join(command) == nodes.dynamic.load, vendor.name
    nvidia_nodes = NVIDIA.nodes
    assert nvidia_nodes is not None
    for path in (nvidia_nodes.path(7), *nvidia_nodes.shared):
        assert nvidia_nodes.make_command(path) is not None, path
    assert nvidia_nodes.make_command("/dev/nvidia-caps/nvidia-cap12") is None
