from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pvegpu.pci import CpuList, PciAddress


def test_parse_and_format_roundtrip() -> None:
    """The kernel's form parses and prints back lowercase."""
    addr = PciAddress.parse("0000:E1:00.0")
    assert str(addr) == "0000:e1:00.0"
    assert addr.slot == "0000:e1:00"
    assert addr.short == "e1:00.0"


@pytest.mark.parametrize("text", ["81:00", "0000:81:00", "0000:81:20.0", "0000:81:00.8", "x"])
def test_parse_rejects_garbage(text: str) -> None:
    """Anything but dddd:bb:dd.f is refused with the text in the message."""
    with pytest.raises(ValueError, match=r"not a PCI address|out of range"):
        PciAddress.parse(text)


def test_lenient_accepts_short_form() -> None:
    """`81:00.0` means domain 0000, as lspci prints it."""
    assert PciAddress.parse_lenient("81:00.0") == PciAddress.parse("0000:81:00.0")


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_address_roundtrip_and_order(d: int, b: int, dev: int, f: int) -> None:
    """parse(str(a)) == a, and ordering is numeric, like sorting by the kernel name."""
    addr = PciAddress(d, b, dev, f)
    assert PciAddress.parse(str(addr)) == addr
    assert (addr < PciAddress(d, b, dev, f)) is False


@given(st.sets(st.integers(0, 300)))
def test_cpulist_roundtrip(cpus: set[int]) -> None:
    """Any CPU set survives format -> parse."""
    cl = CpuList(cpus)
    assert CpuList.parse(str(cl)) == cl


def test_cpulist_format() -> None:
    """Ranges collapse the way the kernel writes them."""
    assert str(CpuList.parse("0-31,64-95")) == "0-31,64-95"
    assert str(CpuList([1, 3, 4, 5])) == "1,3-5"
    with pytest.raises(ValueError, match="not a CPU list"):
        CpuList.parse("0-abc")
