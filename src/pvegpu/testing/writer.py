"""`write_host`: a `HostSpec` written as sysfs, procfs and /etc trees in the kernel's layout.

Every lookup the writer makes (a function's position, the functions behind a bridge, the
virtual functions of a physical one) is an index built once, and every directory is
made once, so writing a host of 16,384 functions takes seconds, not hours.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

from pvegpu.pci import CpuList
from pvegpu.testing.config_space import config_header, resource_table, root_config
from pvegpu.testing.hostspec import (
    BASE_CHAR_DEVICES,
    BLOCK_DEVICES,
    VGA_CLASS,
    DeviceSpec,
    DrmInfo,
    HostSpec,
    NvidiaInfo,
    check,
)
from pvegpu.testing.kernels import write_kernels
from pvegpu.testing.partitions import write_device_partitions, write_host_partitions
from pvegpu.testing.resources import BarPlacer, cpuinfo_text, meminfo_text
from pvegpu.testing.tree_files import DIR_MODE, HostSpecError, TreeFiles
from pvegpu.testing.userspace import nvidia_userspace

DRM_MAJOR = 226

_DEFAULT_BUILD = "Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Nov 27 02:18:11 UTC 2025"


def write_host(desc: HostSpec, root: Path) -> None:
    """Write the tree for `desc` under `root`, which must not exist or be empty."""
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise FileExistsError(f"{root} exists and is not an empty directory")
    _Writer(desc, root).write()


class _Writer(TreeFiles):
    def __init__(self, desc: HostSpec, root: Path) -> None:
        super().__init__(root)
        self.desc = desc
        self.by_address = check(desc)
        self.ordered = sorted(self.by_address.values(), key=lambda d: d.pci_address)
        self.position = {d.address: i for i, d in enumerate(self.ordered)}
        self.behind: dict[str, list[DeviceSpec]] = {}
        self.virtfns: dict[str, list[DeviceSpec]] = {}
        for dev in self.ordered:
            if dev.parent is not None:
                self.behind.setdefault(dev.parent, []).append(dev)
            if dev.physfn is not None:
                self.virtfns.setdefault(dev.physfn, []).append(dev)
        self.functions_per_slot = Counter(self._slot(d) for d in self.ordered)
        self.node_cpus = [CpuList.parse(text) for text in desc.numa]
        self.all_cpus = CpuList([c for cpus in self.node_cpus for c in cpus.cpus])
        self.bars = BarPlacer()

    @staticmethod
    def _slot(dev: DeviceSpec) -> tuple[int, int, int]:
        address = dev.pci_address
        return (address.domain, address.bus, address.device)

    # -- the tree

    def write(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(DIR_MODE)
        self.write_pci()
        self.write_iommu()
        self.write_numa()
        self.write_modules()
        self.write_proc()
        self.write_etc()
        self.write_partitions()
        if self.desc.kernels is not None:
            write_kernels(self, self.desc.kernels)

    def write_partitions(self) -> None:
        """The mediated devices, each in its parent's directory, and the MIG capabilities."""
        mdevs = [
            (mdev, self.device_dir(self.by_address[mdev.parent]))
            for mdev in sorted(self.desc.mdevs, key=lambda m: m.uuid)
        ]
        mig = [
            (dev.nvidia.minor, dev.nvidia.mig)
            for dev in self.ordered
            if dev.driver == "nvidia" and dev.nvidia is not None and dev.nvidia.mig
        ]
        write_host_partitions(self, mdevs, mig)

    def device_dir(self, dev: DeviceSpec) -> str:
        chain = [dev]
        while chain[-1].parent is not None:
            chain.append(self.by_address[chain[-1].parent])
        top = chain[-1].pci_address
        names = [d.address for d in reversed(chain)]
        return "/".join(["sys/devices", f"pci{top.domain:04x}:{top.bus:02x}", *names])

    def irq(self, dev: DeviceSpec) -> int:
        if dev.irq is not None:
            return dev.irq
        if dev.physfn is not None:
            return 0  # MSI-X only: sysfs shows 0
        # Legacy INTx numbers above the 24 IO-APIC pins, handed out in bus order.
        return 24 + 2 * self.position[dev.address]

    def local_cpus(self, dev: DeviceSpec) -> CpuList:
        return self.all_cpus if dev.numa_node < 0 else self.node_cpus[dev.numa_node]

    def write_pci(self) -> None:
        self.dir("sys/bus/pci/devices")
        self.file("sys/bus/pci/drivers_autoprobe", "1\n")
        self.file("sys/bus/pci/drivers_probe", "")
        self.file("sys/bus/pci/rescan", "")
        drivers = {d.driver for d in self.ordered if d.driver} | set(self.desc.extra_drivers)
        for name in sorted(drivers):
            for attr in ("bind", "new_id", "remove_id", "uevent", "unbind"):
                self.file(f"sys/bus/pci/drivers/{name}/{attr}", "")
        for dev in self.ordered:
            self.write_device(dev)

    def write_device(self, dev: DeviceSpec) -> None:
        path = self.device_dir(dev)
        attrs_ = {
            "vendor": f"0x{dev.vendor:04x}",
            "device": f"0x{dev.device:04x}",
            "subsystem_vendor": f"0x{dev.subsystem_vendor:04x}",
            "subsystem_device": f"0x{dev.subsystem_device:04x}",
            "class": f"0x{dev.pci_class:06x}",
            "revision": f"0x{dev.revision:02x}",
            "numa_node": str(dev.numa_node),
            "local_cpulist": str(self.local_cpus(dev)),
            "driver_override": dev.driver_override or "(null)",
            "enable": "1" if dev.driver else "0",
            "irq": str(self.irq(dev)),
        }
        if dev.pci_class >> 8 == VGA_CLASS:
            attrs_["boot_vga"] = "1" if dev.boot_vga else "0"
        if dev.removable:
            attrs_["removable"] = "removable"
        if dev.link is not None:
            attrs_ |= {
                "current_link_speed": dev.link.speed,
                "current_link_width": str(dev.link.width),
                "max_link_speed": dev.link.max_speed or dev.link.speed,
                "max_link_width": str(dev.link.max_width or dev.link.width),
            }
        virtfns = self.virtfns.get(dev.address, [])
        if virtfns or dev.sriov_totalvfs is not None:
            attrs_ |= self.sriov_attributes(dev, virtfns)
        for name, value in sorted(attrs_.items()):
            self.put(f"{path}/{name}", (value + "\n").encode())
        self.put(f"{path}/uevent", self.uevent(dev).encode())
        buses = None
        if dev.is_bridge:
            secondary = self.secondary_bus(dev)
            buses = (dev.pci_address.bus, secondary, self.subordinate_bus(dev))
        multifunction = dev.physfn is None and self.functions_per_slot[self._slot(dev)] > 1
        header = config_header(dev, irq=self.irq(dev), multifunction=multifunction, buses=buses)
        if dev.config_space is not None:
            header = root_config(header, dev.config_space)
        self.put(f"{path}/config", header)
        try:
            starts = self.bars.place(dev.address, dev.bars)
        except ValueError as err:
            raise HostSpecError(str(err)) from None
        self.put(f"{path}/resource", resource_table(dev, starts).encode())
        self.rel_link(f"sys/bus/pci/devices/{dev.address}", path)
        if buses is not None:
            domain = dev.pci_address.domain
            self.put(
                f"{path}/pci_bus/{domain:04x}:{buses[1]:02x}/cpulistaffinity",
                f"{self.local_cpus(dev)}\n".encode(),
            )
        if dev.driver:
            driver_dir = f"sys/bus/pci/drivers/{dev.driver}"
            self.rel_link(f"{path}/driver", driver_dir)
            self.rel_link(f"{driver_dir}/{dev.address}", path)
        if dev.iommu_group is not None:
            group_dir = f"sys/kernel/iommu_groups/{dev.iommu_group}"
            self.rel_link(f"{path}/iommu_group", group_dir)
            self.rel_link(f"{group_dir}/devices/{dev.address}", path)
        if dev.physfn is not None:
            self.rel_link(f"{path}/physfn", self.device_dir(self.by_address[dev.physfn]))
        if dev.drm is not None and dev.driver:
            self.write_drm(path, dev.drm)
        for index, vf in enumerate(virtfns):
            self.rel_link(f"{path}/virtfn{index}", self.device_dir(vf))
        write_device_partitions(self, path, dev.mdev_types, dev.vgpu)

    def write_drm(self, path: str, drm: DrmInfo) -> None:
        """The DRM core's class devices under the GPU, each with its `dev` (major:minor)
        and a sys/class/drm link, as drm_sysfs registers them."""
        for name, minor in ((f"card{drm.card}", drm.card), (f"renderD{drm.render}", drm.render)):
            self.put(f"{path}/drm/{name}/dev", f"{DRM_MAJOR}:{minor}\n".encode())
            self.rel_link(f"sys/class/drm/{name}", f"{path}/drm/{name}")

    @staticmethod
    def sriov_attributes(pf: DeviceSpec, vfs: list[DeviceSpec]) -> dict[str, str]:
        """A PF's `sriov_*` files as the kernel prints them. VF N's routing id is the PF's
        plus offset + N * stride (the capability's First VF Offset and VF Stride)."""

        def routing_id(dev: DeviceSpec) -> int:
            a = dev.pci_address
            return a.bus << 8 | a.device << 3 | a.function

        offset, stride = 1, 1
        if vfs:
            offset = routing_id(vfs[0]) - routing_id(pf)
            if len(vfs) > 1:
                stride = routing_id(vfs[1]) - routing_id(vfs[0])
        total = pf.sriov_totalvfs if pf.sriov_totalvfs is not None else len(vfs)
        return {
            "sriov_numvfs": str(len(vfs)),
            "sriov_totalvfs": str(total),
            "sriov_drivers_autoprobe": "1" if pf.sriov_drivers_autoprobe else "0",
            "sriov_offset": str(offset),
            "sriov_stride": str(stride),
            "sriov_vf_device": f"{(vfs[0] if vfs else pf).device:x}",
        }

    @staticmethod
    def uevent(dev: DeviceSpec) -> str:
        """The kernel's text: the driver core's DRIVER= (when bound), then pci_uevent's
        variables, uppercase hex, the class as `%04X` (no leading zeros beyond four)."""
        klass = dev.pci_class
        lines = [f"DRIVER={dev.driver}"] if dev.driver else []
        lines += [
            f"PCI_CLASS={klass:04X}",
            f"PCI_ID={dev.vendor:04X}:{dev.device:04X}",
            f"PCI_SUBSYS_ID={dev.subsystem_vendor:04X}:{dev.subsystem_device:04X}",
            f"PCI_SLOT_NAME={dev.address}",
            f"MODALIAS=pci:v{dev.vendor:08X}d{dev.device:08X}sv{dev.subsystem_vendor:08X}"
            f"sd{dev.subsystem_device:08X}bc{klass >> 16:02X}sc{(klass >> 8) & 0xFF:02X}"
            f"i{klass & 0xFF:02X}",
        ]
        return "\n".join(lines) + "\n"

    def secondary_bus(self, bridge: DeviceSpec) -> int:
        if bridge.secondary_bus is not None:
            return bridge.secondary_bus
        buses = {d.pci_address.bus for d in self.behind.get(bridge.address, ())}
        if len(buses) != 1:
            raise HostSpecError(
                f"bridge {bridge.address}: give secondary_bus (functions behind it: "
                f"{len(buses)} buses)"
            )
        return buses.pop()

    def subordinate_bus(self, bridge: DeviceSpec) -> int:
        """The highest bus number behind the bridge, its own secondary bus at least."""
        highest = self.secondary_bus(bridge)
        for dev in self.behind.get(bridge.address, ()):
            bus = self.subordinate_bus(dev) if dev.is_bridge else dev.pci_address.bus
            highest = max(highest, bus)
        return highest

    def write_iommu(self) -> None:
        self.dir("sys/class/iommu")
        self.dir("sys/kernel/iommu_groups")
        groups = sorted({d.iommu_group for d in self.ordered if d.iommu_group is not None})
        for group in groups:
            self.file(f"sys/kernel/iommu_groups/{group}/type", self.desc.group_type + "\n")
        for unit in self.desc.iommu_units:
            if unit.device is not None:
                home = f"{self.device_dir(self.by_address[unit.device])}/iommu/{unit.name}"
            else:
                home = f"sys/devices/virtual/iommu/{unit.name}"
            if unit.name.startswith("ivhd"):
                self.file(f"{home}/amd-iommu/cap", "0x00190000\n")
                self.file(f"{home}/amd-iommu/features", "0x246577efa2254afa\n")
            else:
                self.file(f"{home}/intel-iommu/version", "1:0\n")
                self.file(f"{home}/intel-iommu/cap", "0xd2008c40660462\n")
            self.rel_link(f"sys/class/iommu/{unit.name}", home)

    def write_numa(self) -> None:
        nodes = f"0-{len(self.desc.numa) - 1}" if len(self.desc.numa) > 1 else "0"
        for name in ("has_cpu", "has_memory", "online", "possible"):
            self.file(f"sys/devices/system/node/{name}", nodes + "\n")
        for index, cpus in enumerate(self.node_cpus):
            self.file(f"sys/devices/system/node/node{index}/cpulist", f"{cpus}\n")
        for index, memory in enumerate(self.desc.node_memory):
            self.file(f"sys/devices/system/node/node{index}/meminfo", meminfo_text(index, memory))

    def write_modules(self) -> None:
        if self.desc.sev_snp is not None:
            flag = "Y\n" if self.desc.sev_snp else "N\n"
            for name in ("sev", "sev_es", "sev_snp"):
                self.file(f"sys/module/kvm_amd/parameters/{name}", flag)
        nv = self.desc.nvidia
        if nv is not None:
            self.file("sys/module/nvidia/version", nv.version + "\n")
            # Out-of-tree and unsigned (OE); the proprietary module also taints P.
            self.file("sys/module/nvidia/taint", "OE\n" if nv.open else "POE\n")

    def write_proc(self) -> None:
        self.file("proc/cmdline", self.desc.cmdline + "\n")
        if self.desc.cpu is not None:
            self.file("proc/cpuinfo", cpuinfo_text(self.desc.cpu, tuple(self.node_cpus)))
        char = list(BASE_CHAR_DEVICES) + list(self.desc.char_devices)
        nv = self.desc.nvidia
        if nv is not None:
            char.append((195, "nvidia"))
            if nv.uvm_major is not None:
                char.append((nv.uvm_major, "nvidia-uvm"))
            if nv.caps_major is not None:
                char.append((nv.caps_major, "nvidia-caps"))
        # The kernel lists majors in ascending order, registration order within one.
        char.sort(key=lambda entry: entry[0])
        lines = ["Character devices:", *(f"{m:3d} {n}" for m, n in char), ""]
        lines += ["Block devices:", *(f"{m:3d} {n}" for m, n in BLOCK_DEVICES)]
        self.file("proc/devices", "\n".join(lines) + "\n")
        if nv is None:
            return
        build = nv.build or _DEFAULT_BUILD
        banner = (
            f"NVIDIA UNIX Open Kernel Module for x86_64  {nv.version}  {build}"
            if nv.open
            else f"NVIDIA UNIX x86_64 Kernel Module  {nv.version}  {build}"
        )
        self.file(
            "proc/driver/nvidia/version",
            f"NVRM version: {banner}\nGCC version:  gcc version 14.2.0 (Debian 14.2.0-19) \n",
        )
        for dev in self.ordered:
            if dev.driver == "nvidia" and dev.nvidia is not None:
                self.file(
                    f"proc/driver/nvidia/gpus/{dev.address}/information",
                    self.nvidia_information(dev, dev.nvidia),
                )

    def nvidia_information(self, dev: DeviceSpec, info: NvidiaInfo) -> str:
        gpu_uuid = info.uuid or "GPU-" + str(
            uuid.uuid5(uuid.NAMESPACE_DNS, f"{dev.address}.{self.desc.hostname}.pvegpu")
        )
        # The exact seq_printf formats of nv-procfs.c: "Key: \t value", padding included.
        return (
            f"Model: \t\t {info.model}\n"
            f"IRQ:   \t\t {self.irq(dev)}\n"
            f"GPU UUID: \t {gpu_uuid}\n"
            f"Video BIOS: \t {info.vbios}\n"
            "Bus Type: \t PCIe\n"
            f"DMA Size: \t {info.dma_bits} bits\n"
            f"DMA Mask: \t {(1 << info.dma_bits) - 1:#x}\n"
            f"Bus Location: \t {dev.address}\n"
            f"Device Minor: \t {info.minor}\n"
            "GPU Excluded:\t No\n"
        )

    def write_etc(self) -> None:
        self.file("etc/hostname", self.desc.hostname + "\n")
        if self.desc.pve:
            # pmxcfs shows the local node's directories under these fixed names.
            node_dir = f"nodes/{self.desc.hostname}"
            for sub in ("lxc", "qemu-server"):
                self.dir(f"etc/pve/{node_dir}/{sub}")
                self.link(f"etc/pve/{sub}", f"{node_dir}/{sub}")
            self.link("etc/pve/local", node_dir)
        files: dict[str, str] = {}
        links: dict[str, str] = {}
        if self.desc.driver_userspace is not None:
            files, links = nvidia_userspace(self.desc.driver_userspace)
        for rel, target in sorted((links | dict(self.desc.symlinks)).items()):
            self.link(rel, target)
        for rel, content in sorted((files | dict(self.desc.files)).items()):
            self.file(rel, content)
