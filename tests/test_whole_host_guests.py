"""Every guest on the node that names a GPU the plan gives elsewhere (issue 9, item 1).

Each case is a variant of the reference host kpro6, built with `pvegpu.testing` and
discovered like a real root: another container's lines for moved GPUs are removed by
the bundle (and restored by the revert), a rule for every GPU, a VM's hostpci line and a
pending change that grant a pool's GPU are refused with a fix, and a snapshot that
grants one is a warning. The findings' and problems' text is pinned in golden files.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

import fixture_hosts
from bundled import host_facts
from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.errors import PlanError
from pvegpu.host.discover import discover
from pvegpu.model.artifact import REVERT_BUNDLE, Artifact
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import lxcconf
from pvegpu.pvefiles.guestconf import ConfLine, split_sections
from pvegpu.rendering.registry import render
from pvegpu.spec.load import parse_spec
from pvegpu.testing import HostSpec, write_host
from pvegpu.vendors import CONTAINER_NODES as NODES

Golden = Callable[[str], SnapshotAssertion]

CT129 = "etc/pve/lxc/129.conf"
CT131 = "etc/pve/lxc/131.conf"
VM140 = "etc/pve/qemu-server/140.conf"

# The issue's case: a vfio pool takes two GPUs that CT 129 (in no pool) still has as
# dev0/dev1, and that the old mapping pro6000 still lists.
ISSUE = """\
node = "kpro6"
[[pools]]
name = "vm"
gpus = ["01:00.0", "11:00.0"]
mapping = { id = "pro6000-vm" }
vfio = { vm = { vmid = 200 } }
"""
# NUMA 0 but 71:00.0 (minor 3) to LXC 129, NUMA 1 to VM 200: 71:00.0 is in no pool.
SPLIT = """\
node = "kpro6"
[[pools]]
name = "ct"
gpus = ["01:00.0", "11:00.0", "61:00.0"]
mapping = { id = "pro6000" }
lxc = { vmid = 129 }
[[pools]]
name = "vm"
numa_node = 1
mapping = { id = "pro6000-vm" }
vfio = { vm = { vmid = 200 } }
"""
CT131_BASE = """\
#GPU notebooks
arch: amd64
cores: 8
hostname: jupyter
memory: 65536
ostype: debian
rootfs: local-zfs:subvol-131-disk-0,size=64G
"""
VM140_BASE = """\
#scratch VM
cores: 8
machine: q35
memory: 65536
name: scratch
ostype: l26
"""


def variant(
    where: Path, files: dict[str, str], host: Callable[[], HostSpec] = fixture_hosts.kpro6
) -> HostFacts:
    """kpro6 (or `host`) with these files added or replaced, written and discovered."""
    spec = host()
    root = Path(tempfile.mkdtemp(dir=where)) / "kpro6"
    write_host(attrs.evolve(spec, files={**spec.files, **files}), root)
    return discover(root)


def refused(facts: HostFacts, spec: str) -> tuple[Diagnostic, ...]:
    with pytest.raises(PlanError) as error:
        plan(facts, parse_spec(spec))
    return error.value.problems


def of(findings: tuple[Diagnostic, ...], *codes: str) -> list[Diagnostic]:
    return [f for f in findings if f.code in codes]


def text(items: list[Diagnostic] | tuple[Diagnostic, ...]) -> str:
    """Findings as SUMMARY.md lists them, problems as the CLI prints them."""
    lines = [
        f"{i.severity}: {i.code} ({i.subject}): {i.message}"
        if i.severity is not Severity.ERROR
        else str(i)
        for i in items
    ]
    return "\n\n".join(lines) + "\n"


def artifact(artifacts: tuple[Artifact, ...], path: str, bundle: str = "apply") -> Artifact:
    (found,) = [a for a in artifacts if a.path == path and a.bundle == bundle]
    return found


def main_lines(config: str) -> list[str]:
    return split_sections(config)[0].text.splitlines()


# --- the issue's host: CT 129 keeps dev0/dev1, pro6000 keeps both lines ---------------


def test_container_outside_the_pools_loses_the_moved_gpus(golden: Golden) -> None:
    """CT 129 is in no pool: the bundle removes its dev0/dev1 (nvidia0/1 move to vfio-pci)
    and the revert puts them back; its snapshot granting them again is a warning. The GPUs
    it keeps are numbered afresh at the reboot (nvidia2..7 become nvidia0..5): its lines
    move to those numbers, so it does not open another GPU after the reboot."""
    result = plan(host_facts("kpro6"), parse_spec(ISSUE))
    (removed,) = result.containers_losing_gpus
    assert (removed.vmid, removed.minors, removed.keys) == (129, (0, 1), ("dev0", "dev1"))
    assert removed.renumber == tuple((n, n - 2) for n in range(2, 8))
    artifacts = render(result)
    config = artifact(artifacts, CT129)
    base = host_facts("kpro6").file(CT129)
    assert base is not None and config.base == base
    gone = [ln for ln in main_lines(base.content) if ln not in main_lines(config.content)]
    assert gone == [f"dev{n}: /dev/nvidia{n},mode=0666" for n in range(8)]
    added = [ln for ln in main_lines(config.content) if ln not in main_lines(base.content)]
    assert added == [f"dev{n}: /dev/nvidia{n - 2},mode=0666" for n in range(2, 8)]
    assert "nvidia2 -> nvidia0" in config.reason
    # Snapshot section byte for byte; the revert restores the file as discovered.
    assert config.content.split("[pre-split]")[1] == base.content.split("[pre-split]")[1]
    assert artifact(artifacts, CT129, REVERT_BUNDLE).content == base.content
    assert "dev0, dev1 for /dev/nvidia0, /dev/nvidia1 removed" in config.reason
    flagged = of(
        result.findings,
        "container-loses-gpus",
        "container-renumbered-at-reboot",
        "container-number-stale-at-reboot",
        "snapshot-grants-pool-gpus",
    )
    assert [(f.code, f.subject) for f in flagged] == [
        ("container-loses-gpus", CT129),
        ("container-renumbered-at-reboot", CT129),
        ("snapshot-grants-pool-gpus", f"{CT129} [pre-split]"),
        ("container-number-stale-at-reboot", f"{CT129} [pre-split]"),
    ]
    assert [f.code for f in result.findings if f.reboot_first] == ["container-renumbered-at-reboot"]
    assert text(flagged) == golden("txt")


def test_pool_container_keeps_its_own_lines_to_the_patch() -> None:
    """The reference split: CT 129 is the pool's own container, whose GPU lines the patch
    rewrites; nothing else of it is removed, and only its snapshot is a warning."""
    result = plan(host_facts("kpro6"), parse_spec(SPLIT))
    assert result.containers_losing_gpus == ()
    assert [f.subject for f in of(result.findings, "snapshot-grants-pool-gpus")] == [
        f"{CT129} [pre-split]"
    ]
    assert "/dev/nvidia4 (81:00.0)" in of(result.findings, "snapshot-grants-pool-gpus")[0].message


# --- another container: lines for one GPU go, a rule for all is refused ----------------


def test_every_style_of_single_gpu_line_is_removed(tmp_path: Path, golden: Golden) -> None:
    """devN, bind mount and `c 195:N` rule for a VM GPU or the pool container's GPU go;
    the free GPU (71:00.0, nvidia3), nvidiactl and uvm stay, pending and snapshots too."""
    ct131 = CT131_BASE + (
        "dev0: /dev/nvidia4,mode=0666\n"
        "dev1: path=/dev/nvidia3,mode=0666\n"
        "dev2: /dev/nvidiactl,mode=0666\n"
        "dev3: /dev/nvidia-uvm,mode=0666\n"
        "lxc.cgroup2.devices.allow: c 195:0 rwm\n"
        "lxc.cgroup2.devices.allow: c 195:3 rwm\n"
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
        "lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file\n"
        "\n[nightly]\n" + CT131_BASE + "dev0: /dev/nvidia5,mode=0666\nsnaptime: 1764590400\n"
    )
    result = plan(variant(tmp_path, {CT131: ct131}), parse_spec(SPLIT))
    config = artifact(render(result), CT131)
    assert [ln for ln in main_lines(ct131) if ln not in main_lines(config.content)] == [
        "dev0: /dev/nvidia4,mode=0666",
        "lxc.cgroup2.devices.allow: c 195:0 rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
    ]
    assert config.content.split("[nightly]")[1] == ct131.split("[nightly]")[1]
    flagged = of(result.findings, "container-loses-gpus", "snapshot-grants-pool-gpus")
    assert [f.subject for f in flagged] == [f"{CT129} [pre-split]", CT131, f"{CT131} [nightly]"]
    assert text(flagged) == golden("txt")


@pytest.mark.parametrize("rule", ["c 195:* rwm", "a", "c *:* m"])
def test_rule_for_every_gpu_is_refused(tmp_path: Path, rule: str) -> None:
    """A rule for every minor reaches the pools' GPUs whenever nvidia holds them; which
    GPUs CT 131 should keep is the admin's call, so the fix lists the per-GPU rules."""
    ct131 = CT131_BASE + f"lxc.cgroup2.devices.allow: {rule}\n"
    (problem,) = refused(variant(tmp_path, {CT131: ct131}), SPLIT)
    assert (problem.code, problem.subject) == ("lxc-grants-all-gpus", f"{CT131} line 8")
    assert "`c 195:3 rwm` for 71:00.0, and `c 195:255 rwm` for nvidiactl" in problem.fix


