"""Map lines of this node that no longer match sysfs (issue 29, item 6).

After a BIOS update the IOMMU groups renumber, and every VM on a mapping with a stale
map line fails to start: Proxmox checks each map line of the node at every VM start.
pvegpu writes its pools' mappings from sysfs; the other lines are named, by plan and by
check alike (one rule, `stale_map_findings`), with the VMs they stop and the fix. The
fixture host `workstation-bios` is the workstation after such an update.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

import fixture_hosts
from bundled import FIXTURES, copy_tree, example_plan, example_spec, host_facts
from pvegpu.apply.check import EXIT_ERRORS, check
from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.planning.planner import plan
from pvegpu.planning.stale_mappings import stale_map_findings, stale_map_line
from pvegpu.pvefiles import pcicfg
from pvegpu.rendering.registry import render
from test_whole_host_guests import artifact, variant

Golden = Callable[[str], SnapshotAssertion]

STALE_LINE = "id=10de:2204,iommugroup=3,node=pve-ws,path=0000:17:00,subsystem-id=1458:403b"
FRESH_LINE = STALE_LINE.replace("iommugroup=3", "iommugroup=4")
A4000_LINE = "id=10de:24b0,iommugroup=6,node=pve-ws,path=0000:39:00,subsystem-id=10de:14ad"
VM121 = "etc/pve/qemu-server/121.conf"


def stale(findings: tuple[Diagnostic, ...]) -> list[Diagnostic]:
    return [f for f in findings if f.code == "mapping-stale"]


def bios_plan(files: dict[str, str] | None = None, where: Path | None = None) -> Plan:
    """examples/workstation.toml on workstation-bios (or a variant with `files`)."""
    if files is None:
        facts = host_facts("workstation-bios")
    else:
        assert where is not None
        facts = variant(where, files, fixture_hosts.workstation_bios)
    return plan(facts, example_spec("workstation"))


def cfg(*sections: tuple[str, list[str]]) -> str:
    return "".join(
        f"{mapping_id}\n" + "".join(f"\tmap {m}\n" for m in maps) + "\n"
        for mapping_id, maps in sections
    )


# --- the fixture host: a mapping outside the plan, stale after a BIOS update ------------


def test_bios_update_stale_mapping_outside_the_plan_is_a_warning(golden: Golden) -> None:
    """The issue's case: rtx3090 is no pool's, still says group 3 (the 3090 is in 4 now)
    and VM 120 uses it: one warning on the line, naming VM 120 and the fix, while the
    plan writes a4000 and leaves rtx3090's bytes (description first) as they were."""
    result = bios_plan()
    (finding,) = stale(result.findings)
    assert (finding.severity, finding.subject) == (Severity.WARNING, f"{pcicfg.PATH} line 3")
    assert "iommugroup=3, sysfs says 4" in finding.message
    assert "so VM 120 (hostpci0) does not start" in finding.message
    assert f"correct the line to `map {FRESH_LINE}`" in finding.message
    assert finding.message.count("After applying this plan") == 1
    written = artifact(render(result), pcicfg.PATH).content
    assert written.startswith(fixture_hosts.WORKSTATION_BIOS_PCI_CFG + "a4000\n")
    assert f"{finding.severity}: {finding.message}\n" == golden("txt")


def test_check_reports_the_same_line_as_an_error(tmp_path: Path) -> None:
    """`pvegpu check` of the host as it is: the planner's rule, an error (a VM uses the
    mapping), the same words without the plan's "after applying"."""
    root = copy_tree(FIXTURES / "workstation-bios", tmp_path / "root")
    report = check(root, None)
    (finding,) = stale(report.findings)
    assert (finding.severity, finding.subject) == (Severity.ERROR, f"{pcicfg.PATH} line 3")
    assert report.exit_code == EXIT_ERRORS
    (planned,) = stale(bios_plan().findings)
    assert finding.message == planned.message.replace(
        "After applying this plan (it rewrites pci.cfg, and apply refuses a file changed "
        "after planning), correct",
        "Correct",
    )


@pytest.mark.parametrize("name", ["workstation", "kpro6", "kpro6-raw"])
def test_fresh_mappings_give_no_finding(name: str) -> None:
    """The examples' hosts: no pci.cfg, or one whose lines match sysfs."""
    assert stale(example_plan(name).findings) == []


