"""Pure parsers of kernel and system files: exact formats in, typed values or ValueError out."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pvegpu.host import sysfs
from pvegpu.model.facts import CharMajor, IommuGroupType, KernelModuleFlavor
from pvegpu.model.resources import Bar, HostCpu
from pvegpu.vendors import nvidia
from pvegpu.vendors.nvidia import USERSPACE


def test_hex_ids() -> None:
    """`0x10de\\n` is 0x10de; the class has six digits; anything else is refused."""
    assert sysfs.hex_id("0x10de\n", 4) == 0x10DE
    assert sysfs.hex_id("0x030200\n", 6) == 0x030200
    for bad in ("10de\n", "0x10DE\n", "0x10d\n", "0x10de\n0x1\n", ""):
        with pytest.raises(ValueError, match=r"hex digits|single line"):
            sysfs.hex_id(bad, 4)


def test_numa_node() -> None:
    """-1 (firmware gave no node) is None; words are refused."""
    assert sysfs.numa_node("1\n") == 1
    assert sysfs.numa_node("-1\n") is None
    for bad in ("abc\n", "-2\n", "\n"):
        with pytest.raises(ValueError, match="node number"):
            sysfs.numa_node(bad)


def test_driver_override_and_links() -> None:
    """`(null)` means no override; link widths are lanes, `Unknown` is None."""
    assert sysfs.driver_override("(null)\n") is None
    assert sysfs.driver_override("vfio-pci\n") == "vfio-pci"
    assert sysfs.link_width("16\n") == 16
    assert sysfs.link_width("Unknown\n") is None
    assert sysfs.link_speed("32 GT/s\n") == "32 GT/s"
    with pytest.raises(ValueError, match="lane count"):
        sysfs.link_width("x16\n")


def test_iommu_type_and_bools() -> None:
    """Group types are the kernel's names; module bools print Y/N."""
    assert sysfs.iommu_group_type("DMA-FQ\n") is IommuGroupType.DMA_FQ
    assert sysfs.iommu_group_type("identity\n") is IommuGroupType.IDENTITY
    with pytest.raises(ValueError, match="one of DMA"):
        sysfs.iommu_group_type("dma\n")
    assert sysfs.module_bool("Y\n") is True
    assert sysfs.module_bool("N\n") is False
    with pytest.raises(ValueError, match="Y or N"):
        sysfs.module_bool("yes\n")


def test_hostname_strips_domain() -> None:
    """Proxmox's node name is the first label of the host name."""
    assert sysfs.hostname("kpro6.lab.example\n") == "kpro6"
    with pytest.raises(ValueError, match="one host name"):
        sysfs.hostname("\n")
    with pytest.raises(ValueError, match="not a valid host name"):
        sysfs.hostname("bad_name\n")


def test_taint_letters_give_the_flavor() -> None:
    """A module's taint `P` is the proprietary one; the open module taints only OE."""
    assert sysfs.module_flavor("POE\n") is KernelModuleFlavor.PROPRIETARY
    assert sysfs.module_flavor("OE\n") is KernelModuleFlavor.OPEN
    with pytest.raises(ValueError, match="taint letters"):
        sysfs.module_flavor("poe\n")


def test_proc_devices_char_section_only() -> None:
    """Only "Character devices:" counts; block majors with the same names are ignored."""
    text = "Character devices:\n  1 mem\n509 nvidia-uvm\n195 nvidia\n\nBlock devices:\n  8 sd\n"
    assert sysfs.proc_devices(text) == (
        CharMajor(1, "mem"),
        CharMajor(195, "nvidia"),
        CharMajor(509, "nvidia-uvm"),
    )
    with pytest.raises(ValueError, match="Character devices"):
        sysfs.proc_devices("Block devices:\n")
    with pytest.raises(ValueError, match="major"):
        sysfs.proc_devices("Character devices:\nx y\n")


def test_vfio_ids_from_cmdline() -> None:
    """`vfio-pci.ids=` and `vfio_pci.ids=` both count (the kernel treats - and _ alike)."""
    line = "root=/dev/sda quiet vfio-pci.ids=10de:24b0,10de:228b vfio_pci.ids=1002:744c\n"
    assert sysfs.cmdline_vfio_ids(line) == (("10de:24b0", "10de:228b"), ("1002:744c",))
    assert sysfs.cmdline_vfio_ids("quiet\n") == ()
    with pytest.raises(ValueError, match="vendor:device"):
        sysfs.cmdline_vfio_ids("vfio-pci.ids=nvidia\n")


