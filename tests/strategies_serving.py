"""Builders and Hypothesis strategies for serving tests: hosts, pools, model configs.

`kpro6_*` describe the reference deployment (8 x RTX PRO 6000 Blackwell 10de:2bb5,
NUMA 0/1 halves, SEV-SNP with translated IOMMU groups, nvidia 590.48.01, LXC 129 keeping
the NUMA 0 GPUs and serving Qwen3.5-122B-A10B). Model configs are written the way the
models ship them (Qwen3.5 nests its language model under text_config).
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from hypothesis import strategies as st

from pvegpu.model.facts import (
    GPU,
    ConfigFile,
    FileStat,
    GpuDriver,
    HostFacts,
    IommuGroup,
    IommuGroupType,
    IommuState,
    KernelModuleFlavor,
    NumaNode,
    PciFunction,
)
from pvegpu.model.plan import LxcContainer, Plan, Pool, PoolKind
from pvegpu.model.schema import DeviceStyle, LxcSpec, PoolSpec, ServingSpec, Spec
from pvegpu.pci import CpuList, PciAddress

KPRO6_BUSES = (0x01, 0x11, 0x61, 0x71, 0x81, 0x91, 0xE1, 0xF1)
KPRO6_CPUS = ("0-31,64-95", "32-63,96-127")
HOST_DRIVER = "590.48.01"
ROOTFS = "rpool/data/subvol-129-disk-0"
MODEL_DIR = "shared/models/Qwen3.5-122B-A10B"
QWEN_CHECKPOINT = 244_800_000_000
OLD_UNIT = """[Unit]
Description=SGLang Qwen3.5

[Service]
Environment=CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
ExecStart=/root/ml-env/bin/python3 -m sglang.launch_server \\
    --model /shared/models/Qwen3.5-122B-A10B --tp 8
Restart=always

[Install]
WantedBy=multi-user.target
"""
DPKG_STATUS = """Package: libc6
Status: install ok installed
Version: 2.39-0ubuntu8

Package: libnvidia-compute-{major}
Status: install ok installed
Architecture: amd64
Version: {version}-0ubuntu0.24.04.1
Description: NVIDIA libcompute package
 continuation line: Version: 1.0

Package: nvidia-container-toolkit
Status: install ok installed
Version: 1.17.8-1

Package: nvidia-utils-{major}
Status: install ok installed
Version: {version}-0ubuntu0.24.04.1

Package: libnvidia-compute-470
Status: deinstall ok config-files
Version: 470.256.02-0ubuntu0.24.04.1
"""


def qwen35_config(**text: Any) -> str:
    """Qwen3.5-122B-A10B's config.json shape: a multimodal wrapper with text_config."""
    layers = text.pop("num_hidden_layers", 48)
    interval = text.pop("full_attention_interval", 4)
    text_config = {
        "model_type": "qwen3_5_moe_text",
        "num_hidden_layers": layers,
        "full_attention_interval": interval,
        "layer_types": [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(layers)
        ],
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 64,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "hidden_size": 3072,
        "mtp_num_hidden_layers": 1,
        "max_position_embeddings": 262144,
        **text,
    }
    return json.dumps(
        {
            "architectures": ["Qwen3_5MoeForConditionalGeneration"],
            "model_type": "qwen3_5_moe",
            "torch_dtype": "bfloat16",
            "text_config": text_config,
            "vision_config": {"depth": 27, "num_heads": 16},
        },
        indent=2,
    )


def llama_config(**overrides: Any) -> str:
    """A plain dense model: 32 query heads, 8 KV heads, every layer full attention."""
    return json.dumps(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "hidden_size": 4096,
            "max_position_embeddings": 131072,
            "torch_dtype": "bfloat16",
            **overrides,
        }
    )


def index_json(total: int) -> str:
    return json.dumps({"metadata": {"total_size": total}, "weight_map": {}})


