"""`userspace = "host"`: a container pool's GPU programs run the host's driver userspace.

Decided here once: the pool's vendor has a host userspace pvegpu can stage
(`Vendor.host_userspace`), its module is loaded, and the host root has that version's
files the runtime cannot start without. The bundle's staging unit finds the files again
at every boot, by the version loaded then (rendering/userspace.py), so a driver upgrade
is followed; this check is what makes the first boot and the runbook's own run succeed.
"""

from __future__ import annotations

from pvegpu.diagnostic import Diagnostic
from pvegpu.model.facts import HostFacts
from pvegpu.vendors import VENDORS, Vendor

HOST_USERSPACE_VENDORS = tuple(v for v in VENDORS if v.host_userspace and v.driver_version)
"""The vendors whose host userspace pvegpu stages: a library set of the module's exact
version (a runtime released apart from the driver, as ROCm is, is the container's own)."""


def host_userspace_problems(facts: HostFacts, vendor: Vendor, where: str) -> list[Diagnostic]:
    """Why the host's userspace cannot be staged for a pool of `vendor`'s GPUs; `where`:
    the pool's spec path. Empty when it can."""
    userspace, source = vendor.host_userspace, vendor.driver_version
    if userspace is None or source is None:
        known = " and ".join(v.name for v in HOST_USERSPACE_VENDORS)
        return [
            Diagnostic.error(
                "userspace-host-unsupported",
                f"{where}.lxc.userspace",
                f'userspace = "host" hands the container the host\'s driver userspace of '
                f"the loaded module, which pvegpu knows for {known} GPUs only; these are "
                f"{vendor.name}'s, whose runtime the container has to bring itself",
                'remove userspace = "host"',
            )
        ]
    loaded = facts.gpu_driver(vendor.host_driver)
    if loaded is None:
        return [
            Diagnostic.error(
                "host-userspace-missing",
                source.module_version,
                f'userspace = "host" stages the userspace of the loaded {vendor.host_driver} '
                "module's version, and no such module is loaded: there is no version to "
                "stage, and the container's bind mount would fail its start",
                f"load it (modprobe {vendor.host_driver}) and discover again, or remove "
                'userspace = "host"',
            )
        ]
    have = {f.path for f in facts.driver_userspace}
    missing = [p for p in userspace.required_paths(loaded.version) if p not in have]
    if not missing:
        return []
    return [
        Diagnostic.error(
            "host-userspace-missing",
            missing[0],
            f"{vendor.host_driver} {loaded.version} is loaded, but the host root lacks "
            f"its userspace: {', '.join('/' + p for p in missing)}. The staging unit "
            "would refuse at every boot, and the container would not start",
            "install " + userspace.install.format(version=loaded.version) + ", and discover "
            'again; or remove userspace = "host" (the container keeps its own userspace)',
        )
    ]
