"""NVIDIA: its PCI id, drivers, device nodes, the files that say which GPU has which node,
and the tools that show its GPUs."""

from __future__ import annotations

import re

from pvegpu.pci import PciAddress
from pvegpu.vendors.partitions import MigSource, VgpuSource
from pvegpu.vendors.vendor import (
    ComputeRuntime,
    ContainerHook,
    DeviceNodes,
    DriverVersionSource,
    DynamicNode,
    GpuInformation,
    GpuNodeSource,
    GpuTool,
    HostUserspace,
    ModuleFiles,
    NodeMaker,
    Userspace,
    Vendor,
)

PCI_VENDOR = 0x10DE

NODES = DeviceNodes(
    gpu_path="/dev/nvidia{minor}",
    gpu_node=re.compile(r"^/dev/nvidia(\d+)$"),
    # GPUs, control, UVM, modeset, MIG caps.
    any_node=re.compile(r"^/dev/nvidia(?:\d+|ctl|-uvm|-uvm-tools|-modeset|-caps(?:/.*)?)$"),
    # What CUDA opens besides /dev/nvidiaN: control node and unified memory (+ its tools node).
    shared=("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"),
    # Fixed by the driver for /dev/nvidiaN and /dev/nvidiactl.
    major=195,
    # 195:254 is /dev/nvidia-modeset and 195:255 /dev/nvidiactl; the GPUs have the ones below.
    gpu_minors=range(254),
    control_minor=255,
    # nvidia-uvm and nvidia-caps get dynamic majors, read from /proc/devices; uvm's minor 0
    # is uvm, 1 uvm-tools.
    dynamic=DynamicNode("nvidia-uvm", "/dev/nvidia-uvm", (0, 1), "nvidia-modprobe -u -c=0", "CUDA"),
    stack_prefix="nvidia",
    # The driver registers its majors but makes no node: nvidia-modprobe does (the setuid
    # helper a CUDA program calls, here run as root at boot). `-c=N` loads nvidia and makes
    # /dev/nvidiaN, minor 255 being /dev/nvidiactl; `-u -c=0` loads nvidia-uvm and makes
    # /dev/nvidia-uvm and /dev/nvidia-uvm-tools (its minors 0 and 1).
    makers=(
        NodeMaker(re.compile(r"/dev/nvidia([0-9]+)"), ("nvidia-modprobe", "-c={0}")),
        NodeMaker(re.compile(r"/dev/nvidiactl"), ("nvidia-modprobe", "-c=255")),
        NodeMaker(re.compile(r"/dev/nvidia-uvm(?:-tools)?"), ("nvidia-modprobe", "-u", "-c=0")),
    ),
)


def smi_bus_id(address: PciAddress) -> str:
    """The form `nvidia-smi --query-gpu=pci.bus_id` prints: 8-digit domain, uppercase hex."""
    return f"{address.domain:08X}:{address.bus:02X}:{address.device:02X}.{address.function:X}"


# Patterns are used with fullmatch or anchored; digits are ASCII (`\d` and str.isdigit()
# also accept '²', which int() refuses).
_NUMBER = re.compile(r"[0-9]+")
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)+")
# What nvidia-smi -L and NVIDIA_VISIBLE_DEVICES call a GPU: `GPU-` and a UUID's hex digits.
_UUID = re.compile(r"GPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")
# nv-procfs.c prints one of these two banners; the open module names its flavor, the
# proprietary one names the architecture where the open one says "for x86_64".
_BANNER = re.compile(
    r"^NVRM version: NVIDIA UNIX (?P<kind>Open Kernel Module for \S+|\S+ Kernel Module)"
    r"\s+(?P<version>[0-9]+(?:\.[0-9]+)+)\s"
)


def information_fields(raw: str) -> dict[str, str]:
    """proc/driver/nvidia/gpus/<addr>/information: `Key: \\t value` lines -> {key: value}."""
    fields: dict[str, str] = {}
    for line in raw.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"expected 'Key: value' lines, got {line!r}")
        fields[key.strip()] = value.strip()
    return fields


def device_minor(fields: dict[str, str]) -> int:
    """`Device Minor` is N of /dev/nvidiaN, which is NOT the index in PCI order."""
    text = fields.get("Device Minor")
    if text is None or not _NUMBER.fullmatch(text):
        raise ValueError(f"expected a 'Device Minor:' line with a number, got {text!r}")
    return int(text)


