"""Processing accelerators (PCI class 0x12: Instinct MI300X, Gaudi) are GPUs for pvegpu.

`pve-mi300x`: a dual EPYC 9004 server with eight Instinct MI300X OAM modules (1002:74a1,
class 0x120000, on amdgpu, four per socket, each behind a root port in an IOMMU group
of its own; no HD-audio function). Discovery lists them as GPUs; a VM pool takes them as
it takes display GPUs (split, mapping, hostpci lines), and a Gaudi2 (1da3:1020) likewise.
A host with no GPU at all is refused with what discovery found, not with a NUMA node.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from pvegpu.errors import PlanError
from pvegpu.hardware import GPU_MEMORY, MIB, host_driver
from pvegpu.host.discover import discover
from pvegpu.model.facts import HostFacts
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.spec.load import parse_spec
from pvegpu.testing import DeviceSpec, DrmInfo, HostSpec, IommuUnit, Link, write_host

NODE = "pve-mi300x"
MI300X = 0x74A1
GAUDI2 = (0x1DA3, 0x1020)
BUSES = (0x05, 0x15, 0x65, 0x75, 0x85, 0x95, 0xE5, 0xF5)
GPUS = tuple(f"0000:{bus:02x}:00.0" for bus in BUSES)
GEN5 = Link("32.0 GT/s PCIe", 16)
VM = "boot: order=scsi0\ncores: 32\nmachine: q35\nmemory: 524288\nostype: l26\n"

VM_POOL = f"""\
node = "{NODE}"

[[pools]]
name = "rocm"
numa_node = 0
mapping = {{ id = "mi300x-vm" }}

