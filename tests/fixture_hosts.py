"""The hosts committed under fixtures/sysfs/, described for `pvegpu.testing.write_host`.

`kpro6` is the reference deployment: an AMD EPYC Proxmox node with eight RTX PRO 6000
Blackwell GPUs (10de:2bb5), four per NUMA node, all on nvidia for LXC 129 ("--tp 8 era").
`kpro6-split` is the same node after NUMA 1 moved to vfio-pci for a SEV-SNP VM. The
others each pin one situation discovery and planning must handle.

After changing a description, rewrite the committed trees (all, or the ones named):

    python tests/fixture_hosts.py regenerate fixtures/sysfs [NAME...]
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import attrs

from pvegpu.testing import (
    Bar,
    CpuSpec,
    DeviceSpec,
    DrmInfo,
    HostSpec,
    IommuUnit,
    Link,
    NodeMemory,
    NvidiaInfo,
    NvidiaModule,
    VgpuSpec,
    write_host,
)


@attrs.frozen
class Ids:
    """What lspci -nn shows for a function: ids, class and revision."""

    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    pci_class: int
    revision: int = 0


GEN5 = Link("32.0 GT/s PCIe", 16)
GEN4_X16 = Link("16.0 GT/s PCIe", 16)
GEN4_X4 = Link("16.0 GT/s PCIe", 4)
GEN3_X16 = Link("8.0 GT/s PCIe", 16)

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def _bars(*sizes: tuple[int, int, str]) -> tuple[Bar, ...]:
    """BARs as lspci -vv lists them: (index, size, kind): `64p` 64-bit prefetchable,
    `64` 64-bit, `32` 32-bit non-prefetchable, `rom` the expansion ROM."""
    kinds = {"64p": (True, True), "64": (True, False), "32": (False, False), "rom": (False, True)}
    return tuple(Bar(i, size, *kinds[kind]) for i, size, kind in sizes)


# The RTX PRO 6000 Blackwell (96 GB): 64 MiB registers, 128 GiB of VRAM aperture, 32 MiB.
PRO6000_BARS = _bars((0, 64 * MIB, "32"), (1, 128 * GIB, "64p"), (3, 32 * MIB, "64p"),
                     (6, 512 * KIB, "rom"))  # fmt: skip
HDA_BARS = _bars((0, 16 * KIB, "32"))
"""A GPU's HD-audio function: 16 KiB of registers."""
AMPERE_BARS = _bars((0, 16 * MIB, "32"), (1, 256 * MIB, "64p"), (3, 32 * MIB, "64p"),
                    (6, 512 * KIB, "rom"))  # fmt: skip
"""A GeForce/RTX A-series card without resizable BAR: a 256 MiB window to its VRAM."""
RTX4090_REBAR = _bars((0, 16 * MIB, "32"), (1, 32 * GIB, "64p"), (3, 32 * MIB, "64p"),
                      (6, 512 * KIB, "rom"))  # fmt: skip
"""An RTX 4090 with resizable BAR on: all 24 GB of VRAM behind a 32 GiB BAR1."""

EPYC_9354_2S = CpuSpec(sockets=2)
"""kpro6's two EPYC 9354 (Genoa, 32 cores each, SMT): 52 physical address bits."""
INTEL_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts "
    "acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art "
    "arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni "
    "pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid "
    "sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand "
    "lahf_lm abm 3dnowprefetch cpuid_fault epb ssbd ibrs ibpb stibp ibrs_enhanced "
    "tpr_shadow flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms "
    "invpcid rdseed adx smap clflushopt clwb intel_pt sha_ni xsaveopt xsavec xgetbv1 "
    "xsaves split_lock_detect avx_vnni dtherm ida arat pln pts hwp hwp_notify hwp_act_window "
    "hwp_epp hwp_pkg_req umip pku ospke waitpkg gfni vaes vpclmulqdq rdpid movdiri "
    "movdir64b fsrm md_clear serialize arch_lbr flush_l1d arch_capabilities"
)

PRO6000 = Ids(0x10DE, 0x2BB5, 0x10DE, 0x204B, 0x030200, 0xA1)
PRO6000_AUDIO = Ids(0x10DE, 0x22E8, 0x10DE, 0x204B, 0x040300, 0xA1)
PRO6000_MODEL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
NVIDIA_590_OPEN = NvidiaModule(version="590.48.01", open=True)
NVIDIA_580 = NvidiaModule(
    version="580.95.05", open=False, build="Tue Sep 23 09:58:41 UTC 2025", uvm_major=508
)

STORAGE_ZFS = """\
dir: local
\tpath /var/lib/vz
\tcontent iso,vztmpl,backup

zfspool: local-zfs
\tpool rpool/data
\tsparse
\tcontent images,rootdir

"""
STORAGE_LVM = """\
dir: local
\tpath /var/lib/vz
\tcontent iso,vztmpl,backup

lvmthin: local-lvm
\tthinpool data
\tvgname pve
\tcontent rootdir,images

"""
# Shipped by proxmox-kernel-helper; present on every PVE host.
PVE_BLACKLIST = """\
# This file contains a list of modules which are not supported by Proxmox VE

# nvidiafb see bugreport https://bugzilla.proxmox.com/show_bug.cgi?id=701
blacklist nvidiafb
"""
NOUVEAU_BLACKLIST = "blacklist nouveau\noptions nouveau modeset=0\n"


class _Groups:
    """IOMMU group numbers handed out in bus order, skipping the ones fixed on purpose."""

    def __init__(self, reserved: Iterable[int] = ()) -> None:
        self.reserved = set(reserved)
        self.next = 0

    def __call__(self) -> int:
        while self.next in self.reserved:
            self.next += 1
        self.next += 1
        return self.next - 1


def _slot(
    address: str,
    parent: str | None,
    gpu: Ids,
    audio: Ids | None,
    *,
    numa_node: int = -1,
    iommu_group: int | None = None,
    link: Link | None = None,
    driver: str | None = None,
    override: str | None = None,
    nvidia: NvidiaInfo | None = None,
    audio_driver: str | None = None,
    audio_override: str | None = None,
    bars: tuple[Bar, ...] = (),
    audio_bars: tuple[Bar, ...] = (),
    boot_vga: bool = False,
    removable: bool = False,
) -> list[DeviceSpec]:
    """A GPU at .0 and, if given, its HD-audio function at .1, in the same IOMMU group."""
    slot = [
        DeviceSpec(
            address=address, parent=parent, numa_node=numa_node, iommu_group=iommu_group,
            link=link, driver=driver, driver_override=override, nvidia=nvidia, bars=bars,
            boot_vga=boot_vga, removable=removable, **attrs.asdict(gpu),
        )
    ]  # fmt: skip
    if audio is not None:
        slot.append(
            DeviceSpec(
                address=address[:-1] + "1", parent=parent, numa_node=numa_node,
                iommu_group=iommu_group, link=link, driver=audio_driver,
                driver_override=audio_override, bars=audio_bars, removable=removable,
                **attrs.asdict(audio),
            )
        )  # fmt: skip
    return slot


def _amd_complex(bus: int, node: int, groups: _Groups) -> list[DeviceSpec]:
    """An EPYC 9004 root complex: root, IOMMU, dummy host bridge, GPP bridge 01.1."""
    b = f"0000:{bus:02x}"
    return [
        DeviceSpec(
            address=f"{b}:00.0", vendor=0x1022, device=0x14A4, pci_class=0x060000,
            subsystem_vendor=0x1022, subsystem_device=0x14A4, numa_node=node,
            iommu_group=groups(),
        ),
        # The AMD IOMMU is itself a PCI function and belongs to no group.
        DeviceSpec(
            address=f"{b}:00.2", vendor=0x1022, device=0x149E, pci_class=0x080600,
            subsystem_vendor=0x1022, subsystem_device=0x149E, numa_node=node,
        ),
        DeviceSpec(
            address=f"{b}:01.0", vendor=0x1022, device=0x149F, pci_class=0x060000,
            numa_node=node, iommu_group=groups(),
        ),
        DeviceSpec(
            address=f"{b}:01.1", vendor=0x1022, device=0x14AB, pci_class=0x060400,
            subsystem_vendor=0x1022, subsystem_device=0x14AB, numa_node=node,
            driver="pcieport", iommu_group=groups(), link=GEN5,
        ),
    ]  # fmt: skip


# -- kpro6: the reference host

KPRO6_GPUS = (  # (root bus, NUMA node, IOMMU group); GPU at <root bus + 1>:00.0
    (0x00, 0, 12),
    (0x10, 0, 13),
    (0x60, 0, 14),
    (0x70, 0, 15),
    (0x80, 1, 40),
    (0x90, 1, 41),
    (0xE0, 1, 42),
    (0xF0, 1, 43),
)
KPRO6_NIC_BUS = 0xC0


