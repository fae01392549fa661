"""What a VM's start needs from the host besides its devices: their BARs, the memory of
the NUMA node it is bound to, the width of the CPU's physical addresses. No I/O here.

A VM that gets a GPU maps the GPU's memory BARs into its own physical address space, so
they must fit in what its CPU type and firmware give it (`pvegpu.planning.guest_address`);
vfio pins all of the guest's memory at start, so memory bound to a node must fit the node
(`pvegpu.planning.vm_start`). Discovery reads these facts (`pvegpu.host.discover`).
"""

from __future__ import annotations

import attrs

from pvegpu.values import value_class, value_repr

ROM_INDEX = 6
"""The expansion ROM's line of `resource`, after the six standard BARs."""


@value_repr
@attrs.frozen(order=True, repr=False)
class Bar:
    """One memory BAR of a PCI function, as a line of its `resource` file shows it."""

    index: int
    """0-5 the standard BARs (a 64-bit BAR takes two, so its next index is unused), 6 the
    expansion ROM."""
    size: int
    """In bytes (a power of two, at least 16)."""
    is_64bit: bool = False
    """A 64-bit BAR: firmware may place it above 4 GiB, and a large one must be."""
    prefetchable: bool = False

    @property
    def is_rom(self) -> bool:
        return self.index == ROM_INDEX


@value_class
@attrs.frozen(eq=False, repr=False)
class HostCpu:
    """The host's CPU as `/proc/cpuinfo` describes its first processor."""

    vendor: str
    """`vendor_id`: `AuthenticAMD`, `GenuineIntel`. QEMU's generic CPU types (kvm64,
    qemu64 and Proxmox's x86-64-v2-AES and kin) show the guest the host's vendor."""
    phys_bits: int | None = None
    """`address sizes: 52 bits physical, ...`: what `cpu: host` and `phys-bits=host`
    give a guest; None where the line is missing."""
