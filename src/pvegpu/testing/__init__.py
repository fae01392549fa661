"""Build fake Proxmox hosts on disk: sysfs, procfs and /etc trees laid out like the kernel's.

Describe a host with `HostSpec` (PCI functions as `DeviceSpec`, NUMA, IOMMU, drivers,
extra files) and `write_host(spec, root)` writes a tree that `pvegpu.host.discover`, and
any tool calling readlink/realpath or `lspci -A linux-sysfs`, reads like the real thing:

- real device directories under `sys/devices/pci<domain>:<root bus>/<bridges...>/<BDF>/`
  holding `vendor`, `device`, `subsystem_vendor`, `subsystem_device`, `class`,
  `revision`, `numa_node`, `local_cpulist`, `current_link_speed`, `max_link_speed`,
  `current_link_width`, `max_link_width`, `driver_override`, `enable`, `irq`, the
  kernel's `uevent` (`DRIVER=`, `PCI_CLASS=`, `PCI_ID=`, ... as pci_uevent prints them),
  the 64-byte `config` header and `resource` (`DeviceSpec.bars` placed as a kernel
  places them, `pvegpu.testing.resources`), `boot_vga` on VGA-class functions and
  `removable` on those behind a Thunderbolt port; bridges (class 0x0604) also a
  `pci_bus/<domain>:<secondary bus>/` directory; SR-IOV virtual functions (`physfn`)
  a `physfn` link, their physical function `virtfnN` links and `sriov_numvfs`;
- `sys/bus/pci/devices/<BDF>` relative symlinks into them (`../../../devices/...`);
- `driver` -> `.../bus/pci/drivers/<name>` (absent when unbound) with the driver's
  back-link, `iommu_group` -> `.../kernel/iommu_groups/N` with `devices/<BDF>` back-links
  and `type`, `sys/class/iommu/<unit>` (empty, and no groups, when the IOMMU is off);
- `sys/devices/system/node/` (each node's `meminfo` from `HostSpec.node_memory`),
  `/proc/cpuinfo` (from `HostSpec.cpu`), `sys/module/kvm_amd/parameters/sev_snp`,
  `sys/module/nvidia/{version,taint}`, `proc/driver/nvidia/version` and
  `proc/driver/nvidia/gpus/<BDF>/information` (only for functions bound to nvidia),
  `proc/devices`, `proc/cmdline`, `etc/hostname`, pmxcfs's `etc/pve/{local,lxc,
  qemu-server}` links into `etc/pve/nodes/<node>/`, plus any files you add.
- GPU partitions (`pvegpu.testing.partitions`): a parent's `mdev_supported_types/<type>/`
  (`DeviceSpec.mdev_types`), mediated devices under their parent with
  `sys/bus/mdev/devices/<uuid>` links (`HostSpec.mdevs`), the vGPU manager's
  `nvidia/{creatable,current}_vgpu_type*` on a virtual function (`DeviceSpec.vgpu`), and
  MIG capabilities in `proc/driver/nvidia/capabilities/` with the driver's minors
  (`NvidiaInfo.mig`, `caps_minor`);
- kernels (`pvegpu.testing.kernels`, `HostSpec.kernels`): `proc/sys/kernel/osrelease`,
  `boot/vmlinuz-<release>` with its `lib/modules/<release>/`, DKMS's builds and records
  (`var/lib/dkms/<module>/<version>/<release>/<arch>/module/`, the `kernel-<release>-<arch>`
  link, the copies in `updates/dkms/`), proxmox-boot-tool's pins and GRUB's grub.cfg and
  grubenv (`KernelsSpec`, `KernelSpec`, `DkmsBuild`, `GrubSpec`);

Output is deterministic: the same spec always gives the same bytes, link texts and modes
(files 0644, directories 0755). `tree_entries(root)` lists a tree as git keeps it, to
compare a committed tree with a fresh build. `mixed_host(functions)` describes a large
host of any size (GPUs, NVMe, NICs with virtual functions) for scale tests.

pvegpu's own fixture hosts are described in the source tree's tests/fixture_hosts.py;
`python tests/fixture_hosts.py regenerate fixtures/sysfs` rewrites fixtures/sysfs/.

Example::

    from pvegpu.testing import DeviceSpec, HostSpec, IommuUnit, NvidiaInfo, NvidiaModule
    from pvegpu.testing import write_host

    host = HostSpec(
        hostname="lab1",
        cmdline="BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1",
        numa=("0-15",),
        iommu_units=(IommuUnit("dmar0"),),
        nvidia=NvidiaModule(version="580.95.05", open=False),
        devices=(
            DeviceSpec(address="0000:00:01.0", vendor=0x8086, device=0x352A,
                       pci_class=0x060400, driver="pcieport", iommu_group=1),
            DeviceSpec(address="0000:01:00.0", parent="0000:00:01.0", vendor=0x10DE,
                       device=0x2204, pci_class=0x030000, driver="nvidia", iommu_group=2,
                       nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 3090", minor=0)),
        ),
    )
    write_host(host, tmp_path / "lab1")
"""

from __future__ import annotations

from pvegpu.model.resources import Bar
from pvegpu.testing.hostspec import (
    BASE_CHAR_DEVICES,
    BLOCK_DEVICES,
    BRIDGE_CLASS,
    ConfigSpace,
    DeviceSpec,
    DrmInfo,
    HostSpec,
    IommuUnit,
    Link,
    NvidiaInfo,
    NvidiaModule,
)
from pvegpu.testing.kernels import DkmsBuild, GrubSpec, KernelSpec, KernelsSpec
from pvegpu.testing.partitions import MdevSpec, MdevTypeSpec, MigInstance, VgpuSpec, caps_minor
from pvegpu.testing.resources import CpuSpec, NodeMemory
from pvegpu.testing.synthetic import mixed_host
from pvegpu.testing.tree_files import DIR_MODE, FILE_MODE, HostSpecError
from pvegpu.testing.trees import TreeEntry, tree_entries
from pvegpu.testing.writer import write_host

__all__ = [
    "BASE_CHAR_DEVICES",
    "BLOCK_DEVICES",
    "BRIDGE_CLASS",
    "DIR_MODE",
    "FILE_MODE",
    "Bar",
    "ConfigSpace",
    "CpuSpec",
    "DeviceSpec",
    "DkmsBuild",
    "DrmInfo",
    "GrubSpec",
    "HostSpec",
    "HostSpecError",
    "IommuUnit",
    "KernelSpec",
    "KernelsSpec",
    "Link",
    "MdevSpec",
    "MdevTypeSpec",
    "MigInstance",
    "NodeMemory",
    "NvidiaInfo",
    "NvidiaModule",
    "TreeEntry",
    "VgpuSpec",
    "caps_minor",
    "mixed_host",
    "tree_entries",
    "write_host",
]