def _kpro6_devices(split: bool) -> tuple[DeviceSpec, ...]:
    groups = _Groups(reserved=[g for _, _, g in KPRO6_GPUS])
    gpu_at = {bus: (node, group) for bus, node, group in KPRO6_GPUS}
    devices: list[DeviceSpec] = []
    minor = 0
    for bus in sorted([*gpu_at, KPRO6_NIC_BUS]):
        node = gpu_at[bus][0] if bus in gpu_at else 1
        devices += _amd_complex(bus, node, groups)
        port = f"0000:{bus:02x}:01.1"
        child = f"0000:{bus + 1:02x}:00.0"
        if bus == 0x00:
            devices += [
                DeviceSpec(
                    address="0000:00:01.2", vendor=0x1022, device=0x14AB, pci_class=0x060400,
                    subsystem_vendor=0x1022, subsystem_device=0x14AB, numa_node=0,
                    driver="pcieport", iommu_group=groups(), link=GEN4_X4,
                ),
                DeviceSpec(
                    address="0000:02:00.0", parent="0000:00:01.2", vendor=0x144D,
                    device=0xA80A, subsystem_vendor=0x144D, subsystem_device=0xA813,
                    pci_class=0x010802, numa_node=0, driver="nvme", iommu_group=groups(),
                    link=GEN4_X4,
                ),
            ]  # fmt: skip
        if bus == KPRO6_NIC_BUS:
            nic = Ids(0x15B3, 0x101D, 0x15B3, 0x0016, 0x020000)
            group = groups()
            for fn in (0, 1):
                devices.append(
                    DeviceSpec(
                        address=f"{child[:-1]}{fn}", parent=port, numa_node=node,
                        driver="mlx5_core", iommu_group=group, link=GEN4_X16,
                        **attrs.asdict(nic),
                    )
                )  # fmt: skip
            continue
        group = gpu_at[bus][1]
        to_vfio = split and node == 1
        gpu_override: str | None
        audio_override: str | None
        if to_vfio:
            gpu_driver = audio_driver = "vfio-pci"
            gpu_override = audio_override = "vfio-pci"
        else:
            gpu_driver, audio_driver = "nvidia", "snd_hda_intel"
            # After the split the host-side GPUs are pinned so no vfio-pci new_id takes them.
            gpu_override = "nvidia" if split else None
            audio_override = "snd_hda_intel" if split else None
        info = None
        if not to_vfio:
            info = NvidiaInfo(model=PRO6000_MODEL, minor=minor, vbios="98.02.52.00.02")
            minor += 1
        devices += _slot(
            child,
            port,
            PRO6000,
            PRO6000_AUDIO,
            numa_node=node,
            iommu_group=group,
            link=GEN5,
            driver=gpu_driver,
            override=gpu_override,
            nvidia=info,
            audio_driver=audio_driver,
            audio_override=audio_override,
            bars=PRO6000_BARS,
            audio_bars=HDA_BARS,
        )
    return tuple(devices)


def _map_line(dev: DeviceSpec, node: str) -> str:
    """A pci.cfg `map` line for the whole slot, keys alphabetical like the GUI writes."""
    return (
        f"\tmap id={dev.vendor:04x}:{dev.device:04x},iommugroup={dev.iommu_group},"
        f"node={node},path={dev.address[:-2]},"
        f"subsystem-id={dev.subsystem_vendor:04x}:{dev.subsystem_device:04x}\n"
    )


def _kpro6_pci_cfg(devices: tuple[DeviceSpec, ...], split: bool) -> str:
    by_addr = {d.address: d for d in devices}
    nic = by_addr[f"0000:{KPRO6_NIC_BUS + 1:02x}:00.0"]
    text = (
        "nic-cx6\n"
        + _map_line(nic, "kpro6").replace(f"path={nic.address[:-2]}", f"path={nic.address}")
        + "\tdescription ConnectX-6 Dx port 0 for the router VM\n\n"
    )
    gpus = [by_addr[f"0000:{bus + 1:02x}:00.0"] for bus, _, _ in KPRO6_GPUS]
    if not split:
        text += "pro6000\n" + "".join(_map_line(g, "kpro6") for g in gpus)
        text += "\tdescription 8x RTX PRO 6000 Blackwell\n\n"
        return text
    text += "pro6000\n" + "".join(_map_line(g, "kpro6") for g in gpus if g.numa_node == 0)
    text += "\tdescription LXC-side GPUs on NUMA 0\n\n"
    text += "pro6000-vm\n" + "".join(_map_line(g, "kpro6") for g in gpus if g.numa_node == 1)
    text += "\tdescription VM passthrough GPUs on NUMA 1\n\n"
    return text


def _ct129_section(gpus: int) -> dict[str, str]:
    keys = {
        "arch": "amd64",
        "cores": "64",
        "features": "nesting=1",
        "hostname": "sglang-qwen",
        "memory": "524288",
        "mp0": "/shared,mp=/shared",
        "net0": "name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:5E:3A:91,ip=dhcp,type=veth",
        "onboot": "1",
        "ostype": "ubuntu",
        "rootfs": "local-zfs:subvol-129-disk-0,size=200G",
        "swap": "0",
    }
    nodes = [f"/dev/nvidia{i}" for i in range(gpus)]
    nodes += ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    for index, node in enumerate(nodes):
        keys[f"dev{index}"] = f"{node},mode=0666"
    return keys


def _lxc_section(description: str, keys: Mapping[str, str], raw: Iterable[str]) -> str:
    # pve-container writes the description first, keys sorted as plain strings (dev10
    # before dev2), then raw lxc.* keys in their own order.
    lines = [f"#{description}"]
    lines += [f"{key}: {keys[key]}" for key in sorted(keys)]
    lines += list(raw)
    return "\n".join(lines) + "\n"


def _ct129_conf(split: bool) -> str:
    raw = ["lxc.apparmor.profile: unconfined"]
    before = _ct129_section(8)
    main = _ct129_section(4 if split else 8) | {"parent": "pre-split"}
    tp = 4 if split else 8
    # After the split the container is pinned to NUMA node 0's CPUs, like its GPUs.
    main_raw = [*raw, "lxc.cgroup2.cpuset.cpus: 0-31,64-95"] if split else raw
    text = _lxc_section(f"SGLang Qwen3.5-122B-A10B, TP={tp} on {tp}x RTX PRO 6000", main, main_raw)
    text += "\n[pre-split]\n"
    text += _lxc_section(
        "SGLang Qwen3.5-122B-A10B, TP=8 on 8x RTX PRO 6000",
        before | {"snaptime": "1764590400"},
        raw,
    )
    return text


SGLANG_ARGS = (
    "--model-path /shared/models/Qwen3.5-122B-A10B --tp 8 --host 0.0.0.0 --port 30000 "
    "--mem-fraction-static 0.85 --context-length 262144 --reasoning-parser qwen3 "
    "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4 --mamba-scheduler-strategy extra_buffer "
    "--trust-remote-code"
)
SGLANG_PATH = "/usr/local/cuda-13.0/bin:/root/ml-env/bin:/usr/local/sbin:/usr/local/bin:" + (
    "/usr/sbin:/usr/bin:/sbin:/bin"
)
SGLANG_UNIT = f"""\
[Unit]
Description=SGLang Qwen3.5-122B-A10B (TP=8)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=root
WorkingDirectory=/root
Environment=CUDA_HOME=/usr/local/cuda-13.0
Environment=PATH={SGLANG_PATH}
Environment=SGLANG_ENABLE_SPEC_V2=1
Environment=NCCL_DEBUG=WARN
ExecStart=/root/ml-env/bin/python3 -m sglang.launch_server {SGLANG_ARGS}
Restart=on-failure
RestartSec=10
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
"""

DPKG_STATUS = """\
Package: libc6
Status: install ok installed
Priority: optional
Section: libs
Installed-Size: 13215
Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.39-0ubuntu8.4
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.

Package: libnvidia-compute-590
Status: install ok installed
Priority: optional
Section: libs
Installed-Size: 287516
Maintainer: Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Architecture: amd64
Multi-Arch: same
Source: nvidia-graphics-drivers-590
Version: 590.48.01-0ubuntu1
Depends: libc6 (>= 2.34)
Description: NVIDIA libcompute package
 This package contains the CUDA, OpenCL and NVML user space libraries.

"""

OS_RELEASE = """\
PRETTY_NAME="Ubuntu 24.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.3 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=noble
"""


def qwen35_config() -> str:
    """config.json of Qwen3.5-122B-A10B: 48 layers, full attention every 4th, MoE 256x8."""
    layers = 48
    text_config = {
        "attention_bias": False,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 3072,
        "layer_types": [
            "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)
        ],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 64,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 262144,
        "model_type": "qwen3_5_moe_text",
        "moe_intermediate_size": 1024,
        "mtp_num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "num_hidden_layers": layers,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000000,
        "shared_expert_intermediate_size": 1024,
        "torch_dtype": "bfloat16",
        "vocab_size": 248320,
    }
    config = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "image_token_id": 248056,
        "model_type": "qwen3_5_moe",
        "text_config": text_config,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.0.dev0",
        "video_token_id": 248057,
        "vision_config": {
            "depth": 27,
            "hidden_size": 1152,
            "model_type": "qwen3_5_moe_vision",
            "num_heads": 16,
            "out_hidden_size": 3072,
            "patch_size": 16,
        },
    }
    return json.dumps(config, indent=2) + "\n"


def qwen35_index() -> str:
    shards = 39
    weight_map = {
        "lm_head.weight": shards,
        "model.language_model.embed_tokens.weight": 1,
        "model.language_model.layers.0.linear_attn.in_proj_qkvz.weight": 1,
        "model.language_model.layers.3.self_attn.q_proj.weight": 2,
        "model.language_model.layers.47.mlp.experts.255.down_proj.weight": shards - 1,
        "model.language_model.norm.weight": shards,
        "mtp.layers.0.mlp.gate.weight": shards,
    }
    index = {
        "metadata": {"total_size": 244800000000},
        "weight_map": {
            name: f"model-{n:05d}-of-{shards:05d}.safetensors"
            for name, n in sorted(weight_map.items())
        },
    }
    return json.dumps(index, indent=2) + "\n"


VLLM_SITE = "root/ml-env/lib/python3.12/site-packages"
VLLM_METADATA = """Metadata-Version: 2.4
Name: vllm
Version: 0.33.0
Summary: A high-throughput and memory-efficient inference and serving engine for LLMs
Author: vLLM Team
License-Expression: Apache-2.0
Requires-Python: <3.15,>=3.11
Description-Content-Type: text/markdown

# vLLM
"""
"""The dist-info METADATA pip leaves for vLLM 0.33.0 in CT 129's venv (headers as the
wheel has them, dependencies and description cut): examples/kpro6-vllm.toml reads it."""


