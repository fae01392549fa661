"""This node's guests as the facts' files say, worked out once per facts value.

Discovery keeps each guest config whole (`HostFacts.files`, the base a patch starts
from) and lists the cluster's other guests by name (`host/cluster_guests.py`). What
planning asks of them is answered here from those raw files, each answer on first use
and then kept with the facts' lookups (`guests(facts)`): where a container's root file
system is (`model/rootfs.py`), which GPUs its config grants, which containers reach a
vendor's GPUs, which config holds a guest id, and each guest config's sections and
lines with the typed answers read from them (`GuestConfig`, model/guest_config.py: its
raw file stays the base a patch starts from). So planning looks no file up by path and
parses no text, and facts read back from their JSON document, or evolved by a test,
answer from their own files. No I/O here.
"""

from __future__ import annotations

from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.paths import LXC_DIR, NODES_DIR, PVE_DIR, QEMU_DIR
from pvegpu.model.references import Holder
from pvegpu.model.rootfs import STORAGE_CFG, RootfsLocation, granted_gpus, locate_rootfs
from pvegpu.vendors import CONTAINER_NODES, DeviceNodes, Vendor

LXC = "lxc"
QEMU = "qemu-server"
_KINDS = {LXC_DIR: LXC, QEMU_DIR: QEMU}


def _is_id(stem: str) -> bool:
    return stem.isascii() and stem.isdigit()


def guests(facts: HostFacts) -> Guests:
    """The facts' guests, worked out once per facts value (`HostFacts.derived`)."""
    return facts.derived(Guests)


class Guests:
    """A HostFacts' guests, each answer worked out on first use. A plain class, not a
    value: it is never compared or shown (as `HostFacts`' lookups)."""

    __slots__ = ("_configs", "_facts", "_grants", "_listed", "_rootfs", "_stats")

    def __init__(self, facts: HostFacts) -> None:
        self._facts = facts
        self._stats = tuple(s.path for s in facts.stats if s.path.startswith(f"{NODES_DIR}/"))
        self._rootfs: dict[int, RootfsLocation] = {}
        self._grants: dict[tuple[int, DeviceNodes], tuple[frozenset[int], bool]] = {}
        self._configs: dict[str, GuestConfig] = {}
        self._listed: tuple[tuple[str, int, ConfigFile], ...] | None = None

    def _text(self, path: str) -> str | None:
        """The content of a file the facts hold; None when they hold none."""
        file = self._facts.file(path)
        return file.content if file is not None else None

    @property
    def configs(self) -> tuple[tuple[str, int, ConfigFile], ...]:
        """This node's guest configs (`etc/pve/{lxc,qemu-server}/<vmid>.conf`), each with
        its directory's kind (`lxc`, `qemu-server`) and its id, in the facts' order."""
        if self._listed is None:
            found = []
            for file in self._facts.files:
                directory, _, name = file.path.rpartition("/")
                stem = name.removesuffix(".conf")
                # An id is ASCII digits, as Proxmox names the file: `int()` would read
                # other scripts' digits too.
                if directory in _KINDS and name.endswith(".conf") and _is_id(stem):
                    found.append((_KINDS[directory], int(stem), file))
            self._listed = tuple(found)
        return self._listed

    @property
    def containers(self) -> tuple[tuple[int, ConfigFile], ...]:
        """This node's container configs with their ids, in the facts' order."""
        return tuple((vmid, file) for kind, vmid, file in self.configs if kind == LXC)

    @property
    def vms(self) -> tuple[tuple[int, ConfigFile], ...]:
        """This node's VM configs with their ids, in the facts' order."""
        return tuple((vmid, file) for kind, vmid, file in self.configs if kind == QEMU)

    def file(self, kind: str, vmid: int) -> ConfigFile | None:
        """The config of this node's guest `vmid` of `kind` (`lxc`, `qemu-server`), as
        read; None when the facts hold none."""
        return self._facts.file(f"{PVE_DIR}/{kind}/{vmid}.conf")

    def container(self, vmid: int) -> GuestConfig | None:
        """CT `vmid`'s config parsed (`config`); None when this node has none."""
        file = self.file(LXC, vmid)
        return self.config(file) if file is not None else None

    def config(self, file: ConfigFile) -> GuestConfig:
        """Guest config `file` parsed, once per facts value for a file of the facts (one
        they do not hold, as a plan's own, is parsed each time)."""
        found = self._configs.get(file.path)
        if found is not None and found.file is file:
            return found
        parsed = GuestConfig(file)
        if self._facts.file(file.path) is file:
            self._configs[file.path] = parsed
        return parsed

    def rootfs(self, vmid: int) -> RootfsLocation:
        """Where CT `vmid`'s root file system is on the host, or why it is not a directory
        there: from its config's `rootfs:` line and storage.cfg (`model/rootfs.py`)."""
        found = self._rootfs.get(vmid)
        if found is None:
            # The config's main section as parsed once (`GuestConfig`), not its text again.
            config = self.container(vmid)
            main = config.main if config is not None else None
            found = locate_rootfs(vmid, main, self._text(STORAGE_CFG))
            self._rootfs[vmid] = found
        return found

    def granted_gpus(
        self, vmid: int, nodes: DeviceNodes = CONTAINER_NODES
    ) -> tuple[frozenset[int], bool]:
        """The GPU node minors of `nodes` (the vendor's own, or DRM render nodes) that CT
        `vmid`'s config grants in its main section, and whether a rule there reaches every
        GPU (`c 195:* rwm`); nothing for a container without a config."""
        key = (vmid, nodes)
        found = self._grants.get(key)
        if found is None:
            config = self.container(vmid)
            found = granted_gpus(config.main, nodes) if config is not None else (frozenset(), False)
            self._grants[key] = found
        return found

    def vendor_containers(self, vendor: Vendor) -> tuple[int, ...]:
        """The containers whose config (its main section) reaches a GPU of `vendor` or one
        of its shared nodes (`/dev/nvidiactl`): those whose userspace its driver must match."""
        nodes = vendor.nodes
        found = set()
        for ref in self._facts.references:
            if ref.holder is not Holder.CONTAINER or ref.vmid is None or ref.section is not None:
                continue
            gpus = (self._facts.gpu(a) for a in ref.gpus)
            path = ref.node_path or ""
            if any(g is not None and g.vendor is vendor for g in gpus) or (
                nodes is not None and nodes.any_node.match(path)
            ):
                found.add(ref.vmid)
        return tuple(sorted(found))

    def config_path(self, kind: str, vmid: int) -> str | None:
        """The config file of guest `vmid` of `kind` (`lxc`, `qemu-server`): this node's
        (read whole), else another node's of the cluster (known by name only); None when
        no guest of that kind has the id."""
        local = f"{PVE_DIR}/{kind}/{vmid}.conf"
        if self._text(local) is not None:
            return local
        suffix = f"/{kind}/{vmid}.conf"
        return next((p for p in self._stats if p.endswith(suffix)), None)
