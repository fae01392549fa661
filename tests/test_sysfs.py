"""Pure parsers of kernel and system files: exact formats in, typed values or ValueError out."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pvegpu.host import sysfs
from pvegpu.model.facts import CharMajor, IommuGroupType, KernelModuleFlavor
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
