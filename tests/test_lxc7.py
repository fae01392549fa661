"""LXC 7 and the cgroup keys (issue 30, item 4): Proxmox VE 9.2 ships LXC 7.0, which
ignores every `lxc.cgroup.*` key. A pool's container is rewritten to `lxc.cgroup2.*`,
any other container holding GPUs through the old keys is named with the fix, by the plan
and by `pvegpu check` alike."""

from __future__ import annotations

from pathlib import Path

import attrs

from fixture_hosts import kpro6
from pvegpu.apply.check import check
from pvegpu.host.discover import discover
from pvegpu.model.facts import HostFacts
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.spec.load import parse_spec
from pvegpu.testing import write_host

# dpkg's status of a PVE 9.2 node, as far as pvegpu reads it (a removed package's
# stanza stays behind with `deinstall ok config-files`).
DPKG_92 = """\
Package: lxc-pve
Status: install ok installed
Architecture: amd64
Version: 7.0.0-1
Description: Linux containers userspace tools
 LXC is the userspace control package for Linux Containers.

Package: pve-container
Status: install ok installed
Version: 6.1.6

Package: pve-manager
Status: install ok installed
Version: 9.2.3

Package: qemu-server
Status: deinstall ok config-files
Version: 9.1.0
"""
# A Plex container set up by a PVE 7-era guide: v1 keys only.
PLEX = """\
arch: amd64
hostname: plex
lxc.cgroup.devices.allow: c 195:* rwm
lxc.cgroup.devices.allow: c 509:* rwm
lxc.mount.entry: /dev/nvidia7 dev/nvidia7 none bind,optional,create=file
"""
# CT 129 raw, as an old guide wrote it, with a v1 rule beside the cgroup2 ones.
CT129 = """\
arch: amd64
hostname: sglang
memory: 524288
lxc.cgroup.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
"""
SPLIT = """\
node = "kpro6"
[[pools]]
name = "ct"
gpus = ["01:00.0", "11:00.0", "61:00.0", "71:00.0", "81:00.0", "91:00.0", "e1:00.0"]
lxc = { vmid = 129, devices = "raw" }
"""


def pve92(tmp_path: Path) -> Path:
    """kpro6 as a PVE 9.2 node (lxc-pve 7.0.0): CT 129 and CT 140 with v1 keys."""
    desc = kpro6()
    files = dict(desc.files) | {
        "var/lib/dpkg/status": DPKG_92,
        "etc/pve/lxc/129.conf": CT129,
        "etc/pve/lxc/140.conf": PLEX,
    }
    root = tmp_path / "pve92"
    write_host(attrs.evolve(desc, files=files), root)
    return root


def test_the_installed_lxc_is_read_from_dpkg(tmp_path: Path) -> None:
    facts = discover(pve92(tmp_path))
    assert (facts.pve.lxc, facts.pve.pve_container, facts.pve.qemu_server) == (
        "7.0.0-1",
        "6.1.6",
        None,
    )
    assert facts.pve.lxc_ignores_cgroup_v1


def findings(facts: HostFacts) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in plan(facts, parse_spec(SPLIT)).findings:
        found.setdefault(f.code, []).append(f.message)
    return found


def test_another_container_on_v1_keys_is_named_with_lxc_7(tmp_path: Path) -> None:
    facts = discover(pve92(tmp_path))
    (message,) = findings(facts)["lxc-cgroup-key-inert"]
    assert message.startswith("CT 140 allows GPU nodes by `lxc.cgroup.devices.allow` (line 3:")
    assert "LXC 7 (lxc-pve 7.0.0-1) ignores every lxc.cgroup.* key" in message
    assert "`lxc.cgroup2.devices.allow` rules for the GPUs it should have" in message
    # Without the package (an older LXC): the hierarchy's reason, the same finding.
    older = attrs.evolve(facts, pve=attrs.evolve(facts.pve, lxc="6.0.4-1"))
    (message,) = findings(older)["lxc-cgroup-key-inert"]
    assert "devices controller is cgroup v2" in message


def test_the_pools_container_loses_its_v1_gpu_rules(tmp_path: Path) -> None:
    facts = discover(pve92(tmp_path))
    planned = plan(facts, parse_spec(SPLIT))
    (config,) = [
        a for a in render(planned) if a.path == "etc/pve/lxc/129.conf" and a.bundle == "apply"
    ]
    assert "lxc.cgroup.devices.allow" not in config.content
    assert "lxc.cgroup2.devices.allow: c 195:0 rwm" in config.content
    assert "lxc.cgroup2.devices.allow: c 195:* rwm" not in config.content


def test_check_reports_it_of_the_host_as_it_is(tmp_path: Path) -> None:
    report = check(pve92(tmp_path), None)
    subjects = [f.subject for f in report.findings if f.code == "lxc-cgroup-key-inert"]
    assert subjects == ["etc/pve/lxc/129.conf", "etc/pve/lxc/140.conf"]