def test_rule_for_every_gpu_names_gpus_already_on_vfio(tmp_path: Path) -> None:
    """After an earlier split (kpro6-split) the VM GPUs have no /dev/nvidiaN; the rule
    still reaches them once nvidia gets them back, so they are named by address."""
    ct131 = CT131_BASE + "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    facts = variant(tmp_path, {CT131: ct131}, fixture_hosts.kpro6_split)
    (problem,) = refused(facts, SPLIT)
    assert "81:00.0, 91:00.0, e1:00.0, f1:00.0, which the plan gives to VM 200" in problem.message
    assert "None" not in problem.message


def test_rule_for_every_gpu_text(tmp_path: Path, golden: Golden) -> None:
    """With every GPU in a pool there is nothing to keep: the fix is to remove the rule."""
    ct131 = CT131_BASE + "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    facts = variant(tmp_path, {CT131: ct131})
    problems = refused(facts, SPLIT) + refused(facts, SPLIT.replace('", "61:00.0"]', '"]'))
    assert [p.code for p in problems] == ["lxc-grants-all-gpus"] * 2
    whole = SPLIT.replace('gpus = ["01:00.0", "11:00.0", "61:00.0"]', "numa_node = 0")
    problems += refused(facts, whole)
    assert "remove it: no GPU of this host is left for CT 131" in problems[-1].fix
    assert text(problems) == golden("txt")