[pools.vfio.vm]
vmid = 400
"""


def accelerator_host(
    ids: tuple[int, int] = (0x1002, MI300X),
    driver: str | None = "amdgpu",
    *,
    accelerators: bool = True,
) -> HostSpec:
    """The host; `accelerators=False` leaves only its NIC and NVMe (no GPU at all)."""
    devices: list[DeviceSpec] = []
    for index, bus in enumerate(BUSES):
        node = 0 if index < 4 else 1
        port = f"0000:{bus - 5:02x}:01.1"
        devices.append(
            DeviceSpec(
                address=port, vendor=0x1022, device=0x14AB, pci_class=0x060400,
                numa_node=node, driver="pcieport", iommu_group=2 * index, link=GEN5,
                secondary_bus=bus,
            )
        )  # fmt: skip
        if accelerators:
            devices.append(
                DeviceSpec(
                    address=GPUS[index], parent=port, vendor=ids[0], device=ids[1],
                    subsystem_vendor=ids[0], subsystem_device=0x0C34, pci_class=0x120000,
                    numa_node=node, driver=driver, iommu_group=2 * index + 1, link=GEN5,
                    # amdgpu gives each its DRM nodes (card1.. after the BMC's card0).
                    drm=DrmInfo(card=index + 1, render=128 + index) if driver == "amdgpu"
                    else None,
                )
            )  # fmt: skip
    devices += [
        DeviceSpec(
            address="0000:c1:00.0", vendor=0x8086, device=0x1521, pci_class=0x020000,
            subsystem_vendor=0x15D9, subsystem_device=0x1521, numa_node=1, driver="igb",
            iommu_group=40,
        ),
        DeviceSpec(
            address="0000:c2:00.0", vendor=0x144D, device=0xA80A, pci_class=0x010802,
            subsystem_vendor=0x144D, subsystem_device=0xA801, numa_node=1, driver="nvme",
            iommu_group=41,
        ),
    ]  # fmt: skip
    return HostSpec(
        hostname=NODE,
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/mapper/pve-root ro quiet",
        numa=("0-63,128-191", "64-127,192-255"),
        iommu_units=(IommuUnit("ivhd0"), IommuUnit("ivhd1")),
        group_type="DMA-FQ",
        sev_snp=False,
        char_devices=((235, "kfd"),),
        extra_drivers=("vfio-pci",),
        devices=tuple(devices),
        files={"etc/pve/qemu-server/400.conf": VM},
    )


def facts_of(tmp_path: Path, spec: HostSpec | None = None) -> HostFacts:
    root = tmp_path / "root"
    write_host(spec or accelerator_host(), root)
    return discover(root)


def test_accelerators_are_gpus(tmp_path: Path) -> None:
    facts = facts_of(tmp_path)
    assert [str(g.address) for g in facts.gpus] == list(GPUS)
    assert all(g.function.is_gpu and not g.function.is_display for g in facts.gpus)
    assert [str(g.address) for g in facts.gpus if g.numa_node == 0] == list(GPUS[:4])


def test_an_accelerator_returns_to_its_vendors_driver(tmp_path: Path) -> None:
    """Revert takes an MI300X that sysfs shows on vfio-pci (or unbound) back to amdgpu,
    as it would a Radeon."""
    gpu = facts_of(tmp_path).gpus[0].function
    assert host_driver(attrs.evolve(gpu, driver=None)) == "amdgpu"
    assert host_driver(attrs.evolve(gpu, driver="vfio-pci")) == "amdgpu"


@pytest.mark.parametrize(
    ("ids", "driver"), [((0x1002, MI300X), "amdgpu"), (GAUDI2, "habanalabs")], ids=str
)
def test_a_vm_pool_takes_accelerators_like_gpus(
    tmp_path: Path, ids: tuple[int, int], driver: str
) -> None:
    facts = facts_of(tmp_path, accelerator_host(ids, driver))
    planned = plan(facts, parse_spec(VM_POOL))
    (pool,) = planned.pools
    assert [str(f.address) for f in pool.functions] == list(GPUS[:4])
    assert pool.mapping is not None
    assert {m.id for m in pool.mapping.maps} == {f"{ids[0]:04x}:{ids[1]:04x}"}
    files: dict[str, str] = {}
    for artifact in render(planned):  # the bundle's files come before revert's
        files.setdefault(artifact.path, artifact.content)
    script = files["usr/local/sbin/pvegpu-vfio-split"]
    for index, address in enumerate(GPUS[:4]):
        assert f"{address} {ids[0]:04x}:{ids[1]:04x} 0 {2 * index + 1} {driver}" in script
    assert files["etc/pve/qemu-server/400.conf"].count("mapping=mi300x-vm") == 4


def test_a_container_pool_gets_the_accelerators_nodes(tmp_path: Path) -> None:
    """An LXC pool of MI300X gets what ROCm opens, as for a Radeon: each GPU's render
    node and /dev/kfd."""
    spec = accelerator_host()
    spec = attrs.evolve(spec, files={**spec.files, "etc/pve/lxc/129.conf": "arch: amd64\n"})
    text = f'node = "{NODE}"\n\n[[pools]]\nname = "c"\nnuma_node = 0\n\n[pools.lxc]\nvmid = 129\n'
    (pool,) = plan(facts_of(tmp_path, spec), parse_spec(text)).pools
    assert pool.lxc is not None
    assert [d.partition(",")[0] for d in pool.lxc.gpu_lines.devices] == [
        *(f"/dev/dri/renderD{128 + i}" for i in range(4)),
        "/dev/kfd",
    ]


def test_count_and_explicit_addresses_select_accelerators(tmp_path: Path) -> None:
    facts = facts_of(tmp_path)
    text = VM_POOL.replace("numa_node = 0", 'gpus = ["85:00.0"]')
    assert [str(g.address) for g in plan(facts, parse_spec(text)).pools[0].gpus] == [GPUS[4]]
    text = VM_POOL.replace("numa_node = 0", "count = 8")
    assert len(plan(facts, parse_spec(text)).pools[0].gpus) == 8


def test_mi300x_memory_is_known() -> None:
    """rocm-smi's VRAM total of an MI300X in SPX/NPS1: 206141652992 bytes."""
    assert GPU_MEMORY["1002:74a1"][0] == 206141652992 == 196592 * MIB


@pytest.mark.parametrize("select", ["numa_node = 0", "count = 1", 'gpus = ["c1:00.0"]'], ids=str)
def test_a_host_without_gpus_says_what_it_has(tmp_path: Path, select: str) -> None:
    """Whatever the pool selects by, the one refusal names the host's devices: not a
    NUMA node without GPUs, not a count too high."""
    facts = facts_of(tmp_path, accelerator_host(accelerators=False))
    assert facts.gpus == ()
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(VM_POOL.replace("numa_node = 0", select)))
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == ("host-without-gpus", "pools")
    assert "NUMA" not in problem.message
    assert "1 of class 0x0108 (144d:a80a)" in problem.message
    assert "1 of class 0x0200 (8086:1521)" in problem.message
    assert "0x1022" not in problem.message  # the root ports are bridges, not "found"


def test_a_numa_node_without_gpus_on_a_host_with_some_is_still_that(tmp_path: Path) -> None:
    """On a host that has GPUs, an empty NUMA node is the selector's problem, as before."""
    spec = accelerator_host()
    socket0 = tuple(d for d in spec.devices if d.address not in GPUS[4:])
    facts = facts_of(tmp_path, attrs.evolve(spec, devices=socket0))
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(VM_POOL.replace("numa_node = 0", "numa_node = 1")))
    assert [(p.code, p.subject) for p in err.value.problems] == [
        ("pool-empty", "pools[0].numa_node")
    ]
