"""`hostpciN` lines of a VM config: the devices one names, and which belong to a mapping.

qemuconf.py patches a VM's hostpci lines over a pool's mapping; this module reads single
lines for it and for planning/host_guests.py (every other VM): host ids as hostpci and
pci.cfg spell them, raw addresses, `mapping=` ids, and whether a line is the mapping's.
The rules, in our words: docs/formats.md, "VM config".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.pvefiles.guestconf import ConfLine, LineKind
from pvegpu.values import value_class

MAX_HOSTPCI_INDEX = 15
"""qemu-server knows hostpci0 .. hostpci15."""

HOSTPCI_KEY = re.compile(r"^hostpci(\d+)$")
# The options pvegpu owns on its hostpci lines; any other (rombar, x-vga, driver) is kept.
_OWN_OPTIONS = ("mapping", "pcie", "host")
# qemu-server's host id: domain and function optional (`01:00` is all functions of
# 0000:01:00); several are joined by `;`.
_HOST_ID = re.compile(
    r"^(?:([0-9a-f]{4,}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.([0-7]))?$", re.IGNORECASE
)


@value_class
@attrs.frozen(eq=False, repr=False)
class HostId:
    """A host device as hostpci and pci.cfg name it: a slot, or one function of it."""

    domain: int
    bus: int
    device: int
    function: int | None
    """None: every function of the slot."""

    @classmethod
    def parse(cls, text: str) -> HostId | None:
        """`0000:39:00.0`, `0000:39:00`, `39:00.0` or `39:00`; None if it is none of them."""
        match = _HOST_ID.match(text.strip())
        if match is None:
            return None
        domain, bus, device, function = match.groups()
        return cls(
            int(domain or "0", 16),
            int(bus, 16),
            int(device, 16),
            None if function is None else int(function),
        )

    def overlaps(self, other: HostId) -> bool:
        """Whether both hand over some function in common (a slot covers all of its own)."""
        if (self.domain, self.bus, self.device) != (other.domain, other.bus, other.device):
            return False
        return self.function is None or other.function is None or self.function == other.function


@value_class
@attrs.frozen(eq=False, repr=False)
class Conversion:
    """A hostpci line that named the mapping's devices another way (by raw address, or
    by a mapping they leave), rewritten to the mapping with its options."""

    before: str
    """The line as it was, without its newline: `hostpci0: mapping=a4000,pcie=1,x-vga=1`."""
    after: str
    """The line that replaces it: the same index unless a pending change holds that one."""
    old_mapping: str | None
    """The mapping id the line named; None for a line by raw host address."""


def options(value: str) -> list[tuple[str, str]]:
    """A property string's parts; a part without `=` is the default key (`host`)."""
    parts: list[tuple[str, str]] = []
    for part in value.split(","):
        key, sep, item = part.partition("=")
        parts.append((key, item) if sep else ("", key))
    return parts


def kept_options(value: str, *, mdev: bool = False) -> str:
    """The options a line of the mapping takes over from the line it replaces, as written
    (`x-vga=1,rombar=0`): all but the device (`host`, `mapping`) and `pcie`, which
    pvegpu sets by the machine type; `mdev` too where pvegpu sets the vGPU type."""
    own = ("", *_OWN_OPTIONS, *(("mdev",) if mdev else ()))
    return ",".join(f"{k}={v}" for k, v in options(value) if k not in own)


def hostpci_value(mapping_id: str, pcie: bool, extra: str = "", mdev: str | None = None) -> str:
    """`mapping=ID[,pcie=1][,mdev=TYPE][,kept options]`: `mdev` is a vGPU pool's type."""
    return (
        f"mapping={mapping_id}"
        + (",pcie=1" if pcie else "")
        + (f",mdev={mdev}" if mdev else "")
        + (f",{extra}" if extra else "")
    )


def uses_mapping(line: ConfLine, mapping_id: str) -> bool:
    return bool(HOSTPCI_KEY.match(line.key)) and ("mapping", mapping_id) in options(line.value)


def old_mapping(line: ConfLine, old: Iterable[str]) -> str | None:
    """The id among `old` that this hostpci line uses, if any."""
    return next((o for o in old if uses_mapping(line, o)), None)


def host_ids(paths: Iterable[str]) -> tuple[HostId, ...]:
    """The devices of pci.cfg `path` values (`;` lists allowed), unparsable parts left out."""
    return tuple(host for path in paths for part in path.split(";") if (host := HostId.parse(part)))


def raw_hosts(line: ConfLine) -> list[str] | None:
    """The host ids a raw-address hostpci line names; None for a mapping or another key."""
    if not HOSTPCI_KEY.match(line.key):
        return None
    parts = options(line.value)
    if any(key == "mapping" for key, _ in parts):
        return None
    host = next((item for key, item in parts if key in ("", "host")), None)
    return None if host is None else host.split(";")


@value_class
@attrs.frozen(eq=False, repr=False)
class HostpciUse:
    """What one `hostpciN` line hands to the VM: a mapping's devices, or host devices."""

    key: str
    mapping: str | None
    """The `mapping=` id; None for a line by raw host address."""
    hosts: tuple[HostId, ...] = ()
    """The raw host ids (every `;` part); empty for a mapping line."""


def hostpci_use(line: ConfLine) -> HostpciUse | None:
    """The devices a `hostpciN` line names, in any section; None for any other line."""
    if line.kind is not LineKind.KEY or not HOSTPCI_KEY.match(line.key):
        return None
    mapping = next((item for key, item in options(line.value) if key == "mapping"), None)
    if mapping is not None:
        return HostpciUse(line.key, mapping)
    return HostpciUse(line.key, None, host_ids(raw_hosts(line) or ()))


def claims(
    line: ConfLine,
    mapping_id: str,
    owned: tuple[HostId, ...],
    subject: str,
    number: int,
    old: tuple[str, ...] = (),
) -> bool | Diagnostic:
    """Whether a main-section line is the mapping's: it uses the mapping or one of the
    `old` mappings its devices leave, or names by raw address only devices the mapping
    hands over. A raw line mixing those with others cannot be split by pvegpu: that is a
    refusal."""
    if line.kind is not LineKind.KEY:
        return False
    if uses_mapping(line, mapping_id) or old_mapping(line, old) is not None:
        return True
    hosts = raw_hosts(line)
    if not hosts or not owned:
        return False
    ours = [h for h in hosts if (p := HostId.parse(h)) and any(p.overlaps(o) for o in owned)]
    if not ours:
        return False
    if len(ours) == len(hosts):
        return True
    others = [h for h in hosts if h not in ours]
    return Diagnostic.error(
        "vm-hostpci-mixed",
        f"{subject} line {number}",
        f"`{line.raw.rstrip()}` passes {';'.join(ours)} (given to the VM by mapping "
        f"{mapping_id} now) together with {';'.join(others)} (not the pool's): the "
        "mapping line would leave out the others, the raw line would pass the GPU twice",
        f"move {';'.join(others)} to a hostpci line of its own (qm set <vmid> --hostpciN "
        f"{';'.join(others)}) and run pvegpu again",
    )