def test_the_fixs_command_leaves_nothing_stale(tmp_path: Path) -> None:
    """Run as told: the mapping holds the `--map` values of the command (the API replaces
    the list), and the next plan and check find nothing; the other node's line is in the
    command verbatim, never judged here."""
    other = "id=10de:2204,iommugroup=77,node=pve-ws2,path=0000:41:00,subsystem-id=1458:403b"
    text = cfg(("rtx3090", [other, STALE_LINE]))
    (finding,) = stale(bios_plan({pcicfg.PATH: text}, tmp_path).findings)
    command = re.search(r"`(pvesh set [^`]+)`", finding.message)
    assert command is not None
    words = shlex.split(command[1])
    assert words[:3] == ["pvesh", "set", "/cluster/mapping/pci/rtx3090"]
    maps = words[4::2]
    assert maps == [other, FRESH_LINE] and set(words[3::2]) == {"--map"}
    fixed = cfg(("rtx3090", maps))
    assert stale(bios_plan({pcicfg.PATH: fixed}, tmp_path).findings) == []
    root = tmp_path / "fixed"
    copy_tree(FIXTURES / "workstation-bios", root)
    (root / pcicfg.PATH).write_text(fixed)
    assert stale(check(root, None).findings) == []


# --- which lines a plan judges ---------------------------------------------------------


def test_the_pools_own_mapping_is_written_anew_not_judged(tmp_path: Path) -> None:
    """a4000 is the pool's: its stale line is replaced from sysfs, so the plan says
    nothing of it; check, with nothing rewriting it, reports it."""
    text = cfg(("a4000", [A4000_LINE.replace("iommugroup=6", "iommugroup=5")]))
    result = bios_plan({pcicfg.PATH: text}, tmp_path)
    assert stale(result.findings) == []
    assert f"\tmap {A4000_LINE}\n" in artifact(render(result), pcicfg.PATH).content
    facts = result.facts
    (live,) = stale(tuple(stale_map_findings(facts, pcicfg.parse(text), live=True)))
    assert (live.severity, live.subject) == (Severity.WARNING, f"{pcicfg.PATH} line 2")


def test_a_line_that_moves_into_the_pool_is_not_judged(tmp_path: Path) -> None:
    """cad-old hands over the A4000 with an old group: the line moves to a4000 (the
    mapping goes), so its staleness is moot; rtx3090's line, which stays, is named."""
    old = A4000_LINE.replace("iommugroup=6", "iommugroup=2")
    text = cfg(("cad-old", [old]), ("rtx3090", [STALE_LINE]))
    result = bios_plan({pcicfg.PATH: text}, tmp_path)
    assert [f.subject for f in stale(result.findings)] == [f"{pcicfg.PATH} line 5"]
    assert "mapping-devices-moved" in {f.code for f in result.findings}


def test_a_mapping_no_vm_uses_is_info_and_a_pending_use_is_named(tmp_path: Path) -> None:
    """Without a VM on it the stale line stops nothing yet: info in the plan, a warning
    in check. A pending change that adds a line on it is a VM it stops."""
    unused = bios_plan({"etc/pve/qemu-server/120.conf": "cores: 2\n"}, tmp_path)
    (finding,) = stale(unused.findings)
    assert finding.severity is Severity.INFO
    assert "no VM of pve-ws uses the mapping now; one given it will not start" in finding.message
    pending = "cores: 2\n\n[PENDING]\nhostpci1: mapping=rtx3090\n"
    files = {"etc/pve/qemu-server/120.conf": "cores: 2\n", VM121: pending}
    (finding,) = stale(bios_plan(files, tmp_path).findings)
    assert finding.severity is Severity.WARNING
    assert "so VM 121 (pending hostpci1) does not start" in finding.message


def test_after_applying_only_when_the_plan_rewrites_pci_cfg() -> None:
    """The fix waits for the apply only when the bundle writes pci.cfg (a pool has a
    mapping): apply refuses a file changed after planning. Otherwise: now."""
    facts = host_facts("workstation-bios")
    sections = pcicfg.parse(fixture_hosts.WORKSTATION_BIOS_PCI_CFG)
    (now,) = stale_map_findings(facts, sections)
    (later,) = stale_map_findings(facts, sections, owned=["a4000"])
    assert now.message.split(". ")[-1].startswith("Correct the line")
    assert later.message.split(". ")[-1].startswith("After applying this plan")


# --- Proxmox's comparison, line by line -------------------------------------------------


def _line(value: str) -> pcicfg.MapLine:
    (section,) = pcicfg.parse(cfg(("m1", [value])))
    return section.maps[0]


def _judge(
    facts: HostFacts, value: str
) -> tuple[tuple[str, ...], list[tuple[str, str | None, str | None]], str | None] | None:
    found = stale_map_line(facts, "m1", _line(value))
    if found is None:
        return None
    return found.missing, list(found.differs), found.corrected


