"""Adversarial hosts from real reports (issue 29): each one a way GPUs really get wired on
a Proxmox node that none of the committed fixture hosts has, built per test into tmp_path.

One builder per shape, named after it, returns a `FieldHost`: the host as a
`pvegpu.testing.HostSpec` (the GPUs, drivers and numbers of a real host of that kind,
the exact config lines of the shape's sources) and the split spec its admin would write
(some GPUs to a VM, some to a container). Each builder's docstring cites where the shape
comes from; what pvegpu must say of it is asserted in tests/test_field_hosts.py.

Lines the sources give only in part are marked as inferred where they are written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from pvegpu.testing import (
    DeviceSpec,
    DrmInfo,
    HostSpec,
    IommuUnit,
    Link,
    MdevSpec,
    MdevTypeSpec,
    NvidiaInfo,
    NvidiaModule,
    write_host,
)
from sriov_host import igpu_host

GEN4_X16 = Link("16.0 GT/s PCIe", 16)
GEN3_X16 = Link("8.0 GT/s PCIe", 16)
GEN4_X4 = Link("16.0 GT/s PCIe", 4)
STORAGE = """\
dir: local
\tpath /var/lib/vz
\tcontent iso,vztmpl,backup,snippets

zfspool: local-zfs
\tpool rpool/data
\tsparse
\tcontent images,rootdir

"""
PVE_BLACKLIST = "blacklist nvidiafb\n"
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet"


@attrs.frozen
class Card:
    """What lspci -nn shows of a GPU model: its ids and class, and its audio function's."""

    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    pci_class: int = 0x030000
    revision: int = 0xA1
    audio: int | None = None
    """The HD-audio function's device id (same vendor), or None for a card without one."""


RTX3090 = Card(0x10DE, 0x2204, 0x1458, 0x403B, audio=0x1AEF)
QUADRO_P2000 = Card(0x10DE, 0x1C30, 0x10DE, 0x11B3, audio=0x10F1)
A100_SXM4 = Card(0x10DE, 0x20B0, 0x10DE, 0x134F, pci_class=0x030200)
RTX4090 = Card(0x10DE, 0x2684, 0x1043, 0x889D, audio=0x22BA)
RTX2080TI = Card(0x10DE, 0x1E07, 0x10DE, 0x12FA, audio=0x10F7)
GTX1080TI = Card(0x10DE, 0x1B06, 0x10DE, 0x120F, audio=0x10EF)
UHD770 = Card(0x8086, 0x4690, 0x1028, 0x0B1A, revision=0x0C)
ARC_A380 = Card(0x8086, 0x56A5, 0x172F, 0x3937, revision=0x05, audio=0x4F92)
RADEON_780M = Card(0x1002, 0x15BF, 0x1002, 0x0124, revision=0xC2, audio=0x1640)
RX6600 = Card(0x1002, 0x73FF, 0x1DA2, 0xE445, revision=0xC7, audio=0xAB28)
RX9070XT = Card(0x1002, 0x7550, 0x1DA2, 0xE490, revision=0xC0, audio=0xAB40)
GRANITE_RIDGE = Card(0x1002, 0x13C0, 0x1002, 0x13C0, revision=0xC5, audio=0x1640)
RPL_IGPU = Card(0x8086, 0xA7A0, 0x8086, 0x3024, revision=0x04)
NVIDIA_550 = NvidiaModule(
    version="550.127.05", open=False, build="Wed Oct  2 16:41:31 UTC 2024", uvm_major=509
)
NVIDIA_570 = NvidiaModule(version="570.133.20", open=True, uvm_major=505, caps_major=236)
NVIDIA_580 = NvidiaModule(version="580.95.05", open=True, uvm_major=508, caps_major=235)


@attrs.frozen
class FieldHost:
    """A shape's host and the split its admin asks for."""

    name: str
    host: HostSpec
    spec: str

    def write(self, tmp_path: Path) -> Path:
        """The host written under tmp_path/<name>; returns its root."""
        root = tmp_path / self.name
        write_host(self.host, root)
        return root

    def with_files(self, files: Mapping[str, str]) -> FieldHost:
        """The host with more files, or other contents for some."""
        return attrs.evolve(self, host=attrs.evolve(self.host, files={**self.host.files, **files}))

    def without(self, *paths: str) -> FieldHost:
        """The host without some of its files (a guest config, a hook)."""
        files = {p: t for p, t in self.host.files.items() if p not in paths}
        return attrs.evolve(self, host=attrs.evolve(self.host, files=files))

    def with_spec(self, spec: str) -> FieldHost:
        return attrs.evolve(self, spec=spec)


