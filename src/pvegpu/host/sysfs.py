"""Pure parsers for the kernel and system files discovery reads: `process(raw) -> value`.

Each function takes the exact text of one file and returns a typed value, or raises
ValueError with a sentence saying what was expected. They never touch the filesystem;
`pvegpu.host.discover` reads the files and turns a ValueError into a Diagnostic naming the path.
A vendor's own files (its driver's version, which node each GPU has) are parsed by the
same rules in its module under `pvegpu.vendors`.
"""

from __future__ import annotations

import re
import shlex

from pvegpu.model.bootconfig import cmdline_vfio_ids as cmdline_vfio_ids
from pvegpu.model.bootconfig import kernel_params as kernel_params
from pvegpu.model.bootconfig import parse_vfio_ids
from pvegpu.model.facts import CharMajor, IommuGroupType, KernelModuleFlavor
from pvegpu.model.resources import ROM_INDEX, Bar, HostCpu
from pvegpu.pci import CpuList

# Patterns are used with fullmatch: `$` also matches before a trailing newline. Digits
# are ASCII: str.isdigit() and `\d` also accept '²' and other Unicode digits.
_HEX = re.compile(r"0x([0-9a-f]+)")
# vfio-pci's ids= takes vendor:device[:subvendor[:subdevice[:class[:class_mask]]]].
_HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?")
_TAINT = re.compile(r"[A-Z]*")


def _one_line(raw: str) -> str:
    """sysfs attributes are one line ending in a newline; tolerate its absence."""
    text = raw.removesuffix("\n")
    if "\n" in text:
        raise ValueError(f"expected a single line, got {raw!r}")
    return text


def hex_id(raw: str, digits: int) -> int:
    """`0x10de\\n` -> 0x10de: vendor/device/subsystem_* (4 digits), class (6 digits)."""
    text = _one_line(raw)
    match = _HEX.fullmatch(text)
    if match is None or len(match.group(1)) != digits:
        raise ValueError(f"expected 0x and {digits} lowercase hex digits, got {text!r}")
    return int(match.group(1), 16)


# The kernel's pci_uevent: `PCI_CLASS=%04X`, `PCI_ID=%04X:%04X`, `PCI_SUBSYS_ID=%04X:%04X`
# (uppercase hex; the class without its leading zeros, at least 4 digits). Regexes here:
# one fullmatch of a pair is faster than the character tests that would replace it.
_UEVENT_PAIR = re.compile(r"([0-9A-F]{4}):([0-9A-F]{4})")
_UEVENT_CLASS = re.compile(r"[0-9A-F]{4,6}")


def _is_digits(text: str) -> bool:
    """ASCII digits, at least one (`[0-9]+`): str.isdigit() alone also takes '²'."""
    return text.isascii() and text.isdigit()


def pci_uevent(raw: str) -> tuple[int, int, int, int, int, str]:
    """A PCI device's `uevent` -> (vendor, device, subsystem vendor, subsystem device,
    class, PCI_SLOT_NAME): the values the `vendor`, `device`, `subsystem_*` and `class`
    attributes print, from the same fields of the kernel's pci_dev, in one read."""
    fields: dict[str, str] = {}
    for line in raw.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"expected KEY=value lines, got {line!r}")
        fields[key] = value
    ids = _UEVENT_PAIR.fullmatch(fields.get("PCI_ID", ""))
    subsys = _UEVENT_PAIR.fullmatch(fields.get("PCI_SUBSYS_ID", ""))
    klass = fields.get("PCI_CLASS", "")
    slot = fields.get("PCI_SLOT_NAME")
    if ids is None or subsys is None or not _UEVENT_CLASS.fullmatch(klass) or slot is None:
        raise ValueError(
            "expected the kernel's PCI_CLASS=<hex>, PCI_ID=<VVVV:DDDD>, "
            f"PCI_SUBSYS_ID=<VVVV:DDDD> and PCI_SLOT_NAME lines (uppercase hex), got {raw!r}"
        )
    return (
        int(ids.group(1), 16),
        int(ids.group(2), 16),
        int(subsys.group(1), 16),
        int(subsys.group(2), 16),
        int(klass, 16),
        slot,
    )