WS = "workstation-bios"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(FRESH_LINE, None, id="fresh"),
        pytest.param(
            FRESH_LINE.replace("10de:2204", "10DE:2204"),
            ((), [("id", "10DE:2204", "10de:2204")], FRESH_LINE),
            id="uppercase-id-is-text-unequal",
        ),
        pytest.param(
            FRESH_LINE.replace("iommugroup=4", "iommugroup=04"),
            ((), [("iommugroup", "04", "4")], FRESH_LINE),
            id="leading-zero-group",
        ),
        pytest.param(
            FRESH_LINE.replace("iommugroup=4,", ""),
            ((), [("iommugroup", None, "4")], FRESH_LINE),
            id="group-missing",
        ),
        pytest.param(
            FRESH_LINE.replace(",subsystem-id=1458:403b", ""),
            ((), [("subsystem-id", None, "1458:403b")], FRESH_LINE),
            id="subsystem-missing",
        ),
        pytest.param(
            "path=0000:17:00,node=pve-ws,id=10de:2204,iommugroup=9",
            (
                (),
                [("iommugroup", "9", "4"), ("subsystem-id", None, "1458:403b")],
                "path=0000:17:00,node=pve-ws,id=10de:2204,iommugroup=4,subsystem-id=1458:403b",
            ),
            id="unsorted-keys-keep-their-order",
        ),
        pytest.param(
            FRESH_LINE.replace("0000:17:00", "0000:17:00.1"),
            (
                (),
                [("id", "10de:2204", "10de:1aef")],
                FRESH_LINE.replace("2204", "1aef").replace("0000:17:00", "0000:17:00.1"),
            ),
            id="audio-function-has-its-own-id",
        ),
        pytest.param(
            FRESH_LINE.replace("0000:17:00", "0000:17:00;0000:39:00"),
            (
                (),
                [("id", "10de:2204", "10de:24b0"), ("subsystem-id", "1458:403b", "10de:14ad")],
                None,
            ),
            id="two-devices-two-ids-cannot-share-a-line",
        ),
        pytest.param(
            FRESH_LINE.replace("0000:17:00", "0000:18:00;0000:17:00"),
            (("0000:18:00.0",), [], None),
            id="device-not-on-the-host",
        ),
    ],
)
def test_proxmox_start_check(
    value: str,
    expected: tuple[tuple[str, ...], list[tuple[str, str | None, str | None]], str | None] | None,
) -> None:
    """Each rule of qemu-server's check, on the 3090 (10de:2204, 1458:403b, group 4)."""
    assert _judge(host_facts(WS), value) == expected


def test_the_group_of_the_first_device_only() -> None:
    """Two identical GPUs on one line (kpro6: groups 12 and 13): Proxmox compares the
    group of the first device only, so 12 passes and 13 does not."""
    facts = host_facts("kpro6")
    value = (
        "id=10de:2bb5,iommugroup={},node=kpro6,path=0000:01:00;0000:11:00,subsystem-id=10de:204b"
    )
    assert stale_map_line(facts, "m1", _line(value.format(12))) is None
    found = stale_map_line(facts, "m1", _line(value.format(13)))
    assert found is not None and list(found.differs) == [("iommugroup", "13", "12")]


def test_a_group_on_a_host_without_iommu_is_stale() -> None:
    """No IOMMU, no group: a line that names one is refused ("configured but should not
    be"), and the correction drops the key."""
    facts = host_facts("no-iommu")
    gpu = facts.gpus[0].function
    value = (
        f"id={gpu.vendor_device},iommugroup=3,node={facts.node},path={gpu.address},"
        f"subsystem-id={gpu.subsystem_id}"
    )
    found = stale_map_line(facts, "m1", _line(value))
    assert found is not None
    assert list(found.differs) == [("iommugroup", "3", None)]
    assert found.corrected == value.replace("iommugroup=3,", "")
    (finding,) = stale_map_findings(facts, pcicfg.parse(cfg(("m1", [value]))))
    assert "but the device has none (IOMMU off?)" in finding.message


def test_a_line_of_a_missing_device_is_named_with_its_removal(tmp_path: Path) -> None:
    """A map line for a device that is not on the host: named, and the command leaves it
    out; when it is the mapping's only line, the fix deletes the mapping."""
    gone = FRESH_LINE.replace("0000:17:00", "0000:18:00")
    (finding,) = stale(
        bios_plan({pcicfg.PATH: cfg(("rtx3090", [FRESH_LINE, gone]))}, tmp_path).findings
    )
    assert "no device 0000:18:00.0 is on the host" in finding.message
    assert f"`pvesh set /cluster/mapping/pci/rtx3090 --map {FRESH_LINE}`" in finding.message
    (finding,) = stale(bios_plan({pcicfg.PATH: cfg(("rtx3090", [gone]))}, tmp_path).findings)
    assert "`pvesh delete /cluster/mapping/pci/rtx3090`" in finding.message