def _kpro6(split: bool) -> HostSpec:
    devices = _kpro6_devices(split)
    ct = "rpool/data/subvol-129-disk-0"
    libs = f"{ct}/usr/lib/x86_64-linux-gnu"
    model = "shared/models/Qwen3.5-122B-A10B"
    iommu_hosts = sorted(d.address for d in devices if d.address.endswith(":00.2"))
    return HostSpec(
        hostname="kpro6",
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs "
            "amd_iommu=on iommu=nopt mem_encrypt=on kvm_amd.sev=1"
        ),
        numa=("0-31,64-95", "32-63,96-127"),
        cpu=EPYC_9354_2S,
        # 12 x 96 GB DIMMs per socket; CT 129 and the ARC hold part of node 0.
        node_memory=(NodeMemory.gib(1007.6, 612.4), NodeMemory.gib(1007.9, 988.1)),
        iommu_units=tuple(IommuUnit(f"ivhd{i}", a) for i, a in enumerate(iommu_hosts)),
        group_type="DMA-FQ",
        sev_snp=True,
        nvidia=NVIDIA_590_OPEN,
        char_devices=((236, "vfio"),) if split else (),
        devices=devices,
        files={
            "etc/pve/lxc/129.conf": _ct129_conf(split),
            "etc/pve/mapping/pci.cfg": _kpro6_pci_cfg(devices, split),
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/modprobe.d/blacklist-nouveau.conf": NOUVEAU_BLACKLIST,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            "etc/modprobe.d/zfs.conf": "options zfs zfs_arc_max=68719476736\n",
            f"{ct}/etc/os-release": OS_RELEASE,
            f"{ct}/etc/systemd/system/sglang-qwen.service": SGLANG_UNIT,
            f"{libs}/libcuda.so.590.48.01": "",
            f"{libs}/libnvidia-ml.so.590.48.01": "",
            f"{ct}/var/lib/dpkg/status": DPKG_STATUS,
            f"{model}/config.json": qwen35_config(),
            f"{model}/model.safetensors.index.json": qwen35_index(),
            # vLLM installed in the SGLang unit's venv too (the unsplit host only).
            **(
                {} if split else {f"{ct}/{VLLM_SITE}/vllm-0.33.0.dist-info/METADATA": VLLM_METADATA}
            ),
        },
        symlinks={
            f"{libs}/libcuda.so.1": "libcuda.so.590.48.01",
            f"{libs}/libnvidia-ml.so.1": "libnvidia-ml.so.590.48.01",
            # The unit's venv interpreter, as `python3 -m venv` links it: to the
            # container's own /usr (dangling as the host sees it).
            f"{ct}/root/ml-env/bin/python3": "/usr/bin/python3.12",
        },
    )


def kpro6() -> HostSpec:
    """Before the split: all eight GPUs on nvidia, LXC 129 holds /dev/nvidia0..7."""
    return _kpro6(split=False)


def kpro6_split() -> HostSpec:
    """After the split: NUMA 1 GPUs + audio on vfio-pci (pinned), NUMA 0 pinned to nvidia."""
    return _kpro6(split=True)


# -- the cluster of examples/cluster.toml: kpro6, kpro7 and pve-ws share one /etc/pve

KPRO7_SUBSYSTEM = 0x204E
"""kpro7's GPUs come on another board revision: same 10de:2bb5, another subsystem id
(made up for the fixture), which the cluster plan reports for a shared mapping."""


def cluster_pci_cfg() -> str:
    """The cluster's one pci.cfg, as pmxcfs shows it on every node: kpro6's, unsplit
    (kpro7 and pve-ws joined the cluster after kpro6's mappings were made)."""
    return _kpro6_pci_cfg(_kpro6_devices(split=False), split=False)


def kpro7() -> HostSpec:
    """A second kpro6 (eight RTX PRO 6000, all on nvidia), no guests yet, other boards."""
    devices = tuple(
        attrs.evolve(d, subsystem_device=KPRO7_SUBSYSTEM) if d.vendor == 0x10DE else d
        for d in _kpro6_devices(split=False)
    )
    iommu_hosts = sorted(d.address for d in devices if d.address.endswith(":00.2"))
    return HostSpec(
        hostname="kpro7",
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs "
            "amd_iommu=on iommu=nopt mem_encrypt=on kvm_amd.sev=1"
        ),
        numa=("0-31,64-95", "32-63,96-127"),
        cpu=EPYC_9354_2S,
        node_memory=(NodeMemory.gib(1007.6, 990.2), NodeMemory.gib(1007.9, 995.0)),
        iommu_units=tuple(IommuUnit(f"ivhd{i}", a) for i, a in enumerate(iommu_hosts)),
        group_type="DMA-FQ",
        sev_snp=True,
        nvidia=NVIDIA_590_OPEN,
        devices=devices,
        files={
            "etc/pve/mapping/pci.cfg": cluster_pci_cfg(),
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/modprobe.d/blacklist-nouveau.conf": NOUVEAU_BLACKLIST,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
        },
    )


def pve_ws() -> HostSpec:
    """The workstation as a member of kpro6's cluster: the same host, the cluster pci.cfg."""
    host = workstation()
    return attrs.evolve(host, files={**host.files, "etc/pve/mapping/pci.cfg": cluster_pci_cfg()})


# -- smaller hosts


def workstation() -> HostSpec:
    """One NUMA node, Intel VT-d, two VGA GPUs: a 3090 on nvidia, an A4000 via vfio-pci.ids."""
    groups = _Groups()

    def port(address: str, link: Link) -> DeviceSpec:
        return DeviceSpec(
            address=address, vendor=0x8086, device=0x352A, pci_class=0x060400,
            driver="pcieport", iommu_group=groups(), link=link,
        )  # fmt: skip

    devices: list[DeviceSpec] = [
        DeviceSpec(
            address="0000:00:00.0", vendor=0x8086, device=0x09A2, pci_class=0x088000,
            iommu_group=groups(),
        ),
        DeviceSpec(
            address="0000:00:1c.0", vendor=0x8086, device=0x7AB8, pci_class=0x060400,
            driver="pcieport", iommu_group=groups(), link=Link("5.0 GT/s PCIe", 1),
        ),
        DeviceSpec(
            address="0000:01:00.0", parent="0000:00:1c.0", vendor=0x8086, device=0x15F3,
            subsystem_vendor=0x8086, subsystem_device=0x0003, pci_class=0x020000,
            revision=0x03, driver="igc", iommu_group=groups(), link=Link("5.0 GT/s PCIe", 1),
        ),
        port("0000:16:02.0", GEN4_X16),
    ]  # fmt: skip
    devices += _slot(
        "0000:17:00.0",
        "0000:16:02.0",
        Ids(0x10DE, 0x2204, 0x1458, 0x403B, 0x030000, 0xA1),
        Ids(0x10DE, 0x1AEF, 0x1458, 0x403B, 0x040300, 0xA1),
        numa_node=0, iommu_group=groups(), link=GEN4_X16, driver="nvidia",
        nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 3090", minor=0, vbios="94.02.42.00.A9",
                          dma_bits=47),
        audio_driver="snd_hda_intel", bars=AMPERE_BARS, audio_bars=HDA_BARS,
        boot_vga=True,  # in the first x16 slot: the firmware's display
    )  # fmt: skip
    devices.append(port("0000:38:02.0", GEN4_X16))
    devices += _slot(
        "0000:39:00.0",
        "0000:38:02.0",
        Ids(0x10DE, 0x24B0, 0x10DE, 0x14AD, 0x030000, 0xA1),
        Ids(0x10DE, 0x228B, 0x10DE, 0x14AD, 0x040300, 0xA1),
        iommu_group=groups(), link=GEN4_X16, driver="vfio-pci", audio_driver="vfio-pci",
        bars=AMPERE_BARS, audio_bars=HDA_BARS,
    )  # fmt: skip
    devices.append(port("0000:52:02.0", GEN4_X4))
    devices.append(
        DeviceSpec(
            address="0000:53:00.0", parent="0000:52:02.0", vendor=0x144D, device=0xA80C,
            subsystem_vendor=0x144D, subsystem_device=0xA801, pci_class=0x010802,
            driver="nvme", iommu_group=groups(), link=GEN4_X4,
        )
    )  # fmt: skip
    vm = (
        "#Windows workstation VM with the A4000\n"
        "bios: ovmf\n"
        "boot: order=scsi0\n"
        "cores: 16\n"
        "cpu: host\n"
        "efidisk0: local-lvm:vm-110-disk-0,efitype=4m,size=4M\n"
        "hostpci0: 0000:39:00,pcie=1,x-vga=1\n"
        "machine: pc-q35-9.0\n"
        "memory: 65536\n"
        "name: win11-cad\n"
        "net0: virtio=BC:24:11:0A:77:10,bridge=vmbr0\n"
        "ostype: win11\n"
        "scsi0: local-lvm:vm-110-disk-1,size=256G\n"
        "scsihw: virtio-scsi-single\n"
        "smbios1: uuid=0b7a5b8e-4ad6-4f4e-9a43-3c0f1b7d2e11\n"
        "vga: none\n"
    )
    return HostSpec(
        hostname="pve-ws",
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet "
            "intel_iommu=on vfio-pci.ids=10de:24b0,10de:228b"
        ),
        numa=("0-31",),
        cpu=CpuSpec(
            vendor="GenuineIntel",
            model_name="Intel(R) Xeon(R) W-3335 CPU @ 3.40GHz",
            family=6,
            model=106,
            stepping=6,
            phys_bits=46,
            virt_bits=57,
            flags=INTEL_FLAGS,
        ),
        node_memory=(NodeMemory.gib(251.4, 180.2),),
        iommu_units=tuple(IommuUnit(f"dmar{i}") for i in range(4)),
        group_type="DMA-FQ",
        nvidia=NVIDIA_580,
        char_devices=((511, "vfio"),),
        devices=tuple(devices),
        files={
            "etc/pve/qemu-server/110.conf": vm,
            "etc/pve/storage.cfg": STORAGE_LVM,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            "etc/modprobe.d/vfio.conf": (
                "# A4000 + its audio to vfio-pci before nvidia can take them\n"
                "options vfio-pci ids=10de:24b0,10de:228b disable_vga=1\n"
                "softdep nvidia pre: vfio-pci\n"
            ),
        },
    )