def test_pool_container_wide_rule_it_does_not_own_is_refused(tmp_path: Path) -> None:
    """`c 195:*` in the pool's container is one of its GPU lines (the patch replaces it);
    `a` is not pvegpu's to rewrite, and it reaches the VM's GPUs."""
    ct129 = host_facts("kpro6").file(CT129)
    assert ct129 is not None
    main, rest = ct129.content.split("\n[pre-split]", 1)
    wide = main + "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    assert plan(variant(tmp_path, {CT129: wide + "\n[pre-split]" + rest}), parse_spec(SPLIT))
    facts = variant(tmp_path, {CT129: main + "lxc.cgroup2.devices.allow: a\n"})
    assert [p.code for p in refused(facts, SPLIT)] == ["lxc-grants-all-gpus"]


# --- VMs: by address or by mapping -----------------------------------------------------


def test_vm_passing_a_pool_gpu_is_refused(tmp_path: Path, golden: Golden) -> None:
    """VM 140 is in no pool: by raw address it would take LXC 129's GPU (any spelling),
    through mapping pro6000 the container's GPUs, by address VM 200's GPU."""
    vm = VM140_BASE.replace(
        "machine: q35\n",
        "hostpci0: 0000:01:00,pcie=1\n"
        "hostpci1: mapping=pro6000\n"
        "hostpci2: 81:00.0\n"
        "hostpci3: host=11:00.1;0000:c1:00.0\n"
        "hostpci4: 0000:71:00,pcie=1\n"
        "machine: q35\n",
    )
    problems = refused(variant(tmp_path, {VM140: vm}), SPLIT)
    assert [(p.code, p.subject) for p in problems] == [
        ("vm-takes-pool-gpu", f"{VM140} line {n}") for n in (3, 4, 5, 6)
    ]
    assert "make VM 140 the pool's VM" in problems[2].fix
    assert "the pool's VM" not in problems[0].fix
    assert text(problems) == golden("txt")


def test_vfio_pool_without_vm_leaves_its_gpus_to_any_vm(tmp_path: Path) -> None:
    """A vfio pool that names no VM moves its GPUs for whichever VM passes them through."""
    vm = VM140_BASE.replace("machine: q35\n", "hostpci0: 0000:81:00,pcie=1\nmachine: q35\n")
    facts = variant(tmp_path, {VM140: vm})
    no_vm = SPLIT.replace("vfio = { vm = { vmid = 200 } }", "vfio = {}")
    result = plan(facts, parse_spec(no_vm))
    assert not [f for f in result.findings if f.subject.startswith(VM140)]
    assert [p.code for p in refused(facts, SPLIT)] == ["vm-takes-pool-gpu"]


