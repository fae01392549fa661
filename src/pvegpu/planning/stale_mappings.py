"""Map lines of this node that no longer match sysfs: Proxmox refuses their VMs' start.

At every start of a VM with a `hostpciN: mapping=<id>` line, qemu-server checks *each*
map line of that mapping for this node, not only the one the VM gets, and refuses the
start on the first that differs ("PCI device mapping invalid (hardware probably
changed)"). Per device of the line's `path` (a `;` list; a slot is looked up by its
function 0):

- the device exists ("pci device ... not found");
- `id` is its vendor:device and `subsystem-id` its subsystem vendor:device;
- `iommugroup`, on the line's first device only, is its IOMMU group;

compared as text once `0x` is dropped, so `10DE:2BB5` or `iommugroup=027` differ too,
and a key the line lacks where sysfs has a value (or has where sysfs has none) fails as
well. A BIOS update, a kernel change or ACS/firmware settings renumber the IOMMU groups;
another card in the slot changes the ids.

pvegpu writes the pools' own mappings from sysfs (mapping.py), so a plan judges only the
other lines of this node that stay (mapping_moves.py), and `pvegpu check` every line of
this node: one function, so plan and check agree. The rules in words: docs/formats.md,
"Map lines that no longer match sysfs".
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.formats.shell import word
from pvegpu.model.facts import HostFacts, PciFunction
from pvegpu.model.guests import guests
from pvegpu.pci import PciAddress
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.guestconf import is_pending
from pvegpu.pvefiles.hostpci import hostpci_use
from pvegpu.pvefiles.pcicfg import MapLine, PciCfgSection
from pvegpu.values import value_class

# The keys Proxmox compares, in the order it compares them (sorted).
_CHECKED = ("id", "iommugroup", "subsystem-id")
_WHY = {
    "id": "another card in the slot, or the slot renumbered",
    "iommugroup": "the groups renumber after a BIOS, kernel or ACS/firmware change",
    "subsystem-id": "another board of the card, or new firmware",
}


@value_class
@attrs.frozen(eq=False, repr=False)
class StaleMapLine:
    """A map line of this node that Proxmox's start check refuses, and why."""

    mapping_id: str
    line: MapLine
    missing: tuple[str, ...] = ()
    """Its devices not on the host, as Proxmox looks them up (`0000:41:00.0`)."""
    differs: tuple[tuple[str, str | None, str | None], ...] = ()
    """(key, the line's value, sysfs's value) per key that does not match; None: none."""
    corrected: str | None = None
    """The map string with sysfs's values; None when no value can make it pass (a device
    is missing, or the line's devices differ in a key one line holds once)."""


def stale_map_line(facts: HostFacts, mapping_id: str, line: MapLine) -> StaleMapLine | None:
    """What Proxmox's start check finds wrong with this map line on this host, if anything."""
    missing: list[str] = []
    expected: dict[str, set[str | None]] = {}
    for index, part in enumerate((line.get("path") or "").split(";")):
        name = part if "." in part else f"{part}.0"
        function = _function(facts, name)
        if function is None:
            missing.append(name)
            continue
        for key, value in _sysfs(function).items():
            if key != "iommugroup" or index == 0:  # the group of the first device only
                expected.setdefault(key, set()).add(value)
    if missing:
        return StaleMapLine(mapping_id, line, tuple(missing))
    differs = [
        (key, line.get(key), value)
        for key in _CHECKED
        for value in sorted(expected.get(key, set()), key=str)
        if _text(line.get(key)) != _text(value)
    ]
    if not differs:
        return None
    fixable = all(len(expected.get(key, ())) == 1 for key, _, _ in differs)
    corrected = _corrected(line, {k: v for k, _, v in differs}) if fixable else None
    return StaleMapLine(mapping_id, line, (), tuple(differs), corrected)


def stale_map_findings(
    facts: HostFacts,
    sections: Sequence[PciCfgSection],
    *,
    owned: Collection[str] = (),
    moved: Mapping[str, Collection[str]] | None = None,
    live: bool = False,
) -> Iterator[Diagnostic]:
    """`mapping-stale`, one per stale map line of this node, with the VMs it stops.

    A plan passes the pools' mappings (`owned`, written anew from sysfs) and the map
    strings that move out of other mappings (`moved`): neither is judged, and the fix's
    command is the mapping as the bundle leaves it. `pvegpu check` (`live`) judges every
    line: an error where a VM uses the mapping, else a warning; a plan warns (info for a
    mapping no VM uses)."""
    gone = moved or {}
    rewrites = bool(owned)
    users: dict[str, list[str]] | None = None  # read from the VM configs at the first need
    for section in sections:
        if section.id in owned:
            continue
        kept = [m for m in section.maps if m.value not in gone.get(section.id, ())]
        stale = [
            found
            for m in kept
            if m.node == facts.node and (found := stale_map_line(facts, section.id, m)) is not None
        ]
        if not stale:
            continue
        command = _command(section.id, kept, stale)
        users = _users(facts) if users is None else users
        for found in stale:
            yield _finding(facts, found, users.get(section.id, ()), command, live, rewrites)


def _function(facts: HostFacts, name: str) -> PciFunction | None:
    try:
        return facts.function(PciAddress.parse(name))
    except ValueError:
        return None  # parse() let only a valid path through; nothing is at another


def _sysfs(function: PciFunction) -> dict[str, str | None]:
    group = function.iommu_group
    return {
        "id": function.vendor_device,
        "iommugroup": None if group is None else str(group),
        "subsystem-id": function.subsystem_id,
    }