# The gaming VM's mapping as written before a BIOS update renumbered the IOMMU groups:
# the 3090 (0000:17:00) was in group 3 and is in group 4 now. Written by hand, its
# description comes before its map line, which Proxmox reads as well.
WORKSTATION_BIOS_PCI_CFG = (
    "rtx3090\n"
    "\tdescription RTX 3090 for the gaming VM\n"
    "\tmap id=10de:2204,iommugroup=3,node=pve-ws,path=0000:17:00,subsystem-id=1458:403b\n"
    "\n"
)
WORKSTATION_BIOS_VM120 = (
    "bios: ovmf\n"
    "cores: 8\n"
    "cpu: host\n"
    "hostpci0: mapping=rtx3090,pcie=1,x-vga=1\n"
    "machine: q35\n"
    "memory: 32768\n"
    "name: gaming\n"
    "ostype: win11\n"
    "scsi0: local-lvm:vm-120-disk-0,size=128G\n"
    "vga: none\n"
)


def workstation_bios() -> HostSpec:
    """The workstation after a BIOS update: pci.cfg's mapping rtx3090, outside any pool,
    still says the 3090's old IOMMU group, and VM 120 uses it (it would not start)."""
    host = workstation()
    files = {
        **host.files,
        "etc/pve/mapping/pci.cfg": WORKSTATION_BIOS_PCI_CFG,
        "etc/pve/qemu-server/120.conf": WORKSTATION_BIOS_VM120,
    }
    return attrs.evolve(host, files=files)


def shared_group() -> HostSpec:
    """A GPU behind a PLX switch without ACS: its IOMMU group also holds the boot NVMe."""
    shared = 4
    devices = [
        DeviceSpec(
            address="0000:00:00.0", vendor=0x1022, device=0x14D8, pci_class=0x060000,
            numa_node=0, iommu_group=0,
        ),
        DeviceSpec(
            address="0000:00:00.2", vendor=0x1022, device=0x14D9, pci_class=0x080600,
            numa_node=0,
        ),
        DeviceSpec(
            address="0000:00:01.0", vendor=0x1022, device=0x14DA, pci_class=0x060000,
            numa_node=0, iommu_group=1,
        ),
        DeviceSpec(
            address="0000:00:01.1", vendor=0x1022, device=0x14DB, pci_class=0x060400,
            numa_node=0, driver="pcieport", iommu_group=2, link=GEN3_X16,
        ),
        DeviceSpec(
            address="0000:01:00.0", parent="0000:00:01.1", vendor=0x10B5, device=0x8747,
            subsystem_vendor=0x10B5, subsystem_device=0x8747, pci_class=0x060400,
            revision=0xCA, numa_node=0, driver="pcieport", iommu_group=3, link=GEN3_X16,
        ),
        # PEX 8747 downstream ports lack ACS: everything below them is one group.
        DeviceSpec(
            address="0000:02:08.0", parent="0000:01:00.0", vendor=0x10B5, device=0x8747,
            subsystem_vendor=0x10B5, subsystem_device=0x8747, pci_class=0x060400,
            revision=0xCA, numa_node=0, driver="pcieport", iommu_group=shared,
            link=GEN3_X16,
        ),
        DeviceSpec(
            address="0000:02:10.0", parent="0000:01:00.0", vendor=0x10B5, device=0x8747,
            subsystem_vendor=0x10B5, subsystem_device=0x8747, pci_class=0x060400,
            revision=0xCA, numa_node=0, driver="pcieport", iommu_group=shared,
            link=Link("8.0 GT/s PCIe", 4, max_width=16),
        ),
    ]  # fmt: skip
    devices += _slot(
        "0000:03:00.0",
        "0000:02:08.0",
        Ids(0x10DE, 0x2231, 0x10DE, 0x147E, 0x030000, 0xA1),
        Ids(0x10DE, 0x1AEF, 0x10DE, 0x147E, 0x040300, 0xA1),
        numa_node=0, iommu_group=shared,
        link=Link("8.0 GT/s PCIe", 16, max_speed="16.0 GT/s PCIe"), driver="nvidia",
        nvidia=NvidiaInfo(model="NVIDIA RTX A5000", minor=0, vbios="94.02.6D.00.0A",
                          dma_bits=47),
        audio_driver="snd_hda_intel", boot_vga=True,
    )  # fmt: skip
    devices.append(
        DeviceSpec(
            address="0000:04:00.0", parent="0000:02:10.0", vendor=0x144D, device=0xA80A,
            subsystem_vendor=0x144D, subsystem_device=0xA801, pci_class=0x010802,
            numa_node=0, driver="nvme", iommu_group=shared,
            link=Link("8.0 GT/s PCIe", 4, max_speed="16.0 GT/s PCIe"),
        )
    )  # fmt: skip
    return HostSpec(
        hostname="pve-lab",
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet",
        numa=("0-23",),
        iommu_units=(IommuUnit("ivhd0", "0000:00:00.2"),),
        group_type="DMA",
        sev_snp=False,
        nvidia=NvidiaModule(version="580.95.05", open=True, uvm_major=510, caps_major=511),
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_LVM,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
        },
    )


def no_iommu() -> HostSpec:
    """IOMMU off: sys/class/iommu empty, no iommu_group links, no groups at all."""
    devices = [
        DeviceSpec(
            address="0000:00:00.0", vendor=0x8086, device=0xA700, pci_class=0x060000,
            subsystem_vendor=0x1043, subsystem_device=0x8882, revision=0x01,
        ),
        DeviceSpec(
            address="0000:00:01.0", vendor=0x8086, device=0xA70D, pci_class=0x060400,
            revision=0x01, driver="pcieport", link=Link("16.0 GT/s PCIe", 16),
        ),
    ]  # fmt: skip
    devices += _slot(
        "0000:01:00.0",
        "0000:00:01.0",
        Ids(0x10DE, 0x2684, 0x1043, 0x889D, 0x030000, 0xA1),
        Ids(0x10DE, 0x22BA, 0x1043, 0x889D, 0x040300, 0xA1),
        link=GEN4_X16, driver="nvidia",
        nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 4090", minor=0, vbios="95.02.18.80.5F",
                          dma_bits=47),
        audio_driver="snd_hda_intel", boot_vga=True,
    )  # fmt: skip
    devices += [
        DeviceSpec(
            address="0000:00:1d.0", vendor=0x8086, device=0x7AB4, pci_class=0x060400,
            revision=0x11, driver="pcieport", link=GEN4_X4,
        ),
        DeviceSpec(
            address="0000:02:00.0", parent="0000:00:1d.0", vendor=0x144D, device=0xA80C,
            subsystem_vendor=0x144D, subsystem_device=0xA801, pci_class=0x010802,
            driver="nvme", link=GEN4_X4,
        ),
        DeviceSpec(
            address="0000:00:1f.6", vendor=0x8086, device=0x1A1C, pci_class=0x020000,
            subsystem_vendor=0x1043, subsystem_device=0x8882, revision=0x11,
            driver="e1000e",
        ),
    ]  # fmt: skip
    return HostSpec(
        hostname="pve-mini",
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet "
            "intel_iommu=off"
        ),
        numa=("0-23",),
        nvidia=NVIDIA_580,
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_LVM,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            "etc/modprobe.d/blacklist-nouveau.conf": NOUVEAU_BLACKLIST,
        },
    )


RADEON_BARS = _bars((0, 256 * MIB, "64p"), (2, 2 * MIB, "64p"), (5, 1 * MIB, "32"),
                    (6, 128 * KIB, "rom"))  # fmt: skip
"""A Radeon RX 7900 XTX without resizable BAR: VRAM window, doorbells, registers."""


def mixed() -> HostSpec:
    """An RTX PRO 6000 on nvidia next to a Radeon RX 7900 XTX on amdgpu, IOMMU passthrough."""
    groups = _Groups()
    devices = _amd_complex(0x00, 0, groups)
    devices += _slot(
        "0000:01:00.0",
        "0000:00:01.1",
        PRO6000,
        PRO6000_AUDIO,
        numa_node=0, iommu_group=groups(), link=GEN5, driver="nvidia",
        nvidia=NvidiaInfo(model=PRO6000_MODEL, minor=0), audio_driver="snd_hda_intel",
        bars=PRO6000_BARS, audio_bars=HDA_BARS,
    )  # fmt: skip
    # Navi 31 brings its own switch: upstream 1478, downstream 1479, then the GPU.
    devices += [
        DeviceSpec(
            address="0000:00:03.1", vendor=0x1022, device=0x14AB, pci_class=0x060400,
            numa_node=0, driver="pcieport", iommu_group=groups(), link=GEN4_X16,
        ),
        DeviceSpec(
            address="0000:02:00.0", parent="0000:00:03.1", vendor=0x1002, device=0x1478,
            pci_class=0x060400, revision=0x10, numa_node=0, driver="pcieport",
            iommu_group=groups(), link=GEN4_X16,
        ),
        DeviceSpec(
            address="0000:03:00.0", parent="0000:02:00.0", vendor=0x1002, device=0x1479,
            pci_class=0x060400, revision=0x10, numa_node=0, driver="pcieport",
            iommu_group=groups(), link=GEN4_X16,
        ),
    ]  # fmt: skip
    devices += _slot(
        "0000:04:00.0",
        "0000:03:00.0",
        Ids(0x1002, 0x744C, 0x1DA2, 0xE471, 0x030000, 0xC8),
        Ids(0x1002, 0xAB30, 0x1002, 0xAB30, 0x040300),
        numa_node=0, iommu_group=groups(), link=GEN4_X16, driver="amdgpu",
        audio_driver="snd_hda_intel", bars=RADEON_BARS, audio_bars=HDA_BARS,
        boot_vga=True,  # the host's only VGA function (the PRO 6000 is a 3D controller)
    )  # fmt: skip
    return HostSpec(
        hostname="pve-mixed",
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs "
            "amd_iommu=on iommu=pt"
        ),
        numa=("0-63",),
        iommu_units=(IommuUnit("ivhd0", "0000:00:00.2"),),
        group_type="identity",
        sev_snp=False,
        nvidia=NVIDIA_590_OPEN,
        char_devices=((239, "kfd"),),
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
        },
    )


def _with_drm(devices: list[DeviceSpec], card: int, render: int) -> list[DeviceSpec]:
    """The slot's GPU (its first function) with DRM nodes cardN and renderDM."""
    return [attrs.evolve(devices[0], drm=DrmInfo(card, render)), *devices[1:]]


