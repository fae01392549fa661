"""The shape of a GPU vendor's facts (`Vendor`, `DeviceNodes`); the values are in its module."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

import attrs

from pvegpu.pci import PciAddress
from pvegpu.values import value_class
from pvegpu.vendors.partitions import MigSource, VgpuSource


@value_class
@attrs.frozen(eq=False, repr=False)
class DynamicNode:
    """A shared node whose char major the kernel hands out when its module loads (NVIDIA's
    unified memory, AMD's kfd): `/proc/devices` names it, and raw cgroup rules need the
    number."""

    module: str
    """Its name in /proc/devices (`nvidia-uvm`, `kfd`)."""
    node: str
    """Its node, bind-mounted in raw style (`/dev/nvidia-uvm`)."""
    minors: tuple[int, ...]
    """The minors of its major a container is allowed."""
    load: str
    """The command that loads its module, for the fix of a message that finds it missing."""
    user: str
    """What in the container fails without it (`CUDA`), for messages."""
    module_name: str = ""
    """The kernel module whose loading registers it, when that is not `module` itself
    (kfd is part of amdgpu)."""

    @property
    def loaded_by(self) -> str:
        return self.module_name or self.module


@value_class
@attrs.frozen(eq=False, repr=False)
class NodeMaker:
    """A command that makes device nodes a container is given, for nodes the driver does not
    make as it binds a GPU (NVIDIA's /dev/nvidiaN, nvidiactl and nvidia-uvm exist only once
    nvidia-modprobe, or a CUDA program run as root, made them), or that loads the module
    whose loading makes them (AMD's /dev/kfd). Run at every boot before guests start: a
    container's `devN` for a missing node fails its start."""

    node: re.Pattern[str]
    """The node paths it makes (`fullmatch`); the match's groups fill `command`."""
    command: tuple[str, ...]
    """Its argv, each word `str.format`ted with the groups (`-c={0}`: the minor)."""

    def argv(self, path: str) -> tuple[str, ...] | None:
        """The command that makes `path`, or None when this maker does not make it."""
        match = self.node.fullmatch(path)
        if match is None:
            return None
        return tuple(word.format(*match.groups()) for word in self.command)


@value_class
@attrs.frozen(eq=False, repr=False)
class DeviceNodes:
    """The /dev nodes a vendor's driver creates for its GPUs, as a container config names them.

    Each GPU has a node named by its minor (NVIDIA's /dev/nvidiaN, a DRM render node), all
    on one fixed char major; the nodes the GPUs share (control, unified memory, AMD's kfd)
    are handed to every container that has a GPU of the vendor.
    """

    gpu_path: str
    """`str.format` pattern of one GPU's node by its minor: `/dev/nvidia{minor}`."""
    gpu_node: re.Pattern[str]
    """A path that is one GPU's node; group 1 is its minor (on `major`)."""
    any_node: re.Pattern[str]
    """Every node the driver stack creates under /dev (GPUs and shared ones)."""
    shared: tuple[str, ...]
    """What the userspace opens besides the GPU nodes, in the order lines are written."""
    major: int
    """The fixed char major of the GPU nodes (and of the fixed shared ones)."""
    gpu_minors: range
    """The minors on `major` that are a GPU's node; the others are shared nodes."""
    control_minor: int | None = None
    """The shared node on `major` a container needs besides its GPUs, if there is one."""
    dynamic: DynamicNode | None = None
    stack_prefix: str | None = None
    """The `/proc/devices` names of the stack's modules with a dynamic major start so."""
    drm: bool = False
    """The GPU's node is its DRM render node (`GPU.drm_render`), not one the vendor's own
    driver numbers (`GPU.node_minor`)."""
    display_path: str | None = None
    """`str.format` pattern of a GPU's display node by its minor (`/dev/dri/card{minor}`),
    handed over only when the spec asks for display; None: the vendor has no such node."""
    makers: tuple[NodeMaker, ...] = ()
    """What makes the nodes the driver does not make as it binds; a node none of them
    makes appears by itself (devtmpfs) once its driver holds the GPU."""

    def path(self, minor: int) -> str:
        return self.gpu_path.format(minor=minor)

    def make_command(self, path: str) -> tuple[str, ...] | None:
        """The command that makes node `path`, or None: it appears by itself."""
        return next((argv for m in self.makers if (argv := m.argv(path)) is not None), None)

    def majors(self, proc_devices: Iterable[tuple[int, str]]) -> frozenset[int]:
        """The fixed major plus every major of the stack in /proc/devices (major, name)."""
        prefix = self.stack_prefix
        named = {major for major, name in proc_devices if prefix and name.startswith(prefix)}
        return frozenset({self.major, *named})


class GpuInformation(NamedTuple):
    """What the driver says of one GPU it holds."""

    minor: int
    """Of the GPU's node (`DeviceNodes.path`): the driver's numbering, not the PCI order."""
    model: str | None
    bus_location: str | None
    """The PCI address the driver gives it, as text; discovery checks it is the GPU's."""
    uuid: str | None = None
    """Its stable name in the vendor's tools (`GPU-9c74...`), when the driver says it."""


@value_class
@attrs.frozen(eq=False, repr=False)
class GpuNodeSource:
    """Where the host driver says which device node each GPU it holds has.

    Paths are relative to the root discovery reads; the parsers are pure (text in, plain
    values or ValueError out) so vendors/ needs neither host/ nor model/.
    """

    information: str
    """`str.format` pattern of one GPU's file by its PCI address (`{address}`); no file
    means the driver does not hold that GPU."""
    parse: Callable[[str], GpuInformation]

    def path(self, address: PciAddress) -> str:
        return self.information.format(address=address)


@value_class
@attrs.frozen(eq=False, repr=False)
class DriverVersionSource:
    """Where the loaded host driver shows its version and whether it is an open module.

    The banner is read first; without it (the driver's procfs off), the module's own
    version file, and its taint letters for the flavor (`P`: proprietary).
    """

    banner: str
    parse_banner: Callable[[str], tuple[str, bool]]
    """The banner's (version, is the open module)."""
    module_version: str
    parse_module_version: Callable[[str], str]
    module_taint: str


@value_class
@attrs.frozen(eq=False, repr=False)
class ModuleFiles:
    """How the host driver's module file is named on disk, for a driver whose userspace is
    locked to the module's exact version: discovery reads which version the next boot's
    kernel loads (`pvegpu.host.kernels`) before it runs."""

    names: tuple[str, ...]
    """Its file names without `.ko[.xz|.zst|.gz]`, as its packagings build it."""
    directories: tuple[str, ...]
    """Where under a kernel's `lib/modules/<release>/` it is installed without DKMS."""


@value_class
@attrs.frozen(eq=False, repr=False)
class GpuTool:
    """The vendor's command-line tool that lists the GPUs its driver holds (on the host,
    or inside a container that has them): the runbook's and apply's health checks."""

    list_gpus: tuple[str, ...]
    """Prints one line per GPU, each starting with `listed_prefix`."""
    listed_prefix: str
    query_bus_ids: tuple[str, ...]
    """Prints `<index>, <bus id>` per GPU, in the order the userspace numbers them."""
    bus_id: Callable[[PciAddress], str]
    """A PCI address as `query_bus_ids` prints it."""
    reset: tuple[str, ...] = ()
    """Its options that reset a GPU (what a hookscript may run between two guests)."""

    @property
    def name(self) -> str:
        return self.list_gpus[0]


@value_class
@attrs.frozen(eq=False, repr=False)
class ContainerHook:
    """LXC's hook for the vendor's GPUs (`lxc.hook.mount: /usr/share/lxc/hooks/<script>`):
    at every start of an unprivileged container it mounts the GPUs a variable of the
    container's environment names, and the driver's libraries."""

    script: str
    """The hook's file name in LXC's hooks directory."""
    variable: str
    """The `lxc.environment` variable that selects the GPUs: every one, their indices in
    the driver's own order (PCI order of the GPUs it holds), or their UUIDs."""
    tool: str
    """The command the hook runs, which scripts may call the same way."""
    every: str = "all"
    nothing: tuple[str, ...] = ("", "void", "none")
    """Values that hand over no GPU (the libraries at most)."""
    legacy: str = ""
    """A variable whose presence (without `legacy_guard`) makes the hook take every GPU
    when `variable` is unset (an old image's convention)."""
    legacy_guard: str = ""


@value_class
@attrs.frozen(eq=False, repr=False)
class Userspace:
    """How the vendor's userspace in a container shows its version, which must be the
    host kernel module's exactly (the container's driver check)."""

    library: re.Pattern[str]
    """A userspace library's file name, its driver version in group `version`; `.match`
    takes only a whole name."""
    driver_package: Callable[[str], bool]
    """Is this dpkg package name one of the driver's own (its version is the driver's)?"""


@value_class
@attrs.frozen(eq=False, repr=False)
class HostUserspace:
    """The driver's userspace as the host has it installed, of the loaded module's version:
    what a container pool with `userspace = "host"` gets bind-mounted instead of its own.

    The files are found by name, `<library>.so.<version>` in `libdir` and the tools in
    `bindir`, with the host's own soname links to them (`libcuda.so.1`), as
    libnvidia-container selects a driver's libraries for a container.
    """

    libdir: str
    """The multiarch library directory, relative to the root."""
    libraries: tuple[str, ...]
    """Each library's name before `.so`: staged when the host has it for the version."""
    required_libraries: tuple[str, ...]
    """The ones without which the runtime cannot start: their absence is refused."""
    bindir: str
    tools: tuple[str, ...]
    """Command-line tools staged with them (never the host's daemons)."""
    required_tools: tuple[str, ...]
    install: str
    """How an admin installs a version's userspace on the host without touching the
    loaded module, `str.format`ted with `version`: the fix when its files are missing."""

    def library(self, name: str, version: str) -> str:
        """A library's file name for a driver version: `libcuda.so.590.48.01`."""
        return f"{name}.so.{version}"

    def required_paths(self, version: str) -> tuple[str, ...]:
        """Root-relative paths of the files a version must have on the host."""
        return (
            *(f"{self.libdir}/{self.library(n, version)}" for n in self.required_libraries),
            *(f"{self.bindir}/{t}" for t in self.required_tools),
        )


@value_class
@attrs.frozen(eq=False, repr=False)
class ComputeRuntime:
    """The vendor's compute runtime an inference engine's build runs on: how a server is
    told which of the container's GPUs are its own, and the collective library of TP."""

    name: str
    """How messages name it: `CUDA`, `ROCm`."""
    visible_devices: str
    """The variable that lists the server's GPUs by ordinal (`CUDA_VISIBLE_DEVICES`)."""
    device_order: tuple[tuple[str, str], ...]
    """The variables that make those ordinals PCI bus order, set before it; empty when the
    runtime numbers the GPUs it can open in that order anyway."""
    collectives: str
    """The library TP's all-reduce runs on (`NCCL`, `RCCL`): it reads NCCL_P2P_DISABLE."""
    memory_total: str
    """How an admin reads a GPU's memory in bytes, for the fix of an unknown one."""
    other_selectors: tuple[str, ...] = ()
    """Other variables the runtime also narrows or renumbers its GPUs by: a server's
    environment must not set them beside `visible_devices`."""
    release_file: str | None = None
    """Where a container's installed runtime names its release (relative to its root), when
    the vendor's userspace is the runtime's own rather than the driver's (`Vendor.userspace`)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class Vendor:
    name: str
    """How messages name it: `NVIDIA`."""
    pci_vendor: int
    """The PCI vendor id of its GPUs."""
    host_driver: str
    """The driver its GPUs return to when they leave vfio-pci."""
    driver_modules: frozenset[str]
    """Modules (kmod names, `_` not `-`) whose loading binds its GPUs: its drivers, and the
    modules that load the driver as a dependency."""
    drivers: tuple[str, ...] = ()
    """The host drivers that bind its GPUs, each named as its module (softdep lines)."""
    driver_loaders: tuple[str, ...] = ()
    """Services (without `.service`) that load the host driver at boot besides
    systemd-modules-load and udev: the split unit must run before them."""
    nodes: DeviceNodes | None = None
    """Its device nodes, when pvegpu can hand its GPUs to a container."""
    userspace: Userspace | None = None
    """Its userspace in a container, when pvegpu can check it against the host's module."""
    host_userspace: HostUserspace | None = None
    """Its userspace on the host, when pvegpu can hand it to a container
    (`userspace = "host"`); needs `driver_version` for the loaded module's version."""
    tool: GpuTool | None = None
    """Its GPU listing tool, when it has one pvegpu can read."""
    gpu_information: GpuNodeSource | None = None
    """Where discovery reads each GPU's node minor and model, when its driver says them."""
    driver_version: DriverVersionSource | None = None
    """Where discovery reads the loaded host driver's version, when it shows one."""
    module_files: ModuleFiles | None = None
    """Its driver module's files, when its userspace must be the module's version: the
    next boot's is read from them (None: the userspace is not locked to one build)."""
    holders: str = ""
    """What else commonly holds its GPUs' nodes open on a host (besides another container),
    for the runbook step that checks nothing does before the GPUs move."""
    mdev_dirs: tuple[str, ...] = ()
    """Directories its driver adds under a GPU's sysfs directory when the GPU can carry
    virtual GPUs outside the kernel's `mdev_supported_types` (Proxmox reads the device as
    mdev capable on either and then wants `mdev 1` on a mapping)."""
    mig: MigSource | None = None
    """Where its driver lists MIG instances' capability nodes, when its GPUs have MIG."""
    vgpu: VgpuSource | None = None
    """Its vGPU types on SR-IOV virtual functions (in `mdev_dirs`), when it has them."""
    compute: ComputeRuntime | None = None
    """Its compute runtime, when pvegpu can decide an inference server on its GPUs."""
    container_hook: ContainerHook | None = None
    """LXC's hook that hands its GPUs to containers, when LXC ships one."""
    compute_partition: str | None = None
    """The attribute under a GPU's PCI device that names how its driver splits it into
    compute partitions, when its GPUs can be split (`current_compute_partition`)."""
    whole_partition: str = ""
    """That attribute's value for a GPU left whole (`SPX`)."""