def numa_node(raw: str) -> int | None:
    """`0\\n` -> 0; `-1\\n` (firmware gave no proximity domain) -> None."""
    text = _one_line(raw)
    if not _is_digits(text.removeprefix("-")) or int(text) < -1:
        raise ValueError(f"expected a node number or -1, got {text!r}")
    value = int(text)
    return None if value == -1 else value


def cpulist(raw: str) -> CpuList:
    """`0-31,64-95\\n` -> CpuList."""
    return CpuList.parse(_one_line(raw))


def driver_override(raw: str) -> str | None:
    """The kernel prints `(null)` when no override is set."""
    text = _one_line(raw)
    return None if text in ("(null)", "") else text


def link_speed(raw: str) -> str:
    """`32.0 GT/s PCIe` (older kernels `32 GT/s`, or `Unknown`): kept as the kernel says it."""
    text = _one_line(raw).strip()
    if not text:
        raise ValueError("expected a link speed such as '32.0 GT/s PCIe', got an empty file")
    return text


def link_width(raw: str) -> int | None:
    """`16\\n` -> 16. Some kernels print `Unknown` for links that never trained."""
    text = _one_line(raw).strip()
    if text == "Unknown":
        return None
    if not _is_digits(text):
        raise ValueError(f"expected a lane count such as 16, got {text!r}")
    return int(text)


def iommu_group_type(raw: str) -> IommuGroupType:
    """`DMA-FQ\\n` -> IommuGroupType.DMA_FQ."""
    text = _one_line(raw)
    try:
        return IommuGroupType(text)
    except ValueError:
        known = ", ".join(t.value for t in IommuGroupType)
        raise ValueError(f"expected one of {known}, got {text!r}") from None


def module_bool(raw: str) -> bool:
    """A bool module parameter: the kernel prints `Y`/`N` (int params print `1`/`0`)."""
    text = _one_line(raw)
    if text in ("Y", "1"):
        return True
    if text in ("N", "0"):
        return False
    raise ValueError(f"expected Y or N, got {text!r}")


def hostname(raw: str) -> str:
    """The node name Proxmox uses: the first label of etc/hostname (it strips the domain)."""
    lines = [line.strip() for line in raw.splitlines() if line.strip()]
    if len(lines) != 1:
        raise ValueError(f"expected one host name, got {raw!r}")
    name = lines[0].split(".", 1)[0]
    if not _HOSTNAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid host name")
    return name


def module_flavor(raw: str) -> KernelModuleFlavor:
    """sys/module/<module>/taint: a proprietary module taints `P`, an open one does not."""
    text = _one_line(raw)
    if not _TAINT.fullmatch(text):
        raise ValueError(f"expected taint letters such as OE or POE, got {text!r}")
    return KernelModuleFlavor.PROPRIETARY if "P" in text else KernelModuleFlavor.OPEN


def count(raw: str) -> int:
    """`7\\n` -> 7: a count attribute (`sriov_totalvfs`, `sriov_numvfs`)."""
    text = _one_line(raw)
    if not _is_digits(text):
        raise ValueError(f"expected a number such as 7, got {text!r}")
    return int(text)


def flag(raw: str) -> bool:
    """`1\\n` -> True: a 0/1 attribute (`sriov_drivers_autoprobe`)."""
    text = _one_line(raw)
    if text not in ("0", "1"):
        raise ValueError(f"expected 0 or 1, got {text!r}")
    return text == "1"


# The kernel's resource flags (include/linux/ioport.h) that say what a BAR is.
_IORESOURCE_MEM = 0x200
_IORESOURCE_PREFETCH = 0x2000
_IORESOURCE_MEM_64 = 0x100000
_RESOURCE_LINE = re.compile(r"0x([0-9a-f]+) 0x([0-9a-f]+) 0x([0-9a-f]+)")


