"""What planning asks of the guests' files, answered by the facts (model/guests.py): worked
out once per facts value, from the files that value holds, never from an older copy."""

from __future__ import annotations

from pathlib import Path

import attrs

from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json, facts_to_json
from pvegpu.model.facts import ConfigFile, FileStat, HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.rootfs import STORAGE_CFG, RootfsLocation
from pvegpu.vendors.drm import DRM_NODES
from pvegpu.vendors.nvidia import NVIDIA

REPO = Path(__file__).resolve().parent.parent
KPRO6 = REPO / "fixtures/sysfs/kpro6"
CT = "etc/pve/lxc/129.conf"


def _with(facts: HostFacts, path: str, content: str) -> HostFacts:
    others = tuple(f for f in facts.files if f.path != path)
    return attrs.evolve(facts, files=(*others, ConfigFile(path, content)))


def test_rootfs_from_the_config_and_storage_cfg() -> None:
    facts = discover(KPRO6)
    location = guests(facts).rootfs(129)
    assert location == RootfsLocation("local-zfs:subvol-129-disk-0", "rpool/data/subvol-129-disk-0")
    # Worked out once: the same answer object, from the same view.
    assert guests(facts) is guests(facts)
    assert guests(facts).rootfs(129) is location
    assert guests(facts).rootfs(130).why == "etc/pve/lxc/130.conf was not read"


def test_an_evolved_copy_answers_from_its_own_files() -> None:
    facts = discover(KPRO6)
    assert guests(facts).rootfs(129).path is not None
    storage = facts.file(STORAGE_CFG)
    assert storage is not None
    # The same volume on a thin pool: a block device, no directory.
    lvm = storage.content.replace("zfspool: local-zfs", "lvmthin: local-zfs")
    changed = _with(facts, STORAGE_CFG, lvm)
    assert guests(changed).rootfs(129) == RootfsLocation(
        "local-zfs:subvol-129-disk-0",
        None,
        "local-zfs is lvmthin storage: the volume is a block device",
    )
    assert guests(facts).rootfs(129).path == "rpool/data/subvol-129-disk-0"


def test_the_facts_json_document_answers_the_same() -> None:
    facts = discover(KPRO6)
    again = facts_from_json(facts_to_json(facts))
    assert guests(again).rootfs(129) == guests(facts).rootfs(129)
    assert guests(again).granted_gpus(129) == guests(facts).granted_gpus(129)


def test_granted_gpus_by_the_nodes_asked_for() -> None:
    facts = discover(KPRO6)
    config = facts.file(CT)
    assert config is not None
    minors, every = guests(facts).granted_gpus(129)
    assert minors and not every
    assert guests(facts).granted_gpus(129, DRM_NODES) == (frozenset(), False)
    assert guests(facts).granted_gpus(130) == (frozenset(), False)
    every_gpu = "lxc.cgroup2.devices.allow: c 195:* rwm\n" + config.content
    assert guests(_with(facts, CT, every_gpu)).granted_gpus(129) == (minors, True)
    assert 129 in guests(facts).vendor_containers(NVIDIA)


def test_config_path_on_this_node_or_another() -> None:
    facts = discover(KPRO6)
    assert guests(facts).config_path("lxc", 129) == CT
    assert guests(facts).config_path("qemu-server", 129) is None
    other = "etc/pve/nodes/kpro7/qemu-server/140.conf"
    clustered = attrs.evolve(facts, stats=(*facts.stats, FileStat(other, 0)))
    assert guests(clustered).config_path("qemu-server", 140) == other
    assert guests(clustered).config_path("lxc", 140) is None


def test_containers_are_this_nodes_numbered_configs() -> None:
    facts = discover(KPRO6)
    assert [vmid for vmid, _ in guests(facts).containers] == [129]
    odd = (
        ConfigFile("etc/pve/lxc/notes.conf", ""),
        ConfigFile("etc/pve/lxc/131.conf.bak", ""),
        ConfigFile("etc/pve/lxc/sub/132.conf", ""),
        ConfigFile("etc/pve/qemu-server/133.conf", ""),
        ConfigFile("etc/pve/lxc/130.conf", "arch: amd64\n"),
    )
    more = attrs.evolve(facts, files=(*facts.files, *odd))
    assert [(v, f.path) for v, f in guests(more).containers] == [
        (129, CT),
        (130, "etc/pve/lxc/130.conf"),
    ]
    assert [(v, f.path) for v, f in guests(more).vms] == [(133, "etc/pve/qemu-server/133.conf")]
    # Both kinds in the facts' order, as host_guests judges them.
    assert [(k, v) for k, v, _ in guests(more).configs] == [
        ("lxc", 129),
        ("qemu-server", 133),
        ("lxc", 130),
    ]