class _Groups:
    """IOMMU group numbers in bus order, as the kernel hands them out."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self) -> int:
        self.next += 1
        return self.next - 1


def _root(address: str, vendor: int, device: int, groups: _Groups, numa: int = -1) -> DeviceSpec:
    return DeviceSpec(
        address=address, vendor=vendor, device=device, pci_class=0x060000, numa_node=numa,
        iommu_group=groups(),
    )  # fmt: skip


def _port(
    address: str,
    vendor: int,
    device: int,
    groups: _Groups,
    *,
    numa: int = -1,
    link: Link = GEN4_X16,
    parent: str | None = None,
) -> DeviceSpec:
    return DeviceSpec(
        address=address, vendor=vendor, device=device, pci_class=0x060400, numa_node=numa,
        driver="pcieport", iommu_group=groups(), link=link, parent=parent,
    )  # fmt: skip


def _card(
    address: str,
    parent: str | None,
    card: Card,
    group: int,
    *,
    driver: str | None,
    numa: int = -1,
    link: Link | None = GEN4_X16,
    nvidia: NvidiaInfo | None = None,
    drm: DrmInfo | None = None,
    audio_driver: str | None = "snd_hda_intel",
    override: str | None = None,
) -> list[DeviceSpec]:
    """The GPU at .0 and its audio function at .1, in one IOMMU group."""
    found = [
        DeviceSpec(
            address=address, parent=parent, vendor=card.vendor, device=card.device,
            subsystem_vendor=card.subsystem_vendor, subsystem_device=card.subsystem_device,
            revision=card.revision, pci_class=card.pci_class, numa_node=numa,
            iommu_group=group, link=link, driver=driver, driver_override=override,
            nvidia=nvidia if driver == "nvidia" else None,
            drm=drm if driver not in (None, "vfio-pci") else None,
        )
    ]  # fmt: skip
    if card.audio is not None:
        found.append(
            DeviceSpec(
                address=address[:-1] + "1", parent=parent, vendor=card.vendor,
                device=card.audio, subsystem_vendor=card.subsystem_vendor,
                subsystem_device=card.subsystem_device, revision=card.revision,
                pci_class=0x040300, numa_node=numa, iommu_group=group, link=link,
                driver=audio_driver,
            )
        )  # fmt: skip
    return found


def _nvidia_desktop(
    hostname: str,
    cards: Sequence[tuple[str, Card, str]],
    *,
    module: NvidiaModule = NVIDIA_550,
    drm: bool = False,
    minors: Sequence[int] | None = None,
    uuids: Sequence[str | None] | None = None,
    files: Mapping[str, str] | None = None,
    cmdline: str = CMDLINE,
    drivers: Sequence[str] | None = None,
) -> HostSpec:
    """An Intel desktop (Alder Lake, VT-d) with NVIDIA cards on CPU and chipset root ports:
    `cards` is (bus address of the GPU, model, model name), each behind a port of its own;
    minors in PCI order unless given, DRM nodes too when nvidia-drm is loaded."""
    groups = _Groups()
    devices = [_root("0000:00:00.0", 0x8086, 0x4660, groups)]
    ports = ("0000:00:01.0", "0000:00:01.1", "0000:00:1c.0", "0000:00:1c.4", "0000:00:1d.0")
    port_ids = (0x460D, 0x460E, 0x7ABA, 0x7ABC, 0x7AB0)
    for index, (address, card, model) in enumerate(cards):
        port = ports[index]
        devices.append(_port(port, 0x8086, port_ids[index], groups))
        minor = index if minors is None else minors[index]
        driver = "nvidia" if drivers is None else drivers[index]
        uuid = None if uuids is None else uuids[index]
        devices += _card(
            address, port, card, groups(), driver=driver,
            nvidia=NvidiaInfo(model=model, minor=minor, uuid=uuid, vbios="94.02.42.00.A9"),
            drm=DrmInfo(minor, 128 + minor) if drm else None,
            audio_driver="snd_hda_intel" if driver == "nvidia" else driver,
        )  # fmt: skip
    return HostSpec(
        hostname=hostname,
        cmdline=cmdline,
        devices=tuple(devices),
        numa=("0-23",),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        nvidia=module,
        extra_drivers=("vfio-pci",),
        files={
            "etc/pve/storage.cfg": STORAGE,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            **(files or {}),
        },
    )


def _ct(hostname: str, vmid: int, lines: str, *, unprivileged: bool = True) -> str:
    """A container config as pve-container writes it, the GPU lines as the source wrote them."""
    head = (
        f"arch: amd64\ncores: 4\nhostname: {hostname}\nmemory: 8192\n"
        "net0: name=eth0,bridge=vmbr0,ip=dhcp,type=veth\nostype: debian\n"
        f"rootfs: local-zfs:subvol-{vmid}-disk-0,size=32G\n"
    )
    return head + ("unprivileged: 1\n" if unprivileged else "") + lines


def _vm(name: str, vmid: int, lines: str = "") -> str:
    return (
        f"bios: ovmf\ncores: 8\ncpu: host\nmachine: q35\nmemory: 16384\nname: {name}\n"
        f"ostype: l26\nscsi0: local-zfs:vm-{vmid}-disk-0,size=64G\n{lines}"
    )


def _spec(node: str, *pools: str) -> str:
    return f'node = "{node}"\n' + "".join(pools)


def vm_pool(name: str, gpus: Sequence[str], vmid: int, mapping: str) -> str:
    listed = ", ".join(f'"{g}"' for g in gpus)
    return (
        f'\n[[pools]]\nname = "{name}"\ngpus = [{listed}]\nmapping = {{ id = "{mapping}" }}\n'
        f"[pools.vfio.vm]\nvmid = {vmid}\n"
    )


def ct_pool(
    name: str, gpus: Sequence[str], vmid: int, devices: str = "dev", gid: int | None = None
) -> str:
    """A container pool; `gid`: the render group of an unprivileged container whose root
    file system is not readable here (Debian 12's LXC template: 104)."""
    listed = ", ".join(f'"{g}"' for g in gpus)
    return (
        f'\n[[pools]]\nname = "{name}"\ngpus = [{listed}]\n'
        f'[pools.lxc]\nvmid = {vmid}\ndevices = "{devices}"\n'
        + ("" if gid is None else f"gid = {gid}\n")
    )


# --- 1. nvidia-hook-visible-all -------------------------------------------------------

HOOK_ALL_LINES = """\
lxc.hook.pre-start: sh -c '[ ! -f /dev/nvidia-uvm ] && /usr/bin/nvidia-modprobe -c0 -u'
lxc.environment: NVIDIA_VISIBLE_DEVICES=all
lxc.environment: NVIDIA_DRIVER_CAPABILITIES=all
lxc.hook.mount: /usr/share/lxc/hooks/nvidia
lxc.hook.pre-start: sh -c 'chown :100000 /dev/nvidia*'
"""


def nvidia_hook_visible_all() -> FieldHost:
    """`nvidia-hook-visible-all`: Saberwolf64/Proxmox-Nvidia-LXC- `6.2-1.sh` appends LXC's
    nvidia hook with NVIDIA_VISIBLE_DEVICES=all (and two pre-start hooks: nvidia-modprobe,
    and `chown :100000 /dev/nvidia*` of every NVIDIA node on the host) to an unprivileged
    Plex container. lxc/lxc `hooks/nvidia` resolves `all` at every start through the
    driver. The host: two RTX 3090 and a Quadro P2000 on nvidia 550. The admin gives one
    3090 to a Windows VM and the other to an LLM container; Plex keeps the P2000."""
    host = _nvidia_desktop(
        "pve-plex",
        (
            ("0000:01:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
            ("0000:02:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
            ("0000:05:00.0", QUADRO_P2000, "Quadro P2000"),
        ),
        files={
            "etc/pve/lxc/110.conf": _ct("plex", 110, HOOK_ALL_LINES),
            "etc/pve/lxc/120.conf": _ct("llm", 120, ""),
            "etc/pve/qemu-server/200.conf": _vm("win11", 200),
        },
    )
    spec = _spec(
        "pve-plex",
        ct_pool("llm", ["01:00.0"], 120),
        vm_pool("win", ["02:00.0"], 200, "rtx3090-vm"),
    )
    return FieldHost("nvidia-hook-visible-all", host, spec)


# --- 2. nvidia-hook-index-or-uuid ------------------------------------------------------

# gvisor #9389's A100 host: NVML index (PCI order) is not the device minor.
A100_BUSES = ("0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0")
A100_MINORS = (2, 3, 0, 1)
A100_UUIDS = (
    "GPU-5a3b1c0e-4f1d-2b6e-8a9c-0d7e6f5a4b3c",
    "GPU-8ddd601a-494f-9489-46c6-d23129ccad16",
    "GPU-1f2e3d4c-5b6a-7988-a1b2-c3d4e5f60718",
    "GPU-9c8b7a69-5847-3625-1403-f2e1d0c9b8a7",
)
PVE_META_NVIDIA = f"""\
lxc.cgroup2.devices.allow: c 195:3 rwm
lxc.cgroup2.devices.allow: c 195:255 rwm
lxc.cgroup2.devices.allow: c 505:0 rwm
lxc.cgroup2.devices.allow: c 505:1 rwm
lxc.hook.mount: /usr/share/lxc/hooks/nvidia
lxc.environment: NVIDIA_VISIBLE_DEVICES={A100_UUIDS[1]}
lxc.environment: NVIDIA_DRIVER_CAPABILITIES=compute,utility
lxc.environment: NVIDIA_REQUIRE_CUDA=cuda>=12.8
"""


def nvidia_hook_index_or_uuid() -> FieldHost:
    """`nvidia-hook-index-or-uuid`: google/gvisor #9389's A100 host, where NVML index 0 is
    device minor 2, index 1 minor 3, index 2 minor 0; arki05/pve-meta-nvidia's README lines
    (a UUID selector with per-minor cgroup rules, uvm on major 505) in CT 140; a CT by
    index (141), one whose variable is `lxc.environment.runtime` (init only: the hook
    never sees it, CT 142) and one by `lxc.environment.hooks` (hooks only, CT 143): the
    scopes of lxc.container.conf(5). The admin gives index 0 (07:00.0) to a VM."""
    groups = _Groups()
    devices: list[DeviceSpec] = []
    for index, address in enumerate(A100_BUSES):
        bus = int(address[5:7], 16)
        root = f"0000:{bus - 1:02x}:01.1"
        devices.append(_port(root, 0x1022, 0x1483, groups, numa=0))
        devices += _card(
            address, root, A100_SXM4, groups(), driver="nvidia", numa=0,
            nvidia=NvidiaInfo(
                model="NVIDIA A100-SXM4-40GB", minor=A100_MINORS[index], uuid=A100_UUIDS[index],
                vbios="92.00.19.00.10",
            ),
        )  # fmt: skip
    hook = "lxc.hook.mount: /usr/share/lxc/hooks/nvidia\n"
    host = HostSpec(
        hostname="pve-a100",
        cmdline=CMDLINE + " amd_iommu=on iommu=pt",
        devices=(_root("0000:00:00.0", 0x1022, 0x1480, groups, 0), *devices),
        numa=("0-63,128-191", "64-127,192-255"),
        iommu_units=(IommuUnit("ivhd0"),),
        group_type="identity",
        sev_snp=False,
        nvidia=NVIDIA_570,
        extra_drivers=("vfio-pci",),
        files={
            "etc/pve/storage.cfg": STORAGE,
            "etc/pve/lxc/140.conf": _ct("train", 140, PVE_META_NVIDIA),
            "etc/pve/lxc/141.conf": _ct(
                "notebook", 141, "lxc.environment: NVIDIA_VISIBLE_DEVICES=1\n" + hook
            ),
            "etc/pve/lxc/142.conf": _ct(
                "batch", 142, "lxc.environment.runtime: NVIDIA_VISIBLE_DEVICES=2\n" + hook
            ),
            "etc/pve/lxc/143.conf": _ct(
                "eval", 143, "lxc.environment.hooks: NVIDIA_VISIBLE_DEVICES=3\n" + hook
            ),
            "etc/pve/qemu-server/300.conf": _vm("cuda-vm", 300),
        },
    )
    spec = _spec("pve-a100", vm_pool("vm", ["07:00.0"], 300, "a100-vm"))
    return FieldHost("nvidia-hook-index-or-uuid", host, spec)


# --- 3. cdi-spec-index-names -----------------------------------------------------------

RTX4090_UUIDS = (
    "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
    "GPU-4404041a-04cf-1ccf-9e70-f139a9b1e23c",
)


def _cdi_device(name: str, gpus: Sequence[tuple[str, int]]) -> str:
    """One device of `nvidia-ctk cdi generate`'s YAML: fields in alphabetical order
    (containerEdits before name), as NVIDIA/nvidia-container-toolkit #314 shows it."""
    nodes = "".join(
        f"    - path: /dev/nvidia{minor}\n    - path: /dev/dri/card{minor}\n"
        f"    - path: /dev/dri/renderD{128 + minor}\n"
        for _, minor in gpus
    )
    links = "".join(
        f"      - --link\n      - ../card{minor}::/dev/dri/by-path/pci-{address}-card\n"
        f"      - --link\n      - ../renderD{128 + minor}::/dev/dri/by-path/pci-{address}-render\n"
        for address, minor in gpus
    )
    return (
        "- containerEdits:\n    deviceNodes:\n"
        + nodes
        + "    hooks:\n    - args:\n      - nvidia-cdi-hook\n      - create-symlinks\n"
        + links
        + "      env:\n      - NVIDIA_CTK_DEBUG=false\n      hookName: createContainer\n"
        "      path: /usr/bin/nvidia-cdi-hook\n"
        f"  name: {name}\n"
    )


def cdi_yaml(gpus: Sequence[tuple[str, int, str]]) -> str:
    """The spec `nvidia-ctk cdi generate` writes for GPUs (address, minor, UUID), with the
    index and UUID names of its default strategy and `all`."""
    devices = ""
    for index, (address, minor, uuid) in enumerate(gpus):
        devices += _cdi_device(f'"{index}"', [(address, minor)])
        devices += _cdi_device(uuid, [(address, minor)])
    devices += _cdi_device("all", [(a, m) for a, m, _ in gpus])
    return (
        "---\ncdiVersion: 0.5.0\ncontainerEdits:\n  deviceNodes:\n"
        "  - path: /dev/nvidia-modeset\n  - path: /dev/nvidia-uvm\n"
        "  - path: /dev/nvidia-uvm-tools\n  - path: /dev/nvidiactl\n"
        "  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n"
        f"devices:\n{devices}kind: nvidia.com/gpu\n"
    )


def cdi_spec_index_names() -> FieldHost:
    """`cdi-spec-index-names`: a CDI spec `nvidia-ctk cdi generate` wrote (device names by
    index and by UUID, and `all`; NVIDIA/nvidia-container-toolkit #314, #856), read by a
    Docker runtime inside an LXC; NVIDIA/NemoClaw #4733 and dra-driver-nvidia-gpu #1458:
    nothing regenerates it when a GPU changes driver. The host: two RTX 4090 with
    nvidia-drm loaded, the spec in /var/run/cdi (the #856 unit regenerates it at boot)
    and an older copy in /etc/cdi as JSON. The admin gives the second 4090 to a VM."""
    gpus = (
        ("0000:01:00.0", 0, RTX4090_UUIDS[0]),
        ("0000:02:00.0", 1, RTX4090_UUIDS[1]),
    )
    generated = cdi_yaml(gpus)
    # The same spec as JSON, on one line, as `--format=json` writes it (inferred: only the
    # device nodes are kept here).
    stale = (
        '{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":['
        '{"name":"1","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia1"}]}},'
        '{"name":"all","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"},'
        '{"path":"/dev/nvidia1"}]}}],"containerEdits":{"deviceNodes":'
        '[{"path":"/dev/nvidiactl"}]}}\n'
    )
    host = _nvidia_desktop(
        "pve-docker",
        (
            ("0000:01:00.0", RTX4090, "NVIDIA GeForce RTX 4090"),
            ("0000:02:00.0", RTX4090, "NVIDIA GeForce RTX 4090"),
        ),
        module=NVIDIA_580,
        drm=True,
        uuids=RTX4090_UUIDS,
        files={
            "var/run/cdi/nvidia.yaml": generated,
            "etc/cdi/nvidia.json": stale,
            "etc/systemd/system/nvidia-cdi-generate.service": (
                "[Unit]\nDescription=Generate the NVIDIA CDI spec\n\n[Service]\nType=oneshot\n"
                "ExecStart=nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml\n\n"
                "[Install]\nWantedBy=multi-user.target\n"
            ),
            "etc/pve/lxc/140.conf": _ct("docker", 140, "features: nesting=1\n"),
            "etc/pve/qemu-server/410.conf": _vm("gaming", 410),
        },
    )
    spec = _spec(
        "pve-docker",
        ct_pool("docker", ["01:00.0"], 140),
        vm_pool("vm", ["02:00.0"], 410, "rtx4090-vm"),
    )
    return FieldHost("cdi-spec-index-names", host, spec)


# --- 4. dri-dir-bind-with-per-minor-rules ----------------------------------------------

TTECK_PLEX = """\
lxc.cgroup2.devices.allow: c 226:0 rwm
lxc.cgroup2.devices.allow: c 226:128 rwm
lxc.cgroup2.devices.allow: c 29:0 rwm
lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir
lxc.mount.entry: /dev/dri/renderD128 dev/renderD128 none bind,optional,create=file
"""
THEHELLSITE = """\
lxc.cgroup2.devices.allow: c 226:0 rwm
lxc.cgroup2.devices.allow: c 226:128 rwm
lxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file 0, 0
lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir
lxc.hook.pre-start: sh -c "chown -R 100000:100000 /dev/dri"
lxc.hook.pre-start: sh -c "chown 100000:100044 /dev/dri/card0"
"""
# community-scripts build.func before 2025-12-04, unprivileged branch, on a host with
# card0 and card1: two dev0 keys.
COMMUNITY_TWO_DEV0 = """\
dev0: /dev/dri/card0,gid=44
dev0: /dev/dri/card1,gid=44
dev1: /dev/dri/renderD128,gid=104
"""


def _intel_media(hostname: str, files: Mapping[str, str], cmdline: str = CMDLINE) -> HostSpec:
    """A Core i5-12500 box: its UHD 770 (i915, card0 / renderD128) and an Arc A380 (i915,
    card1 / renderD129) on the CPU's x16 port."""
    groups = _Groups()
    devices = [_root("0000:00:00.0", 0x8086, 0x4650, groups)]
    devices += _card(
        "0000:00:02.0", None, UHD770, groups(), driver="i915", link=None, drm=DrmInfo(0, 128)
    )
    devices.append(_port("0000:00:01.0", 0x8086, 0x460D, groups))
    devices += _card(
        "0000:03:00.0", "0000:00:01.0", ARC_A380, groups(), driver="i915", drm=DrmInfo(1, 129)
    )
    return HostSpec(
        hostname=hostname,
        cmdline=cmdline,
        devices=tuple(devices),
        numa=("0-11",),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        extra_drivers=("vfio-pci",),
        files={
            "etc/pve/storage.cfg": STORAGE,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            **files,
        },
    )


def dri_dir_bind_with_per_minor_rules() -> FieldHost:
    """`dri-dir-bind-with-per-minor-rules`: the lines tteck/Proxmox #24's Plex helper wrote
    (rules for minors 0 and 128, all of /dev/dri bound, renderD128 bound outside dev/dri),
    TheHellSite/proxmox_collection #1's config (pre-start hooks that chown the host's
    /dev/dri), and community-scripts' pre-2025-12-04 unprivileged branch (two `dev0:` keys
    on a host with card0 and card1). The host: a UHD 770 (card0, renderD128) and an Arc
    A380 (card1, renderD129). The admin gives the Arc to Jellyfin and the UHD 770 to a
    Blue Iris VM: after the reboot the Arc is card0 and renderD128."""
    host = _intel_media(
        "pve-media",
        {
            "etc/pve/lxc/120.conf": _ct("jellyfin", 120, ""),
            "etc/pve/lxc/122.conf": _ct("plex", 122, TTECK_PLEX, unprivileged=False),
            "etc/pve/lxc/123.conf": _ct("docker", 123, THEHELLSITE),
            "etc/pve/lxc/124.conf": _ct("emby", 124, COMMUNITY_TWO_DEV0),
            "etc/pve/qemu-server/310.conf": _vm("blueiris", 310),
        },
    )
    spec = _spec(
        "pve-media",
        ct_pool("jellyfin", ["03:00.0"], 120, gid=104),
        vm_pool("nvr", ["00:02.0"], 310, "igpu-vm"),
    )
    return FieldHost("dri-dir-bind-with-per-minor-rules", host, spec)


# --- 5. drm-number-flip-and-by-path ----------------------------------------------------

PROXMENUX_DRI = """\
dev0: /dev/dri/card1,gid=44
dev1: /dev/dri/card2,gid=44
dev2: /dev/dri/renderD128,gid=104
dev3: /dev/dri/renderD129,gid=104
"""


def drm_number_flip_and_by_path() -> FieldHost:
    """`drm-number-flip-and-by-path`: CachyOS/linux-cachyos #552 (kernel 6.16): card0 moved
    to card1 and card1 to card2 (simpledrm keeps card0), and the iGPU got the *higher*
    render minor: `pci-0000:00:02.0-render -> ../renderD129`, `pci-0000:01:00.0-render ->
    ../renderD128`. ProxMenux `add_gpu_lxc.sh` writes `dev${idx}: ${dri_dev},gid=${gid}`
    for each node of its list that exists (CT 105); community-scripts #6270 asks for
    by-path names instead (CT 106, the iGPU's). The host: a Raptor Lake iGPU and an
    RX 6600 on amdgpu. The admin gives the RX 6600 to a VM; the iGPU stays."""
    groups = _Groups()
    devices = [_root("0000:00:00.0", 0x8086, 0xA700, groups)]
    devices += _card(
        "0000:00:02.0", None, RPL_IGPU, groups(), driver="i915", link=None, drm=DrmInfo(2, 129)
    )
    devices.append(_port("0000:00:01.0", 0x8086, 0xA70D, groups))
    devices += _card(
        "0000:01:00.0", "0000:00:01.0", RX6600, groups(), driver="amdgpu", drm=DrmInfo(1, 128)
    )
    by_path = "dev/dri/by-path"
    host = HostSpec(
        hostname="pve-desk",
        cmdline=CMDLINE + " intel_iommu=on",
        devices=tuple(devices),
        numa=("0-19",),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        extra_drivers=("vfio-pci",),
        files={
            "etc/pve/storage.cfg": STORAGE,
            "etc/pve/lxc/105.conf": _ct("jellyfin", 105, PROXMENUX_DRI),
            "etc/pve/lxc/106.conf": _ct(
                "frigate", 106, f"dev0: /{by_path}/pci-0000:00:02.0-render,gid=104\n"
            ),
            "etc/pve/qemu-server/220.conf": _vm("gaming", 220),
        },
        symlinks={
            f"{by_path}/pci-0000:00:02.0-card": "../card2",
            f"{by_path}/pci-0000:00:02.0-render": "../renderD129",
            f"{by_path}/pci-0000:01:00.0-card": "../card1",
            f"{by_path}/pci-0000:01:00.0-render": "../renderD128",
        },
    )
    spec = _spec("pve-desk", vm_pool("gaming", ["01:00.0"], 220, "rx6600-vm"))
    return FieldHost("drm-number-flip-and-by-path", host, spec)


# --- 6. devN-every-nvidia-node ---------------------------------------------------------

PROXMENUX_NVIDIA = """\
dev0: /dev/nvidia0,gid=44
dev1: /dev/nvidia1,gid=44
dev2: /dev/nvidiactl,gid=44
dev3: /dev/nvidia-uvm,gid=44
dev4: /dev/nvidia-uvm-tools,gid=44
dev5: /dev/nvidia-modeset,gid=44
dev6: /dev/nvidia-caps/nvidia-cap1,gid=44
dev7: /dev/nvidia-caps/nvidia-cap2,gid=44
"""


def devn_every_nvidia_node() -> FieldHost:
    """`devN-every-nvidia-node`: ProxMenux `_configure_nvidia` (and community-scripts'
    build.func) hands every NVIDIA node that exists at creation to the container, by
    number, gid = the host's video group: two such containers (Jellyfin and Ollama) on a
    host with two RTX 3090. The admin gives the first 3090 to a VM and nothing else: after
    the reboot the second one is /dev/nvidia0."""
    host = _nvidia_desktop(
        "pve-ollama",
        (
            ("0000:01:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
            ("0000:02:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
        ),
        files={
            "etc/pve/lxc/105.conf": _ct("jellyfin", 105, PROXMENUX_NVIDIA),
            "etc/pve/lxc/106.conf": _ct("ollama", 106, PROXMENUX_NVIDIA),
            "etc/pve/qemu-server/200.conf": _vm("win11", 200),
        },
    )
    spec = _spec("pve-ollama", vm_pool("win", ["01:00.0"], 200, "rtx3090-vm"))
    return FieldHost("devN-every-nvidia-node", host, spec)


# --- 7. cgroup-allow-all-privileged ----------------------------------------------------

COMMUNITY_USB = """\
# Automatic USB passthrough (privileged container)
lxc.cgroup2.devices.allow: a
lxc.cap.drop:
lxc.cgroup2.devices.allow: c 188:* rwm
lxc.cgroup2.devices.allow: c 189:* rwm
lxc.mount.entry: /dev/serial/by-id  dev/serial/by-id  none bind,optional,create=dir
lxc.mount.entry: /dev/ttyUSB0       dev/ttyUSB0       none bind,optional,create=file
lxc.mount.entry: /dev/ttyUSB1       dev/ttyUSB1       none bind,optional,create=file
lxc.mount.entry: /dev/ttyACM0       dev/ttyACM0       none bind,optional,create=file
lxc.mount.entry: /dev/ttyACM1       dev/ttyACM1       none bind,optional,create=file
"""


def cgroup_allow_all_privileged() -> FieldHost:
    """`cgroup-allow-all-privileged`: community-scripts/ProxmoxVE `misc/build.func`
    `configure_usb_passthrough`, appended to every privileged container the helper makes:
    `lxc.cgroup2.devices.allow: a` with an empty `lxc.cap.drop:` opens every device. A
    zigbee2mqtt container made so, on a host with two RTX 4090 (nvidia-drm loaded) split
    between a VM and an Ollama container."""
    host = _nvidia_desktop(
        "pve-home",
        (
            ("0000:01:00.0", RTX4090, "NVIDIA GeForce RTX 4090"),
            ("0000:02:00.0", RTX4090, "NVIDIA GeForce RTX 4090"),
        ),
        module=NVIDIA_580,
        drm=True,
        files={
            "etc/pve/lxc/107.conf": _ct("zigbee2mqtt", 107, COMMUNITY_USB, unprivileged=False),
            "etc/pve/lxc/140.conf": _ct("ollama", 140, ""),
            "etc/pve/qemu-server/410.conf": _vm("gaming", 410),
        },
    )
    spec = _spec(
        "pve-home",
        ct_pool("ollama", ["01:00.0"], 140),
        vm_pool("vm", ["02:00.0"], 410, "rtx4090-vm"),
    )
    return FieldHost("cgroup-allow-all-privileged", host, spec)


# --- 8. cgroup-v1-keys-pve7-8-9 --------------------------------------------------------

V1_KEYS = """\
lxc.cgroup.devices.allow: c 226:0 rwm
lxc.cgroup.devices.allow: c 226:128 rwm
lxc.cgroup.devices.allow: c 29:0 rwm
lxc.autodev: 1
lxc.hook.autodev: /var/lib/lxc/201/mount_hook.sh
"""
# The hook's text is not in the source: the usual autodev hook of LXC guides (inferred).
MOUNT_HOOK = """\
#!/bin/sh
mkdir -p ${LXC_ROOTFS_MOUNT}/dev/dri
mknod -m 666 ${LXC_ROOTFS_MOUNT}/dev/dri/card0 c 226 0
mknod -m 666 ${LXC_ROOTFS_MOUNT}/dev/dri/renderD128 c 226 128
mknod -m 666 ${LXC_ROOTFS_MOUNT}/dev/fb0 c 29 0
"""
HYBRID = " systemd.unified_cgroup_hierarchy=0"


def cgroup_v1_keys(*, hybrid: bool) -> FieldHost:
    """`cgroup-v1-keys-pve7-8-9`: a public PVE container config (exact-string index id
    21449075582) with `lxc.cgroup.devices.allow` for card0, renderD128 and fb0 and an
    autodev hook that makes the nodes. pve8to9 `check_containers_cgroup_compat`: the key
    is ignored on the unified hierarchy, live on PVE 7/8 booted with
    `systemd.unified_cgroup_hierarchy=0` (`hybrid`). The host: the UHD 770 and Arc A380
    box; the admin gives the UHD 770 to a VM and the Arc to Jellyfin."""
    files = {
        "etc/pve/lxc/120.conf": _ct("jellyfin", 120, ""),
        "etc/pve/lxc/201.conf": _ct("kodi", 201, V1_KEYS, unprivileged=False),
        "var/lib/lxc/201/mount_hook.sh": MOUNT_HOOK,
        "etc/pve/qemu-server/310.conf": _vm("blueiris", 310),
    }
    if hybrid:
        # The legacy hierarchy mounts a devices controller of its own.
        files["sys/fs/cgroup/devices/devices.list"] = "a *:* rwm\n"
    else:
        files["sys/fs/cgroup/cgroup.controllers"] = "cpuset cpu io memory hugetlb pids rdma misc\n"
    host = _intel_media("pve-media", files, cmdline=CMDLINE + (HYBRID if hybrid else ""))
    spec = _spec(
        "pve-media",
        ct_pool("jellyfin", ["03:00.0"], 120, gid=104),
        vm_pool("nvr", ["00:02.0"], 310, "igpu-vm"),
    )
    return FieldHost("cgroup-v1-keys" + ("-hybrid" if hybrid else ""), host, spec)


def cgroup_v1_keys_unified() -> FieldHost:
    return cgroup_v1_keys(hybrid=False)


def cgroup_v1_keys_hybrid() -> FieldHost:
    return cgroup_v1_keys(hybrid=True)


# --- 9. dynamic-majors-and-late-nodes --------------------------------------------------

# Written at a boot when nvidia-uvm had 506 and nvidia-caps 509 (Telmate #1138's pair);
# on this boot /proc/devices gives nvidia-uvm 508 and nvidia-caps 235.
FRIGATE_RAW = """\
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 506:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
"""
WOLF_UNIT = """\
[Unit]
Description=Run nvidia-smi once at boot to initialize GPU
After=systemd-modules-load.service
Before=pve-guests.service

[Service]
Type=oneshot
ExecStart=/usr/bin/nvidia-smi

[Install]
WantedBy=multi-user.target
"""
PROXMENUX_NVIDIA_RULES = """\
KERNEL=="nvidia", RUN+="/bin/bash -c '/usr/bin/nvidia-smi -L'"
KERNEL=="nvidia_uvm", RUN+="/bin/bash -c '/usr/bin/nvidia-modprobe -c0 -u'"
"""


def dynamic_majors_and_late_nodes() -> FieldHost:
    """`dynamic-majors-and-late-nodes`: jammsen/proxmox-setup-scripts #7 ("every new kernel
    changes the cgroups", Frigate in an LXC) with Telmate/terraform-provider-proxmox
    #1138's two dynamic majors (506, 509) in a Frigate container; games-on-whales/wolf
    #361's nvidia-smi oneshot before pve-guests; ProxMenux's 70-nvidia.rules. The host:
    two RTX 3090 on nvidia 580 (uvm on 508 this boot). The admin gives the first to a VM
    and keeps the second for the Frigate container, which becomes its pool."""
    host = _nvidia_desktop(
        "pve-nvr",
        (
            ("0000:01:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
            ("0000:02:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
        ),
        module=NVIDIA_580,
        files={
            "etc/pve/lxc/150.conf": _ct("frigate", 150, FRIGATE_RAW, unprivileged=False),
            "etc/pve/lxc/151.conf": _ct(
                "tdarr",
                151,
                "lxc.cgroup2.devices.allow: c 506:* rwm\nlxc.cgroup2.devices.allow: c 509:* rwm\n",
            ),
            "etc/systemd/system/nvidia-init.service": WOLF_UNIT,
            "etc/udev/rules.d/70-nvidia.rules": PROXMENUX_NVIDIA_RULES,
            "etc/pve/qemu-server/200.conf": _vm("win11", 200),
        },
    )
    spec = _spec(
        "pve-nvr",
        vm_pool("win", ["01:00.0"], 200, "rtx3090-vm"),
        ct_pool("frigate", ["02:00.0"], 150, devices="raw"),
    )
    return FieldHost("dynamic-majors-and-late-nodes", host, spec)


# --- 10. vfio-move-renumbers-minors ----------------------------------------------------

RTX_A6000 = Card(0x10DE, 0x2230, 0x10DE, 0x1459, audio=0x1AEF)


def vfio_move_renumbers_minors() -> FieldHost:
    """`vfio-move-renumbers-minors`: canonical/lxd #12128 and lxc/lxc #4332 (a GPU that goes
    to a VM leaves `nvidia-smi -L`), NVIDIA/nvidia-docker #1432 (minors in boot-time
    discovery order), dra-driver-nvidia-gpu #428 (the index shifts at once, the minor at
    the reboot). The host: four RTX A6000 with nvidia-drm; containers name /dev/nvidia2
    and /dev/nvidia3 by mount entry, rule and devN, and renderD130 by number. The admin
    gives the second GPU (minor 1, in the middle of the bus order) to a VM."""
    cards = tuple((f"0000:0{bus}:00.0", RTX_A6000, "NVIDIA RTX A6000") for bus in (1, 2, 3, 4))
    host = _nvidia_desktop(
        "pve-render",
        cards,
        module=NVIDIA_580,
        drm=True,
        files={
            "etc/pve/lxc/150.conf": _ct(
                "blender", 150,
                "lxc.cgroup2.devices.allow: c 195:2 rwm\n"
                "lxc.cgroup2.devices.allow: c 195:255 rwm\n"
                "lxc.mount.entry: /dev/nvidia2 dev/nvidia2 none bind,optional,create=file\n"
                "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n",
            ),
            "etc/pve/lxc/151.conf": _ct(
                "comfyui", 151, "dev0: /dev/nvidia3,gid=44\ndev1: /dev/nvidiactl,gid=44\n"
                "dev2: /dev/nvidia-uvm,gid=44\n",
            ),
            "etc/pve/lxc/152.conf": _ct(
                "transcode", 152, "dev0: /dev/dri/renderD130,gid=104\n"
            ),
            # NVENC through /dev/nvidia3 and VA-API through its render node (inferred: the
            # pair Jellyfin's NVIDIA guide asks for).
            "etc/pve/lxc/153.conf": _ct(
                "jellyfin", 153, "dev0: /dev/nvidia3,gid=44\ndev1: /dev/nvidiactl,gid=44\n"
                "dev2: /dev/dri/renderD131,gid=104\n",
            ),
            "etc/pve/qemu-server/200.conf": _vm("cad", 200),
        },
    )  # fmt: skip
    spec = _spec("pve-render", vm_pool("cad", ["02:00.0"], 200, "a6000-vm"))
    return FieldHost("vfio-move-renumbers-minors", host, spec)


# --- 11. vm-hookscript-driver-juggling -------------------------------------------------

ISC30_HOOK = """\
#!/bin/bash
vmid="$1"
phase="$2"

if [ "$phase" == "pre-start" ]; then
    # Unbind gpu from amdgpu
    echo "0000:10:00.0" > /sys/bus/pci/drivers/amdgpu/unbind 2>/dev/null
    echo "0000:10:00.1" > /sys/bus/pci/drivers/snd_hda_intel/unbind 2>/dev/null
    sleep 5
elif [ "$phase" == "post-stop" ]; then
    echo "0000:10:00.0" > /sys/bus/pci/drivers/amdgpu/bind 2>/dev/null
fi
"""
# ComicBit/proxmox-nvidia-vfio-handoff: the hook runs the handoff script, which picks the
# first NVIDIA GPU itself and unloads the nvidia modules (the script's text is inferred
# from its README: its steps, not its bytes).
HANDOFF_HOOK = """\
#!/bin/bash
case "$2" in
  pre-start) /usr/local/bin/gpu-handoff.sh to_vfio ;;
  post-stop) /usr/local/bin/gpu-handoff.sh to_nvidia ;;
esac
"""
HANDOFF = """\
#!/bin/bash
# Auto-detect the first NVIDIA GPU
GPU=$(lspci -D -d 10de: | awk '/VGA|3D/ {print $1; exit}')
if [ "$1" = to_vfio ]; then
  modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia
  echo vfio-pci > /sys/bus/pci/devices/$GPU/driver_override
  echo "$GPU" > /sys/bus/pci/drivers_probe || {
    echo 1 > /sys/bus/pci/devices/$GPU/remove; echo 1 > /sys/bus/pci/rescan; }
else
  echo > /sys/bus/pci/devices/$GPU/driver_override
  echo "$GPU" > /sys/bus/pci/drivers/vfio-pci/unbind
  modprobe nvidia_drm
fi
"""
# fidpa/proxmox-gpu-passthrough hookscripts/reset-method.sh (its defaults).
RESET_METHOD = """\
#!/bin/bash
BDF="${BDF:-0000:03:00.0}"
RESET_METHOD="${RESET_METHOD:-bus}"
if [ "$2" = "pre-start" ]; then
  echo "$RESET_METHOD" > "/sys/bus/pci/devices/$BDF/reset_method"
fi
"""
RTX4060 = Card(0x10DE, 0x2882, 0x1458, 0x4116, audio=0x22BE)


def vm_hookscript_driver_juggling() -> FieldHost:
    """`vm-hookscript-driver-juggling`: isc30/ryzen-gpu-passthrough-proxmox #131's
    hookscript (unbinds the 780M at 10:00.0 from amdgpu at pre-start, rebinds it at
    post-stop), ComicBit/proxmox-nvidia-vfio-handoff's handoff (the first NVIDIA GPU,
    modules unloaded), fidpa/proxmox-gpu-passthrough `reset-method.sh` (default BDF
    0000:03:00.0). The host: a Ryzen 7 7840HS mini PC with its 780M and an RTX 4060 on
    OCuLink. The admin keeps the 780M for Jellyfin and gives the 4060 to VM 111."""
    groups = _Groups()
    devices = [
        _root("0000:00:00.0", 0x1022, 0x14E8, groups),
        _port("0000:00:02.2", 0x1022, 0x14EE, groups, link=GEN4_X4),
        *_card(
            "0000:03:00.0", "0000:00:02.2", RTX4060, groups(), driver="nvidia", link=GEN4_X4,
            nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 4060", minor=0),
        ),
        _port("0000:00:08.1", 0x1022, 0x14EB, groups),
        *_card(
            "0000:10:00.0", "0000:00:08.1", RADEON_780M, groups(), driver="amdgpu",
            drm=DrmInfo(0, 128),
        ),
    ]  # fmt: skip
    host = HostSpec(
        hostname="pve-mini",
        cmdline=CMDLINE + " amd_iommu=on iommu=pt",
        devices=tuple(devices),
        numa=("0-15",),
        iommu_units=(IommuUnit("ivhd0"),),
        group_type="identity",
        sev_snp=False,
        nvidia=NVIDIA_580,
        char_devices=((237, "kfd"),),
        extra_drivers=("vfio-pci",),
        files={
            "etc/pve/storage.cfg": STORAGE,
            "etc/pve/lxc/105.conf": _ct("jellyfin", 105, ""),
            "etc/pve/qemu-server/100.conf": _vm(
                "win-igpu",
                100,
                "hookscript: local:snippets/gpu-hook.sh\nhostpci0: 0000:10:00,pcie=1,x-vga=1\n",
            ),
            "var/lib/vz/snippets/gpu-hook.sh": ISC30_HOOK,
            "etc/pve/qemu-server/111.conf": _vm(
                "win-4060", 111, "hookscript: local:snippets/vm111-hook.sh\n"
            ),
            "var/lib/vz/snippets/vm111-hook.sh": HANDOFF_HOOK,
            "usr/local/bin/gpu-handoff.sh": HANDOFF,
            "etc/pve/qemu-server/112.conf": _vm(
                "linux-4060", 112, "hookscript: local:snippets/reset-method.sh\n"
            ),
            "var/lib/vz/snippets/reset-method.sh": RESET_METHOD,
        },
    )
    spec = _spec(
        "pve-mini",
        ct_pool("jellyfin", ["10:00.0"], 105, gid=104),
        vm_pool("vm", ["03:00.0"], 111, "rtx4060-vm"),
    )
    return FieldHost("vm-hookscript-driver-juggling", host, spec)


# --- 12. args-vfio-device --------------------------------------------------------------

VGPU_UNLOCK_MDEV = "ed49b5c8-8a6c-4621-98e5-fac5204b9c99"
VGPU_UNLOCK_ARGS = (
    f"args: -device vfio-pci,sysfsdev=/sys/bus/mdev/devices/{VGPU_UNLOCK_MDEV},display=off,"
    "id=hostpci0.0,bus=ich9-pcie-port-1,addr=0x0.0,x-pci-vendor-id=0x10de,"
    "x-pci-device-id=0x1b38 -uuid 00000000-0000-0000-0000-000000000101\n"
)


def args_vfio_device() -> FieldHost:
    """`args-vfio-device`: DualCoder/vgpu_unlock #75 and #9: a vGPU passed by `args:`
    (`-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/<uuid>`, spoofed as a Tesla P40,
    with `-uuid`), invisible to whatever reads only hostpciN; isc30 #142's `args: -cpu`.
    The host: an RTX 2080 Ti with vgpu_unlock's mdev types (one instance made) and a
    GTX 1080 Ti. The admin gives the 2080 Ti to an AI container and the 1080 Ti to VM 102."""
    groups = _Groups()
    vgpu = MdevTypeSpec("nvidia-259", "GRID RTX6000-4Q", 5)
    devices = [
        _root("0000:00:00.0", 0x8086, 0x3E30, groups),
        _port("0000:00:01.0", 0x8086, 0x1901, groups, link=GEN3_X16),
        *_card(
            "0000:01:00.0", "0000:00:01.0", RTX2080TI, groups(), driver="nvidia",
            link=GEN3_X16, nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 2080 Ti", minor=0),
        ),
        _port("0000:00:01.1", 0x8086, 0x1905, groups, link=GEN3_X16),
        *_card(
            "0000:02:00.0", "0000:00:01.1", GTX1080TI, groups(), driver="nvidia",
            link=GEN3_X16, nvidia=NvidiaInfo(model="NVIDIA GeForce GTX 1080 Ti", minor=1),
        ),
    ]  # fmt: skip
    devices[2] = attrs.evolve(devices[2], mdev_types=(vgpu,))
    host = HostSpec(
        hostname="pve-vgpu",
        cmdline=CMDLINE + " intel_iommu=on",
        devices=tuple(devices),
        numa=("0-11",),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        nvidia=NVIDIA_550,
        extra_drivers=("vfio-pci", "nvidia-vgpu-vfio"),
        mdevs=(MdevSpec(VGPU_UNLOCK_MDEV, "0000:01:00.0", "nvidia-259"),),
        files={
            "etc/pve/storage.cfg": STORAGE,
            "etc/pve/lxc/130.conf": _ct("ai", 130, ""),
            "etc/pve/qemu-server/101.conf": _vm("vgpu-win", 101, VGPU_UNLOCK_ARGS),
            "etc/pve/qemu-server/102.conf": _vm(
                "gaming", 102, "args: -cpu 'host,-hypervisor,kvm=off'\n"
            ),
        },
    )
    spec = _spec(
        "pve-vgpu",
        ct_pool("ai", ["01:00.0"], 130),
        vm_pool("vm", ["02:00.0"], 102, "gtx1080ti-vm"),
    )
    return FieldHost("args-vfio-device", host, spec)


# --- 13. udev-driver-override-and-mode-rules -------------------------------------------

PROXMENUX_VFIO_RULE = 'SUBSYSTEM=="pci", KERNEL=="0000:01:00.0", ATTR{driver_override}="vfio-pci"\n'
# anomixer/proxmox-vgpu-installer appends one line per member of a non-selected GPU's
# IOMMU group: here the switch's downstream port shares the group (no ACS on it).
ANOMIXER_RULES = "".join(
    f'ACTION=="add", SUBSYSTEM=="pci", KERNELS=="{member}", DRIVERS=="*", '
    'ATTR{driver_override}="vfio-pci"\n'
    for member in ("0000:05:08.0", "0000:06:00.0", "0000:06:00.1")
)
RPUFKY_RULES = 'KERNEL=="renderD128", MODE="0666"\nKERNEL=="card1", MODE="0666"\n'
PLX_UP = 0x8747


def udev_driver_override_and_mode_rules() -> FieldHost:
    """`udev-driver-override-and-mode-rules`: ProxMenux's
    `/etc/udev/rules.d/10-proxmenux-vfio-bind.rules` (one KERNEL== line per BDF),
    anomixer/proxmox-vgpu-installer's `90-vfio-pci.rules` (KERNELS== for every member of a
    non-selected GPU's group, a bridge among them, which matches everything below it), and
    r-pufky's `59-igpu-passthrough.rules` (MODE on renderD128 and card1). The host: a
    UHD 770 (card1, renderD128: simpledrm kept card0), an RTX 3090 on vfio-pci by the
    ProxMenux rule, and a second one behind a PLX switch on vfio-pci by anomixer's. The
    admin keeps the first for a VM and now wants the second for an LLM container."""
    groups = _Groups()
    devices = [_root("0000:00:00.0", 0x8086, 0x4660, groups)]
    devices += _card(
        "0000:00:02.0", None, UHD770, groups(), driver="i915", link=None, drm=DrmInfo(1, 128)
    )
    devices.append(_port("0000:00:01.0", 0x8086, 0x460D, groups))
    devices += _card(
        "0000:01:00.0", "0000:00:01.0", RTX3090, groups(), driver="vfio-pci",
        override="vfio-pci",
    )  # fmt: skip
    devices.append(_port("0000:00:1c.0", 0x8086, 0x7ABA, groups))
    devices.append(_port("0000:04:00.0", 0x10B5, PLX_UP, groups, parent="0000:00:1c.0"))
    shared = groups()
    devices.append(
        attrs.evolve(
            _port("0000:05:08.0", 0x10B5, PLX_UP, groups, parent="0000:04:00.0"),
            iommu_group=shared,
        )
    )
    devices += _card(
        "0000:06:00.0", "0000:05:08.0", RTX3090, shared, driver="vfio-pci", override="vfio-pci"
    )
    host = HostSpec(
        hostname="pve-lab",
        cmdline=CMDLINE + " intel_iommu=on",
        devices=tuple(devices),
        numa=("0-23",),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        nvidia=NVIDIA_550,
        extra_drivers=("nvidia",),
        files={
            "etc/pve/storage.cfg": STORAGE,
            "etc/udev/rules.d/10-proxmenux-vfio-bind.rules": PROXMENUX_VFIO_RULE,
            "etc/udev/rules.d/90-vfio-pci.rules": ANOMIXER_RULES,
            "etc/udev/rules.d/59-igpu-passthrough.rules": RPUFKY_RULES,
            "etc/pve/lxc/130.conf": _ct("llm", 130, ""),
            "etc/pve/qemu-server/200.conf": _vm("win11", 200, "hostpci0: 0000:01:00,pcie=1\n"),
        },
    )
    spec = _spec(
        "pve-lab",
        vm_pool("win", ["01:00.0"], 200, "rtx3090-vm"),
        ct_pool("llm", ["06:00.0"], 130),
    )
    return FieldHost("udev-driver-override-and-mode-rules", host, spec)


# --- 14. boot-time-binders-sysfs-conf-and-units ----------------------------------------

RTX5070 = Card(0x10DE, 0x2F04, 0x1462, 0x5316, audio=0x2F80)
RTX3060 = Card(0x10DE, 0x2504, 0x1458, 0x4096, audio=0x228E)
HANDOFF_UNITS = {
    "etc/systemd/system/gpu-to-vfio.service": (
        "[Unit]\nDescription=Hand the GPU to vfio-pci\nBefore=pve-guests.service\n\n"
        "[Service]\nType=oneshot\nExecStart=/usr/local/bin/gpu-handoff.sh to_vfio\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    ),
    "etc/systemd/system/gpu-to-nvidia.service": (
        "[Unit]\nDescription=Hand the GPU back to nvidia\n\n"
        "[Service]\nType=oneshot\nExecStart=/usr/local/bin/gpu-handoff.sh to_nvidia\n"
    ),
    "usr/local/bin/gpu-handoff.sh": HANDOFF,
}


def boot_time_binders() -> FieldHost:
    """`boot-time-binders-sysfs-conf-and-units`: ComicBit/proxmox-nvidia-vfio-handoff's
    `gpu-to-vfio.service` / `gpu-to-nvidia.service` (ExecStart=/usr/local/bin/gpu-handoff.sh,
    which picks the first NVIDIA GPU and unloads the nvidia modules), wolf #361's
    nvidia-smi oneshot, and a sysfsutils line (i915-sriov-dkms's install guide writes
    /etc/sysfs.conf; here it pins the 5070 by driver_override). The host: an RTX 5070
    (the handoff's "first NVIDIA GPU") and an RTX 3060. The admin gives the 5070 to a VM
    and keeps the 3060 for a Plex container."""
    host = _nvidia_desktop(
        "pve-game",
        (
            ("0000:01:00.0", RTX5070, "NVIDIA GeForce RTX 5070"),
            ("0000:02:00.0", RTX3060, "NVIDIA GeForce RTX 3060"),
        ),
        module=NVIDIA_580,
        files={
            **HANDOFF_UNITS,
            "etc/systemd/system/nvidia-init.service": WOLF_UNIT,
            "etc/sysfs.conf": "bus/pci/devices/0000:01:00.0/driver_override = vfio-pci\n",
            "etc/pve/lxc/110.conf": _ct("plex", 110, ""),
            "etc/pve/qemu-server/111.conf": _vm("gaming", 111),
        },
    )
    spec = _spec(
        "pve-game",
        vm_pool("vm", ["01:00.0"], 111, "rtx5070-vm"),
        ct_pool("plex", ["02:00.0"], 110),
    )
    return FieldHost("boot-time-binders-sysfs-conf-and-units", host, spec)


# --- 15. modprobe-ids-shared-device-id -------------------------------------------------

CLOUDMIGRATION_CMDLINE = (
    "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet nomodeset "
    "amd_iommu=on iommu=pt vfio-pci.ids=10de:2204,10de:1aef rd.driver.pre=vfio-pci "
    "modprobe.blacklist=nouveau,nvidiafb,nvidia video=efifb:off video=vesafb:off"
)
PECU_VFIO = "options vfio-pci ids=10de:2204,10de:1aef disable_vga=1\n"
PECU_BLACKLIST = "blacklist nouveau\nblacklist nvidia\nblacklist nvidiafb\n"


def modprobe_ids_shared_device_id(*, ids_removed: bool = False) -> FieldHost:
    """`modprobe-ids-shared-device-id`: cloudmigration.blog's 2x RTX 3090 host (its final
    cmdline: vfio-pci.ids and modprobe.blacklist=...,nvidia) with PECU's
    `/etc/modprobe.d/vfio.conf` (`options vfio-pci ids=$ids_csv disable_vga=1`) and its
    overwritten `blacklist-gpu.conf`. Both 3090s are on vfio-pci. The admin now wants one
    for a VM and the other for an LLM container on nvidia. `ids_removed`: the host after
    the admin followed pvegpu's first refusals (the ids= gone, the second 3090 back on
    nvidia), the blacklists still there."""
    files = {
        "etc/modprobe.d/blacklist-gpu.conf": PECU_BLACKLIST,
        "etc/pve/lxc/130.conf": _ct("llm", 130, ""),
        "etc/pve/qemu-server/200.conf": _vm("win11", 200, "hostpci0: 0000:01:00,pcie=1\n"),
    }
    cmdline = CLOUDMIGRATION_CMDLINE
    if ids_removed:
        cmdline = cmdline.replace(" vfio-pci.ids=10de:2204,10de:1aef", "")
    else:
        files["etc/modprobe.d/vfio.conf"] = PECU_VFIO
    host = _nvidia_desktop(
        "pve-3090",
        (
            ("0000:01:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
            ("0000:02:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
        ),
        drivers=("vfio-pci", "nvidia" if ids_removed else "vfio-pci"),
        minors=(0, 0),
        cmdline=cmdline,
        files=files,
    )
    spec = _spec(
        "pve-3090",
        vm_pool("win", ["01:00.0"], 200, "rtx3090-vm"),
        ct_pool("llm", ["02:00.0"], 130),
    )
    return FieldHost("modprobe-ids-shared-device-id", host, spec)


# --- 16. driverctl-override ------------------------------------------------------------


def driverctl_override() -> FieldHost:
    """`driverctl-override`: PECU's driverctl method (commit 8508554: `driverctl
    set-override "$GPU_ID" vfio-pci`), a per-BDF override in /etc/driverctl.d/pci-<BDF>
    (driverctl's CONFDIR) that outlives PECU upgrades. The host: two RTX 3090, the first
    overridden to vfio-pci long ago. The admin now gives the first to an LLM container
    and the second to a VM."""
    host = _nvidia_desktop(
        "pve-pecu",
        (
            ("0000:01:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
            ("0000:02:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
        ),
        drivers=("vfio-pci", "nvidia"),
        files={
            "etc/driverctl.d/pci-0000:01:00.0": "vfio-pci\n",
            "etc/pve/lxc/130.conf": _ct("llm", 130, ""),
            "etc/pve/qemu-server/200.conf": _vm("win11", 200),
        },
    )
    spec = _spec(
        "pve-pecu",
        ct_pool("llm", ["01:00.0"], 130),
        vm_pool("win", ["02:00.0"], 200, "rtx3090-vm"),
    )
    return FieldHost("driverctl-override", host, spec)


# --- 22. intel-igpu-sriov-vfs ----------------------------------------------------------

VF_BLOCK_RULE = (
    'ACTION=="add", SUBSYSTEM=="pci", KERNEL=="0000:00:02.[1-7]", ATTR{vendor}=="0x8086", '
    'ATTR{device}=="0xa7a0", DRIVER!="vfio-pci", RUN+="/bin/sh -c \'echo \\$kernel > '
    "/sys/bus/pci/devices/\\$kernel/driver/unbind; echo vfio-pci > "
    "/sys/bus/pci/devices/\\$kernel/driver_override; modprobe vfio-pci; echo \\$kernel > "
    "/sys/bus/pci/drivers/vfio-pci/bind'\"\n"
)
# ProxMenux's gpu-guard era hookscript, as #179 describes it: it moves the PF itself
# (inferred text; the issue quotes what it does, not its lines).
PROXMENUX_PF_HOOK = """\
#!/bin/bash
if [ "$2" = "pre-start" ]; then
  echo 0000:00:02.0 > /sys/bus/pci/drivers/i915/unbind
  echo vfio-pci > /sys/bus/pci/devices/0000:00:02.0/driver_override
  echo 0000:00:02.0 > /sys/bus/pci/drivers/vfio-pci/bind
fi
"""


def intel_igpu_sriov_vfs() -> FieldHost:
    """`intel-igpu-sriov-vfs`: strongtz/i915-sriov-dkms (`docs/install-pve-host.md`: VFs from
    /etc/sysfs.conf; `docs/block-vfs.md`: the 99-i915-vf-vfio.rules rule that moves VFs
    00:02.1-7 to vfio-pci, so only card0 and renderD128 are left), #308's container lines
    (`dev0: /dev/dri/card0,gid=44`, `dev1: /dev/dri/renderD128,gid=104`), and MacRimi/
    ProxMenux #179's hookscript that moves the PF to vfio-pci, destroying every VF. The
    host: a Raptor Lake-P iGPU with 7 VFs, blocked. The admin keeps the PF for Jellyfin
    (its pool) and gives VF 1 to the desktop VM; VM 201 still has the ProxMenux hook."""
    conf = (
        "arch: amd64\ncores: 4\ndev0: /dev/dri/card0,gid=44\ndev1: /dev/dri/renderD128,gid=104\n"
        "hostname: media\nmemory: 4096\nostype: debian\n"
        "rootfs: local-lvm:vm-300-disk-0,size=16G\n"
    )
    host = igpu_host(
        vf_driver="vfio-pci",
        files={
            "etc/pve/storage.cfg": STORAGE,
            "etc/sysfs.conf": "devices/pci0000:00/0000:00:02.0/sriov_numvfs = 7\n",
            "etc/udev/rules.d/99-i915-vf-vfio.rules": VF_BLOCK_RULE,
            "etc/pve/lxc/300.conf": conf,
            "etc/pve/qemu-server/201.conf": _vm(
                "win-vf", 201, "hookscript: local:snippets/proxmenux-gpu-guard.sh\n"
                "hostpci0: 0000:00:02.2,pcie=1\n",
            ),
            "var/lib/vz/snippets/proxmenux-gpu-guard.sh": PROXMENUX_PF_HOOK,
        },
    )  # fmt: skip
    devices = tuple(
        attrs.evolve(d, drm=DrmInfo(0, 128)) if d.address == "0000:00:02.0" else d
        for d in host.devices
    )
    host = attrs.evolve(host, devices=devices)
    spec = _spec(
        "pve-nuc",
        ct_pool("media", ["00:02.0"], 300, gid=104),
        vm_pool("desktop", ["00:02.1"], 200, "igpu-vf1"),
    )
    return FieldHost("intel-igpu-sriov-vfs", host, spec)


# --- 23. amd-kfd-shared-node -----------------------------------------------------------

COMMUNITY_AMD = """\
dev0: /dev/dri/renderD128,gid=992
dev1: /dev/dri/renderD129,gid=992
dev2: /dev/dri/card0,gid=44
dev3: /dev/dri/card1,gid=44
dev4: /dev/dri/card2,gid=44
dev5: /dev/kfd,gid=44
"""


def amd_kfd_shared_node() -> FieldHost:
    """`amd-kfd-shared-node`: community-scripts/ProxmoxVE PR #15401's CTID.conf before the
    fix (every render and card node, and /dev/kfd), on ROCm/legacy-rocm-build #5379's
    host: a Ryzen 7 9700X (its iGPU) and an RX 9070 XT on amdgpu, kfd on major 511
    (card0 is simpledrm's, which stays). /dev/kfd is one node for every AMD GPU: which
    GPUs ROCm sees is decided by the render nodes the container holds. The admin gives
    the RX 9070 XT to a VM."""
    groups = _Groups()
    devices = [
        _root("0000:00:00.0", 0x1022, 0x14D8, groups),
        _port("0000:00:01.1", 0x1022, 0x14DB, groups),
        *_card(
            "0000:03:00.0", "0000:00:01.1", RX9070XT, groups(), driver="amdgpu",
            drm=DrmInfo(1, 128),
        ),
        _port("0000:00:08.1", 0x1022, 0x14DD, groups),
        *_card(
            "0000:7c:00.0", "0000:00:08.1", GRANITE_RIDGE, groups(), driver="amdgpu",
            drm=DrmInfo(2, 129),
        ),
    ]  # fmt: skip
    host = HostSpec(
        hostname="pve-rocm",
        cmdline=CMDLINE + " amd_iommu=on iommu=pt",
        devices=tuple(devices),
        numa=("0-15",),
        iommu_units=(IommuUnit("ivhd0"),),
        group_type="identity",
        sev_snp=False,
        char_devices=((511, "kfd"),),
        extra_drivers=("vfio-pci",),
        files={
            "etc/pve/storage.cfg": STORAGE,
            "etc/pve/lxc/105.conf": _ct("ollama", 105, COMMUNITY_AMD),
            "etc/pve/qemu-server/220.conf": _vm("gaming", 220),
        },
    )
    spec = _spec("pve-rocm", vm_pool("gaming", ["03:00.0"], 220, "rx9070-vm"))
    return FieldHost("amd-kfd-shared-node", host, spec)


# --- red team: spellings and files that would trip the inventory ----------------------

ODD_SPELLINGS = (
    "#lxc.cgroup2.devices.allow: c 195:0 rwm\n"  # a description line: no rule
    "lxc.cgroup2.devices.allow = c 195:1 rwm\n"
    "lxc.cgroup2.devices.allow:\tc\t195:1\trwm\n"
    "lxc.cgroup2.devices.allow: c 195:1 rwm   # the second 3090\n"
    "lxc.cgroup2.devices.allow: /dev/nvidia1 rwm\n"
    "lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n"
)
SPACED_HOOK = (
    "lxc.environment: NVIDIA_VISIBLE_DEVICES=0, 1\nlxc.hook.mount: /usr/share/lxc/hooks/nvidia\n"
)


def odd_spellings() -> FieldHost:
    """Red team: one GPU named in every spelling pve-container and LXC accept (`=`, tabs,
    a trailing comment after the access letters, LXC's rule by device path) beside a
    `#` line that is the description (CT 130), and NVIDIA_VISIBLE_DEVICES with a space
    (CT 131). The host: two RTX 3090; the admin gives the second to a VM."""
    host = _nvidia_desktop(
        "pve-odd",
        (
            ("0000:01:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
            ("0000:02:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
        ),
        files={
            "etc/pve/lxc/130.conf": _ct("odd", 130, ODD_SPELLINGS, unprivileged=False),
            "etc/pve/lxc/131.conf": _ct("spaced", 131, SPACED_HOOK),
            "etc/pve/qemu-server/200.conf": _vm("win11", 200),
        },
    )
    return FieldHost(
        "odd-spellings", host, _spec("pve-odd", vm_pool("win", ["02:00.0"], 200, "vm"))
    )