def test_vfio_ids_from_modprobe() -> None:
    """`options vfio-pci ids=` lines, with comments and backslash continuations."""
    text = (
        "# options vfio-pci ids=dead:beef\n"
        "options vfio_pci disable_vga=1 \\\n ids=10de:24b0,10de:228b\n"
        "options snd-hda-intel ids=1:2\n"
        "softdep nvidia pre: vfio-pci\n"
    )
    assert sysfs.modprobe_vfio_ids(text) == (("10de:24b0", "10de:228b"),)


@pytest.mark.parametrize(
    ("parse", "raw"),
    [
        (lambda raw: sysfs.link_width(raw), "\u0661\u0666\n"),  # Arabic-Indic 16
        (lambda raw: sysfs.link_width(raw), "\u00b2\n"),  # superscript two
        (lambda raw: nvidia.gpu_information(f"Device Minor: {raw}\n"), "\u0663"),
        (lambda raw: nvidia.gpu_information(f"Device Minor: {raw}\n"), "\u00b2"),
        (lambda raw: sysfs.proc_devices(f"Character devices:\n{raw} nvidia\n"), "\u0663"),
        (lambda raw: sysfs.proc_devices(f"Character devices:\n{raw} nvidia\n"), "\u00b2"),
        (lambda raw: sysfs.numa_node(raw), "\u0661\n"),
    ],
)
def test_unicode_digits_are_not_numbers(parse: Callable[[str], object], raw: str) -> None:
    """str.isdigit() accepts '\u00b2' and '\u0661'; the kernel only writes ASCII digits."""
    with pytest.raises(ValueError, match="expected"):
        parse(raw)


def test_nvidia_library_names_are_whole_ascii_names() -> None:
    """Even `.match` takes only a whole name: no trailing newline, no Unicode digits."""
    assert USERSPACE.library.match("libcuda.so.590.48.01") is not None
    for bad in ("libcuda.so.590.48.01\n", "libcuda.so.\u0665\u0669\u0660.48", "libcuda.so.1"):
        assert USERSPACE.library.match(bad) is None, bad


_UEVENT = (
    "DRIVER=nvidia\nPCI_CLASS={klass}\nPCI_ID={ids}\nPCI_SUBSYS_ID=10DE:204B\n"
    "PCI_SLOT_NAME=0000:81:00.0\n"
)


def test_pci_uevent_ids_and_class() -> None:
    """The kernel's %04X:%04X pairs and its class without leading zeros (4-6 digits)."""
    raw = _UEVENT.format(klass="30200", ids="10DE:2BB5")
    assert sysfs.pci_uevent(raw) == (0x10DE, 0x2BB5, 0x10DE, 0x204B, 0x030200, "0000:81:00.0")
    assert sysfs.pci_uevent(_UEVENT.format(klass="0604", ids="1022:14AB"))[4] == 0x0604
    assert sysfs.pci_uevent(_UEVENT.format(klass="FF0000", ids="1022:14AB"))[4] == 0xFF0000


@pytest.mark.parametrize(
    ("klass", "ids"),
    [
        ("30200", "10de:2bb5"),  # lowercase: not what the kernel prints
        ("30200", "10DE:2BB"),
        ("30200", "10DE2BB5"),
        ("30200", "10DE-2BB5"),
        ("30200", "10DE:2BB5:"),
        ("30200", ":10DE2BB5"),
        ("30200", "10DE:2BG5"),
        ("30200", "+0DE:2BB5"),
        ("30200", " 0DE:2BB5"),
        ("302", "10DE:2BB5"),
        ("3020000", "10DE:2BB5"),
        ("30g00", "10DE:2BB5"),
        ("", "10DE:2BB5"),
    ],
)
def test_pci_uevent_refuses_other_forms(klass: str, ids: str) -> None:
    with pytest.raises(ValueError, match="PCI_ID"):
        sysfs.pci_uevent(_UEVENT.format(klass=klass, ids=ids))


@pytest.mark.parametrize("raw", ["\u00b2\n", "\u0667\n", "-1\n", "+1\n", " 1\n", "\n", "1 \n"])
def test_counts_are_ascii_digits(raw: str) -> None:
    with pytest.raises(ValueError, match="number"):
        sysfs.count(raw)


@pytest.mark.parametrize("raw", ["-\n", "--1\n", "+1\n", "-\u00b2\n", " 1\n"])
def test_numa_node_sign_and_digits(raw: str) -> None:
    with pytest.raises(ValueError, match="node number"):
        sysfs.numa_node(raw)


# -- what a VM's start depends on: BARs, boot_vga, removable, node memory, the CPU

