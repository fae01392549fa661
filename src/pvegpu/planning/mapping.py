"""Each pool's cluster PCI mapping (a pci.cfg section), decided from discovered facts.

Proxmox checks `id`, `subsystem-id` and `iommugroup` of each map line against sysfs at VM
start, so all three are always written and none is typed by hand. The file format itself
(parse, canonical print, patch) is `pvefiles.pcicfg`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import GPU, HostFacts, PciFunction
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.plan import Pool
from pvegpu.model.released import MapLinesMoved
from pvegpu.model.schema import MappingSpec
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.pcicfg import PciMap, PciMapping
from pvegpu.wording import plural


def pool_mapping(
    facts: HostFacts,
    gpus: Sequence[GPU],
    spec: MappingSpec,
    switches: Sequence[PciFunction] = (),
    *,
    moves: bool = False,
) -> tuple[PciMapping | None, list[Diagnostic]]:
    """The pool's pci.cfg section with this node's map lines, or the problems in the way.

    Every GPU has an IOMMU group: plan() refuses one without (gpu-without-iommu-group)
    and does not ask for its mapping. `switches`: the NVSwitches that go to the VM with a
    whole board (planning/fabric.py), a map line each after the GPUs'. `moves`: the GPUs
    go to vfio-pci (a passthrough pool), where they have no vGPU types any more."""
    maps: list[PciMap] = []
    problems: list[Diagnostic] = []
    for gpu in gpus:
        # The function-less path hands over every function of the slot (GPU + audio);
        # that only works when they all sit in the GPU's group. A VF is one function: its
        # slot holds its siblings (and Proxmox takes no vGPU on a multifunction path).
        slot = facts.slot_functions(gpu.address)
        whole_slot = gpu.function.physfn is None and all(
            f.iommu_group == gpu.iommu_group for f in slot
        )
        maps.append(
            PciMap(
                id=gpu.vendor_device,
                node=facts.node,
                path=gpu.address.slot if whole_slot else str(gpu.address),
                iommugroup=gpu.iommu_group,
                subsystem_id=gpu.function.subsystem_id,
            )
        )
    maps += [
        PciMap(
            id=switch.vendor_device,
            node=facts.node,
            path=str(switch.address),
            iommugroup=switch.iommu_group,
            subsystem_id=switch.subsystem_id,
        )
        for switch in switches
    ]
    # At VM start Proxmox compares `mdev` with the device as sysfs shows it then: 1 while
    # it has mdev_supported_types/ or NVIDIA's nvidia/ (a vGPU VF), 0 otherwise; either
    # way wrong refuses the start. A GPU that goes to vfio-pci has neither there.
    mdev = True if not moves and any(g.function.mdev_capable for g in gpus) else None
    mapping = PciMapping(id=spec.id, maps=tuple(maps), description=spec.description, mdev=mdev)
    problems.extend(pcicfg.value_problems(mapping))
    return (None if problems else mapping), problems


def pci_cfg_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """Refusals of pci.cfg as a whole: a mapping id used twice, an existing file that
    Proxmox would misread (so it cannot be patched)."""
    mappings = [p.mapping for p in pools if p.mapping is not None]
    if not mappings:
        return
    for mapping_id, n in Counter(m.id for m in mappings).items():
        if n > 1:
            yield Diagnostic.error(
                "mapping-id-twice",
                f"{pcicfg.PATH} mapping {mapping_id!r}",
                "two pools name the same mapping; a VM would get GPUs of either pool",
                "give each pool its own mapping id",
            )
    error = pci_cfg(facts).error
    if error is not None:
        yield from error.problems


def pci_cfg_findings(
    facts: HostFacts, pools: Sequence[Pool], moved: Sequence[MapLinesMoved] = ()
) -> Iterator[Diagnostic]:
    """The pools' mappings are printed anew, as Proxmox prints them: the `#` comments
    inside them (and inside a mapping the plan removes) do not survive; every other byte
    of the file does."""
    existing = pci_cfg(facts)
    owned = [p.mapping.id for p in pools if p.mapping is not None]
    if existing.file is None or not owned:
        return
    drop = {m.mapping_id: m.values for m in moved}
    dropped = existing.dropped_comment_lines(owned, drop)
    if dropped:
        yield Diagnostic(
            Severity.INFO,
            "pcicfg-comments-dropped",
            pcicfg.PATH,
            f"the new file drops {plural(len(dropped), '# comment line')} "
            f"({'line' if len(dropped) == 1 else 'lines'} {', '.join(map(str, dropped))}) "
            "inside the mappings it writes anew, as every Proxmox write of them does; keep "
            "notes in the mappings' descriptions instead",
        )