_MEDIA_CT = "rpool/data/subvol-120-disk-0"
# Debian 12's /etc/group as the LXC template has it, plus the Jellyfin package's user.
_DEBIAN_GROUP = """\
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
video:x:44:jellyfin
users:x:100:
nogroup:x:65534:
render:x:105:jellyfin
jellyfin:x:106:
"""


def intel_media() -> HostSpec:
    """A Core i5-12500 box: its UHD 770 for Jellyfin in an unprivileged container, an Arc
    A380 for a VM, and a Frigate container that holds the Arc's render node today."""
    groups = _Groups()
    devices = [
        DeviceSpec(
            address="0000:00:00.0", vendor=0x8086, device=0x4650, pci_class=0x060000,
            iommu_group=groups(),
        ),
    ]  # fmt: skip
    devices += _with_drm(
        _slot(
            "0000:00:02.0",
            None,
            Ids(0x8086, 0x4690, 0x1028, 0x0B1A, 0x030000, 0x0C),
            None,
            iommu_group=groups(),
            driver="i915",
            bars=_bars((0, 16 * MIB, "64"), (2, 256 * MIB, "64p")),
            boot_vga=True,  # the iGPU drives the host's display
        ),
        0,
        128,
    )
    devices += [
        DeviceSpec(
            address="0000:00:01.0", vendor=0x8086, device=0x460D, pci_class=0x060400,
            driver="pcieport", iommu_group=groups(), link=GEN4_X16,
        ),
    ]  # fmt: skip
    devices += _with_drm(
        _slot(
            "0000:03:00.0",
            "0000:00:01.0",
            Ids(0x8086, 0x56A5, 0x172F, 0x3937, 0x030000, 0x05),
            Ids(0x8086, 0x4F92, 0x172F, 0x3937, 0x040300),
            iommu_group=groups(),
            link=GEN4_X16,
            driver="i915",
            audio_driver="snd_hda_intel",
            # Resizable BAR on: all 6 GB of VRAM behind an 8 GiB BAR2.
            bars=_bars((0, 16 * MIB, "64"), (2, 8 * GIB, "64p"), (6, 2 * MIB, "rom")),
            audio_bars=_bars((0, 16 * KIB, "64")),
        ),
        1,
        129,
    )
    return HostSpec(
        hostname="pve-media",
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs",
        numa=("0-11",),
        cpu=CpuSpec(
            vendor="GenuineIntel",
            model_name="12th Gen Intel(R) Core(TM) i5-12500",
            family=6,
            model=151,
            stepping=5,
            phys_bits=39,
            virt_bits=48,
            flags=INTEL_FLAGS,
        ),
        node_memory=(NodeMemory.gib(62.6, 40.1),),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        sev_snp=None,
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/pve/lxc/120.conf": (
                "arch: amd64\ncores: 4\nhostname: jellyfin\nmemory: 4096\n"
                "net0: name=eth0,bridge=vmbr0,ip=dhcp,type=veth\nostype: debian\n"
                "rootfs: local-zfs:subvol-120-disk-0,size=16G\nunprivileged: 1\n"
            ),
            "etc/pve/lxc/121.conf": (
                "arch: amd64\ncores: 4\ndev0: /dev/dri/renderD129,mode=0666\n"
                "hostname: frigate\nmemory: 8192\nostype: debian\n"
                "rootfs: local-zfs:subvol-121-disk-0,size=32G\n"
            ),
            "etc/pve/qemu-server/310.conf": (
                "bios: ovmf\ncores: 8\nmachine: q35\nmemory: 16384\nname: plex\n"
                "ostype: win11\nscsi0: local-zfs:vm-310-disk-0,size=64G\n"
            ),
            f"{_MEDIA_CT}/etc/group": _DEBIAN_GROUP,
            f"{_MEDIA_CT}/etc/os-release": OS_RELEASE,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
        },
    )


_W7900 = Ids(0x1002, 0x7448, 0x1002, 0x0E0D, 0x030000, 0x00)
_W7900_AUDIO = Ids(0x1002, 0xAB30, 0x1002, 0xAB30, 0x040300)


def amd_rocm() -> HostSpec:
    """An EPYC with two Radeon Pro W7900 on amdgpu for a ROCm container (raw lines)."""
    groups = _Groups()
    devices = _amd_complex(0x00, 0, groups)
    devices += _with_drm(
        _slot(
            "0000:01:00.0",
            "0000:00:01.1",
            _W7900,
            _W7900_AUDIO,
            numa_node=0,
            iommu_group=groups(),
            link=GEN4_X16,
            driver="amdgpu",
            audio_driver="snd_hda_intel",
            boot_vga=True,
        ),
        0,
        128,
    )
    devices += [
        DeviceSpec(
            address="0000:00:03.1", vendor=0x1022, device=0x14AB, pci_class=0x060400,
            numa_node=0, driver="pcieport", iommu_group=groups(), link=GEN4_X16,
        ),
    ]  # fmt: skip
    devices += _with_drm(
        _slot(
            "0000:02:00.0",
            "0000:00:03.1",
            _W7900,
            _W7900_AUDIO,
            numa_node=0,
            iommu_group=groups(),
            link=GEN4_X16,
            driver="amdgpu",
            audio_driver="snd_hda_intel",
        ),
        1,
        129,
    )
    return HostSpec(
        hostname="pve-rocm",
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs "
            "amd_iommu=on iommu=pt"
        ),
        numa=("0-31",),
        iommu_units=(IommuUnit("ivhd0", "0000:00:00.2"),),
        group_type="identity",
        sev_snp=False,
        char_devices=((238, "kfd"),),
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/pve/lxc/130.conf": (
                "arch: amd64\ncores: 16\nhostname: rocm\nmemory: 65536\nostype: ubuntu\n"
                "rootfs: local-zfs:subvol-130-disk-0,size=200G\n"
            ),
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
        },
    )


_RTX4090 = Ids(0x10DE, 0x2684, 0x1043, 0x889D, 0x030000, 0xA1)
_RTX4090_AUDIO = Ids(0x10DE, 0x22BA, 0x1043, 0x889D, 0x040300, 0xA1)
_STREAM_CT = "rpool/data/subvol-140-disk-0"
# The GPU modules' lines of /proc/modules as the kernel prints them ("name size refs
# users, state address (taint)"; the address is 0 to a reader without CAP_SYSLOG):
# nvidia-drm is loaded, so each GPU has DRM nodes next to its /dev/nvidiaN.
_NVIDIA_DRM_MODULES = """\
nvidia_uvm 2076672 0 - Live 0x0000000000000000 (OE)
nvidia_drm 135168 2 - Live 0x0000000000000000 (OE)
nvidia_modeset 1830912 3 nvidia_drm, Live 0x0000000000000000 (OE)
nvidia 14381056 12 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (OE)
drm_ttm_helper 16384 1 nvidia_drm, Live 0x0000000000000000
drm_kms_helper 253952 1 nvidia_drm, Live 0x0000000000000000
drm 774144 6 nvidia_drm,drm_ttm_helper,drm_kms_helper, Live 0x0000000000000000
"""


def nvidia_drm() -> HostSpec:
    """A Threadripper 7960X (no iGPU) with two RTX 4090 on nvidia and nvidia-drm loaded:
    the first for Jellyfin (NVENC) and Ollama in an unprivileged container, the second
    for a VM, and a Frigate container that holds the second's DRM render node today."""
    groups = _Groups()
    devices = _amd_complex(0x00, 0, groups)
    for minor, port in enumerate(("0000:00:01.1", "0000:00:03.1")):
        if minor:
            # The second GPU's root port; the first is the complex's GPP bridge 01.1.
            devices.append(
                DeviceSpec(
                    address=port, vendor=0x1022, device=0x14AB, pci_class=0x060400,
                    numa_node=0, driver="pcieport", iommu_group=groups(), link=GEN4_X16,
                )
            )  # fmt: skip
        devices += _with_drm(
            _slot(
                f"0000:{minor + 1:02x}:00.0", port, _RTX4090, _RTX4090_AUDIO, numa_node=0,
                iommu_group=groups(), link=GEN4_X16, driver="nvidia",
                nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 4090", minor=minor,
                                  vbios="95.02.18.80.5F", dma_bits=47),
                audio_driver="snd_hda_intel", bars=RTX4090_REBAR, audio_bars=HDA_BARS,
                boot_vga=not minor,
            ),
            minor,
            128 + minor,
        )  # fmt: skip
    return HostSpec(
        hostname="pve-stream",
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet",
        numa=("0-47",),
        cpu=CpuSpec(
            model_name="AMD Ryzen Threadripper 7960X 24-Cores",
            model=24,
            phys_bits=48,
            virt_bits=48,
        ),
        node_memory=(NodeMemory.gib(125.2, 88.0),),
        iommu_units=(IommuUnit("ivhd0", "0000:00:00.2"),),
        sev_snp=False,
        # nvidia-uvm's major is dynamic (508 on this boot); nvidia's is 195, drm's 226.
        nvidia=NvidiaModule(version="580.95.05", open=True, uvm_major=508, caps_major=235),
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/pve/lxc/140.conf": (
                "#Jellyfin (NVENC) and Ollama\n"
                "arch: amd64\ncores: 16\nfeatures: nesting=1\nhostname: stream\n"
                "memory: 32768\nnet0: name=eth0,bridge=vmbr0,ip=dhcp,type=veth\n"
                "ostype: debian\nrootfs: local-zfs:subvol-140-disk-0,size=64G\n"
                "unprivileged: 1\n"
            ),
            "etc/pve/lxc/141.conf": (
                "arch: amd64\ncores: 4\ndev0: /dev/dri/renderD129,gid=104,mode=0660\n"
                "hostname: frigate\nmemory: 8192\nostype: debian\n"
                "rootfs: local-zfs:subvol-141-disk-0,size=32G\nunprivileged: 1\n"
            ),
            "etc/pve/qemu-server/410.conf": (
                "bios: ovmf\ncores: 12\ncpu: host\nmachine: q35\nmemory: 32768\n"
                "name: gaming\nostype: win11\nscsi0: local-zfs:vm-410-disk-0,size=256G\n"
            ),
            f"{_STREAM_CT}/etc/group": _DEBIAN_GROUP,
            f"{_STREAM_CT}/etc/os-release": OS_RELEASE,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            "etc/modprobe.d/blacklist-nouveau.conf": NOUVEAU_BLACKLIST,
            "etc/modprobe.d/nvidia-drm.conf": "options nvidia-drm modeset=1\n",
            "proc/modules": _NVIDIA_DRM_MODULES,
            "sys/module/nvidia_drm/parameters/modeset": "Y\n",
        },
    )


