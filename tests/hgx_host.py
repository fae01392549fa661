"""An HGX H100 8-GPU host, built with pvegpu.testing into a test's tmp_path.

`pve-hgx`: a dual-socket Sapphire Rapids server with an HGX H100 baseboard: eight H100
SXM5 GPUs (10de:2330, class 0x0302, four per socket, each behind a root port of its own
and in an IOMMU group of its own) and four NVSwitches (10de:22a3, class 0x0680, "bridge,
other") behind a PCIe switch on socket 0, each in its own group, all on nvidia. Fabric
Manager is installed from NVIDIA's package and enabled (multi-user.target.wants), its
configuration in full passthrough mode unless a test gives another. VM 300 (q35) is there
to get the board, VM 301 half of it, CT 129 the rest.
"""

from __future__ import annotations

from collections.abc import Mapping

from pvegpu.testing import DeviceSpec, HostSpec, IommuUnit, Link, NvidiaInfo, NvidiaModule

NODE = "pve-hgx"
GPU_ID = 0x2330
SWITCH_ID = 0x22A3
GPU_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
"""The GPUs' buses as an HGX H100 server enumerates them; the first four on socket 0."""
SWITCH_BUSES = (0x05, 0x06, 0x07, 0x08)
GPUS = tuple(f"0000:{bus:02x}:00.0" for bus in GPU_BUSES)
SWITCHES = tuple(f"0000:{bus:02x}:00.0" for bus in SWITCH_BUSES)
MODEL = "NVIDIA H100 80GB HBM3"
GEN5 = Link("32.0 GT/s PCIe", 16)

FM_UNIT = "lib/systemd/system/nvidia-fabricmanager.service"
FM_WANTS = "etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service"
FM_CONFIG = "usr/share/nvidia/nvswitch/fabricmanager.cfg"
FM_UNIT_TEXT = """\
[Unit]
Description=NVIDIA fabric manager service
After=network-online.target
Requires=network-online.target

[Service]
User=root
PrivateTmp=false
Type=forking
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg

[Install]
WantedBy=multi-user.target
"""


def fm_config(mode: int) -> str:
    return (
        "# Fabric Manager configuration\n"
        "LOG_LEVEL=4\n"
        "LOG_FILE_NAME=/var/log/fabricmanager.log\n"
        "DAEMONIZE=1\n"
        "# 0: bare metal or full passthrough, 1: shared NVSwitch, 2: vGPU\n"
        f"FABRIC_MODE={mode}\n"
        "FABRIC_MODE_RESTART=0\n"
    )


VM_300 = """\
boot: order=scsi0
cores: 64
machine: q35
memory: 1048576
name: train
ostype: l26
scsi0: local-lvm:vm-300-disk-0,size=512G
"""
VM_301 = VM_300.replace("name: train", "name: half").replace("vm-300", "vm-301")
CT_129 = "arch: amd64\nhostname: serve\nmemory: 65536\nostype: debian\n"

WHOLE_BOARD = f"""\
node = "{NODE}"

[[pools]]
name = "train"
count = 8
mapping = {{ id = "hgx-board", description = "the HGX board for VM 300" }}

[pools.vfio.vm]
vmid = 300
"""

HALF_TO_VM = f"""\
node = "{NODE}"

[[pools]]
name = "half"
numa_node = 0
mapping = {{ id = "hgx-half" }}

[pools.vfio.vm]
vmid = 301
"""

HOST_ONLY = f"""\
node = "{NODE}"

[[pools]]
name = "serve"
count = 8

[pools.lxc]
vmid = 129
"""


def _root_port(bus: int, node: int, group: int) -> DeviceSpec:
    """A Sapphire Rapids root port on root bus `bus - 1`, secondary bus `bus`."""
    return DeviceSpec(
        address=f"0000:{bus - 1:02x}:01.0", vendor=0x8086, device=0x352A,
        pci_class=0x060400, numa_node=node, driver="pcieport", iommu_group=group,
        link=GEN5,
    )  # fmt: skip