def _text(value: str | None) -> str | None:
    """A value as Proxmox compares it: text without `0x`."""
    return None if value is None else value.replace("0x", "")


def _corrected(line: MapLine, values: Mapping[str, str | None]) -> str:
    """The map string with these keys set (or dropped, for None), its other keys and
    their order kept; a key it lacked is added, in sorted place if its keys were sorted."""
    fields = [(k, values.get(k, v)) for k, v in line.fields]
    fields += [(k, v) for k, v in values.items() if line.get(k) is None]
    if [k for k, _ in line.fields] == sorted(k for k, _ in line.fields):
        fields.sort()
    return ",".join(f"{k}={v}" for k, v in fields if v is not None)


def _users(facts: HostFacts) -> dict[str, list[str]]:
    """By mapping id, the hostpci lines of this node's VMs that name it: `VM 120
    (hostpci0)`, `VM 121 (pending hostpci1)`; snapshots are history, left out."""
    found: dict[str, list[str]] = {}
    for vmid, file in guests(facts).vms:
        for section, lines in guests(facts).config(file).sections:
            if section.name is not None and not is_pending(section):
                continue
            for line in lines:
                use = hostpci_use(line)
                if use is not None and use.mapping is not None:
                    pending = "pending " if section.name is not None else ""
                    found.setdefault(use.mapping, []).append(f"VM {vmid} ({pending}{use.key})")
    return found


def _command(mapping_id: str, kept: Sequence[MapLine], stale: Sequence[StaleMapLine]) -> str:
    """`pvesh set` of the mapping's whole `map` list (the API replaces it): every line
    of every node, this node's stale ones corrected, those of a missing device left out;
    `pvesh delete` when no line would be left."""
    fixed = {s.line.line: s for s in stale}
    values = [
        m.value if m.line not in fixed else fixed[m.line].corrected
        for m in kept
        if m.line not in fixed or fixed[m.line].corrected is not None
    ]
    if not values:
        return f"pvesh delete /cluster/mapping/pci/{word(mapping_id)}"
    maps = " ".join(f"--map {word(v)}" for v in values if v is not None)
    return f"pvesh set /cluster/mapping/pci/{word(mapping_id)} {maps}"


def _finding(
    facts: HostFacts,
    stale: StaleMapLine,
    users: Sequence[str],
    command: str,
    live: bool,
    rewrites: bool,
) -> Diagnostic:
    line, mapping_id = stale.line, stale.mapping_id
    if stale.missing:
        what = (
            f"no device {', '.join(stale.missing)} is on the host (removed, or renumbered "
            "by a BIOS or firmware change: `lspci -D` lists what is there)"
        )
    else:
        what = "; ".join(_differs(key, said, now) for key, said, now in stale.differs)
    harm = (
        f"{_listed(users)} {'does' if len(users) == 1 else 'do'} not start"
        if users
        else f"no VM of {facts.node} uses the mapping now; one given it will not start"
    )
    message = (
        f"mapping {mapping_id}'s map line for {line.get('path')} on {facts.node}: {what}. "
        f"Proxmox checks every map line of {facts.node} in a mapping at each start of a VM "
        'on it and refuses the start ("PCI device mapping invalid (hardware probably '
        'changed)"), so '
        f"{harm}. {_fix(facts, stale, command, rewrites)}"
    )
    if live:
        severity = Severity.ERROR if users else Severity.WARNING
    else:
        severity = Severity.WARNING if users else Severity.INFO
    return Diagnostic(severity, "mapping-stale", f"{pcicfg.PATH} line {line.line}", message)


def _differs(key: str, said: str | None, now: str | None) -> str:
    if said is None:
        return f"the line has no {key}, sysfs says {now}"
    if now is None:
        return f"the line says {key}={said}, but the device has none (IOMMU off?)"
    return f"the line says {key}={said}, sysfs says {now} ({_WHY[key]})"


def _fix(facts: HostFacts, stale: StaleMapLine, command: str, rewrites: bool) -> str:
    when = (
        "After applying this plan (it rewrites pci.cfg, and apply refuses a file changed "
        "after planning), "
        if rewrites
        else ""
    )
    gui = f"Datacenter > Resource Mappings > {stale.mapping_id}"
    if stale.missing and command.startswith("pvesh delete"):
        how = (
            f"put the device back, or remove the mapping (`{command}`) and the VMs' hostpci "
            "lines on it (qm set <vmid> --delete hostpciN)"
        )
    elif stale.missing:
        how = (
            f"put the device back, or remove the line ({gui}, or `{command}`: every "
            "map line of the mapping but those of devices not on the host)"
        )
    elif stale.corrected is None:
        how = (
            f"give each device of the line its own map line ({gui}): they differ in "
            f"{', '.join(sorted({k for k, _, _ in stale.differs}))}"
        )
    else:
        how = (
            f"correct the line to `map {stale.corrected}`: select the device again under "
            f"{gui}, or run `{command}` (every map line of the mapping, the stale ones of "
            f"{facts.node} corrected)"
        )
        if _is_gpu(facts, stale.line):
            how += (
                f"; or give the GPU to a pool of the spec with mapping id {stale.mapping_id}, "
                "and pvegpu writes its lines from sysfs"
            )
    text = f"{when}{how}"
    return text[0].upper() + text[1:]


def _is_gpu(facts: HostFacts, line: MapLine) -> bool:
    parts = (line.get("path") or "").split(";")
    found = (_function(facts, p if "." in p else f"{p}.0") for p in parts)
    return any(f is not None and facts.gpu(f.address) is not None for f in found)


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
