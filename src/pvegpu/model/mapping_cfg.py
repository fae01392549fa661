"""The cluster's PCI mappings, `/etc/pve/mapping/pci.cfg`, as the facts hold them.

Discovery keeps the file whole (`HostFacts.files`): its bytes are the base the patch of
`pvefiles/pcicfg.py` starts from, keeping every byte pvegpu does not own. Planning asks
for its sections here, parsed once per facts value on first use (`pci_cfg(facts)`, kept
with the facts' lookups), with the refusal a file that does not parse gets: the planner
refuses such a file on its own (`planning/mapping.py`), every other rule reads it as
having no mapping. No I/O here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType

from pvegpu.errors import RenderError
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.pvefiles import hostpci, pcicfg
from pvegpu.pvefiles.pcicfg import PciCfgSection, PciMapping


def pci_cfg(facts: HostFacts) -> PciCfg:
    """The facts' pci.cfg, parsed once per facts value (`HostFacts.derived`)."""
    return facts.derived(PciCfg)


class PciCfg:
    """A HostFacts' pci.cfg: its raw file, its sections, or why it does not parse. A plain
    class, not a value: it is never compared or shown (as `HostFacts`' lookups)."""

    __slots__ = ("_paths", "error", "file", "sections")

    def __init__(self, facts: HostFacts) -> None:
        self.file: ConfigFile | None = facts.file(pcicfg.PATH)
        """The file as read, the base a patch starts from; None: the host has none."""
        self.sections: tuple[PciCfgSection, ...] = ()
        """Its mappings as read, in file order; none while absent or not parsed."""
        self.error: RenderError | None = None
        """Why it does not parse (`pcicfg-syntax`, naming the line); None when it does."""
        if self.file is not None:
            try:
                self.sections = pcicfg.parse(self.file.content)
            except RenderError as error:
                self.error = error
        self._paths: dict[str, dict[str, list[str]]] | None = None
        """By node, then mapping id, the `path` values of its map lines; built on first use."""

    def dropped_comment_lines(
        self,
        mapping_ids: Collection[str],
        drop: Mapping[str, Collection[str]] = MappingProxyType({}),
    ) -> tuple[int, ...]:
        """Line numbers of the `#` lines the patch leaves out: those inside the mappings
        it prints anew (`mapping_ids`) or removes (`drop`: their map lines that go).
        A file that does not parse raises its refusal (the patch refuses it too)."""
        if self.error is not None:
            raise self.error
        if self.file is None:
            return ()
        comments = pcicfg.comment_lines(self.file.content)
        return pcicfg.dropped_comments(self.sections, comments, mapping_ids, drop)

    @property
    def mappings(self) -> tuple[PciMapping, ...]:
        """Its mappings with their known keys (`PciCfgSection.mapping`), in file order."""
        return tuple(section.mapping for section in self.sections)

    def node_hosts(self, node: str) -> dict[str, tuple[hostpci.HostId, ...]]:
        """By mapping id, the host devices its map lines of `node` hand over."""
        if self._paths is None:
            # Every line read once, grouped by node: a cluster's file holds every node's
            # lines, and several rules of each node ask for its own.
            self._paths = {}
            for section in self.sections:
                for line in section.maps:
                    by_id = self._paths.setdefault(line.node, {})
                    by_id.setdefault(section.id, []).append(line.get("path") or "")
        by_id = self._paths.get(node, {})
        return {s.id: hostpci.host_ids(by_id.get(s.id, ())) for s in self.sections}