def gpu_information(raw: str) -> GpuInformation:
    """One GPU's information file: its node minor, model and the address the driver gives it."""
    fields = information_fields(raw)
    uuid = fields.get("GPU UUID")
    if uuid is not None and not _UUID.fullmatch(uuid):
        raise ValueError(f"expected 'GPU UUID: GPU-<hex and dashes>', got {uuid!r}")
    return GpuInformation(
        device_minor(fields), fields.get("Model"), fields.get("Bus Location"), uuid
    )


def banner_version(raw: str) -> tuple[str, bool]:
    """The `NVRM version:` line of /proc/driver/nvidia/version, either banner: (version,
    is the open module)."""
    first = raw.splitlines()[0] if raw else ""
    match = _BANNER.match(first)
    if match is None:
        raise ValueError(
            f"expected 'NVRM version: NVIDIA UNIX ... Kernel Module  <version>  ...', got {first!r}"
        )
    return match.group("version"), match.group("kind").startswith("Open")


def module_version(raw: str) -> str:
    """sys/module/nvidia/version: just `590.48.01`, one line."""
    text = raw.removesuffix("\n")
    if "\n" in text:
        raise ValueError(f"expected a single line, got {raw!r}")
    text = text.strip()
    if not _VERSION.fullmatch(text):
        raise ValueError(f"expected a version such as 590.48.01, got {text!r}")
    return text


GPU_INFORMATION = GpuNodeSource(
    information="proc/driver/nvidia/gpus/{address}/information",
    parse=gpu_information,
)

DRIVER_VERSION = DriverVersionSource(
    banner="proc/driver/nvidia/version",
    parse_banner=banner_version,
    module_version="sys/module/nvidia/version",
    parse_module_version=module_version,
    module_taint="sys/module/nvidia/taint",
)

# NVIDIA's .run and Ubuntu's nvidia-dkms-<branch> build `nvidia.ko` (DKMS module `nvidia`),
# Debian's nvidia-kernel-dkms renames it `nvidia-current.ko`; without DKMS the .run
# installs it under kernel/drivers/video (nvidia-installer's --kernel-install-path).
MODULE_FILES = ModuleFiles(
    names=("nvidia", "nvidia-current"),
    directories=("updates/dkms", "kernel/drivers/video"),
)

USERSPACE = Userspace(
    # libcuda.so.<driver version> / libnvidia-ml.so.<driver version>. ASCII digits only (a
    # Unicode digit is not a version), anchored at the very end (`$` would also take a
    # name ending in a newline), so even `.match` takes only the whole name.
    library=re.compile(
        r"(?P<lib>libcuda|libnvidia-ml)\.so\.(?P<version>[0-9]+\.[0-9]+(?:\.[0-9]+)?)\Z"
    ),
    # Only the driver's own packages carry a driver version (cuda-toolkit is 12.x,
    # nvidia-container-toolkit 1.x, and the caller checks the version's shape).
    driver_package=lambda name: "nvidia" in name or name.startswith("libcuda"),
)

