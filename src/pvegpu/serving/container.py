"""The container side of any engine's server: where its files are, its Python, its GPU
userspace against the host's module (NVIDIA's), or what of it was not checked (ROCm's).
(The unit systemd runs there now is the engine's: `engines/common/old_unit.py`.)"""

from __future__ import annotations

import re

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.container_files import container_driver_state as container_driver_state
from pvegpu.model.container_files import container_files, module_version
from pvegpu.model.decision import ContainerDriver
from pvegpu.model.guests import guests
from pvegpu.model.paths import CONTAINER_LIBDIRS, DPKG_STATUS
from pvegpu.model.rootfs import RootfsLocation
from pvegpu.pvefiles.lxcconf import DRIVER_MOUNT_POINT
from pvegpu.serving.checks import Checks
from pvegpu.serving.next_boot import userspace_target
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_VENDOR, ComputeRuntime, Vendor, module_version_file

_MAJOR_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<major>\d{3})$")


HOST_USERSPACE_WAY = (
    'or set userspace = "host" in [pools.lxc]: its server then runs the host\'s own '
    "userspace of the loaded module, staged at every boot, and follows driver upgrades "
    "with nothing to install in the container (docs/upgrades.md)"
)
"""The other way out of a container userspace that is not the host module's."""


def container_driver_problems(
    state: ContainerDriver, host_version: str, *, rootfs: str, vmid: int, module: str = ""
) -> tuple[Diagnostic, ...]:
    """The container's userspace must be the host module's exact version. `module`: how
    the messages name that module (`userspace_target`); the loaded one by default."""
    subject = f"{rootfs}/{CONTAINER_LIBDIRS[0]}"
    if not state.libraries:
        return (
            Diagnostic.error(
                "container-driver-missing",
                subject,
                f"no libcuda.so.<version> or libnvidia-ml.so.<version> in container {vmid}: "
                f"CUDA cannot start ({module or f'host module {host_version}'})",
                f"pct exec {vmid} -- apt install libnvidia-compute-{host_version.split('.')[0]}"
                f"={host_version}-*",
            ),
        )
    wrong = sorted(v for v in state.versions if v != host_version)
    if not wrong:
        return ()
    found = ", ".join(f"{n} ({v})" for n, v in (*state.libraries, *state.packages))
    against = module or f"the host's kernel module is {host_version}"
    fix = container_driver_install(state, host_version, vmid)
    return (
        Diagnostic.error(
            "container-driver-mismatch",
            subject,
            f"container {vmid} has NVIDIA userspace {', '.join(wrong)} but {against}; a "
            "mismatch hangs NCCL or fails CUDA init "
            f"(found: {found})",
            fix + f"; {HOST_USERSPACE_WAY}",
        ),
    )


def container_driver_install(state: ContainerDriver, version: str, vmid: int) -> str:
    """The command that puts driver userspace `version` into the container: its driver
    packages moved to that version (their branch suffix too), leftover libraries of a
    runfile removed, or the runfile named when it has no packages."""
    major = version.split(".")[0]
    installs, removes = [], []
    for name, have in state.packages:
        if have == version:
            continue
        m = _MAJOR_SUFFIX.match(name)
        if m:
            installs.append(f"{m.group('base')}-{major}={version}-*")
            removes.append(name)
        else:
            installs.append(f"{name}={version}-*")
    stale = [n for n, v in state.libraries if v != version]
    if installs:
        cmd = f"apt install {' '.join(dict.fromkeys(installs))}"
        if removes:
            cmd += f" && apt remove {' '.join(removes)}"
        return f"pct exec {vmid} -- sh -c '{cmd}'"
    if stale and any(v == version for _, v in state.packages):
        # The packages are right; the old libraries are leftovers (e.g. of a runfile).
        libdir = f"/{CONTAINER_LIBDIRS[0]}"
        return f"pct exec {vmid} -- rm " + " ".join(f"{libdir}/{n}" for n in stale)
    return (
        f"install the {version} userspace in container {vmid} "
        f"(NVIDIA-Linux-x86_64-{version}.run --no-kernel-modules)"
    )


