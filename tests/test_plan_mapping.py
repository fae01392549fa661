"""Each pool's pci.cfg section, built by the planner from discovered facts."""

from __future__ import annotations

import attrs

from pvegpu.planning.mapping import pool_mapping
from pvegpu.pvefiles import pcicfg
from pvegpu.spec.schema import MappingSpec
from strategies import kpro6


def test_mapping_from_facts() -> None:
    """One map line per GPU, every value from sysfs; whole slot since audio shares the group."""
    facts = kpro6()
    mapping, problems = pool_mapping(
        facts, facts.gpus[4:], MappingSpec("pro6000-vm", "VM GPUs on NUMA 1")
    )
    assert problems == []
    assert mapping is not None
    assert pcicfg.format([mapping]) == (
        "pro6000-vm\n"
        "\tmap id=10de:2bb5,iommugroup=40,node=kpro6,path=0000:81:00,subsystem-id=10de:204b\n"
        "\tmap id=10de:2bb5,iommugroup=41,node=kpro6,path=0000:91:00,subsystem-id=10de:204b\n"
        "\tmap id=10de:2bb5,iommugroup=56,node=kpro6,path=0000:e1:00,subsystem-id=10de:204b\n"
        "\tmap id=10de:2bb5,iommugroup=57,node=kpro6,path=0000:f1:00,subsystem-id=10de:204b\n"
        "\tdescription VM GPUs on NUMA 1\n"
        "\n"
    )


def test_mapping_uses_function_path_when_audio_is_elsewhere() -> None:
    """With the audio function in another group, the map names the GPU function only."""
    facts = kpro6(audio_group_offset=100)
    mapping, _ = pool_mapping(facts, facts.gpus[4:5], MappingSpec("g1"))
    assert mapping is not None
    (entry,) = mapping.maps
    assert entry.path == "0000:81:00.0"


def test_mapping_marks_mdev_devices() -> None:
    """A GPU with mdev types needs `mdev 1`, or Proxmox refuses the mapping; plan() decides
    it, so pci.cfg's renderer writes the mapping as it is."""
    facts = kpro6()
    gpu = facts.gpus[4]
    mdev_gpu = attrs.evolve(gpu, function=attrs.evolve(gpu.function, mdev_capable=True))
    mapping, _ = pool_mapping(facts, (mdev_gpu,), MappingSpec("g1"))
    assert mapping is not None and mapping.mdev is True
    plain, _ = pool_mapping(facts, (gpu,), MappingSpec("g1"))
    assert plain is not None and plain.mdev is None


def test_mapping_refuses_gpus_without_group() -> None:
    """No IOMMU group means no passthrough: refused, naming every such device."""
    facts = kpro6()
    orphans = tuple(
        attrs.evolve(g, function=attrs.evolve(g.function, iommu_group=None))
        for g in facts.gpus[4:6]
    )
    mapping, problems = pool_mapping(facts, orphans, MappingSpec("g1"))
    assert mapping is None
    assert [p.subject for p in problems] == ["0000:81:00.0", "0000:91:00.0"]
    assert {p.code for p in problems} == {"gpu-without-iommu-group"}


def test_mapping_value_that_cannot_be_written_is_a_problem() -> None:
    """A description pci.cfg cannot hold (a newline) is refused when planning, not later."""
    facts = kpro6()
    mapping, problems = pool_mapping(facts, facts.gpus[4:5], MappingSpec("g1", "two\nlines"))
    assert mapping is None
    assert [(p.code, p.subject) for p in problems] == [
        ("pcicfg-value", f"{pcicfg.PATH} mapping 'g1'")
    ]
