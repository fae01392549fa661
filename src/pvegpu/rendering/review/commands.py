"""The commands the steps print, one function each, and the names the split installs.

GPU and health checks read the host, not pvegpu's own report; the VM attach lines give
a VM a pool's GPUs through its mapping.
"""

from __future__ import annotations

from collections.abc import Sequence

from pvegpu.model import paths
from pvegpu.model.plan import Pool
from pvegpu.pci import PciAddress
from pvegpu.pvefiles.hostpci import hostpci_value

SPLIT_SCRIPT = f"/{paths.SPLIT_SCRIPT}"
SPLIT_UNIT = paths.SPLIT_UNIT_NAME
HEALTH_TIMEOUT_S = 600
"""Bound on waiting for the server: the seed deployment (234 GB of BF16 weights, TP=4)
was healthy after ~80 s, so ten minutes without health means something is wrong."""


def driver_check(addresses: Sequence[PciAddress]) -> str:
    """A one-liner printing `<address> <driver>` per function (`unbound` for none), from sysfs.

    It reads the kernel, not the split script's own report, so it checks the script.
    """
    joined = " ".join(str(a) for a in addresses)
    return (
        f"for d in {joined}; do "
        'drv=$(readlink "/sys/bus/pci/devices/$d/driver") || drv=unbound; '
        'printf \'%s %s\\n\' "$d" "${drv##*/}"; done'
    )


# ---------------------------------------------------------------------------- VM attach


def attach_count(pool: Pool) -> int:
    """How many hostpci lines give a VM the pool: one per GPU, or for a vGPU pool without
    a VM of its own one, since each VM takes one vGPU of the mapping."""
    if pool.vgpu_type is not None and pool.vm is None:
        return 1
    return pool.size


def hostpci_lines(pool: Pool) -> tuple[str, ...]:
    """The VM config lines that give a VM every GPU of the pool through its mapping (a
    vGPU pool's with its type)."""
    if pool.mapping is None:
        return ()
    # pcie=1 needs machine q35, which passthrough of modern GPUs wants anyway; several
    # hostpciN naming one mapping each take the next free device of it.
    value = hostpci_value(pool.mapping.id, True, mdev=pool.vgpu_type)
    return tuple(f"hostpci{i}: {value}" for i in range(attach_count(pool)))


def qm_set_command(pool: Pool, vmid: str = "<vmid>") -> str:
    """`qm set` adding those lines to an existing VM; empty for a pool without mapping."""
    if pool.mapping is None:
        return ""
    value = hostpci_value(pool.mapping.id, True, mdev=pool.vgpu_type)
    return f"qm set {vmid} " + " ".join(f"--hostpci{i} {value}" for i in range(attach_count(pool)))