@value_class
@attrs.frozen(eq=False, repr=False)
class ContainerRootfs:
    """Where the container's files were read from, or why nothing was."""

    path: str | None
    """Root-relative directory the container's files came from; None: none was read."""
    location: RootfsLocation
    """What the container's `rootfs:` line and storage.cfg say."""


def container_rootfs(checks: Checks, vmid: int) -> ContainerRootfs:
    """The container's root file system: from its rootfs: line and storage.cfg, else the spec's.

    The first of the two that has files wins, so a subvolume that is not mounted falls
    back to `container_rootfs`. Nothing read: an error when the spec named a path (it is
    wrong, or not mounted), else the `container-rootfs-unreachable` warning.
    """
    location = guests(checks.facts).rootfs(vmid)
    trees = container_files(checks.facts)
    spec_path = None
    if checks.spec.container_rootfs is not None:
        spec_path = checks.path("container_rootfs", checks.spec.container_rootfs)
    candidates = [p for p in dict.fromkeys((location.path, spec_path)) if p is not None]
    for candidate in candidates:
        if trees.at(candidate).was_read:
            if spec_path not in (None, candidate) and not trees.at(spec_path).was_read:
                # The plan is still right (the storage's directory has the files), but
                # the spec names a path that holds none: say so rather than drop it.
                checks.finding(
                    Severity.WARNING,
                    "container-rootfs-ignored",
                    f"container_rootfs ({checks.where}.container_rootfs) names /{spec_path}, "
                    f"where nothing of a container was read; CT {vmid}'s files were read "
                    f"from /{candidate} (its rootfs: line and storage.cfg). Fix or remove "
                    "container_rootfs",
                )
            return ContainerRootfs(candidate, location)
    if spec_path is not None:
        checks.problem(
            "container-rootfs-unread",
            f"nothing was read from {spec_path} (no {DPKG_STATUS}, no NVIDIA libraries, no "
            "unit): it is not a container root filesystem, or it is not mounted",
            f"check container_rootfs; for a stopped container: pct mount {vmid}",
            subject=spec_path,
        )
    elif checks.spec.container_rootfs is None:
        checks.finding(
            Severity.WARNING,
            "container-rootfs-unreachable",
            _unreachable_message(location, vmid, checks.spec.unit),
        )
    return ContainerRootfs(None, location)


def python_finding(checks: Checks, vmid: int, rootfs: ContainerRootfs) -> None:
    """Warn when the container was read and the unit's python is not a file in it.

    A warning, not a refusal: an LXC mount point (`mpN:`) or a bind mount can bring the
    interpreter in at start, and the host sees none of it under the root file system.
    """
    if rootfs.path is None:
        return
    python = checks.spec.python
    if container_files(checks.facts).at(rootfs.path).has(python):
        return
    checks.finding(
        Severity.WARNING,
        "serving-python-missing",
        f"python ({checks.where}.python) is {python}, which is not a file in CT {vmid}'s "
        f"root file system (/{rootfs.path}): {checks.spec.unit}.service cannot start "
        "unless a mount point brings it in. Set python to the interpreter the server is "
        f"installed for (`pct exec {vmid} -- which python3`)",
    )


def _runtime_unchecked(
    checks: Checks,
    vmid: int,
    rootfs: ContainerRootfs,
    vendor: Vendor,
    runtime: ComputeRuntime,
) -> None:
    """Say what of the container's runtime was read and that it was not paired with the host.

    ROCm's userspace is not locked to one amdgpu build as NVIDIA's is to its module: each
    ROCm release supports a range of kernels and amdgpu-dkms releases (AMD's compatibility
    matrix), a table pvegpu does not carry, so claiming a pass or a mismatch would be a guess.
    """
    module_file = module_version_file(vendor)
    version = module_version(checks.facts, vendor)
    driver = (
        f"{vendor.host_driver} {version} (/{module_file}, an out-of-tree build such as amdgpu-dkms)"
        if version
        else f"{vendor.host_driver} (the kernel's own: no /{module_file})"
    )
    release_file = runtime.release_file
    if rootfs.path is None:
        found = f"CT {vmid}'s files were not read, so its {runtime.name} release is unknown"
    elif release_file is None:
        found = f"{runtime.name} in CT {vmid} names no release pvegpu reads"
    elif (text := container_files(checks.facts).at(rootfs.path).text(release_file)) is None:
        found = (
            f"CT {vmid} has no /{release_file}: {runtime.name} is not installed there, or "
            "not where its packages put it"
        )
    else:
        release = text.strip().splitlines()[0] if text.strip() else "empty"
        found = f"CT {vmid} has {runtime.name} {release} (/{release_file})"
    checks.finding(
        Severity.INFO,
        "container-runtime-unchecked",
        f"{found}; the host runs {driver}. pvegpu has no rule pairing {runtime.name} "
        "releases with that module, so the two were not compared: check the release "
        "against the vendor's compatibility table for the host's kernel and module",
    )


