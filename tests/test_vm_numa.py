"""A VM's own NUMA pinning beyond its GPUs' node (issue 19, item 7): the container's warning.

Without `numa = true` in the pool's `vm` table the plan keeps the VM's `affinity` and
`numaN` lines; one that pins it off the node its GPUs are on gets a warning, as a
container's cores beyond its cpuset's node do. With `numa = true` the plan writes them
itself, and a value that is no CPU or node list is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from pvegpu.host.discover import discover
from pvegpu.model.facts import HostFacts
from pvegpu.planning.planner import plan
from pvegpu.planning.vm_numa import hostnodes
from pvegpu.spec.load import parse_spec
from test_acs_override import CMDLINE, VM_SPEC, switch_host, written
from test_whole_host_guests import of, refused, text

Golden = Callable[[str], SnapshotAssertion]

VM120 = "etc/pve/qemu-server/120.conf"
CODES = ("vm-affinity-beyond-node", "vm-numa-beyond-node")
NUMA_ON = VM_SPEC + "numa = true\n"


def vm_config(*pinning: str) -> str:
    lines = [
        "boot: order=scsi0",
        "cores: 8",
        "machine: q35",
        "memory: 32768",
        "name: cuda",
        "ostype: l26",
        "scsi0: local-lvm:vm-120-disk-0,size=64G",
        "sockets: 1",
        *pinning,
    ]
    return "\n".join(sorted(lines)) + "\n"


def host(tmp_path: Path, *pinning: str) -> HostFacts:
    desc = switch_host(
        cmdline=CMDLINE, numa=("0-11,24-35", "12-23,36-47"), files={VM120: vm_config(*pinning)}
    )
    return discover(written(tmp_path, desc))


def test_pinning_off_the_gpus_node_is_a_warning(tmp_path: Path, golden: Golden) -> None:
    facts = host(
        tmp_path,
        "affinity: 0-15",
        "numa: 1",
        "numa0: cpus=0-7,hostnodes=1,memory=32768,policy=bind",
    )
    found = of(plan(facts, parse_spec(VM_SPEC)).findings, *CODES)
    assert [(f.code, f.subject) for f in found] == [
        ("vm-affinity-beyond-node", VM120),
        ("vm-numa-beyond-node", VM120),
    ]
    assert "4 CPUs outside NUMA node 0 (0-11,24-35)" in found[0].message
    assert text(found) == golden("txt")


def test_pinning_on_the_gpus_node_is_quiet(tmp_path: Path) -> None:
    facts = host(
        tmp_path,
        "affinity: 0-7,24-31",
        "numa: 1",
        "numa0: cpus=0-7,hostnodes=0,memory=32768,policy=bind",
    )
    assert not of(plan(facts, parse_spec(VM_SPEC)).findings, *CODES)


def test_an_unpinned_vm_is_quiet(tmp_path: Path) -> None:
    assert not of(plan(host(tmp_path), parse_spec(VM_SPEC)).findings, *CODES)


def test_numa_true_rewrites_the_lines_instead(tmp_path: Path) -> None:
    facts = host(tmp_path, "affinity: 12-23")
    assert not of(plan(facts, parse_spec(NUMA_ON)).findings, *CODES)


@pytest.mark.parametrize(
    ("line", "key"),
    [("affinity: 0-x", "affinity"), ("numa0: cpus=0-7,hostnodes=1-0,policy=bind", "numa0")],
)
def test_an_unreadable_pinning_is_refused(tmp_path: Path, line: str, key: str) -> None:
    problems = refused(host(tmp_path, line), VM_SPEC)
    assert [(p.code, p.subject) for p in problems] == [("vm-numa-unreadable", f"{VM120}: {key}")]
    assert "numa = true" in problems[0].fix


@pytest.mark.parametrize(
    ("value", "nodes"),
    [
        ("cpus=0-7,hostnodes=1,memory=1024,policy=bind", (1,)),
        ("cpus=0-7,hostnodes=0-1;3,memory=1024,policy=preferred", (0, 1, 3)),
        ("cpus=0-7,memory=1024", None),
    ],
)
def test_hostnodes(value: str, nodes: tuple[int, ...] | None) -> None:
    assert hostnodes(value) == nodes
