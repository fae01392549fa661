"""One guest config (`etc/pve/{lxc,qemu-server}/<vmid>.conf`) parsed once, with the typed
answers planning, rendering, apply and check ask of it.

The file stays whole (`GuestConfig.file`): its bytes are the base pvefiles' patchers start
from, keeping every byte pvegpu does not own. Its sections and lines are split once, when
the value is made; each answer below is worked out from those lines on first use and kept
(`guests(facts).config(file)` keeps the value with the facts' lookups, so per facts value).
The rules themselves are pvefiles' (`lxcconf`, `lxccaps`, `qemuconf`), which read parsed
lines: so no module past discovery parses a guest config's text, and an answer here is
the rule's own. Only the main section counts where Proxmox starts the guest from it;
pending changes are read from `[pve:pending]` (containers) and `[PENDING]` (VMs), as the
patchers read them. No I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, TypeVar, cast

from pvegpu.pci import CpuList
from pvegpu.pvefiles import lxccaps, lxcconf, qemuconf
from pvegpu.pvefiles.guestconf import ConfLine, LineKind, Section, split_sections
from pvegpu.pvefiles.hostpci import HOSTPCI_KEY
from pvegpu.pvefiles.lxcconf import CGROUP1_ALLOW, CGROUP_ALLOW, MOUNT_ENTRY, PLAIN, NodeNaming

if TYPE_CHECKING:
    from pvegpu.diagnostic import Diagnostic
    from pvegpu.model.facts import ConfigFile
    from pvegpu.vendors import DeviceNodes
    from pvegpu.vendors.partitions import MigSource

LXC_PENDING = "pve:pending"
"""pve-container's pending section."""
VM_PENDING = "PENDING"
"""qemu-server's pending section."""
_DEV_KEY = re.compile(r"^dev(\d+)$")
_DEVICE_RAW_KEYS = frozenset({CGROUP_ALLOW, CGROUP1_ALLOW, MOUNT_ENTRY})
_T = TypeVar("_T")


def is_device_line(line: ConfLine) -> bool:
    """A line that may hand the guest a host device: a container's `devN` entry, a
    devices.allow rule (either cgroup hierarchy's key) or `lxc.mount.entry`, a VM's
    `hostpciN`. Every rule of pvefiles about device nodes (`gpu_minor`, `is_gpu_line`,
    `caps_line`, `raw_uvm_majors`) reads these lines and no other."""
    if line.kind is LineKind.KEY:
        return bool(_DEV_KEY.match(line.key) or HOSTPCI_KEY.match(line.key))
    return line.kind is LineKind.RAW and line.key in _DEVICE_RAW_KEYS