def _unreachable_message(location: RootfsLocation, vmid: int, unit: str) -> str:
    volume = f" ({location.volume})" if location.volume else ""
    why = location.why or f"nothing was read from /{location.path}, so it is not mounted"
    return (
        f"CT {vmid}'s root file system{volume} was not read: {why}. So {unit}.service and "
        "its drop-ins were not judged; the runbook copies the current unit out of the "
        f"container (pct pull) into revert/ before replacing it, and the revert restores that "
        f"copy. To have them checked: stop CT {vmid}, `pct mount {vmid}`, plan with "
        f'container_rootfs = "var/lib/lxc/{vmid}/rootfs", then `pct unmount {vmid}`'
    )


def container_driver(
    checks: Checks, vmid: int, rootfs: ContainerRootfs, runtime: ComputeRuntime
) -> ContainerDriver | None:
    """The container's NVIDIA userspace, compared with the host's kernel module; for a
    vendor whose userspace pvegpu cannot pair with its module, a finding saying so."""
    vendor = checks.pool.gpus[0].vendor if checks.pool.gpus else None
    if vendor is not None and vendor.userspace is None:
        # A runtime whose userspace is not the driver's own (ROCm): named, not paired.
        _runtime_unchecked(checks, vmid, rootfs, vendor, runtime)
        return None
    host = checks.facts.gpu_driver(CONTAINER_VENDOR.host_driver)
    if rootfs.path is None:
        module = f"the host module {host.version}" if host is not None else "the host's module"
        checks.finding(
            Severity.WARNING,
            "container-driver-unchecked",
            f"CT {vmid}'s files were not read, so its NVIDIA userspace was not compared with "
            f"{module}; a mismatch hangs NCCL or fails CUDA init. Check by hand: "
            f"`pct exec {vmid} -- nvidia-smi` must show driver version "
            f"{host.version if host is not None else 'of the host'}",
        )
        return None
    path = rootfs.path
    state = container_files(checks.facts).at(path).driver
    if host is None:
        checks.finding(
            Severity.WARNING,
            "container-driver-unchecked",
            "the host has no nvidia module loaded, so the container's NVIDIA userspace "
            f"({', '.join(sorted(state.versions)) or 'none'}) was not compared with it",
        )
        return state
    lxc = checks.pool.lxc
    if lxc is not None and lxc.host_userspace:
        _bypassed(checks, state, host.version, vmid)
        return state
    # Against the module it will meet: the next boot's when the runbook reboots first.
    target = userspace_target(checks.facts, checks.after_reboot)
    version, module = target if target is not None else (host.version, "")
    checks.add(container_driver_problems(state, version, rootfs=path, vmid=vmid, module=module))
    return state


def _bypassed(checks: Checks, state: ContainerDriver, host_version: str, vmid: int) -> None:
    """With `userspace = "host"` the server runs the host's userspace, whatever the
    container has: its own is said, not refused (it is what other programs there load)."""
    wrong = sorted(v for v in state.versions if v != host_version)
    if not wrong:
        return
    found = ", ".join(f"{n} ({v})" for n, v in (*state.libraries, *state.packages))
    checks.finding(
        Severity.INFO,
        "container-driver-bypassed",
        f"CT {vmid} has NVIDIA userspace {', '.join(wrong)} of its own (found: {found}); "
        f"its server runs the host's {host_version} from /{DRIVER_MOUNT_POINT} "
        '(userspace = "host"), so the two need not match. Other programs in the container '
        "still load its own, which the host's module refuses (NVML: driver/library version "
        f"mismatch): run them with LD_LIBRARY_PATH=/{DRIVER_MOUNT_POINT}/lib",
    )