def resource_bars(raw: str) -> tuple[Bar, ...]:
    """A PCI function's `resource` -> its memory BARs and ROM: one `0x<start> 0x<end>
    0x<flags>` line per resource, the six standard BARs then the ROM first (SR-IOV and
    bridge windows follow). An unused one is all zero; an I/O BAR is not memory. The
    size holds also for a BAR the kernel could not place (start 0, IORESOURCE_UNSET)."""
    lines = raw.splitlines()
    if len(lines) <= ROM_INDEX:
        raise ValueError(f"expected at least {ROM_INDEX + 1} lines, got {len(lines)}")
    bars: list[Bar] = []
    for index, line in enumerate(lines):
        match = _RESOURCE_LINE.fullmatch(line)
        if match is None:
            raise ValueError(f"line {index + 1}: expected 0x<start> 0x<end> 0x<flags>: {line!r}")
        if index > ROM_INDEX:
            continue
        start, end, flags = (int(group, 16) for group in match.groups())
        if not flags & _IORESOURCE_MEM or start == end == 0:
            continue
        if end < start:
            raise ValueError(f"line {index + 1}: ends at {end:#x}, before its start {start:#x}")
        bars.append(
            Bar(
                index,
                end - start + 1,
                is_64bit=bool(flags & _IORESOURCE_MEM_64),
                prefetchable=bool(flags & _IORESOURCE_PREFETCH),
            )
        )
    return tuple(bars)


def removable(raw: str) -> bool:
    """`removable\n` -> True: the driver core's attribute (`fixed`, `unknown` -> False).
    PCI devices have it only below an external-facing (Thunderbolt/USB4) port."""
    text = _one_line(raw)
    if text not in ("removable", "fixed", "unknown"):
        raise ValueError(f"expected removable, fixed or unknown, got {text!r}")
    return text == "removable"


def node_meminfo(raw: str, node: int) -> tuple[int, int | None]:
    """A NUMA node's `meminfo` -> (MemTotal, MemFree) in KiB, from its
    `Node <N> <Key>: <value> kB` lines."""
    found: dict[str, int] = {}
    prefix = f"Node {node} "
    for line in raw.splitlines():
        if not line.startswith(prefix):
            raise ValueError(f"expected lines 'Node {node} <Key>: <value> kB', got {line!r}")
        key, sep, value = line[len(prefix) :].partition(":")
        number = value.strip().removesuffix(" kB")
        if not sep or not _is_digits(number):
            raise ValueError(f"expected '<Key>: <number> kB' after {prefix!r}, got {line!r}")
        found[key] = int(number)
    if "MemTotal" not in found:
        raise ValueError(f"has no 'Node {node} MemTotal:' line")
    return found["MemTotal"], found.get("MemFree")


_ADDRESS_SIZES = re.compile(r"([0-9]+) bits physical, ([0-9]+) bits virtual")


def cpuinfo(raw: str) -> HostCpu | None:
    """`/proc/cpuinfo` -> the first processor's `vendor_id` and the physical address
    bits of its `address sizes` line; None without a `vendor_id` (not an x86 host)."""
    vendor: str | None = None
    bits: int | None = None
    for line in raw.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or key not in ("vendor_id", "address sizes"):
            if not line.strip() and vendor is not None:
                break  # the end of the first processor's block
            continue
        if key == "vendor_id":
            vendor = value.strip()
            continue
        match = _ADDRESS_SIZES.fullmatch(value.strip())
        if match is None:
            raise ValueError(
                f"address sizes: expected 'N bits physical, M bits virtual', got {value.strip()!r}"
            )
        bits = int(match.group(1))
    return None if not vendor else HostCpu(vendor, bits)