_UPGRADED_CT = "rpool/data/subvol-160-disk-0"
_UPGRADED_LIBS = f"{_UPGRADED_CT}/usr/lib/x86_64-linux-gnu"
_UPGRADED_VENV = "opt/vllm"
_UPGRADED_DPKG = """\
Package: libnvidia-compute-580
Status: install ok installed
Priority: optional
Section: libs
Installed-Size: 281304
Maintainer: Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Architecture: amd64
Multi-Arch: same
Source: nvidia-graphics-drivers-580
Version: 580.95.05-0ubuntu1
Depends: libc6 (>= 2.34)
Description: NVIDIA libcompute package
 This package contains the CUDA, OpenCL and NVML user space libraries.

Package: nvidia-utils-580
Status: install ok installed
Priority: optional
Section: utils
Installed-Size: 2391
Maintainer: Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Architecture: amd64
Source: nvidia-graphics-drivers-580
Version: 580.95.05-0ubuntu1
Description: NVIDIA driver support binaries

"""
"""CT 160's image came with the 580 driver's userspace from Ubuntu's packages."""


def driver_upgrade() -> HostSpec:
    """Two RTX 4090 on nvidia after a driver upgrade by the .run installer and a reboot:
    the loaded module and the host's own userspace are 590.48.01, while CT 160 (vLLM over
    both GPUs) still has the 580.95.05 userspace its image came with. Nothing has run
    CUDA since the boot, so nvidia-uvm is not loaded and /dev/nvidia-uvm does not exist."""
    groups = _Groups()
    devices = _amd_complex(0x00, 0, groups)
    for minor, port in enumerate(("0000:00:01.1", "0000:00:03.1")):
        if minor:
            devices.append(
                DeviceSpec(
                    address=port, vendor=0x1022, device=0x14AB, pci_class=0x060400,
                    numa_node=0, driver="pcieport", iommu_group=groups(), link=GEN4_X16,
                )
            )  # fmt: skip
        devices += _slot(
            f"0000:{minor + 1:02x}:00.0", port, _RTX4090, _RTX4090_AUDIO, numa_node=0,
            iommu_group=groups(), link=GEN4_X16, driver="nvidia",
            nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 4090", minor=minor,
                              vbios="95.02.18.80.5F", dma_bits=47),
            audio_driver="snd_hda_intel",
        )  # fmt: skip
    return HostSpec(
        hostname="pve-llm",
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet",
        numa=("0-47",),
        iommu_units=(IommuUnit("ivhd0", "0000:00:00.2"),),
        sev_snp=False,
        nvidia=NvidiaModule(version="590.48.01", open=True, uvm_major=None, caps_major=None),
        driver_userspace="590.48.01",
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/pve/lxc/160.conf": (
                "#vLLM over both 4090s\n"
                "arch: amd64\ncores: 24\ndev0: /dev/nvidia0,mode=0666\n"
                "dev1: /dev/nvidia1,mode=0666\ndev2: /dev/nvidiactl,mode=0666\n"
                "dev3: /dev/nvidia-uvm,mode=0666\ndev4: /dev/nvidia-uvm-tools,mode=0666\n"
                "hostname: llm\nmemory: 98304\nnet0: name=eth0,bridge=vmbr0,ip=dhcp,type=veth\n"
                "onboot: 1\nostype: ubuntu\nrootfs: local-zfs:subvol-160-disk-0,size=200G\n"
                "unprivileged: 1\n"
            ),
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            "etc/modprobe.d/blacklist-nouveau.conf": NOUVEAU_BLACKLIST,
            f"{_UPGRADED_CT}/etc/os-release": OS_RELEASE,
            f"{_UPGRADED_CT}/var/lib/dpkg/status": _UPGRADED_DPKG,
            f"{_UPGRADED_LIBS}/libcuda.so.580.95.05": "",
            f"{_UPGRADED_LIBS}/libnvidia-ml.so.580.95.05": "",
            f"{_UPGRADED_CT}/{_UPGRADED_VENV}/lib/python3.12/site-packages/"
            "vllm-0.33.0.dist-info/METADATA": VLLM_METADATA,
        },
        symlinks={
            f"{_UPGRADED_LIBS}/libcuda.so.1": "libcuda.so.580.95.05",
            f"{_UPGRADED_LIBS}/libnvidia-ml.so.1": "libnvidia-ml.so.580.95.05",
            f"{_UPGRADED_CT}/{_UPGRADED_VENV}/bin/python3": "/usr/bin/python3.12",
        },
    )


_BMC_VGA = "0000:06:00.0"
_BMC_CARD = "sys/devices/pci0000:00/0000:00:1c.0/0000:05:00.0/0000:06:00.0/drm/card0"


def intel_arc() -> HostSpec:
    """A Xeon server board whose only GPU is an Arc B580 on xe, for Plex and Frigate in a
    privileged container (raw lines, card node too), next to the BMC's ASPEED display.
    The container holds all of /dev/dri today, as community helper scripts write it."""
    groups = _Groups()

    def port(address: str, device: int, link: Link, parent: str | None = None) -> DeviceSpec:
        vendor = 0x8086
        return DeviceSpec(
            address=address, parent=parent, vendor=vendor, device=device,
            pci_class=0x060400, numa_node=0, driver="pcieport", iommu_group=groups(),
            link=link,
        )  # fmt: skip

    devices: list[DeviceSpec] = [
        DeviceSpec(
            address="0000:00:00.0", vendor=0x8086, device=0x09A2, pci_class=0x088000,
            numa_node=0, iommu_group=groups(),
        ),
        port("0000:00:1c.0", 0x7AB8, Link("5.0 GT/s PCIe", 1)),
    ]  # fmt: skip
    # The AST2600 sits behind ASPEED's own PCIe-to-PCI bridge: one IOMMU group for both.
    # Its driver, ast, gives it a card node only (no render node), probed first: card0.
    bmc_group = groups()
    devices += [
        DeviceSpec(
            address="0000:05:00.0", parent="0000:00:1c.0", vendor=0x1A03, device=0x1150,
            subsystem_vendor=0x1A03, subsystem_device=0x1150, pci_class=0x060400,
            revision=0x06, numa_node=0, iommu_group=bmc_group, link=Link("5.0 GT/s PCIe", 1),
        ),
        DeviceSpec(
            address=_BMC_VGA, parent="0000:05:00.0", vendor=0x1A03, device=0x2000,
            subsystem_vendor=0x15D9, subsystem_device=0x1C48, pci_class=0x030000,
            revision=0x52, numa_node=0, iommu_group=bmc_group, driver="ast", boot_vga=True,
        ),
    ]  # fmt: skip
    # The B580 brings its own switch: the GPU and its HDMI audio on two downstream ports.
    devices += [
        port("0000:16:02.0", 0x352A, GEN4_X16),
        port("0000:17:00.0", 0xE2FF, GEN4_X16, "0000:16:02.0"),
        port("0000:18:01.0", 0xE2F0, GEN4_X16, "0000:17:00.0"),
        port("0000:18:02.0", 0xE2F1, GEN4_X16, "0000:17:00.0"),
    ]
    devices += _with_drm(
        _slot(
            "0000:19:00.0",
            "0000:18:01.0",
            Ids(0x8086, 0xE20B, 0x8086, 0x1100, 0x030000, 0x00),
            None,
            numa_node=0,
            iommu_group=groups(),
            link=GEN4_X16,
            driver="xe",
        ),
        1,
        128,
    )
    devices.append(
        DeviceSpec(
            address="0000:1a:00.0", parent="0000:18:02.0", vendor=0x8086, device=0xE2F7,
            subsystem_vendor=0x8086, subsystem_device=0x1100, pci_class=0x040300,
            numa_node=0, iommu_group=groups(), link=GEN4_X16, driver="snd_hda_intel",
        )
    )  # fmt: skip
    return HostSpec(
        hostname="pve-nvr",
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/mapper/pve-root ro quiet",
        numa=("0-15",),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_LVM,
            "etc/pve/lxc/150.conf": (
                "#Plex and Frigate on the Arc (Quick Sync)\n"
                "arch: amd64\ncores: 8\nfeatures: nesting=1\nhostname: nvr\nmemory: 16384\n"
                "mp0: /tank/recordings,mp=/media/frigate\n"
                "net0: name=eth0,bridge=vmbr0,ip=dhcp,type=veth\nostype: debian\n"
                "rootfs: local-lvm:vm-150-disk-0,size=32G\n"
                # Every DRM node of the host, the BMC's card0 included.
                "lxc.cgroup2.devices.allow: c 226:* rwm\n"
                "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir\n"
            ),
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            f"{_BMC_CARD}/dev": "226:0\n",
        },
        symlinks={"sys/class/drm/card0": f"../../{_BMC_CARD.removeprefix('sys/')}"},
    )


# -- pve-mi300x: eight Instinct MI300X, SGLang on ROCm in a container, a VM on the rest

MI300X = Ids(0x1002, 0x74A1, 0x1002, 0x74A1, 0x120000)
MI300X_BARS = _bars((0, 256 * GIB, "64p"), (2, 2 * MIB, "64p"), (5, 512 * KIB, "32"),
                    (6, 128 * KIB, "rom"))  # fmt: skip
