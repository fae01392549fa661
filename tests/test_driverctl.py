"""Other binders (issue 19, item 7): driverctl's persisted overrides.

`driverctl set-override` saves `/etc/driverctl.d/pci-<ADDR>` (the driver's name) and
applies it again at every boot. Discovery reads them; the plan refuses an override that
sends a device of the plan elsewhere (fix: `driverctl unset-override`), warns about one
that agrees (it outlives `revert`), says what it does to devices the plan leaves alone,
and the revert table says what driverctl does to each reverted device at boot.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from pvegpu.errors import DiscoveryError
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json, facts_to_json
from pvegpu.model.facts import DriverctlOverride, HostFacts
from pvegpu.pci import PciAddress
from pvegpu.pipeline import check_host
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.spec.load import parse_spec
from test_acs_override import CMDLINE, GPU, OTHER, VM_SPEC, switch_host, written
from test_whole_host_guests import artifact, of, refused, text

Golden = Callable[[str], SnapshotAssertion]

LXC_SPEC = """\
node = "pve-lab"

[[pools]]
name = "ct"
gpus = ["03:00.0"]

[pools.lxc]
vmid = 130
"""
CT130 = (
    "arch: amd64\nhostname: llm\nmemory: 65536\nostype: debian\n"
    "rootfs: local-lvm:vm-130-disk-0,size=64G\n"
)


def path(address: str) -> str:
    return f"etc/driverctl.d/pci-{address}"


def host(
    tmp_path: Path, overrides: dict[str, str], extra: dict[str, str] | None = None
) -> HostFacts:
    files = {path(a): f"{d}\n" for a, d in overrides.items()} | (extra or {})
    return discover(written(tmp_path, switch_host(cmdline=CMDLINE, files=files)))


def test_discovery_reads_the_pci_overrides_in_address_order(tmp_path: Path) -> None:
    facts = host(
        tmp_path,
        {OTHER: "vfio-pci", GPU: "nvidia"},
        # driverctl's other buses are not PCI devices: not read.
        {"etc/driverctl.d/usb-1-1": "usbhid\n"},
    )
    assert facts.driverctl == (
        DriverctlOverride(PciAddress.parse(GPU), "nvidia"),
        DriverctlOverride(PciAddress.parse(OTHER), "vfio-pci"),
    )
    assert facts_from_json(facts_to_json(facts)) == facts


def test_without_driverctl_the_document_is_as_before(tmp_path: Path) -> None:
    facts = host(tmp_path, {})
    assert facts.driverctl == ()
    assert '"driverctl"' not in facts_to_json(facts)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("pci-0000:3:00.0", "vfio-pci\n", "names no PCI address"),
        ("pci-0000:03:00.0", "vfio-pci nvidia\n", "not one driver name"),
        ("pci-0000:03:00.0", "\n", "not one driver name"),
    ],
)
def test_a_malformed_override_is_a_discovery_error(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    files = {f"etc/driverctl.d/{name}": content}
    with pytest.raises(DiscoveryError) as error:
        discover(written(tmp_path, switch_host(cmdline=CMDLINE, files=files)))
    (problem,) = error.value.problems
    assert (problem.code, problem.subject) == ("bad-value", f"etc/driverctl.d/{name}")
    assert message in problem.message
    assert "driverctl unset-override" in problem.fix


def test_a_vm_gpu_driverctl_binds_elsewhere_is_refused(tmp_path: Path, golden: Golden) -> None:
    problems = refused(host(tmp_path, {GPU: "nvidia"}), VM_SPEC)
    assert [(p.code, p.subject) for p in problems] == [("driverctl-override-conflict", path(GPU))]
    assert f"`driverctl unset-override {GPU}`" in problems[0].fix
    assert text(problems) == golden("txt")


def test_a_container_gpu_driverctl_sends_to_vfio_is_refused(tmp_path: Path) -> None:
    facts = host(tmp_path, {GPU: "vfio-pci"}, {"etc/pve/lxc/130.conf": CT130})
    problems = refused(facts, LXC_SPEC)
    assert [(p.code, p.subject) for p in problems] == [("driverctl-override-conflict", path(GPU))]
    assert "CT 130 on nvidia" in problems[0].message


def test_an_override_that_agrees_is_said_and_in_the_revert_table(
    tmp_path: Path, golden: Golden
) -> None:
    facts = host(tmp_path, {GPU: "vfio-pci", OTHER: "nvme"})
    result = plan(facts, parse_spec(VM_SPEC))
    found = of(result.findings, "driverctl-also-binds", "driverctl-override")
    assert [(f.code, f.subject) for f in found] == [
        ("driverctl-also-binds", path(GPU)),
        ("driverctl-override", path(OTHER)),
    ]
    assert "the plan leaves it alone" in found[1].message
    assert text(found) == golden("txt")
    summary = artifact(render(result), "SUMMARY.md").content
    said = (
        f"At every boot driverctl binds {GPU} to vfio-pci again: run "
        f"`driverctl unset-override {GPU}` to keep it on nvidia."
    )
    assert said in summary


def test_check_lists_every_override(tmp_path: Path) -> None:
    root = written(tmp_path, switch_host(cmdline=CMDLINE, files={path(OTHER): "vfio-pci\n"}))
    found = [f for f in check_host(root)[2] if "driverctl" in f.code]
    assert [(f.code, f.subject) for f in found] == [("driverctl-override", path(OTHER))]
    assert "144d:a80a, on nvme now" in found[0].message
