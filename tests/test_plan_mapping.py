"""Each pool's pci.cfg section, built by the planner from discovered facts."""

from __future__ import annotations

import attrs
import pytest

from pvegpu.errors import PlanError
from pvegpu.model.facts import PciFunction
from pvegpu.model.schema import MappingSpec
from pvegpu.planning.mapping import pool_mapping
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import pcicfg
from pvegpu.spec.load import parse_spec
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


def test_gpus_without_group_are_refused_once_each() -> None:
    """No IOMMU group means no mapping: plan() refuses, once per such GPU (pool_mapping is
    not asked, so it does not report them again)."""
    facts = kpro6({"etc/pve/lxc/129.conf": "arch: amd64\n"})
    orphans = {g.address for g in facts.gpus[4:6]}
    drop = {a for g in facts.gpus[4:6] for a in (g.address, *(c.address for c in g.companions))}

    def orphan(f: PciFunction) -> PciFunction:
        return attrs.evolve(f, iommu_group=None) if f.address in drop else f

    facts = attrs.evolve(
        facts,
        functions=tuple(map(orphan, facts.functions)),
        gpus=tuple(
            attrs.evolve(
                g, function=orphan(g.function), companions=tuple(map(orphan, g.companions))
            )
            for g in facts.gpus
        ),
        iommu_groups=tuple(g for g in facts.iommu_groups if not set(g.members) & drop),
    )
    spec = parse_spec(
        'node = "kpro6"\n[[pools]]\nname = "ct"\nnuma_node = 1\nmapping = { id = "g1" }\n'
        "[pools.lxc]\nvmid = 129\n"
    )
    with pytest.raises(PlanError) as caught:
        plan(facts, spec)
    problems = caught.value.problems
    assert sorted(p.subject for p in problems) == sorted(str(a) for a in orphans)
    assert {(p.code, p.fix) for p in problems} == {(problems[0].code, problems[0].fix)}
    assert problems[0].code == "gpu-without-iommu-group"


def test_mapping_value_that_cannot_be_written_is_a_problem() -> None:
    """A description pci.cfg cannot hold (a newline) is refused when planning, not later."""
    facts = kpro6()
    mapping, problems = pool_mapping(facts, facts.gpus[4:5], MappingSpec("g1", "two\nlines"))
    assert mapping is None
    assert [(p.code, p.subject) for p in problems] == [
        ("pcicfg-value", f"{pcicfg.PATH} mapping 'g1'")
    ]
