"""The builder beyond GPUs: config headers lspci reads, SR-IOV links, hosts of any size."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import attrs
import pytest

from fixture_hosts import HOSTS
from pvegpu.host.discover import discover
from pvegpu.testing import DeviceSpec, HostSpecError, mixed_host, write_host

LSPCI = shutil.which("lspci") or next(
    (p for p in ("/usr/bin/lspci", "/usr/sbin/lspci", "/sbin/lspci") if Path(p).exists()), None
)
needs_lspci = pytest.mark.skipif(
    LSPCI is None and os.environ.get("CI") != "true",
    reason="lspci missing (apt-get install pciutils); required when CI=true",
)


def _device(root: Path, address: str) -> Path:
    return (root / "sys/bus/pci/devices" / address).resolve()


def _lspci(root: Path) -> list[str]:
    assert LSPCI is not None, "CI=true and no lspci: apt-get install pciutils"
    done = subprocess.run(
        [LSPCI, "-A", "linux-sysfs", "-O", f"sysfs.path={root}/sys/bus/pci", "-nn", "-D"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.fixture(scope="module")
def nics(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three slots: a GPU with its audio, an NVMe drive, a dual-port NIC with VFs."""
    root = tmp_path_factory.mktemp("mixed") / "host"
    write_host(mixed_host(40), root)
    return root


def test_config_header_of_an_endpoint(tmp_path: Path) -> None:
    """Ids, command, class, header type and subsystem at the offsets of the PCI spec."""
    root = tmp_path / "kpro6"
    write_host(HOSTS["kpro6"](), root)
    config = (_device(root, "0000:81:00.0") / "config").read_bytes()
    assert len(config) == 64
    vendor, device, command, status = struct.unpack_from("<HHHH", config, 0)
    assert (vendor, device, command & 0x6, status) == (0x10DE, 0x2BB5, 0x6, 0)
    assert (config[8], config[9:12]) == (0xA1, bytes((0x00, 0x02, 0x03)))
    assert config[0x0E] == 0x80, "multi-function: the audio function is 81:00.1"
    assert struct.unpack_from("<HH", config, 0x2C) == (0x10DE, 0x204B)
    irq = int((_device(root, "0000:81:00.0") / "irq").read_text())
    assert (config[0x3C], config[0x3D]) == (irq & 0xFF, 1)


def test_config_header_of_a_bridge(nics: Path) -> None:
    """Type 1 header: primary, secondary and subordinate bus of the root port."""
    config = (_device(nics, "0000:00:01.2") / "config").read_bytes()
    assert config[0x0E] & 0x7F == 1
    assert tuple(config[0x18:0x1B]) == (0x00, 0x03, 0x03)
    resource = (_device(nics, "0000:00:01.2") / "resource").read_text().splitlines()
    assert len(resource) == 17
    assert len((_device(nics, "0000:03:00.0") / "resource").read_text().splitlines()) == 13


def test_sriov_links(nics: Path) -> None:
    """physfn -> the PF; virtfnN -> its VFs in address order; sriov_numvfs counts them."""
    pf = _device(nics, "0000:03:00.1")
    assert (pf / "sriov_numvfs").read_text() == "6\n"
    assert (pf / "virtfn0").resolve() == _device(nics, "0000:03:01.0")
    assert (pf / "virtfn5").resolve() == _device(nics, "0000:03:01.5")
    assert not (pf / "virtfn6").exists()
    vf = _device(nics, "0000:03:01.0")
    assert (vf / "physfn").resolve() == pf
    assert str((vf / "physfn").readlink()) == "../0000:03:00.1"
    assert (vf / "config").read_bytes()[0:4] == b"\xff\xff\xff\xff", "a VF reads no ids"
    assert (vf / "irq").read_text() == "0\n"
    assert not (pf / "physfn").exists()


@pytest.mark.parametrize("functions", [1, 7, 40, 300])
def test_mixed_host_has_exactly_the_functions_asked(functions: int, tmp_path: Path) -> None:
    host = mixed_host(functions)
    assert len(host.devices) == functions
    write_host(host, tmp_path / "h")
    facts = discover(tmp_path / "h")
    assert len(facts.functions) == functions
    assert len(facts.gpus) == sum(d.nvidia is not None for d in host.devices)


def test_mixed_host_spans_domains(tmp_path: Path) -> None:
    """Past 248 root ports the next PCI domain starts; both NUMA nodes get GPUs."""
    host = mixed_host(2600)
    domains = {d.address[:4] for d in host.devices}
    assert domains == {"0000", "0001"}
    nodes = {d.numa_node for d in host.devices if d.nvidia is not None}
    assert nodes == {0, 1}


def test_virtual_function_errors(tmp_path: Path) -> None:
    """A VF of a function that is missing, a bridge, or behind another parent is refused."""
    host = mixed_host(40)
    vf = next(d for d in host.devices if d.physfn is not None)
    port = host.devices[0]
    cases: list[tuple[DeviceSpec, str]] = [
        (attrs.evolve(vf, physfn="0000:09:00.0"), "not a physical function"),
        (attrs.evolve(vf, physfn=port.address), "not a physical function"),
        (attrs.evolve(vf, parent="0000:00:01.0"), "sits next to"),
    ]
    for index, (changed, match) in enumerate(cases):
        devices = tuple(changed if d is vf else d for d in host.devices)
        with pytest.raises(HostSpecError, match=match):
            write_host(attrs.evolve(host, devices=devices), tmp_path / str(index))


@needs_lspci
@pytest.mark.parametrize("name", ["kpro6", "workstation", "mixed-40"])
def test_lspci_lists_every_function(name: str, tmp_path: Path) -> None:
    """lspci's sysfs backend reads a built tree: every function, with its ids and class."""
    host = mixed_host(40) if name == "mixed-40" else HOSTS[name]()
    write_host(host, tmp_path / "h")
    lines = _lspci(tmp_path / "h")
    assert [line.split(" ", 1)[0] for line in lines] == sorted(d.address for d in host.devices)
    for line, dev in zip(lines, sorted(host.devices, key=lambda d: d.address), strict=True):
        assert f"[{dev.pci_class >> 8:04x}]" in line, line
        assert f"[{dev.vendor:04x}:{dev.device:04x}]" in line, line
