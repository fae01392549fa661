"""A container's NVIDIA userspace against the module the host's next boot loads.

NVIDIA's userspace must be the kernel module's exact version (`serving/container.py`).
A driver upgrade installed but not yet running (DKMS built the new version for the
kernel the next boot runs) keeps today's containers working until the reboot and breaks
every one whose userspace still is today's after it. The planner (`planning/next_boot.py`)
and `pvegpu check` ask the same two questions here: which module will the container
meet, and does its userspace match it.
"""

from __future__ import annotations

import attrs

from pvegpu.model.decision import ContainerDriver
from pvegpu.model.facts import HostFacts
from pvegpu.model.kernels import Kernels, ModuleOrigin, NextModule
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_VENDOR, Vendor

HOST_USERSPACE = 'userspace = "host"'
"""The pool option that hands the container the host's own NVIDIA libraries, which a
driver upgrade replaces together with the module: the way out of keeping a container's
copy in step (the wording every message uses)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class NextDriver:
    """A version-locked host driver: the version loaded now, and what the next boot loads."""

    vendor: Vendor
    loaded: str
    """The loaded module's version."""
    kernels: Kernels
    module: NextModule
    """The next boot kernel's module of the driver (`Kernels.modules`)."""

    @property
    def driver(self) -> str:
        return self.vendor.host_driver

    @property
    def next_version(self) -> str | None:
        """The version the next boot loads, when DKMS says it."""
        return self.module.version

    @property
    def changes(self) -> bool:
        """The next boot loads a known other version than the one loaded now."""
        return self.next_version is not None and self.next_version != self.loaded

    @property
    def kernel(self) -> str:
        return self.kernels.next_boot or "?"

    @property
    def describe(self) -> str:
        """`nvidia 590.48.01 (DKMS, var/lib/dkms/...) under kernel 6.17.2-1-pve (why)`."""
        module = self.module
        if module.origin is ModuleOrigin.DKMS:
            what = f"{self.driver} {module.version} (built by DKMS: /{module.where})"
        elif module.origin is ModuleOrigin.OTHER:
            what = f"{self.driver} from /{module.path} (not DKMS's: its version unread)"
        else:
            what = f"no {self.driver} module"
        return f"{what} under kernel {self.kernel} ({self.kernels.why_next})"


def next_driver(facts: HostFacts, vendor: Vendor = CONTAINER_VENDOR) -> NextDriver | None:
    """The vendor's loaded driver and its next boot's module; None when either is unknown
    (the driver is not loaded, or no kernel of the next boot was read)."""
    loaded = facts.gpu_driver(vendor.host_driver)
    module = facts.boot.kernels.module(vendor.host_driver)
    if loaded is None or module is None:
        return None
    return NextDriver(vendor, loaded.version, facts.boot.kernels, module)


def userspace_target(facts: HostFacts, after_reboot: bool) -> tuple[str, str] | None:
    """The module version a container's userspace must equal, and how messages name that
    module ("" for their own wording of the loaded one): the loaded one, or, when the
    runbook reboots before the container starts again, the one the next boot loads (if
    DKMS says its version)."""
    loaded = facts.gpu_driver(CONTAINER_VENDOR.host_driver)
    if loaded is None:
        return None
    pending = next_driver(facts)
    if after_reboot and pending is not None and pending.changes:
        assert pending.next_version is not None  # `changes` says so
        return pending.next_version, (
            f"the module the host loads after the runbook's reboot is {pending.next_version} "
            f"({pending.describe}; {loaded.version} is loaded now)"
        )
    return loaded.version, ""  # the loaded module: the messages' own wording


def breaks_at_reboot(state: ContainerDriver, pending: NextDriver) -> bool:
    """The container's userspace is the loaded module's version alone and the next boot
    loads another: its CUDA works now and fails after the reboot."""
    return pending.changes and state.versions == {pending.loaded}


def next_boot_message(vmid: int, state: ContainerDriver, pending: NextDriver) -> str:
    """What `container-driver-next-boot` says of a container `breaks_at_reboot` holds for."""
    found = ", ".join(f"{n} ({v})" for n, v in (*state.libraries, *state.packages))
    return (
        f"CT {vmid} has {pending.vendor.name} userspace {pending.loaded}, the loaded module's, "
        "but the next "
        f"boot loads {pending.describe}: after that reboot NVML reports a driver/library "
        f"version mismatch and CUDA fails or hangs in CT {vmid} (found: {found})"
    )


def next_boot_fix(vmid: int, install: str, pending: NextDriver, pool: str | None) -> str:
    """Its fix: the install command (`container_driver_problems`' for the next version),
    when to run it, and the pool option that makes the question go away."""
    way_out = (
        f"or set {HOST_USERSPACE} on pool {pool} so it runs the host's libraries"
        if pool is not None
        else f"or give CT {vmid} the host's libraries (a pool with {HOST_USERSPACE})"
    )
    return (
        f"right after the reboot, before CT {vmid}'s CUDA is used: {install} "
        f"(before the reboot that version fails against the loaded {pending.loaded}); "
        f"{way_out}"
    )
