"""A workstation-class host with three GPU models, built with pvegpu.testing into tmp_path.

`pve-mix`: one socket (Intel VT-d), three GPUs on nvidia 580, each behind a root port of
its own and in an IOMMU group of its own: an RTX 6000 Ada (10de:26b1, 48 GB) at 01:00.0,
a GeForce RTX 4090 (10de:2684, 24 GB) at 02:00.0 and a GeForce RTX 3090 (10de:2204,
24 GB) at 03:00.0. CT 129 (on a ZFS subvolume that is not mounted) is there to serve a
pool of two of them: the 4090 with the 3090 (equal memory, two models), or the 6000 Ada
with the 4090 (48 GB beside 24 GB, which SGLang refuses to start with).
"""

from __future__ import annotations

from pvegpu.testing import DeviceSpec, HostSpec, IommuUnit, Link, NvidiaInfo, NvidiaModule

NODE = "pve-mix"
GEN4_X16 = Link("16.0 GT/s PCIe", 16)
MODELS = (
    (0x26B1, "NVIDIA RTX 6000 Ada Generation"),
    (0x2684, "NVIDIA GeForce RTX 4090"),
    (0x2204, "NVIDIA GeForce RTX 3090"),
)
ADA, RTX4090, RTX3090 = "01:00.0", "02:00.0", "03:00.0"
CT_129 = (
    "arch: amd64\nhostname: serve\nmemory: 65536\nrootfs: local-zfs:subvol-129-disk-0,size=64G\n"
)
STORAGE = "zfspool: local-zfs\n\tpool rpool/data\n\tcontent images,rootdir\n\tsparse 1\n"
LLAMA = (
    '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32, '
    '"num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, '
    '"max_position_embeddings": 8192, "torch_dtype": "bfloat16"}'
)
MODEL_DIR = "models/llama"


def mixed_gpus_host() -> HostSpec:
    devices: list[DeviceSpec] = [
        DeviceSpec(
            address="0000:00:00.0", vendor=0x8086, device=0x09A2, pci_class=0x060000,
            iommu_group=0,
        )
    ]  # fmt: skip
    for index, (device, model) in enumerate(MODELS):
        bus = index + 1
        port = f"0000:00:{bus:02x}.0"
        devices.append(
            DeviceSpec(
                address=port, vendor=0x8086, device=0x352A, pci_class=0x060400,
                driver="pcieport", iommu_group=10 + 2 * index, link=GEN4_X16,
                secondary_bus=bus,
            )
        )  # fmt: skip
        devices.append(
            DeviceSpec(
                address=f"0000:{bus:02x}:00.0", parent=port, vendor=0x10DE, device=device,
                subsystem_vendor=0x10DE, subsystem_device=0x16A1, pci_class=0x030000,
                revision=0xA1, numa_node=0, driver="nvidia", iommu_group=11 + 2 * index,
                link=GEN4_X16, nvidia=NvidiaInfo(model=model, minor=index),
            )
        )  # fmt: skip
    return HostSpec(
        hostname=NODE,
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/mapper/pve-root ro intel_iommu=on",
        numa=("0-31",),
        iommu_units=(IommuUnit("dmar0"),),
        group_type="DMA-FQ",
        nvidia=NvidiaModule(version="580.95.05", open=True),
        devices=tuple(devices),
        files={
            "etc/pve/lxc/129.conf": CT_129,
            "etc/pve/storage.cfg": STORAGE,
            f"{MODEL_DIR}/config.json": LLAMA,
        },
    )


def serving_spec(gpus: tuple[str, ...], *, engine: str = "sglang", extra: str = "") -> str:
    """A pool of `gpus` serving an 8B Llama (16 GB of weights) from CT 129."""
    version = 'version = "0.5.23"' if engine == "sglang" else 'version = "0.33.0"'
    listed = ", ".join(f'"{g}"' for g in gpus)
    return (
        f'node = "{NODE}"\n[[pools]]\nname = "serve"\ngpus = [{listed}]\n'
        "[pools.lxc]\nvmid = 129\n"
        f'[pools.lxc.serving]\nengine = "{engine}"\n{version}\n'
        'model_path = "/models/llama"\n'
        f'model_config = "{MODEL_DIR}/config.json"\n'
        "checkpoint_bytes = 16000000000\n"
        f"{extra}"
    )
