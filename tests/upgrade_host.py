"""Hosts with a kernel or GPU driver upgrade installed and not yet running, built with
pvegpu.testing into a test's tmp_path.

- `kpro6_upgrade`: kpro6 (systemd-boot through proxmox-boot-tool, ZFS) running kernel
  6.14.8-2-pve with nvidia 580.95.05 loaded, CT 129's userspace 580.95.05. The admin
  installed proxmox-kernel-6.17 and built the 590.48.01 driver for it with DKMS
  (`dkms install nvidia/590.48.01 -k 6.17.2-1-pve`), keeping 580.95.05 on the running
  kernel: the newest kernel is the default next boot, and it loads 590.48.01.
- `pinned`: the same host after `apt` replaced 580.95.05 by 590.48.01 in DKMS, whose
  build for 6.14.8-2-pve failed (its headers were gone), with that kernel pinned: the
  next boot runs 6.14.8-2-pve, which has no nvidia module at all.
- `workstation_grub`: the workstation (GRUB, no proxmox-boot-tool) running 6.8.12-4-pve
  with NVIDIA's .run 580.95.05 installed without DKMS (kernel/drivers/video/nvidia.ko of
  the running kernel only) and proxmox-kernel-6.14 installed since: GRUB's first entry,
  the default, boots 6.14.8-2-pve, which has no nvidia module.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import attrs

import fixture_hosts
from pvegpu.testing import (
    DkmsBuild,
    GrubSpec,
    HostSpec,
    KernelSpec,
    KernelsSpec,
    NvidiaModule,
    write_host,
)

RUNNING = "6.14.8-2-pve"
NEWER = "6.17.2-1-pve"
OLD = "580.95.05"
NEW = "590.48.01"
CT = "rpool/data/subvol-129-disk-0"
LIBS = f"{CT}/usr/lib/x86_64-linux-gnu"
SYSTEMD_BOOT = {
    "etc/kernel/cmdline": "root=ZFS=rpool/ROOT/pve-1 boot=zfs amd_iommu=on iommu=nopt\n",
    "etc/kernel/proxmox-boot-uuids": "1A2B-3C4D\n",
}
WS_RUNNING = "6.8.12-4-pve"
WS_CMDLINE = "quiet intel_iommu=on vfio-pci.ids=10de:24b0,10de:228b"
"""The workstation's GRUB_CMDLINE_LINUX_DEFAULT: what its /proc/cmdline shows."""


def dpkg_status(version: str) -> str:
    """CT 129's dpkg database with libnvidia-compute of `version` (Ubuntu's packaging)."""
    branch = version.split(".")[0]
    text = fixture_hosts.DPKG_STATUS.replace("-590", f"-{branch}")
    return text.replace("590.48.01-0ubuntu1", f"{version}-0ubuntu1")


def with_userspace(base: HostSpec, version: str) -> HostSpec:
    """kpro6 with CT 129's NVIDIA userspace at `version` (libraries and dpkg database)."""
    files = {
        k: v
        for k, v in base.files.items()
        if not k.startswith(f"{LIBS}/libcuda.so.") and not k.startswith(f"{LIBS}/libnvidia-ml.so.")
    }
    files |= {
        f"{LIBS}/libcuda.so.{version}": "",
        f"{LIBS}/libnvidia-ml.so.{version}": "",
        f"{CT}/var/lib/dpkg/status": dpkg_status(version),
    }
    symlinks = dict(base.symlinks) | {
        f"{LIBS}/libcuda.so.1": f"libcuda.so.{version}",
        f"{LIBS}/libnvidia-ml.so.1": f"libnvidia-ml.so.{version}",
    }
    return attrs.evolve(base, files=files, symlinks=symlinks)


def kpro6_upgrade(
    *,
    userspace: str = OLD,
    kernels: KernelsSpec | None = None,
    files: Mapping[str, str] = {},
    base: HostSpec | None = None,
) -> HostSpec:
    """kpro6 on 580.95.05 with 590.48.01 built by DKMS for the newer, default kernel."""
    host = with_userspace(base or fixture_hosts.kpro6(), userspace)
    kernels = kernels or KernelsSpec(
        running=RUNNING,
        installed=(
            KernelSpec(release=RUNNING, dkms=(DkmsBuild(version=OLD),)),
            KernelSpec(release=NEWER, dkms=(DkmsBuild(version=NEW),)),
        ),
    )
    return attrs.evolve(
        host,
        nvidia=NvidiaModule(version=OLD, open=True),
        kernels=kernels,
        files={**host.files, **SYSTEMD_BOOT, **files},
    )


def pinned() -> HostSpec:
    """The running kernel pinned, and DKMS's only nvidia build is 590.48.01 for the newer."""
    return kpro6_upgrade(
        kernels=KernelsSpec(
            running=RUNNING,
            installed=(
                KernelSpec(release=RUNNING),
                KernelSpec(release=NEWER, dkms=(DkmsBuild(version=NEW),)),
            ),
            pin=RUNNING,
        )
    )


def workstation_grub(grub: GrubSpec | None = None, *, newer_module: bool = False) -> HostSpec:
    """The workstation on GRUB, a .run without DKMS for the running kernel only; with
    `newer_module`, the .run installed into the newer kernel too (still no DKMS)."""
    video = "kernel/drivers/video/nvidia.ko"
    return attrs.evolve(
        fixture_hosts.workstation(),
        kernels=KernelsSpec(
            running=WS_RUNNING,
            installed=(
                KernelSpec(release=WS_RUNNING, other_modules=(video,)),
                KernelSpec(release=RUNNING, other_modules=(video,) if newer_module else ()),
            ),
            grub=attrs.evolve(grub or GrubSpec(), cmdline=WS_CMDLINE),
        ),
    )


def write(spec: HostSpec, root: Path) -> Path:
    write_host(spec, root)
    return root
