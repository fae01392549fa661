"""An Intel iGPU SR-IOV host, built with pvegpu.testing into a test's tmp_path.

`pve-nuc`: a mini PC with a Raptor Lake-P iGPU (8086:a7a0, i915 with SR-IOV) whose PF
0000:00:02.0 has up to 7 VFs (0000:00:02.1 .. .7, the same device id, each in an IOMMU
group of its own, as VT-d gives them), created at boot by `i915.max_vfs=7` or sysfs.conf.
VM 200 (q35) is there to get one VF, container 300 to keep the PF. Parameters change
what the kernel shows: how many VFs exist (0: the PF's driver has not created them yet),
which driver they are on, their overrides, the PF's `sriov_drivers_autoprobe`, extra
files (a VM already on a VF).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pvegpu.testing import DeviceSpec, HostSpec, IommuUnit, write_host

NODE = "pve-nuc"
PF = "0000:00:02.0"
IGPU_ID = 0xA7A0
TOTAL_VFS = 7


def vf_address(index: int) -> str:
    """VF N (virtfnN) of the PF: First VF Offset 1, VF Stride 1, as i915 lays them out."""
    return f"0000:00:02.{index + 1}"


def vf_group(index: int) -> int:
    """VT-d gives each VF a group; the kernel numbers them after the boot-time groups."""
    return 20 + index


VM_200 = """\
boot: order=scsi0
cores: 4
machine: q35
memory: 8192
name: desktop
ostype: l26
scsi0: local-lvm:vm-200-disk-0,size=64G
"""

CT_300 = """\
arch: amd64
cores: 4
hostname: media
memory: 4096
ostype: debian
rootfs: local-lvm:vm-300-disk-0,size=16G
"""

SPEC = f"""\
node = "{NODE}"

[[pools]]
name = "desktop"
gpus = ["00:02.1"]
mapping = {{ id = "igpu-vf1", description = "iGPU VF 1 for the desktop VM" }}

[pools.vfio.vm]
vmid = 200
"""


def igpu_host(
    vfs: int = TOTAL_VFS,
    *,
    pf_driver: str | None = "i915",
    vf_driver: str | Mapping[int, str | None] | None = "i915",
    autoprobe: bool = True,
    vf_override: Mapping[int, str] | None = None,
    files: Mapping[str, str] | None = None,
) -> HostSpec:
    """The host with `vfs` VFs created; `vf_driver` one driver for all, or per index."""
    devices = [
        DeviceSpec(
            address="0000:00:00.0",
            vendor=0x8086,
            device=0xA706,
            pci_class=0x060000,
            subsystem_vendor=0x8086,
            subsystem_device=0x7270,
            iommu_group=0,
        ),
        DeviceSpec(
            address=PF,
            vendor=0x8086,
            device=IGPU_ID,
            pci_class=0x030000,
            subsystem_vendor=0x8086,
            subsystem_device=0x3024,
            revision=0x04,
            driver=pf_driver,
            iommu_group=1,
            sriov_totalvfs=TOTAL_VFS,
            sriov_drivers_autoprobe=autoprobe,
        ),
        DeviceSpec(
            address="0000:00:14.0",
            vendor=0x8086,
            device=0x51ED,
            pci_class=0x0C0330,
            subsystem_vendor=0x8086,
            subsystem_device=0x7270,
            driver="xhci_hcd",
            iommu_group=2,
        ),
    ]
    for index in range(vfs):
        driver = vf_driver.get(index) if isinstance(vf_driver, Mapping) else vf_driver
        devices.append(
            DeviceSpec(
                address=vf_address(index),
                vendor=0x8086,
                device=IGPU_ID,
                pci_class=0x030000,
                subsystem_vendor=0x8086,
                subsystem_device=0x3024,
                revision=0x04,
                driver=driver,
                driver_override=(vf_override or {}).get(index),
                iommu_group=vf_group(index),
                physfn=PF,
            )
        )
    return HostSpec(
        hostname=NODE,
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet "
            "intel_iommu=on iommu=pt i915.enable_guc=3 i915.max_vfs=7"
        ),
        devices=tuple(devices),
        numa=("0-11",),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        group_type="identity",
        extra_drivers=("vfio-pci",),
        files={
            "etc/pve/qemu-server/200.conf": VM_200,
            "etc/pve/lxc/300.conf": CT_300,
            **(files or {}),
        },
    )


def write_igpu_host(root: Path, vfs: int = TOTAL_VFS, **options: object) -> Path:
    """`igpu_host(vfs, **options)` written under root/; returns root."""
    write_host(igpu_host(vfs, **options), root)  # type: ignore[arg-type]
    return root
