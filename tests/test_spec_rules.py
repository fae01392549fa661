"""Spec values that the programs reading the rendered files would take differently: refused."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from pvegpu.errors import SpecError
from pvegpu.pci import CpuList, PciAddress
from pvegpu.spec.load import load_spec, parse_spec

BASE = """
node = "{node}"

[[pools]]
name = "{name}"
gpus = [{gpus}]
mapping = {{ id = "{mapping}" }}

[pools.lxc]
vmid = {vmid}
mode = "{mode}"

[pools.lxc.serving]
version = "0.5.23"
model_path = "/models/m"
mem_fraction_static = {fraction}
checkpoint_bytes = {checkpoint}
extra_args = [{extra}]

[pools.lxc.serving.environment]
{env}
"""
GOOD = {
    "node": "kpro6",
    "name": "sglang",
    "gpus": '"01:00.0"',
    "mapping": "pro6000",
    "vmid": "129",
    "mode": "0666",
    "fraction": "0.85",
    "checkpoint": "1000",
    "extra": '"--trust-remote-code"',
    "env": 'NCCL_DEBUG = "WARN"',
}


def spec_text(**changes: str) -> str:
    return BASE.format(**{**GOOD, **changes})


def refusal(text: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as err:
        parse_spec(text)
    return [(p.code, p.subject) for p in err.value.problems]


def test_the_base_spec_is_accepted() -> None:
    assert parse_spec(spec_text()).pools[0].lxc is not None


@pytest.mark.parametrize(
    ("change", "subject"),
    [
        ({"name": "sglang\\n"}, "pools[0].name"),
        ({"node": "kpro6\\n"}, "node"),
        ({"mapping": "pro6000\\n"}, "pools[0].mapping.id"),
        ({"mode": "0666\\n"}, "pools[0].lxc.mode"),
        ({"gpus": '"01:00.0\\n"'}, "pools[0].gpus[0]"),
        ({"extra": '"--x\\nExecStartPre=/bin/rm"'}, "pools[0].lxc.serving.extra_args[0]"),
        ({"env": 'A = "1\\nB=2"'}, "pools[0].lxc.serving.environment.A"),
    ],
)
def test_a_trailing_or_embedded_newline_is_refused(change: dict[str, str], subject: str) -> None:
    assert subject in [s for _, s in refusal(spec_text(**change))]


@pytest.mark.parametrize("vmid", ["99", "1000000000", "-129", "0"])
def test_vmid_outside_proxmox_range_is_refused(vmid: str) -> None:
    assert ("spec-invalid-value", "pools[0].lxc.vmid") in refusal(spec_text(vmid=vmid))


@pytest.mark.parametrize(
    ("change", "subject"),
    [
        ({"mode": "-666"}, "pools[0].lxc.mode"),
        ({"checkpoint": "-1"}, "pools[0].lxc.serving.checkpoint_bytes"),
        ({"checkpoint": "99999999999999999999"}, "pools[0].lxc.serving.checkpoint_bytes"),
        ({"fraction": "nan"}, "pools[0].lxc.serving.mem_fraction_static"),
        ({"fraction": "inf"}, "pools[0].lxc.serving.mem_fraction_static"),
        ({"name": "x" * 65}, "pools[0].name"),
        ({"extra": '"' + "a" * 5000 + '"'}, "pools[0].lxc.serving.extra_args[0]"),
        ({"env": '"1BAD" = "x"'}, "pools[0].lxc.serving.environment.1BAD"),
        ({"gpus": ""}, "pools[0].gpus"),
    ],
)
def test_out_of_range_and_malformed_values_are_refused(
    change: dict[str, str], subject: str
) -> None:
    assert subject in [s for _, s in refusal(spec_text(**change))]


def test_deeply_nested_toml_is_a_syntax_error() -> None:
    text = spec_text() + "deep = " + "[" * 50_000 + "]" * 50_000 + "\n"
    assert refusal(text) == [("spec-syntax", "<spec>")]


def test_spec_that_is_not_utf8_or_not_a_file_is_refused(tmp_path: Path) -> None:
    latin = tmp_path / "latin1.toml"
    latin.write_bytes(spec_text().replace("sglang", "sgl\xe4ng").encode("latin-1"))
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path in (latin, fifo, tmp_path):
        result: list[str] = []

        def load(p: Path = path, out: list[str] = result) -> None:
            try:
                load_spec(p)
            except SpecError as err:
                out.append(err.problems[0].code)

        worker = threading.Thread(target=load, daemon=True)
        worker.start()
        worker.join(timeout=10)
        assert result == ["spec-unreadable"], path  # a FIFO must not block the read


@pytest.mark.parametrize("text", ["0-4000000000", "²", "0-1²", "3-1"])
def test_cpu_lists_that_no_kernel_writes_are_refused_quickly(text: str) -> None:
    with pytest.raises(ValueError):
        CpuList.parse(text)


def test_pci_address_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ValueError):
        PciAddress.parse("0000:01:00.0\n")
    with pytest.raises(ValueError):
        PciAddress.parse_lenient("01:00.0\n")
