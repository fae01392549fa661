"""The Proxmox packages installed on the host, as its dpkg status names them: what a rule
that changed between releases is judged by (LXC 7.0 ignores the cgroup v1 keys)."""

from __future__ import annotations

import re

import attrs

from pvegpu.values import value_class

PVE_PACKAGES = ("lxc-pve", "pve-container", "pve-manager", "qemu-server")
"""The packages discovery records, by their Debian names."""
_MAJOR = re.compile(r"(?:[0-9]+:)?([0-9]+)\.")


@value_class
@attrs.frozen(eq=False, repr=False)
class PvePackages:
    """Installed versions (Debian's, `7.0.0-1`) of the Proxmox packages pvegpu's rules
    depend on; None where the package is not installed or the status was not read."""

    lxc: str | None = None
    """`lxc-pve`: the LXC Proxmox VE ships (7.0 since PVE 9.2)."""
    pve_container: str | None = None
    pve_manager: str | None = None
    qemu_server: str | None = None

    @classmethod
    def of(cls, installed: dict[str, str]) -> PvePackages:
        return cls(*(installed.get(name) for name in PVE_PACKAGES))

    @property
    def lxc_major(self) -> int | None:
        found = _MAJOR.match(self.lxc or "")
        return int(found[1]) if found else None

    @property
    def lxc_ignores_cgroup_v1(self) -> bool:
        """LXC 7.0 drops the cgroup v1 keys (`lxc.cgroup.*`): it no longer applies them."""
        major = self.lxc_major
        return major is not None and major >= 7