class GuestConfig:
    """A guest config parsed once: its sections (the main one first, then pending,
    snapshots, `[special:...]`), each with its lines, and the answers read from them. A
    plain class, never compared or shown."""

    __slots__ = ("_answers", "_devices", "_keys", "file", "sections")

    def __init__(self, file: ConfigFile) -> None:
        self.file = file
        """The file as read: the base a patch starts from, every byte kept."""
        self.sections: tuple[tuple[Section, tuple[ConfLine, ...]], ...] = tuple(
            (section, section.lines) for section in split_sections(file.content)
        )
        """Each section with its lines, in file order; concatenated, the file again."""
        self._keys: dict[str, tuple[str, ...]] | None = None
        self._devices: tuple[ConfLine, ...] | None = None
        self._answers: dict[tuple[object, ...], tuple[tuple[object, ...], object]] = {}

    @property
    def main(self) -> tuple[ConfLine, ...]:
        """The lines of the main section (the one a guest starts with)."""
        return self.sections[0][1]

    def section(self, name: str) -> tuple[ConfLine, ...]:
        """The lines of the first section called `name` (case-insensitive, as Proxmox
        reads `[PENDING]`); none when the file has no such section."""
        wanted = name.lower()
        found = (lines for s, lines in self.sections if (s.name or "").lower() == wanted)
        return next(found, ())

    @property
    def keys(self) -> dict[str, tuple[str, ...]]:
        """The main section's `key: value` lines (not the raw `lxc.*` ones) by key, each
        key's values in file order: Proxmox writes one a key, a hand edit may repeat it."""
        if self._keys is None:
            keys: dict[str, list[str]] = {}
            for line in self.main:
                if line.kind is LineKind.KEY:
                    keys.setdefault(line.key, []).append(line.value)
            self._keys = {key: tuple(values) for key, values in keys.items()}
        return self._keys

    def value(self, key: str) -> str | None:
        """The main section's first `key:` value (`hostname`, `name`, `lock`), as written."""
        values = self.keys.get(key)
        return values[0] if values else None

    @property
    def device_lines(self) -> tuple[ConfLine, ...]:
        """The main section's lines that may hand over a host device (`is_device_line`),
        in file order."""
        if self._devices is None:
            self._devices = tuple(line for line in self.main if is_device_line(line))
        return self._devices

    def _kept(self, question: str, make: Callable[[], _T], *args: object) -> _T:
        """The answer to `question` with `args`, made on first use and kept. The arguments
        are told apart by identity (a vendor's nodes, its MIG source: one object each, and
        hashing a value would cost more than the answer); kept with the answer, so an id
        is never another object's."""
        key = (question, *map(id, args))
        found = self._answers.get(key)
        if found is None:
            found = self._answers[key] = (args, make())
        return cast(_T, found[1])

    # -- a container's -----------------------------------------------------------------

    @property
    def unprivileged(self) -> bool:
        """`unprivileged: 1` (the last one; pve-container's default is privileged)."""
        return self._kept("unprivileged", lambda: lxcconf.unprivileged(self.main))

    @property
    def host_userspace(self) -> bool:
        """It bind-mounts the host's staged driver userspace (`userspace = "host"`)."""
        return self._kept("userspace", lambda: lxcconf.has_userspace_mount(self.main))

    @property
    def cpuset(self) -> CpuList | None:
        """Its `lxc.cgroup2.cpuset.cpus` (the last one); None without one that parses."""
        return self._kept("cpuset", lambda: lxcconf.cpuset(self.main))

    def cores(self) -> int | None:
        """Its `cores:` (None when unset); one Proxmox cannot read is a PlanError naming
        the file (`lxc-config-value-invalid`)."""
        return lxcconf.cores(self.main, self.file.path)

    def raw_uvm_majors(self, nodes: DeviceNodes) -> tuple[int, ...] | None:
        """The majors of its `c M:...` rules when it bind-mounts `nodes`' dynamic node in
        raw style; None when it does not (`lxcconf.raw_uvm_majors`)."""
        # Kept: several rules ask it of every container (findings, next_boot, guests).
        return self._kept("uvm", lambda: lxcconf.raw_uvm_majors(self.device_lines, nodes), nodes)

    def keeps_a_gpu(
        self, nodes: DeviceNodes, minors: Collection[int], naming: NodeNaming = PLAIN
    ) -> bool:
        """Does it still name a GPU of `nodes` once `minors` are removed?"""
        return lxcconf.keeps_a_gpu(self.main, nodes, minors, naming)

    def shared_node_keys(
        self, nodes: DeviceNodes, majors: Collection[int], naming: NodeNaming = PLAIN
    ) -> tuple[str, ...]:
        """The keys of its lines for `nodes`' shared nodes (not one GPU's)."""
        return lxcconf.shared_node_keys(self.main, nodes, majors, naming)

    def gpu_line_count(
        self, nodes: DeviceNodes, majors: Collection[int], naming: NodeNaming = PLAIN
    ) -> int:
        """How many of its lines hand over `nodes` (`lxcconf.is_gpu_line`)."""
        return sum(lxcconf.is_gpu_line(line, nodes, majors, naming) for line in self.main)

    def dev_slot_problems(
        self, nodes: DeviceNodes, new: lxcconf.GpuLines, naming: NodeNaming = PLAIN
    ) -> tuple[Diagnostic, ...]:
        """Whether the patch finds devN indices for `new` beside its other devices and its
        pending ones (`lxc-dev-slots-full`)."""
        pending = self.section(LXC_PENDING)
        return lxcconf.dev_slot_problems(self.device_lines, pending, nodes, new, naming)

    def caps_held(self, mig: MigSource, caps_major: int | None) -> lxccaps.CapsHeld:
        """The MIG capability nodes it hands over."""

        def held() -> lxccaps.CapsHeld:
            return lxccaps.caps_held(self.device_lines, mig, caps_major)

        return self._kept(f"caps {caps_major}", held, mig)

    # -- a VM's ------------------------------------------------------------------------

    @property
    def is_q35(self) -> bool:
        """A q35 machine (`machine: q35`, `pc-q35-9.0`, `type=q35,...`)."""
        return self._kept("q35", lambda: qemuconf.is_q35(self.main))

    def hostpci_problems(
        self,
        mapping_id: str,
        count: int,
        *,
        numa: bool = False,
        mapped: Collection[str] = (),
        old: Collection[str] = (),
    ) -> tuple[Diagnostic, ...]:
        """Everything the hostpci patch with these arguments would refuse, naming the file
        (`qemuconf.hostpci_problems`)."""
        return qemuconf.hostpci_problems(
            self.main,
            self.section(VM_PENDING),
            mapping_id,
            count,
            numa=numa,
            mapped=mapped,
            old=old,
            subject=self.file.path,
        )