def hgx_host(
    *,
    fm_mode: int | None = 0,
    fm_installed: bool = True,
    fm_enabled: bool = True,
    gpu_driver: str | Mapping[int, str] = "nvidia",
    switch_driver: str = "nvidia",
    files: Mapping[str, str] | None = None,
) -> HostSpec:
    """The host; `gpu_driver` one driver for every GPU or one per GPU index."""
    group = 10
    devices: list[DeviceSpec] = []
    # The NVSwitches sit behind a PCIe switch on socket 0: its upstream port 03:00.0 under
    # root port 02:01.0, a downstream port on bus 04 per NVSwitch, each with ACS (own groups).
    devices.append(
        DeviceSpec(
            address="0000:02:01.0", vendor=0x8086, device=0x352A, pci_class=0x060400,
            numa_node=0, driver="pcieport", iommu_group=1, link=GEN5, secondary_bus=0x03,
        )
    )  # fmt: skip
    devices.append(
        DeviceSpec(
            address="0000:03:00.0", parent="0000:02:01.0", vendor=0x1000, device=0xC030,
            pci_class=0x060400, numa_node=0, driver="pcieport", iommu_group=2, link=GEN5,
            secondary_bus=0x04,
        )
    )  # fmt: skip
    for index, bus in enumerate(SWITCH_BUSES):
        port = f"0000:04:{index:02x}.0"
        devices.append(
            DeviceSpec(
                address=port, parent="0000:03:00.0", vendor=0x1000, device=0xC030,
                pci_class=0x060400, numa_node=0, driver="pcieport", iommu_group=3 + index,
                link=Link("16.0 GT/s PCIe", 2),
            )
        )  # fmt: skip
        devices.append(
            DeviceSpec(
                address=f"0000:{bus:02x}:00.0", parent=port, vendor=0x10DE, device=SWITCH_ID,
                subsystem_vendor=0x10DE, subsystem_device=0x1796, pci_class=0x068000,
                revision=0xA1, numa_node=0, driver=switch_driver, iommu_group=7 + index,
                link=Link("16.0 GT/s PCIe", 2),
            )
        )  # fmt: skip
    for index, bus in enumerate(GPU_BUSES):
        node = 0 if index < 4 else 1
        driver = gpu_driver.get(index, "nvidia") if isinstance(gpu_driver, Mapping) else gpu_driver
        devices.append(_root_port(bus, node, group))
        devices.append(
            DeviceSpec(
                address=GPUS[index], parent=f"0000:{bus - 1:02x}:01.0", vendor=0x10DE,
                device=GPU_ID, subsystem_vendor=0x10DE, subsystem_device=0x16C1,
                pci_class=0x030200, revision=0xA1, numa_node=node, driver=driver,
                iommu_group=group + 1, link=GEN5,
                nvidia=NvidiaInfo(model=MODEL, minor=index) if driver == "nvidia" else None,
            )
        )  # fmt: skip
        group += 2
    extra: dict[str, str] = {}
    symlinks: dict[str, str] = {}
    if fm_installed:
        extra[FM_UNIT] = FM_UNIT_TEXT
        if fm_enabled:
            symlinks[FM_WANTS] = "/" + FM_UNIT
    if fm_mode is not None:
        extra[FM_CONFIG] = fm_config(fm_mode)
    return HostSpec(
        hostname=NODE,
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/mapper/pve-root ro quiet "
            "intel_iommu=on"
        ),
        numa=("0-55,112-167", "56-111,168-223"),
        iommu_units=tuple(IommuUnit(f"dmar{n}") for n in range(8)),
        group_type="DMA-FQ",
        nvidia=NvidiaModule(version="570.172.08", open=True),
        extra_drivers=("vfio-pci",),
        devices=tuple(devices),
        files={
            "etc/pve/qemu-server/300.conf": VM_300,
            "etc/pve/qemu-server/301.conf": VM_301,
            "etc/pve/lxc/129.conf": CT_129,
            **extra,
            **(files or {}),
        },
        symlinks=symlinks,
    )