def test_pool_vm_is_judged_for_other_pools_gpus(tmp_path: Path) -> None:
    """VM 140 as the pool's VM: its own GPUs by raw address become the mapping (guests.py);
    a container pool's GPU by mapping is still refused."""
    vm = VM140_BASE.replace(
        "machine: q35\n", "hostpci0: 0000:81:00\nhostpci1: mapping=pro6000\nmachine: q35\n"
    )
    vm += "cpu: host\n"  # the pool's four 128 GiB BARs need more than 40 address bits
    own = SPLIT.replace("vmid = 200", "vmid = 140")
    problems = refused(variant(tmp_path, {VM140: vm}), own)
    assert [(p.code, p.subject) for p in problems] == [("vm-takes-pool-gpu", f"{VM140} line 4")]


# --- pending changes and snapshots -----------------------------------------------------


def test_pending_changes_granting_pool_gpus_are_refused(tmp_path: Path, golden: Golden) -> None:
    """A pending change applies at the next start: reverted first, or refused."""
    ct131 = CT131_BASE + "\n[pve:pending]\ndev0: /dev/nvidia5,mode=0666\n"
    vm = VM140_BASE + "\n[PENDING]\nhostpci0: 0000:61:00,pcie=1\n"
    files = {CT131: ct131, VM140: vm}
    problems = refused(variant(tmp_path, files), SPLIT)
    assert [(p.code, p.fix) for p in problems] == [
        ("pending-grants-pool-gpu", "revert it (pct set 131 --revert dev0), then run pvegpu again"),
        (
            "pending-grants-pool-gpu",
            "revert it (qm set 140 --revert hostpci0), then run pvegpu again",
        ),
    ]
    assert text(problems) == golden("txt")


def test_vm_snapshot_granting_a_pool_gpu_is_a_warning(tmp_path: Path) -> None:
    """Only a rollback brings a snapshot's hostpci line back: the plan goes on, with the
    command that would bring it back and the one that removes the snapshot."""
    vm = VM140_BASE.replace("memory:", "parent: gpu\nmemory:") + (
        "\n[gpu]\n" + VM140_BASE.replace("machine", "hostpci0: 0000:91:00\nmachine")
    )
    result = plan(variant(tmp_path, {VM140: vm}), parse_spec(SPLIT))
    (finding,) = of(result.findings, "snapshot-grants-pool-gpus")[1:]
    assert finding.subject == f"{VM140} [gpu]"
    assert "0000:91:00.0, 0000:91:00.1, which the plan gives to VM 200" in finding.message
    assert "`qm rollback 140 gpu`" in finding.message
    assert "`qm delsnapshot 140 gpu`" in finding.message


def test_guests_without_pool_gpus_are_left_alone(tmp_path: Path) -> None:
    """Lines for GPUs in no pool (71:00.0), for non-GPU devices and cloud-init sections
    change nothing: no artifact, no finding for CT 131 or VM 140."""
    ct131 = CT131_BASE + "dev0: /dev/nvidia3\ndev1: /dev/dri/renderD128\n"
    vm = VM140_BASE + "hostpci0: 0000:71:00\n\n[special:cloudinit]\nhostpci1: 0000:01:00\n"
    files = {CT131: ct131, VM140: vm}
    result: Plan = plan(variant(tmp_path, files), parse_spec(SPLIT))
    assert result.containers_losing_gpus == ()
    assert not [f for f in result.findings if f.subject.startswith((CT131, VM140))]
    assert not [a for a in render(result) if a.path in (CT131, VM140)]


# --- which container lines name GPUs --------------------------------------------------