"""An Instinct MI300X: its 192 GB of HBM behind a 256 GiB BAR0, doorbells, registers."""
_ROCM_CT = "rpool/data/subvol-150-disk-0"
# Ubuntu 24.04's /etc/group as the LXC template has it (render and video are system
# groups with ids the distribution picks), plus the serving user made by the admin.
_UBUNTU_GROUP = """\
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:syslog
tty:x:5:
disk:x:6:
video:x:44:sglang
users:x:100:
nogroup:x:65534:
render:x:993:sglang
sglang:x:1000:
"""
_UBUNTU_PASSWD = """\
root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
sglang:x:1000:1000:SGLang server:/home/sglang:/bin/bash
"""


def amd_instinct() -> HostSpec:
    """A dual EPYC 9004 with eight Instinct MI300X (class 0x12, amdgpu, four per socket):
    NUMA 0's four serve SGLang on ROCm in CT 150 (unprivileged, render nodes by gid),
    NUMA 1's go to vfio-pci for VM 450; the IOMMU translates DMA (no iommu=pt)."""
    groups = _Groups()
    devices: list[DeviceSpec] = []
    for index in range(8):
        # One root complex per module, as the OAM baseboard wires them to the sockets.
        node, bus = index // 4, 0x40 * (index // 4) + 0x10 * (index % 4)
        devices += _amd_complex(bus, node, groups)
        port = f"0000:{bus:02x}:01.1"
        devices += _with_drm(
            _slot(
                f"0000:{bus + 1:02x}:00.0", port, MI300X, None, numa_node=node,
                iommu_group=groups(), link=GEN5, driver="amdgpu", bars=MI300X_BARS,
            ),
            index,
            128 + index,
        )  # fmt: skip
    model = "shared/models/Qwen3.5-122B-A10B"
    return HostSpec(
        hostname="pve-mi300x",
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs amd_iommu=on"
        ),
        numa=("0-63,128-191", "64-127,192-255"),
        cpu=CpuSpec(model_name="AMD EPYC 9534 64-Core Processor", sockets=2),
        node_memory=(NodeMemory.gib(1511.3, 1320.0), NodeMemory.gib(1511.8, 1490.2)),
        iommu_units=tuple(
            IommuUnit(f"ivhd{i}", d.address)
            for i, d in enumerate(d for d in devices if d.address.endswith(":00.2"))
        ),
        group_type="DMA-FQ",
        sev_snp=False,
        char_devices=((235, "kfd"),),
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/pve/lxc/150.conf": (
                "arch: amd64\ncores: 64\nhostname: rocm-sglang\nmemory: 524288\n"
                "mp0: /shared,mp=/shared\nostype: ubuntu\n"
                "rootfs: local-zfs:subvol-150-disk-0,size=200G\nunprivileged: 1\n"
            ),
            # cpu: host: four 256 GiB BARs need more than QEMU's default 40 address bits.
            "etc/pve/qemu-server/450.conf": (
                "boot: order=scsi0\ncores: 64\ncpu: host\nmachine: q35\nmemory: 524288\n"
                "ostype: l26\n"
            ),
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
            f"{_ROCM_CT}/etc/os-release": OS_RELEASE,
            f"{_ROCM_CT}/etc/group": _UBUNTU_GROUP,
            f"{_ROCM_CT}/etc/passwd": _UBUNTU_PASSWD,
            # Written by the rocm-core package: the release and its build.
            f"{_ROCM_CT}/opt/rocm/.info/version": "6.4.1-120\n",
            f"{model}/config.json": qwen35_config(),
            f"{model}/model.safetensors.index.json": qwen35_index(),
            # vLLM in the same venv: the ROCm server can be either engine.
            f"{_ROCM_CT}/home/sglang/venv/lib/python3.12/site-packages/"
            "vllm-0.33.0.dist-info/METADATA": VLLM_METADATA,
        },
        symlinks={f"{_ROCM_CT}/home/sglang/venv/bin/python3": "/usr/bin/python3.12"},
    )


# -- pve-vdi: an L40S whose SR-IOV virtual functions carry NVIDIA vGPUs, and a second one

L40S = Ids(0x10DE, 0x26B9, 0x10DE, 0x1851, 0x030200, 0xA1)
L40S_VFS = 32
"""`sriov_totalvfs` of an L40S: `sriov-manage -e` creates all of them."""
# creatable_vgpu_types of an idle VF (no VF of its GPU has a type yet), a subset of the
# driver's list. Type ids are the driver's, numbered per release; these are examples.
L40S_VGPU_TYPES = (
    (1150, "NVIDIA L40S-1B"),
    (1151, "NVIDIA L40S-2B"),
    (1155, "NVIDIA L40S-4Q"),
    (1157, "NVIDIA L40S-8Q"),
    (1158, "NVIDIA L40S-12Q"),
    (1160, "NVIDIA L40S-24Q"),
    (1161, "NVIDIA L40S-48Q"),
)
_VDI_WIN = """\
agent: 1
bios: ovmf
boot: order=scsi0
cores: 8
cpu: host
efidisk0: local-zfs:vm-301-disk-0,efitype=4m,pre-enrolled-keys=1,size=1M
machine: pc-q35-9.2
memory: 16384
name: cad-ws
net0: virtio=BC:24:11:3A:10:01,bridge=vmbr0
ostype: win11
scsi0: local-zfs:vm-301-disk-1,discard=on,size=128G
scsihw: virtio-scsi-single
tpmstate0: local-zfs:vm-301-disk-2,size=4M,version=v2.0
"""
_RENDER_VM = """\
boot: order=scsi0
cores: 16
cpu: host
machine: q35
memory: 65536
name: render
net0: virtio=BC:24:11:3A:10:20,bridge=vmbr0
ostype: l26
scsi0: local-zfs:vm-320-disk-0,discard=on,size=256G
scsihw: virtio-scsi-single
"""


def vgpu_l40s() -> HostSpec:
    """A Xeon server with two L40S on NVIDIA's vGPU manager (550.127.06, kernel 6.8). The
    first has its 32 SR-IOV virtual functions created (pve-nvidia-sriov@0000:4b:00.0), each
    on nvidia in an IOMMU group of its own with every vGPU type creatable, no VM running;
    the second has none created and goes whole to a render VM. VM 301 is a CAD desktop
    to get a vGPU."""
    groups = _Groups()

    def port(address: str) -> DeviceSpec:
        return DeviceSpec(
            address=address, vendor=0x8086, device=0x352A, pci_class=0x060400,
            numa_node=0, driver="pcieport", iommu_group=groups(), link=GEN4_X16,
        )  # fmt: skip

    devices: list[DeviceSpec] = [
        DeviceSpec(
            address="0000:00:00.0", vendor=0x8086, device=0x09A2, pci_class=0x060000,
            numa_node=0, iommu_group=groups(),
        ),
    ]  # fmt: skip
    for minor, (root, gpu) in enumerate((("0000:4a:01.0", "0000:4b:00.0"),
                                         ("0000:5a:01.0", "0000:5b:00.0"))):  # fmt: skip
        devices.append(port(root))
        (l40s,) = _slot(
            gpu, root, L40S, None, numa_node=0, iommu_group=groups(), link=GEN4_X16,
            driver="nvidia", nvidia=NvidiaInfo(model="NVIDIA L40S", minor=minor,
                                               vbios="95.02.5D.00.01", dma_bits=52),
        )  # fmt: skip
        devices.append(attrs.evolve(l40s, sriov_totalvfs=L40S_VFS))
    # VF N: First VF Offset 4, VF Stride 1 (0000:4b:00.4 .. 0000:4b:04.3), ARI.
    for n in range(L40S_VFS):
        routing = 4 + n
        devices.append(
            DeviceSpec(
                address=f"0000:4b:{routing // 8:02x}.{routing % 8}", parent="0000:4a:01.0",
                numa_node=0, driver="nvidia", iommu_group=groups(), physfn="0000:4b:00.0",
                vgpu=VgpuSpec(creatable=L40S_VGPU_TYPES), **attrs.asdict(L40S),
            )
        )  # fmt: skip
    return HostSpec(
        hostname="pve-vdi",
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.8.12-9-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet "
            "intel_iommu=on"
        ),
        numa=("0-31",),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        # The vGPU manager is NVIDIA's proprietary module.
        nvidia=NvidiaModule(version="550.127.06", open=False),
        devices=tuple(devices),
        files={
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/pve/qemu-server/301.conf": _VDI_WIN,
            "etc/pve/qemu-server/320.conf": _RENDER_VM,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
        },
    )


# -- what a VM needs to start with its GPUs (issue 29, item 3)

PRO6000_WS = Ids(0x10DE, 0x2BB1, 0x10DE, 0x204B, 0x030000, 0xA1)
"""The RTX PRO 6000 Blackwell Workstation Edition: a display controller with outputs."""
_WRX_VM = """\
#CFD and rendering, all four RTX PRO 6000
bios: ovmf
boot: order=scsi0
cores: 64
cpu: x86-64-v2-AES
efidisk0: local-zfs:vm-200-disk-0,efitype=4m,pre-enrolled-keys=1,size=1M
machine: q35
memory: 262144
name: sim
net0: virtio=BC:24:11:20:00:01,bridge=vmbr0
numa: 0
ostype: l26
scsi0: local-zfs:vm-200-disk-1,iothread=1,size=512G
scsihw: virtio-scsi-single
smbios1: uuid=6c1f2a34-8d0e-4b7a-9e55-2f3c4d5e6a70
sockets: 1
"""
"""VM 200 as the GUI creates it (x86-64-v2-AES, PVE's default CPU type since 8.0)."""