def gpu(bus: int, numa: int | None, *, minor: int, device: int = 0x2BB5, group: int = 0) -> GPU:
    address = PciAddress(0, bus, 0, 0)
    function = PciFunction(
        address=address,
        vendor=0x10DE,
        device=device,
        subsystem_vendor=0x10DE,
        subsystem_device=0x204E,
        pci_class=0x030200,
        sysfs_path=f"sys/devices/pci0000:00/{address}",
        numa_node=numa,
        iommu_group=group,
        driver="nvidia",
    )
    return GPU(function, (), node_minor=minor, model="NVIDIA RTX PRO 6000 Blackwell")


def host(
    gpus: tuple[GPU, ...],
    *,
    iommu_type: IommuGroupType | None = IommuGroupType.DMA_FQ,
    iommu: bool = True,
    sev_snp: bool = True,
    nvidia: str | None = HOST_DRIVER,
    files: tuple[ConfigFile, ...] = (),
    stats: tuple[FileStat, ...] = (),
) -> HostFacts:
    groups = tuple(
        IommuGroup(g.iommu_group, (g.address,), iommu_type)
        for g in gpus
        if iommu and g.iommu_group is not None
    )
    return HostFacts(
        node="kpro6",
        functions=tuple(sorted(g.function for g in gpus)),
        gpus=tuple(sorted(gpus)),
        numa_nodes=tuple(NumaNode(i, CpuList.parse(c)) for i, c in enumerate(KPRO6_CPUS)),
        iommu_groups=groups,
        iommu=IommuState(iommu, ("ivhd0",) if iommu else ()),
        sev_snp=sev_snp,
        gpu_drivers=(GpuDriver("nvidia", nvidia, KernelModuleFlavor.OPEN),) if nvidia else (),
        char_majors=(),
        cmdline="",
        vfio_ids=(),
        files=files,
        stats=stats,
    )


def kpro6_gpus() -> tuple[GPU, ...]:
    return tuple(
        gpu(bus, 0 if i < 4 else 1, minor=i, group=20 + i) for i, bus in enumerate(KPRO6_BUSES)
    )


def kpro6_files(
    *,
    config: str | None = None,
    container_version: str = HOST_DRIVER,
    extra: tuple[ConfigFile, ...] = (),
) -> tuple[tuple[ConfigFile, ...], tuple[FileStat, ...]]:
    """Model config + index, the container's dpkg status, old unit and NVIDIA libraries."""
    major = container_version.split(".")[0]
    files = (
        ConfigFile(f"{MODEL_DIR}/config.json", config or qwen35_config()),
        ConfigFile(f"{MODEL_DIR}/model.safetensors.index.json", index_json(QWEN_CHECKPOINT)),
        ConfigFile(
            f"{ROOTFS}/var/lib/dpkg/status",
            DPKG_STATUS.format(major=major, version=container_version),
        ),
        ConfigFile(f"{ROOTFS}/etc/systemd/system/sglang-qwen.service", OLD_UNIT),
        ConfigFile("etc/pve/lxc/129.conf", "arch: amd64\ncores: 32\n"),
        *extra,
    )
    libdir = f"{ROOTFS}/usr/lib/x86_64-linux-gnu"
    stats = (
        FileStat(f"{libdir}/libcuda.so.{container_version}", 70_000_000),
        FileStat(f"{libdir}/libnvidia-ml.so.{container_version}", 2_000_000),
    )
    return files, stats


def qwen_serving(**overrides: Any) -> ServingSpec:
    values: dict[str, Any] = {
        "version": "0.5.23",
        "unit": "sglang-qwen",
        "python": "/root/ml-env/bin/python3",
        "model_path": "/shared/models/Qwen3.5-122B-A10B",
        "served_model_name": "qwen3.5-122b",
        "model_config": f"{MODEL_DIR}/config.json",
        "container_rootfs": ROOTFS,
        "context_length": 262144,
        "mem_fraction_static": 0.85,
        "mtp": True,
    }
    values.update(overrides)
    # A key no ServingSpec field holds is one of an engine's own (vLLM's
    # pipeline_parallel_size): the spec holds those as the loader takes them.
    fields = attrs.fields_dict(ServingSpec)
    own = {k: v for k, v in values.items() if k in fields}
    engine_keys = tuple((k, v) for k, v in values.items() if k not in fields)
    own["engine_keys"] = (*own.get("engine_keys", ()), *engine_keys)
    return ServingSpec(**own)