def proc_devices(raw: str) -> tuple[CharMajor, ...]:
    """The "Character devices:" section of /proc/devices (block majors are ignored)."""
    lines = raw.splitlines()
    if not lines or lines[0] != "Character devices:":
        raise ValueError("expected the first line 'Character devices:'")
    majors: list[CharMajor] = []
    for line in lines[1:]:
        if not line.strip() or line.endswith(":"):
            break
        number, _, name = line.strip().partition(" ")
        if not _is_digits(number) or not name:
            raise ValueError(f"expected '<major> <name>' lines, got {line!r}")
        majors.append(CharMajor(int(number), name.strip()))
    return tuple(sorted(majors, key=lambda m: (m.major, m.name)))


def modprobe_vfio_ids(raw: str) -> tuple[tuple[str, ...], ...]:
    """Every `options vfio-pci ids=...` line of a modprobe.d file (with `\\` continuations)."""
    found: list[tuple[str, ...]] = []
    for line in raw.replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0]
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        if len(words) < 3 or words[0] != "options" or words[1].replace("_", "-") != "vfio-pci":
            continue
        for word in words[2:]:
            key, sep, value = word.partition("=")
            if sep and key == "ids":
                found.append(parse_vfio_ids(value))
    return tuple(found)


def module_names(raw: str) -> tuple[str, ...]:
    """The modules of a list that loads them at boot: etc/initramfs-tools/modules,
    etc/modules, etc/modules-load.d/*.conf. One per line, the first word (initramfs-tools
    and /etc/modules allow arguments after it); `#` and `;` start a comment line."""
    names: list[str] = []
    for line in raw.splitlines():
        words = line.split()
        if words and not words[0].startswith(("#", ";")):
            names.append(words[0])
    return tuple(names)


_ASSIGNMENT = re.compile(r"[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)=")
_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*)")


def shell_assignments(raw: str, env: dict[str, str]) -> dict[str, str]:
    """The `NAME=value` assignments of a sourced shell file (etc/default/grub, grub.d).

    grub-mkconfig sources /etc/default/grub, then each grub.d/*.cfg, so a file sees and
    may extend what the ones before it set (`GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX x"`):
    `env` holds those values. Quotes, backslashes and `$NAME`/`${NAME}` are handled as sh
    does in an assignment; any other statement is skipped, and an assignment inside an
    `if` counts as made. Returns this file's assignments, the last one per name.
    """
    scope = dict(env)
    made: dict[str, str] = {}
    at = 0
    while at < len(raw):
        match = _ASSIGNMENT.match(raw, at)
        if match is not None:
            value, at = _shell_word(raw, match.end(), scope)
            scope[match.group(1)] = made[match.group(1)] = value
        end = raw.find("\n", at)
        at = len(raw) if end < 0 else end + 1
    return made


def _shell_word(raw: str, at: int, env: dict[str, str]) -> tuple[str, int]:
    """One sh word from `at` (quotes may span lines): its value and where it ends."""
    out: list[str] = []
    quote = ""
    while at < len(raw):
        char = raw[at]
        if quote == "'":
            quote = "" if char == "'" else quote
            out.append("" if char == "'" else char)
        elif char == "\\" and at + 1 < len(raw):
            escaped = raw[at + 1]
            if escaped != "\n":
                # Inside double quotes a backslash escapes only $ ` " \ (and a newline).
                keep = quote == '"' and escaped not in '$`"\\'
                out.append("\\" + escaped if keep else escaped)
            at += 2
            continue
        elif char == "$" and (name := _VARIABLE.match(raw, at + 1)) is not None:
            out.append(env.get(name.group(1) or name.group(2), ""))
            at = name.end()
            continue
        elif quote == '"':
            quote = "" if char == '"' else quote
            out.append("" if char == '"' else char)
        elif char in "'\"":
            quote = char
        elif char in " \t\n;&|":
            break
        else:
            out.append(char)
        at += 1
    if quote:
        raise ValueError(f"a {quote} quote is never closed")
    return "".join(out), at
