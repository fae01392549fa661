"""The container side: its NVIDIA userspace against the host's module, other copies of the unit."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

from pvegpu.errors import Problem
from pvegpu.host.facts import ConfigFile
from pvegpu.host.paths import CONTAINER_LIBDIRS, DPKG_STATUS, NVIDIA_LIBRARY, UNIT_DIR
from pvegpu.planning.plan import Severity
from pvegpu.serving.checks import Checks
from pvegpu.serving.decision import ContainerDriver

_DRIVER_VERSION = re.compile(r"^\d{3}\.\d+(?:\.\d+)?$")
_MAJOR_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<major>\d{3})$")


def container_driver_state(
    library_names: Iterable[str], dpkg_status: str | None
) -> ContainerDriver:
    """Driver versions from a libdir listing and the dpkg status database text."""
    libraries = sorted(
        (name, m.group("version")) for name in library_names if (m := NVIDIA_LIBRARY.match(name))
    )
    packages: list[tuple[str, str]] = []
    for stanza in (dpkg_status or "").split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace():  # continuation lines belong to Description
                key, _, value = line.partition(": ")
                fields[key] = value
        name, version = fields.get("Package"), fields.get("Version")
        if not name or not version or not fields.get("Status", "").endswith(" installed"):
            continue
        # 1:590.48.01-0ubuntu0.24.04.1 -> 590.48.01 (epoch and Debian revision dropped).
        upstream = version.split(":", 1)[-1].rsplit("-", 1)[0]
        # Only the driver's own packages carry a driver version (cuda-toolkit is 12.x,
        # nvidia-container-toolkit 1.x): that is what keeps unrelated packages out.
        if ("nvidia" in name or name.startswith("libcuda")) and _DRIVER_VERSION.match(upstream):
            packages.append((name, upstream))
    return ContainerDriver(tuple(libraries), tuple(sorted(packages)))


def container_driver_problems(
    state: ContainerDriver, host_version: str, *, rootfs: str, vmid: int
) -> tuple[Problem, ...]:
    """The container's userspace must be the host module's exact version."""
    subject = f"{rootfs}/{CONTAINER_LIBDIRS[0]}"
    if not state.libraries:
        return (
            Problem(
                "container-driver-missing",
                subject,
                f"no libcuda.so.<version> or libnvidia-ml.so.<version> in container {vmid}: "
                f"CUDA cannot start (host module {host_version})",
                f"pct exec {vmid} -- apt install libnvidia-compute-{host_version.split('.')[0]}"
                f"={host_version}-*",
            ),
        )
    wrong = sorted(v for v in state.versions if v != host_version)
    if not wrong:
        return ()
    found = ", ".join(f"{n} ({v})" for n, v in (*state.libraries, *state.packages))
    major = host_version.split(".")[0]
    installs, removes = [], []
    for name, version in state.packages:
        if version == host_version:
            continue
        m = _MAJOR_SUFFIX.match(name)
        if m:
            installs.append(f"{m.group('base')}-{major}={host_version}-*")
            removes.append(name)
        else:
            installs.append(f"{name}={host_version}-*")
    stale = [n for n, v in state.libraries if v != host_version]
    if installs:
        cmd = f"apt install {' '.join(dict.fromkeys(installs))}"
        if removes:
            cmd += f" && apt remove {' '.join(removes)}"
        fix = f"pct exec {vmid} -- sh -c '{cmd}'"
    elif stale and any(v == host_version for _, v in state.packages):
        # The packages are right; the old libraries are leftovers (e.g. of a runfile).
        libdir = f"/{CONTAINER_LIBDIRS[0]}"
        fix = f"pct exec {vmid} -- rm " + " ".join(f"{libdir}/{n}" for n in stale)
    else:
        fix = (
            f"install the {host_version} userspace in container {vmid} "
            f"(NVIDIA-Linux-x86_64-{host_version}.run --no-kernel-modules)"
        )
    return (
        Problem(
            "container-driver-mismatch",
            subject,
            f"container {vmid} has NVIDIA userspace {', '.join(wrong)} but the host's kernel "
            f"module is {host_version}; a mismatch hangs NCCL or fails CUDA init "
            f"(found: {found})",
            fix,
        ),
    )


def _rootfs(checks: Checks) -> str | None:
    if checks.spec.container_rootfs is None:
        return None
    return checks.path("container_rootfs", checks.spec.container_rootfs)


def container_driver(checks: Checks, vmid: int) -> ContainerDriver | None:
    """The container's NVIDIA userspace, compared with the host's kernel module."""
    rootfs = _rootfs(checks)
    if rootfs is None:
        return None
    names = [
        posixpath.basename(s.path)
        for d in CONTAINER_LIBDIRS
        for s in checks.facts.stats_in(f"{rootfs}/{d}")
    ]
    status = checks.facts.file(f"{rootfs}/{DPKG_STATUS}")
    unit = checks.facts.file(f"{rootfs}/{UNIT_DIR}/{checks.spec.unit}.service")
    if not names and status is None and unit is None:
        checks.problem(
            "container-rootfs-unread",
            f"nothing was read from {rootfs} (no {DPKG_STATUS}, no NVIDIA libraries, no "
            "unit): it is not a container root filesystem, or it is not mounted",
            f"check container_rootfs; for a stopped container: pct mount {vmid}",
            subject=rootfs,
        )
        return None
    state = container_driver_state(names, status.content if status else None)
    if checks.facts.nvidia is None:
        checks.finding(
            Severity.WARNING,
            "container-driver-unchecked",
            "the host has no nvidia module loaded, so the container's NVIDIA userspace "
            f"({', '.join(sorted(state.versions)) or 'none'}) was not compared with it",
        )
        return state
    checks.plan_problems.extend(
        container_driver_problems(state, checks.facts.nvidia.version, rootfs=rootfs, vmid=vmid)
    )
    return state


def unit_base(checks: Checks, vmid: int) -> ConfigFile | None:
    """The unit as it is in the container now; other copies and drop-ins are findings."""
    rootfs = _rootfs(checks)
    if rootfs is None:
        return None
    name = f"{checks.spec.unit}.service"
    authoritative = f"{rootfs}/{UNIT_DIR}/{name}"
    base = checks.facts.file(authoritative)
    dropins = f"{authoritative}.d/"
    copies, overrides = [], []
    for file in checks.facts.files:
        if not file.path.startswith(rootfs + "/") or file.path == authoritative:
            continue
        if file.path.startswith(dropins) and file.path.endswith(".conf"):
            overrides.append(file.path)
        elif posixpath.basename(file.path) == name:
            same = base is not None and file.content == base.content
            copies.append(f"/{file.path[len(rootfs) + 1 :]}" + (" (same)" if same else ""))
    if copies:
        checks.finding(
            Severity.WARNING,
            "serving-unit-copies",
            f"other copies of {name} in container {vmid}: "
            f"{', '.join(copies)}. /{UNIT_DIR}/{name} is the one systemd runs and the one "
            "pvegpu writes; delete the others so no one edits a copy that drifts",
        )
    if overrides:
        shown = ", ".join(f"/{p[len(rootfs) + 1 :]}" for p in sorted(overrides))
        checks.finding(
            Severity.WARNING,
            "serving-unit-dropins",
            f"drop-ins override the rendered unit: {shown}; move what they set into the "
            "spec (environment, extra_args) and delete them",
        )
    return base
