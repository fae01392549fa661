"""pci.cfg and the guest configs as the facts answer them (model/mapping_cfg.py,
model/guests.py): parsed once per facts value, from the file that value holds; the raw
file stays the base a patch starts from."""

from __future__ import annotations

from pathlib import Path

import attrs

from pvegpu.host.discover import discover
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.guests import guests
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.pvefiles import hostpci, pcicfg

REPO = Path(__file__).resolve().parent.parent
KPRO6 = REPO / "fixtures/sysfs/kpro6"
CT = "etc/pve/lxc/129.conf"


def _with(facts: HostFacts, path: str, content: str | None) -> HostFacts:
    others = tuple(f for f in facts.files if f.path != path)
    added = () if content is None else (ConfigFile(path, content),)
    return attrs.evolve(facts, files=(*others, *added))


def test_pci_cfg_sections_once_per_facts_value() -> None:
    facts = discover(KPRO6)
    cfg = pci_cfg(facts)
    assert cfg is pci_cfg(facts)
    assert cfg.file is facts.file(pcicfg.PATH)
    assert cfg.error is None
    assert [s.id for s in cfg.sections][:2] == ["nic-cx6", "pro6000"]
    assert cfg.file is not None
    assert cfg.mappings == pcicfg.parse_mappings(cfg.file.content)
    assert cfg.node_hosts("kpro6")["nic-cx6"] == hostpci.host_ids(["0000:c1:00.0"])
    assert cfg.node_hosts("kpro7")["pro6000"] == ()


def test_a_broken_pci_cfg_has_no_sections_and_says_why() -> None:
    facts = discover(KPRO6)
    assert facts.file(pcicfg.PATH) is not None
    broken = _with(facts, pcicfg.PATH, "pro6000\n\tmap id=10de:2bb5,node=kpro6\n")
    cfg = pci_cfg(broken)
    assert cfg.sections == () and cfg.mappings == ()
    assert cfg.error is not None and cfg.error.problems
    gone = pci_cfg(_with(facts, pcicfg.PATH, None))
    assert gone.file is None and gone.sections == () and gone.error is None
    # The original value still answers from its own file.
    assert pci_cfg(facts).sections


def test_guest_config_parsed_once_for_the_facts_file() -> None:
    facts = discover(KPRO6)
    file = facts.file(CT)
    assert file is not None
    config = guests(facts).config(file)
    assert guests(facts).config(file) is config
    assert "".join(s.text for s, _ in config.sections) == file.content
    assert config.main == config.sections[0][0].lines
    assert any(line.key == "rootfs" for line in config.main)
    # A file the facts do not hold (a plan's own) is parsed, not kept.
    other = ConfigFile(CT, file.content + "# changed\n")
    assert guests(facts).config(other).file is other
    assert guests(facts).config(file) is config