ServingPool = tuple[Pool, ServingSpec | None]
"""A pool as plan() has it before the serving step, and the serving its spec asks for."""


def lxc_pool(
    gpus: tuple[GPU, ...], serving: ServingSpec | None, *, name: str = "sglang", vmid: int = 129
) -> ServingPool:
    pool = Pool(
        name=name,
        kind=PoolKind.LXC,
        gpus=tuple(sorted(gpus)),
        functions=tuple(sorted(g.function for g in gpus)),
        driver="nvidia",
        numa_nodes=tuple(sorted({g.numa_node for g in gpus}, key=lambda n: -1 if n is None else n)),
        lxc=LxcContainer(vmid, DeviceStyle.DEV, "0666", None, None),
    )
    return pool, serving


def plan_of(facts: HostFacts, *pools: ServingPool) -> Plan:
    """The plan as plan() has it before its last step: no server decided yet.

    `decided_servings(plan)` then decides them (or raises), as plan() does.
    """
    spec = Spec(
        node=facts.node,
        pools=tuple(
            PoolSpec(
                name=pool.name,
                lxc=LxcSpec(vmid=pool.lxc.vmid if pool.lxc else 0, serving=serving),
            )
            for pool, serving in pools
        ),
    )
    return Plan(facts=facts, spec=spec, pools=tuple(pool for pool, _ in pools))


def kpro6_plan(serving: ServingSpec | None = None, **files: Any) -> Plan:
    """LXC 129 keeps the four NUMA 0 GPUs of kpro6 and serves Qwen3.5 on them (undecided)."""
    gpus = kpro6_gpus()
    file_list, stats = kpro6_files(**files)
    facts = host(gpus, files=file_list, stats=stats)
    return plan_of(facts, lxc_pool(gpus[:4], serving or qwen_serving()))


@st.composite
def pools_on_hosts(draw: st.DrawFn) -> tuple[Plan, Pool]:
    """A host with 1-16 GPUs on one NUMA node, and an LXC pool taking any subset of them.

    The plan is undecided (as plan() has it before its serving step); the pool serves.

    Sometimes a second pool gives more GPUs to the same container, so the container sees
    more GPUs than the serving pool has.
    """
    n = draw(st.integers(1, 16))
    buses = sorted(draw(st.lists(st.integers(1, 0xFE), min_size=n, max_size=n, unique=True)))
    gpus = tuple(gpu(bus, 0, minor=i, group=40 + i) for i, bus in enumerate(buses))
    iommu_type = draw(st.sampled_from([*IommuGroupType, None]))
    facts = host(
        gpus,
        iommu_type=iommu_type,
        iommu=draw(st.booleans()),
        sev_snp=draw(st.booleans()),
        nvidia=None,
    )
    chosen = draw(st.lists(st.sampled_from(gpus), min_size=1, unique=True))
    rest = [g for g in gpus if g not in chosen]
    serving = ServingSpec(version=draw(st.sampled_from(["0.5.9", "0.5.23"])), model_path="/m")
    pool = lxc_pool(tuple(chosen), serving)
    pools = [pool]
    share: bool = draw(st.booleans())
    if rest and share:
        other = draw(st.lists(st.sampled_from(rest), min_size=1, unique=True))
        pools.append(lxc_pool(tuple(other), None, name="other"))
    return plan_of(facts, *pools), pool[0]


@st.composite
def model_geometries(draw: st.DrawFn) -> dict[str, int]:
    """Head counts as models have them: powers of two and the odd 3/5/6/12/40/48/56/96."""
    counts = st.sampled_from([1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 40, 48, 56, 64, 96, 128])
    heads = draw(counts)
    kv = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    geometry = {"num_attention_heads": heads, "num_key_value_heads": kv}
    if draw(st.booleans()):
        geometry["linear_num_key_heads"] = draw(counts)
        geometry["linear_num_value_heads"] = geometry["linear_num_key_heads"] * draw(
            st.sampled_from([1, 2, 4])
        )
    return geometry