_ZERO = "0x0000000000000000 0x0000000000000000 0x0000000000000000"
# An RTX PRO 6000 as a 6.14 kernel prints it: BAR0 64 MiB 32-bit, BAR1 128 GiB and BAR3
# 32 MiB 64-bit prefetchable (the upper halves' lines zero), an I/O BAR5, the ROM,
# then the six SR-IOV lines.
PRO6000_RESOURCE = (
    "\n".join(
        [
            "0x00000000f0000000 0x00000000f3ffffff 0x0000000000040200",
            "0x0000380000000000 0x0000381fffffffff 0x000000000014220c",
            _ZERO,
            "0x0000382000000000 0x0000382001ffffff 0x000000000014220c",
            _ZERO,
            "0x000000000000f000 0x000000000000f07f 0x0000000000040101",
            "0x00000000f4000000 0x00000000f407ffff 0x0000000000046200",
            *[_ZERO] * 6,
        ]
    )
    + "\n"
)


def test_resource_bars() -> None:
    """Memory BARs and the ROM with their sizes; I/O BARs, unused and SR-IOV lines not."""
    assert sysfs.resource_bars(PRO6000_RESOURCE) == (
        Bar(0, 64 << 20),
        Bar(1, 128 << 30, is_64bit=True, prefetchable=True),
        Bar(3, 32 << 20, is_64bit=True, prefetchable=True),
        Bar(6, 512 << 10, prefetchable=True),
    )


def test_an_unplaced_bar_keeps_its_size() -> None:
    """A BAR the kernel could not place starts at 0 with IORESOURCE_UNSET: still its size."""
    lines = PRO6000_RESOURCE.splitlines()
    lines[1] = "0x0000000000000000 0x0000001fffffffff 0x000000002014220c"
    assert sysfs.resource_bars("\n".join(lines))[1] == Bar(1, 128 << 30, True, True)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ("\n".join([_ZERO] * 5), "at least 7 lines"),
        (PRO6000_RESOURCE.replace("0x000000000014220c", "0x14220c zzz", 1), "line 2"),
        (PRO6000_RESOURCE.replace("0x0000381fffffffff", "0x0000001fffffffff", 1), "before"),
    ],
)
def test_resource_refuses_other_text(raw: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sysfs.resource_bars(raw)


def test_removable_and_boot_vga() -> None:
    """The driver core's three words; boot_vga is a 0/1 attribute."""
    assert sysfs.removable("removable\n") is True
    assert sysfs.removable("fixed\n") is False
    assert sysfs.removable("unknown\n") is False
    with pytest.raises(ValueError, match="removable, fixed or unknown"):
        sysfs.removable("yes\n")
    assert sysfs.flag("1\n") is True


NODE_MEMINFO = """\
Node 1 MemTotal:       197960524 kB
Node 1 MemFree:        157489844 kB
Node 1 MemUsed:         40470680 kB
Node 1 Active(anon):     1048576 kB
Node 1 HugePages_Total:     0
Node 1 HugePages_Free:      0
Node 1 HugePages_Surp:      0
"""


def test_node_meminfo() -> None:
    """MemTotal and MemFree in KiB, from the kernel's `Node <N> <Key>: <n> kB` lines."""
    assert sysfs.node_meminfo(NODE_MEMINFO, 1) == (197960524, 157489844)
    with pytest.raises(ValueError, match="'Node 2 <Key>"):
        sysfs.node_meminfo(NODE_MEMINFO, 2)
    with pytest.raises(ValueError, match="MemTotal"):
        sysfs.node_meminfo("Node 0 MemFree: 1 kB\n", 0)
    with pytest.raises(ValueError, match="number"):
        sysfs.node_meminfo("Node 0 MemTotal: lots kB\n", 0)


CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
address sizes\t: 46 bits physical, 57 bits virtual
power management:

processor\t: 1
vendor_id\t: GenuineIntel
address sizes\t: 52 bits physical, 57 bits virtual

"""


def test_cpuinfo_first_processor() -> None:
    """The first processor's vendor and physical address bits; none on a host without
    `vendor_id` (arm64), a malformed `address sizes` refused."""
    assert sysfs.cpuinfo(CPUINFO) == HostCpu("GenuineIntel", 46)
    assert sysfs.cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\n\n") is None
    assert sysfs.cpuinfo("vendor_id\t: AuthenticAMD\n") == HostCpu("AuthenticAMD", None)
    with pytest.raises(ValueError, match="address sizes"):
        sysfs.cpuinfo("vendor_id\t: AuthenticAMD\naddress sizes\t: 52 bits\n")