# What libnvidia-container (src/nvc_info.c) mounts into a container for the `utility` and
# `compute` capabilities, of the driver's exact version: the libraries a CUDA process and
# NVML open. libcuda loads the PTX JIT (libnvidia-ptxjitcompiler) itself, so the three
# required ones are what CUDA and nvidia-smi cannot start without; the others are staged
# when the version ships them. The host's daemons (nvidia-persistenced, nv-fabricmanager)
# stay out: run in a container, they would fight the host's.
HOST_USERSPACE = HostUserspace(
    libdir="usr/lib/x86_64-linux-gnu",
    libraries=(
        "libnvidia-ml",
        "libnvidia-cfg",
        "libnvidia-nscq",
        "libcuda",
        "libcudadebugger",
        "libnvidia-opencl",
        "libnvidia-gpucomp",
        "libnvidia-ptxjitcompiler",
        "libnvidia-fatbinaryloader",
        "libnvidia-allocator",
        "libnvidia-compiler",
        "libnvidia-pkcs11",
        "libnvidia-pkcs11-openssl3",
        "libnvidia-nvvm",
        "libnvidia-tileiras",
    ),
    required_libraries=("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"),
    bindir="usr/bin",
    tools=("nvidia-smi", "nvidia-debugdump", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
    required_tools=("nvidia-smi",),
    install=(
        "sh NVIDIA-Linux-x86_64-{version}.run --no-kernel-modules (the userspace of the "
        "loaded module), or the distribution's packages of exactly {version}"
    ),
)

SMI = GpuTool(
    list_gpus=("nvidia-smi", "-L"),
    listed_prefix="GPU ",
    query_bus_ids=("nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"),
    bus_id=smi_bus_id,
    reset=("-r", "--gpu-reset"),
)

# LXC's hooks/nvidia: nvidia-container-cli mounts the GPUs NVIDIA_VISIBLE_DEVICES names
# (`all`, NVML indices, UUIDs; empty, `void` or `none` for none); an old CUDA image's
# CUDA_VERSION without NVIDIA_REQUIRE_CUDA means all of them.
HOOK = ContainerHook(
    script="nvidia",
    variable="NVIDIA_VISIBLE_DEVICES",
    tool="nvidia-container-cli",
    legacy="CUDA_VERSION",
    legacy_guard="NVIDIA_REQUIRE_CUDA",
)

# MIG and vGPU: what nv-caps.c prints per capability, and the vGPU manager's VF files.
_ACCESS_MINOR = re.compile(r"^DeviceFileMinor:\s*([0-9]+)\s*$", re.MULTILINE)
_VGPU_TYPE = re.compile(r"^([0-9]+)\s*:\s*(\S.*?)\s*$")


def caps_access_minor(raw: str) -> int:
    """A MIG `access` file (`DeviceFileMinor: 12`, `DeviceFileMode: 292`, ...): the minor
    of /dev/nvidia-caps/nvidia-cap<minor>."""
    found = _ACCESS_MINOR.findall(raw)
    if len(found) != 1:
        raise ValueError(f"expected one 'DeviceFileMinor: <number>' line, got {raw[:80]!r}")
    return int(found[0])


def creatable_vgpu_types(raw: str) -> tuple[tuple[int, str], ...]:
    """nvidia/creatable_vgpu_types of a VF: `1414 : NVIDIA H200X-1-18C` lines, after an
    optional `ID : vGPU Name` header; empty when the VF can take no more types."""
    types: list[tuple[int, str]] = []
    for number, line in enumerate(raw.splitlines()):
        if not line.strip() or (number == 0 and line.split(":")[0].strip() == "ID"):
            continue
        match = _VGPU_TYPE.match(line.strip())
        if match is None:
            raise ValueError(f"expected '<type id> : <name>' lines, got {line!r}")
        types.append((int(match[1]), match[2]))
    return tuple(types)


def current_vgpu_type(raw: str) -> int:
    """nvidia/current_vgpu_type of a VF: the type id it has, 0 for none."""
    text = raw.strip()
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"expected a vGPU type id (0 for none), got {raw[:40]!r}")
    return int(text)


MIG = MigSource(
    capabilities="proc/driver/nvidia/capabilities",
    parse_access=caps_access_minor,
    node_path="/dev/nvidia-caps/nvidia-cap{minor}",
    node=re.compile(r"^/dev/nvidia-caps/nvidia-cap([0-9]+)$"),
    directory="/dev/nvidia-caps",
    major_name="nvidia-caps",
)

VGPU = VgpuSource(
    directory="nvidia",
    creatable="creatable_vgpu_types",
    current="current_vgpu_type",
    parse_creatable=creatable_vgpu_types,
    parse_current=current_vgpu_type,
    # Proxmox's `mdev=nvidia-<id>` on a VF writes <id> to its current_vgpu_type.
    type_name="nvidia-{id}",
    # pve-nvidia-vgpu-helper's template unit: sriov-manage -e at boot.
    vf_unit="pve-nvidia-sriov@{address}.service",
)


# CUDA numbers GPUs fastest first unless told PCI order; NCCL carries TP's all-reduce.
CUDA = ComputeRuntime(
    "CUDA",
    "CUDA_VISIBLE_DEVICES",
    (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),),
    "NCCL",
    "nvidia-smi --query-gpu=memory.total --format=csv: MiB x 1048576",
)

NVIDIA = Vendor(
    name="NVIDIA",
    pci_vendor=PCI_VENDOR,
    host_driver="nvidia",
    # nouveau binds them too; nvidia_drm and the others load nvidia as a dependency.
    driver_modules=frozenset({"nvidia", "nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nouveau"}),
    drivers=("nvidia", "nouveau"),
    # It loads nvidia, which binds every NVIDIA GPU it finds free.
    driver_loaders=("nvidia-persistenced",),
    nodes=NODES,
    userspace=USERSPACE,
    host_userspace=HOST_USERSPACE,
    tool=SMI,
    gpu_information=GPU_INFORMATION,
    driver_version=DRIVER_VERSION,
    module_files=MODULE_FILES,
    holders=(
        "dcgm-exporter; for nvidia-persistenced `systemctl stop nvidia-persistenced`, and "
        "start it again after the bind"
    ),
    # NVIDIA's vGPU on SR-IOV VFs keeps its types in nvidia/ (creatable_vgpu_types).
    mdev_dirs=("nvidia",),
    mig=MIG,
    vgpu=VGPU,
    compute=CUDA,
    container_hook=HOOK,
)