@pytest.mark.parametrize(
    ("line", "minor", "every"),
    [
        ("dev3: /dev/nvidia12,mode=0666", 12, False),
        ("dev3: path=/dev/nvidia2,gid=44", 2, False),
        ("dev3: /dev/nvidiactl,mode=0666", None, False),
        ("dev3: /dev/dri/renderD128", None, False),
        ("lxc.mount.entry: /dev/nvidia5 dev/nvidia5 none bind,optional,create=file", 5, False),
        ("lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind", None, False),
        ("lxc.cgroup2.devices.allow: c 195:7 rwm", 7, False),
        ("lxc.cgroup2.devices.allow = c 195:7 rw", 7, False),
        ("lxc.cgroup2.devices.allow: c 195:255 rwm", None, False),  # nvidiactl, no GPU
        ("lxc.cgroup2.devices.allow: c 195:254 rwm", None, False),  # nvidia-modeset
        ("lxc.cgroup2.devices.allow: c 508:0 rwm", None, False),
        ("lxc.cgroup2.devices.allow: b 195:7 rwm", None, False),
        ("lxc.cgroup2.devices.allow: b *:* rwm", None, False),
        ("lxc.cgroup2.devices.allow: c 508:* rwm", None, False),
        ("lxc.cgroup2.devices.allow: c 195:* rwm", None, True),
        ("lxc.cgroup2.devices.allow: c *:* m", None, True),
        ("lxc.cgroup2.devices.allow: a", None, True),
        ("lxc.cgroup.devices.allow: c 195:* rwm", None, False),
        ("lxc.cgroup2.devices.deny: c 195:7 rwm", None, False),
    ],
)
def test_which_lines_name_gpus(line: str, minor: int | None, every: bool) -> None:
    """One GPU by its minor (devN, bind mount, `c 195:N`), every GPU by a wildcard; the
    shared nodes, other majors, block rules and cgroup v1 name none."""
    parsed = ConfLine.parse(line + "\n")
    assert (lxcconf.gpu_minor(parsed, NODES), lxcconf.grants_every_gpu(parsed, NODES)) == (
        minor,
        every,
    )


def test_container_left_without_a_gpu_loses_its_shared_nodes(tmp_path: Path) -> None:
    """CT 131 has only a VM GPU (nvidia4): with it gone, its nvidiactl and nvidia-uvm
    lines, in both styles, go too (`pct start` fails on a node that is gone once no GPU is
    left on nvidia), and the reason and the finding say so; other lines stay."""
    uvm = host_facts("kpro6").char_major("nvidia-uvm")
    shared = [
        "dev1: /dev/nvidiactl,mode=0666",
        "dev2: /dev/nvidia-uvm,mode=0666",
        "dev3: /dev/nvidia-uvm-tools,mode=0666",
        "lxc.cgroup2.devices.allow: c 195:255 rwm",
        f"lxc.cgroup2.devices.allow: c {uvm}:* rwm",
        "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file",
    ]
    ct131 = CT131_BASE + "dev0: /dev/nvidia4,mode=0666\n" + "".join(f"{s}\n" for s in shared)
    ct131 += "lxc.cgroup2.devices.allow: c 226:128 rwm\n"
    result = plan(variant(tmp_path, {CT131: ct131}), parse_spec(SPLIT))
    (removed,) = result.containers_losing_gpus
    assert removed.shared_keys == ("dev1", "dev2", "dev3", *["lxc.cgroup2.devices.allow"] * 2,
                                   "lxc.mount.entry")  # fmt: skip
    config = artifact(render(result), CT131)
    assert [ln for ln in main_lines(ct131) if ln not in main_lines(config.content)] == [
        "dev0: /dev/nvidia4,mode=0666",
        *shared,
    ]
    assert "lxc.cgroup2.devices.allow: c 226:128 rwm" in main_lines(config.content)
    assert "it keeps no GPU, so dev1, dev2, dev3" in config.reason
    (finding,) = [f for f in of(result.findings, "container-loses-gpus") if f.subject == CT131]
    assert "it keeps none, so its lines for the shared NVIDIA nodes (dev1, dev2" in finding.message


def test_container_keeping_a_gpu_keeps_its_shared_nodes(tmp_path: Path) -> None:
    """With a GPU left (nvidia3, in no pool), nvidiactl and nvidia-uvm stay."""
    ct131 = CT131_BASE + (
        "dev0: /dev/nvidia4,mode=0666\n"
        "dev1: /dev/nvidia3,mode=0666\n"
        "dev2: /dev/nvidiactl,mode=0666\n"
        "dev3: /dev/nvidia-uvm,mode=0666\n"
    )
    result = plan(variant(tmp_path, {CT131: ct131}), parse_spec(SPLIT))
    (removed,) = result.containers_losing_gpus
    assert (removed.shared_majors, removed.shared_keys) == (None, ())
    config = artifact(render(result), CT131)
    assert [ln for ln in main_lines(ct131) if ln not in main_lines(config.content)] == [
        "dev0: /dev/nvidia4,mode=0666"
    ]