def pve_wrx() -> HostSpec:
    """A Threadripper PRO 7985WX workstation (one NUMA node, 52 address bits) with four
    RTX PRO 6000 Workstation Edition, each a 128 GiB BAR1, for VM 200, whose CPU type
    x86-64-v2-AES gives the guest QEMU's default 40 bits (1 TiB): too few for them. The
    board's ASPEED BMC is the boot display."""
    groups = _Groups()
    devices: list[DeviceSpec] = []
    for minor, bus in enumerate((0x00, 0x20, 0x40, 0x60)):
        devices += _amd_complex(bus, 0, groups)
        devices += _slot(
            f"0000:{bus + 1:02x}:00.0", f"0000:{bus:02x}:01.1", PRO6000_WS, PRO6000_AUDIO,
            numa_node=0, iommu_group=groups(), link=GEN5, driver="nvidia",
            nvidia=NvidiaInfo(model="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                              minor=minor),
            audio_driver="snd_hda_intel", bars=PRO6000_BARS, audio_bars=HDA_BARS,
        )  # fmt: skip
    bmc_group = groups()
    devices += [
        DeviceSpec(
            address="0000:60:03.1", vendor=0x1022, device=0x14AB, pci_class=0x060400,
            numa_node=0, driver="pcieport", iommu_group=groups(), link=Link("5.0 GT/s PCIe", 1),
        ),
        DeviceSpec(
            address="0000:62:00.0", parent="0000:60:03.1", vendor=0x1A03, device=0x1150,
            subsystem_vendor=0x1A03, subsystem_device=0x1150, pci_class=0x060400,
            revision=0x06, numa_node=0, iommu_group=bmc_group, link=Link("5.0 GT/s PCIe", 1),
        ),
        DeviceSpec(
            address="0000:63:00.0", parent="0000:62:00.0", vendor=0x1A03, device=0x2000,
            subsystem_vendor=0x1043, subsystem_device=0x8826, pci_class=0x030000,
            revision=0x52, numa_node=0, iommu_group=bmc_group, driver="ast", boot_vga=True,
        ),
    ]  # fmt: skip
    return HostSpec(
        hostname="pve-wrx",
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet",
        numa=("0-127",),
        cpu=CpuSpec(model_name="AMD Ryzen Threadripper PRO 7985WX 64-Cores", model=24),
        node_memory=(NodeMemory.gib(503.1, 470.0),),
        iommu_units=tuple(
            IommuUnit(f"ivhd{i}", d.address)
            for i, d in enumerate(d for d in devices if d.address.endswith(":00.2"))
        ),
        sev_snp=False,
        nvidia=NVIDIA_590_OPEN,
        devices=tuple(devices),
        files={
            "etc/pve/qemu-server/200.conf": _WRX_VM,
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
        },
    )


L40S_BARS = _bars((0, 16 * MIB, "32"), (1, 64 * GIB, "64p"), (3, 32 * MIB, "64p"))
NPS4_NODES = ("0-15,64-79", "16-31,80-95", "32-47,96-111", "48-63,112-127")
_NPS4_VM = """\
affinity: 32-47,96-111
bios: ovmf
boot: order=scsi0
cores: 32
cpu: host
machine: q35
memory: 262144
name: train
numa: 1
numa0: cpus=0-31,hostnodes=2,memory=262144,policy=bind
ostype: l26
scsi0: local-zfs:vm-300-disk-0,size=256G
sockets: 1
"""
"""VM 300 pinned whole to NUMA node 2, where its L40S is: 256 GiB on a 192 GB quadrant."""


def pve_nps4() -> HostSpec:
    """An EPYC 9554 in NPS4 (one socket, four NUMA nodes of 192 GB each, 12 x 64 GB DIMMs
    over four quadrants) with an L40S per node. VM 300 binds 256 GiB to node 2."""
    groups = _Groups()
    devices: list[DeviceSpec] = []
    for node, bus in enumerate((0x00, 0x40, 0x80, 0xC0)):
        devices += _amd_complex(bus, node, groups)
        devices += _slot(
            f"0000:{bus + 1:02x}:00.0", f"0000:{bus:02x}:01.1", L40S, None, numa_node=node,
            iommu_group=groups(), link=GEN4_X16, driver="nvidia",
            nvidia=NvidiaInfo(model="NVIDIA L40S", minor=node), bars=L40S_BARS,
        )  # fmt: skip
    return HostSpec(
        hostname="pve-nps4",
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs amd_iommu=on"
        ),
        numa=NPS4_NODES,
        cpu=CpuSpec(model_name="AMD EPYC 9554 64-Core Processor"),
        node_memory=(
            NodeMemory.gib(188.6, 150.2),
            NodeMemory.gib(188.9, 120.4),
            NodeMemory.gib(188.9, 181.0),
            NodeMemory.gib(188.9, 184.3),
        ),
        iommu_units=tuple(
            IommuUnit(f"ivhd{i}", d.address)
            for i, d in enumerate(d for d in devices if d.address.endswith(":00.2"))
        ),
        group_type="DMA-FQ",
        sev_snp=False,
        nvidia=NVIDIA_590_OPEN,
        devices=tuple(devices),
        files={
            "etc/pve/qemu-server/300.conf": _NPS4_VM,
            "etc/pve/storage.cfg": STORAGE_ZFS,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
        },
    )


def pve_tb() -> HostSpec:
    """A Core i7-1360P mini PC: its Iris Xe drives the display; an RTX 4070 in a
    Thunderbolt 4 enclosure (removable, behind the enclosure's JHL7440 switch) is
    meant for VM 500."""
    groups = _Groups()
    tb_link = Link("8.0 GT/s PCIe", 4)
    devices: list[DeviceSpec] = [
        DeviceSpec(
            address="0000:00:00.0", vendor=0x8086, device=0xA706, pci_class=0x060000,
            iommu_group=groups(),
        ),
        DeviceSpec(
            address="0000:00:06.0", vendor=0x8086, device=0xA74D, pci_class=0x060400,
            driver="pcieport", iommu_group=groups(), link=GEN4_X4,
        ),
        DeviceSpec(
            address="0000:01:00.0", parent="0000:00:06.0", vendor=0x144D, device=0xA80C,
            subsystem_vendor=0x144D, subsystem_device=0xA801, pci_class=0x010802,
            driver="nvme", iommu_group=groups(), link=GEN4_X4,
        ),
        # The CPU's Thunderbolt 4 root port (external facing: not removable itself).
        DeviceSpec(
            address="0000:00:07.0", vendor=0x8086, device=0xA76E, pci_class=0x060400,
            driver="pcieport", iommu_group=groups(), link=tb_link,
        ),
        DeviceSpec(
            address="0000:2c:00.0", parent="0000:00:07.0", vendor=0x8086, device=0x15EF,
            pci_class=0x060400, revision=0x06, driver="pcieport", iommu_group=groups(),
            link=tb_link, removable=True,
        ),
        DeviceSpec(
            address="0000:2d:01.0", parent="0000:2c:00.0", vendor=0x8086, device=0x15EF,
            pci_class=0x060400, revision=0x06, driver="pcieport", iommu_group=groups(),
            link=tb_link, removable=True,
        ),
    ]  # fmt: skip
    devices += _with_drm(
        _slot(
            "0000:00:02.0", None, Ids(0x8086, 0xA7A0, 0x8086, 0x3024, 0x030000, 0x04), None,
            iommu_group=groups(), driver="i915",
            bars=_bars((0, 16 * MIB, "64"), (2, 256 * MIB, "64p")), boot_vga=True,
        ),
        0,
        128,
    )  # fmt: skip
    devices += _slot(
        "0000:2e:00.0", "0000:2d:01.0",
        Ids(0x10DE, 0x2786, 0x1043, 0x8888, 0x030000, 0xA1),
        Ids(0x10DE, 0x22BC, 0x1043, 0x8888, 0x040300, 0xA1),
        iommu_group=groups(), link=tb_link, driver="nvidia",
        nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 4070", minor=0, vbios="95.04.31.00.5C",
                          dma_bits=47),
        audio_driver="snd_hda_intel", bars=AMPERE_BARS, audio_bars=HDA_BARS, removable=True,
    )  # fmt: skip
    return HostSpec(
        hostname="pve-tb",
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/mapper/pve-root ro quiet",
        numa=("0-15",),
        cpu=CpuSpec(
            vendor="GenuineIntel",
            model_name="13th Gen Intel(R) Core(TM) i7-1360P",
            family=6,
            model=186,
            stepping=2,
            phys_bits=39,
            virt_bits=48,
            flags=INTEL_FLAGS,
        ),
        node_memory=(NodeMemory.gib(62.4, 51.3),),
        iommu_units=(IommuUnit("dmar0"), IommuUnit("dmar1")),
        nvidia=NVIDIA_590_OPEN,
        devices=tuple(devices),
        files={
            "etc/pve/qemu-server/500.conf": (
                "bios: ovmf\ncores: 8\ncpu: host\nmachine: q35\nmemory: 32768\nname: egpu\n"
                "ostype: win11\nscsi0: local-lvm:vm-500-disk-0,size=128G\n"
            ),
            "etc/pve/storage.cfg": STORAGE_LVM,
            "etc/modprobe.d/pve-blacklist.conf": PVE_BLACKLIST,
        },
    )


HOSTS: Mapping[str, Callable[[], HostSpec]] = {
    "amd-instinct": amd_instinct,
    "amd-rocm": amd_rocm,
    "driver-upgrade": driver_upgrade,
    "intel-arc": intel_arc,
    "intel-media": intel_media,
    "kpro6": kpro6,
    "kpro6-split": kpro6_split,
    "kpro7": kpro7,
    "mixed": mixed,
    "no-iommu": no_iommu,
    "nvidia-drm": nvidia_drm,
    "pve-nps4": pve_nps4,
    "pve-tb": pve_tb,
    "pve-ws": pve_ws,
    "pve-wrx": pve_wrx,
    "shared-group": shared_group,
    "vgpu-l40s": vgpu_l40s,
    "workstation": workstation,
    "workstation-bios": workstation_bios,
}


def regenerate(dest: Path, names: Sequence[str] | None = None) -> list[Path]:
    """Rewrite dest/<name>/ for every host in HOSTS (or only `names`)."""
    chosen = list(names) if names else sorted(HOSTS)
    unknown = [n for n in chosen if n not in HOSTS]
    if unknown:
        raise KeyError(f"no fixture host {', '.join(unknown)}; known: {', '.join(sorted(HOSTS))}")
    written: list[Path] = []
    for name in chosen:
        root = dest / name
        if root.exists():
            shutil.rmtree(root)
        write_host(HOSTS[name](), root)
        written.append(root)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "regenerate":
        print("usage: python tests/fixture_hosts.py regenerate DEST [NAME...]", file=sys.stderr)
        return 2
    for root in regenerate(Path(args[1]), args[2:]):
        print(f"wrote {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
