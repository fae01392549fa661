"""The QEMU machine: q35 under TCG with an emulated Intel IOMMU and two NUMA nodes.

Per NUMA node one pxb-pcie expander (its devices report that `numa_node`) with two root
ports; in each slot a bochs-display at .0 (class 0x038000, 1234:1111: identical
"GPUs" that one DRM driver binds all of, as nvidia does) and an ich9-intel-hda at .1,
which shares its IOMMU group (multifunction, no ACS) as a GPU's HDMI audio does. The
board's own HD audio sits at 00:1b.0 on the root bus, with no NUMA node: a function of
the host that no plan names.

The NUMA 1 slots are less plain: one behind a PCIe switch, one behind a PCIe-to-PCI
bridge, so both VM groups hold a bridge, which the split leaves where it is.

The variants are the changed hosts the split script must refuse: a NIC on the PCI
bridge's bus (so in that GPU's group), another card in the switch's slot, the two
expanders' NUMA nodes swapped, no IOMMU at all.
"""

from __future__ import annotations

import enum
import subprocess
from pathlib import Path

import attrs

EXPANDERS = ((0, 0x20), (1, 0x60))
"""(NUMA node, first bus) per pxb-pcie expander."""
PORTS = 2
SWITCHED = (1, 0)
"""The slot behind a PCIe switch (buses +1 upstream port, +2 downstream port, +3 GPU):
the downstream port has no ACS, so it shares the GPU's IOMMU group (a bridge: it stays)."""
PCI_BRIDGED = (1, 1)
"""The slot behind a PCIe-to-PCI bridge (bus +4 bridge, +5 GPU at 01.0): every device
behind it shares one IOMMU group, as their DMA carries the bridge's requester ID."""
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
"""PID 1's PATH for services on a merged-/usr system; /bin and /sbin are not in it."""

_BASE = [
    "-machine", "q35,kernel-irqchip=split", "-accel", "tcg", "-m", "1G", "-smp", "2",
    "-object", "memory-backend-ram,id=m0,size=512M",
    "-object", "memory-backend-ram,id=m1,size=512M",
    "-numa", "node,nodeid=0,cpus=0,memdev=m0", "-numa", "node,nodeid=1,cpus=1,memdev=m1",
    "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
]  # fmt: skip


class Iommu(enum.Enum):
    TRANSLATED = "translated"  # intel_iommu=on: DMA domains, as on kpro6
    IDENTITY = "identity"  # intel_iommu=on iommu=pt: passthrough domains, as on pve-mixed
    OFF = "off"  # no IOMMU device: no groups at all


class Change(enum.Enum):
    """How a scenario's machine differs from the one the plan was made on."""

    NONE = "none"
    FOREIGN_IN_GROUP = "foreign-in-group"  # an e1000 (8086:100e) beside the bridged GPU
    OTHER_CARD = "other-card"  # virtio-gpu-pci (1af4:1050) in place of the switched GPU
    NUMA_SWAPPED = "numa-swapped"  # the expanders report each other's node


@attrs.frozen
class Machine:
    iommu: Iommu = Iommu.TRANSLATED
    change: Change = Change.NONE

    def args(self) -> list[str]:
        args = list(_BASE)
        if self.iommu is not Iommu.OFF:
            args += ["-device", "intel-iommu,intremap=on"]
        args += ["-device", "ich9-intel-hda,bus=pcie.0,addr=1b.0"]
        for node, bus_nr in EXPANDERS:
            reported = 1 - node if self.change is Change.NUMA_SWAPPED else node
            args += ["-device", f"pxb-pcie,id=pxb{node},bus_nr={bus_nr},numa_node={reported},"
                     "bus=pcie.0"]  # fmt: skip
            for port in range(PORTS):
                rp = f"rp{node}{port}"
                args += ["-device", f"pcie-root-port,id={rp},bus=pxb{node},"
                         f"chassis={node * PORTS + port + 1},addr={port}.0"]  # fmt: skip
                slot, addr = rp, "0"
                if (node, port) == SWITCHED:
                    slot = "down"
                    args += [
                        "-device", f"x3130-upstream,id=up,bus={rp}",
                        "-device", "xio3130-downstream,id=down,bus=up,chassis=11,slot=0",
                    ]  # fmt: skip
                elif (node, port) == PCI_BRIDGED:
                    slot, addr = "pcibus", "1"
                    args += ["-device", f"pcie-pci-bridge,id=pcibus,bus={rp}"]
                card = "bochs-display"
                if (node, port) == SWITCHED and self.change is Change.OTHER_CARD:
                    card = "virtio-gpu-pci"
                args += [
                    "-device", f"{card},bus={slot},addr={addr}.0,multifunction=on",
                    "-device", f"ich9-intel-hda,bus={slot},addr={addr}.1",
                ]  # fmt: skip
        if self.change is Change.FOREIGN_IN_GROUP:
            args += ["-device", "e1000,bus=pcibus,addr=2.0"]
        return args

    def cmdline(self) -> str:
        # panic=-1 with -no-reboot ends QEMU at once on a guest panic. no_timer_check:
        # under TCG on a loaded host (CI's two cores running four QEMUs and a test suite)
        # the kernel's early check that the timer interrupt arrives through the remapped
        # IO-APIC can miss its window and panic ("timer doesn't work through
        # Interrupt-remapped IO-APIC"); the check proves nothing about the split.
        cmdline = "console=ttyS0 panic=-1 loglevel=4 no_timer_check"
        if self.iommu is not Iommu.OFF:
            cmdline += " intel_iommu=on"
        if self.iommu is Iommu.IDENTITY:
            cmdline += " iommu=pt"
        return cmdline


def boot(
    machine: Machine, vmlinux: Path, initrd: Path, *, scenario: str, timeout: float = 300
) -> str:
    """Boot, let /init run the scenario and power off; the serial console log.

    A QEMU that dies of a signal before the guest prints a byte (TCG has segfaulted at
    start-up on CI's loaded two cores) is started once more: no guest ran, so nothing
    under test failed. Its exit is kept in the log if the second one dies too."""
    argv = [
        "qemu-system-x86_64", *machine.args(), "-kernel", str(vmlinux), "-initrd", str(initrd),
        "-append", f"{machine.cmdline()} pvegpu={scenario}",
    ]  # fmt: skip
    for _ in range(2):
        result = subprocess.run(
            argv, capture_output=True, text=True, errors="replace", timeout=timeout,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log = result.stdout.replace("\r", "") + result.stderr
        if result.returncode >= 0 or log:
            return log
    return f"qemu-system-x86_64 died of signal {-result.returncode} twice before the guest printed"
