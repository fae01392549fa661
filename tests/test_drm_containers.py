"""AMD and Intel GPUs in containers: DRM nodes discovered, handed over per vendor, owned
by the container's own render group when it is unprivileged (issue: every vendor in
containers)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import attrs
import pytest

import fixture_hosts
from bundled import FIXTURES, copy_tree, example_plan, example_spec
from pvegpu.apply import doing
from pvegpu.apply.host import Completed
from pvegpu.errors import ApplyError, DiscoveryError, PlanError
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json, facts_to_json
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.plan import Plan
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import lxcconf
from pvegpu.pvefiles.guestconf import parse_lines
from pvegpu.rendering.registry import render
from pvegpu.rendering.review.actions import CheckNodes
from pvegpu.rendering.review.apply_steps import runbook
from pvegpu.spec.load import parse_spec
from pvegpu.testing import DrmInfo, write_host
from pvegpu.vendors.amd import AMD
from pvegpu.vendors.intel import INTEL

CT120 = "etc/pve/lxc/120.conf"
CT130 = "etc/pve/lxc/130.conf"
GROUPS = "rpool/data/subvol-120-disk-0/etc/group"
JELLYFIN = """\
node = "pve-media"

[[pools]]
name = "jellyfin"
gpus = ["00:02.0"]

[pools.lxc]
vmid = 120
"""
ROCM = """\
node = "pve-rocm"

[[pools]]
name = "rocm"
count = 2

[pools.lxc]
vmid = 130
"""


def planned(host: str, spec: str, root: Path | None = None) -> Plan:
    parsed = parse_spec(spec)
    return plan(discover_for(parsed, root or FIXTURES / host), parsed)


def lines_of(plan_: Plan, path: str) -> list[str]:
    (config,) = [a for a in render(plan_) if a.path == path and a.bundle == "apply"]
    return [line.raw.rstrip("\n") for line in parse_lines(config.content)]


def evolve_file(facts: HostFacts, path: str, content: str | None) -> HostFacts:
    kept = tuple(f for f in facts.files if f.path != path)
    added = () if content is None else (ConfigFile(path, content),)
    return attrs.evolve(facts, files=kept + added)


# --- discovery


def test_drm_nodes_are_read_from_the_pci_device() -> None:
    facts = discover(FIXTURES / "intel-media")
    assert [(g.vendor, g.drm_card, g.drm_render) for g in facts.gpus] == [
        (INTEL, 0, 128),
        (INTEL, 1, 129),
    ]
    # A DRM vendor's container node is its render node; NVIDIA's stays /dev/nvidiaN.
    assert [g.node_path for g in facts.gpus] == ["/dev/dri/renderD128", "/dev/dri/renderD129"]
    nvidia = discover(FIXTURES / "kpro6").gpus[0]
    assert (nvidia.drm_render, nvidia.node_path) == (None, "/dev/nvidia0")


@pytest.mark.parametrize(
    ("names", "match"),
    [
        (("renderD128", "renderD129"), "second renderD node"),
        (("card0", "renderD5"), "numbered below 128"),
    ],
)
def test_a_broken_drm_directory_is_refused(
    tmp_path: Path, names: tuple[str, ...], match: str
) -> None:
    root = copy_tree(FIXTURES / "intel-media", tmp_path / "host")
    drm = root / "sys/devices/pci0000:00/0000:00:02.0/drm"
    for entry in drm.iterdir():
        (entry / "dev").unlink()
        entry.rmdir()
    for name in names:
        (drm / name).mkdir()
    with pytest.raises(DiscoveryError, match=match) as info:
        discover(root)
    assert info.value.problems[0].code == "bad-value"
    assert info.value.problems[0].subject.startswith("sys/bus/pci/devices/0000:00:02.0/drm/")


# --- Intel: render nodes, the container's own group


def test_unprivileged_container_gets_its_render_group() -> None:
    """CT 120 is unprivileged: its devN entry names the gid of `render` in the container's
    own /etc/group (105), not the host's."""
    result = planned("intel-media", JELLYFIN)
    assert "dev0: /dev/dri/renderD128,gid=105,mode=0666" in lines_of(result, CT120)
    assert not [line for line in lines_of(result, CT120) if "card" in line]


def test_the_spec_gid_wins_and_a_privileged_container_needs_none() -> None:
    result = planned("intel-media", JELLYFIN.replace("vmid = 120", "vmid = 120\ngid = 44"))
    assert "dev0: /dev/dri/renderD128,gid=44,mode=0666" in lines_of(result, CT120)
    spec = parse_spec(JELLYFIN)
    facts = discover_for(spec, FIXTURES / "intel-media")
    config = facts.file(CT120)
    assert config is not None
    privileged = evolve_file(facts, CT120, config.content.replace("unprivileged: 1\n", ""))
    assert "dev0: /dev/dri/renderD128,mode=0666" in lines_of(plan(privileged, spec), CT120)


def test_unreadable_group_file_is_refused_with_the_fix() -> None:
    spec = parse_spec(JELLYFIN)
    facts = evolve_file(discover_for(spec, FIXTURES / "intel-media"), GROUPS, None)
    with pytest.raises(PlanError) as info:
        plan(facts, spec)
    (problem,) = info.value.problems
    assert (problem.code, problem.subject) == ("lxc-render-gid-unknown", CT120)
    assert "its /etc/group was not read" in problem.message
    assert "getent group render" in problem.fix
    # `video` serves when the image has no `render` group.
    video_only = evolve_file(facts, GROUPS, "root:x:0:\nvideo:x:44:\n")
    assert "dev0: /dev/dri/renderD128,gid=44,mode=0666" in lines_of(plan(video_only, spec), CT120)


def test_display_adds_the_card_node() -> None:
    result = planned("intel-media", JELLYFIN.replace("vmid = 120", "vmid = 120\ndisplay = true"))
    lines = lines_of(result, CT120)
    assert "dev0: /dev/dri/renderD128,gid=105,mode=0666" in lines
    assert "dev1: /dev/dri/card0,gid=105,mode=0666" in lines


def test_another_containers_render_node_goes_with_the_gpu() -> None:
    """CT 121 holds the Arc's render node; the Arc goes to a VM: the line is removed (and
    restored by the revert), with a warning naming the node."""
    result = example_plan("intel-media")
    (removed,) = result.containers_losing_gpus
    assert (removed.vmid, removed.minors, removed.keys) == (121, (129,), ("dev0",))
    assert not [line for line in lines_of(result, "etc/pve/lxc/121.conf") if "renderD" in line]
    (finding,) = [f for f in result.findings if f.code == "container-loses-gpus"]
    assert "/dev/dri/renderD129 (03:00.0)" in finding.message


def test_raw_lines_in_an_unprivileged_container_explain_the_host_ids() -> None:
    result = planned("intel-media", JELLYFIN.replace("vmid = 120", 'vmid = 120\ndevices = "raw"'))
    lines = lines_of(result, CT120)
    assert "lxc.cgroup2.devices.allow: c 226:128 rwm" in lines
    mount = "/dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file"
    assert f"lxc.mount.entry: {mount}" in lines
    (finding,) = [f for f in result.findings if f.code == "lxc-raw-unprivileged-ids"]
    assert finding.subject == CT120 and "map to nobody inside" in finding.message


def test_raw_lines_with_the_containers_own_idmap_say_what_to_check() -> None:
    """An admin's lxc.idmap lines may map the host's render group in: not `nobody`."""
    spec = parse_spec(JELLYFIN.replace("vmid = 120", 'vmid = 120\ndevices = "raw"'))
    facts = discover_for(spec, FIXTURES / "intel-media")
    config = facts.file(CT120)
    assert config is not None
    idmap = "lxc.idmap: g 0 100000 104\nlxc.idmap: g 104 104 1\nlxc.idmap: g 105 100105 65431\n"
    result = plan(evolve_file(facts, CT120, config.content + idmap), spec)
    (finding,) = [f for f in result.findings if f.code == "lxc-raw-unprivileged-ids"]
    assert "its own lxc.idmap lines" in finding.message
    assert "nobody" not in finding.message


# --- AMD: render nodes and /dev/kfd


def test_amd_raw_lines_allow_render_nodes_and_kfd_by_minor() -> None:
    lines = lines_of(example_plan("amd-rocm"), CT130)
    assert [line for line in lines if line.startswith("lxc.")] == [
        "lxc.cgroup2.devices.allow: c 226:128 rwm",
        "lxc.cgroup2.devices.allow: c 226:129 rwm",
        "lxc.cgroup2.devices.allow: c 238:0 rwm",
        "lxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file",
        "lxc.mount.entry: /dev/dri/renderD129 dev/dri/renderD129 none bind,optional,create=file",
        "lxc.mount.entry: /dev/kfd dev/kfd none bind,optional,create=file",
    ]


def test_amd_dev_entries_and_the_kfd_module() -> None:
    result = planned("amd-rocm", ROCM)
    assert [line for line in lines_of(result, CT130) if line.startswith("dev")] == [
        "dev0: /dev/dri/renderD128,mode=0666",
        "dev1: /dev/dri/renderD129,mode=0666",
        "dev2: /dev/kfd,mode=0666",
    ]
    spec = parse_spec(ROCM.replace("vmid = 130", 'vmid = 130\ndevices = "raw"'))
    facts = discover_for(spec, FIXTURES / "amd-rocm")
    without_kfd = attrs.evolve(
        facts, char_majors=tuple(c for c in facts.char_majors if c.name != "kfd")
    )
    with pytest.raises(PlanError) as info:
        plan(without_kfd, spec)
    assert [(p.code, p.subject) for p in info.value.problems] == [("kfd-major-unknown", CT130)]
    assert "modprobe amdgpu" in info.value.problems[0].fix


def test_a_stale_kfd_major_is_the_planners_finding() -> None:
    """Raw lines allow /dev/kfd by the major it had: after amdgpu comes back with another,
    every plan (and check) names the container, unless the plan rewrites it."""
    first = example_plan("amd-rocm")
    (config,) = [a for a in render(first) if a.path == CT130 and a.bundle == "apply"]
    facts = evolve_file(first.facts, "etc/pve/lxc/131.conf", config.content)
    facts = attrs.evolve(
        facts,
        char_majors=tuple(
            attrs.evolve(c, major=237) if c.name == "kfd" else c for c in facts.char_majors
        ),
    )
    spec = parse_spec(ROCM.replace("vmid = 130", 'vmid = 130\ndevices = "raw"'))
    stale = [f for f in plan(facts, spec).findings if f.code == "container-kfd-major-stale"]
    assert [f.subject for f in stale] == ["etc/pve/lxc/131.conf"]
    assert "ROCm fails in the container" in stale[0].message


def test_mixed_vendor_pool_and_unknown_vendor_are_refused() -> None:
    spec = parse_spec(
        'node = "pve-mixed"\n[[pools]]\nname = "both"\ngpus = ["01:00.0", "04:00.0"]\n'
        "[pools.lxc]\nvmid = 129\n"
    )
    facts = discover(FIXTURES / "mixed")
    facts = evolve_file(
        facts, "etc/pve/lxc/129.conf", "arch: amd64\nrootfs: local-zfs:subvol-129-disk-0\n"
    )
    with pytest.raises(PlanError) as info:
        plan(facts, spec)
    assert [p.code for p in info.value.problems] == ["lxc-pool-mixed-vendors"]
    assert "are GPUs of AMD and NVIDIA" in info.value.problems[0].message
    # Moore Threads (1ed5): a GPU vendor pvegpu has no module for.
    unknown_vendor = attrs.evolve(
        facts,
        gpus=tuple(
            attrs.evolve(g, function=attrs.evolve(g.function, vendor=0x1ED5))
            if g.address.bus == 4
            else g
            for g in facts.gpus
        ),
    )
    one = parse_spec(str(spec_text_for("04:00.0")))
    with pytest.raises(PlanError) as unknown:
        plan(unknown_vendor, one)
    assert [p.code for p in unknown.value.problems] == ["lxc-gpu-vendor-unknown"]


def spec_text_for(address: str) -> str:
    return (
        f'node = "pve-mixed"\n[[pools]]\nname = "one"\ngpus = ["{address}"]\n'
        "[pools.lxc]\nvmid = 129\n"
    )


def test_render_nodes_renumbered_after_the_split_are_a_reboot_finding() -> None:
    """The DRM core numbers every DRM device afresh at boot: with the iGPU (renderD128)
    on vfio-pci, the Arc on renderD129 today becomes renderD128."""
    arc = JELLYFIN.replace('gpus = ["00:02.0"]', 'gpus = ["03:00.0"]')
    spec = parse_spec(arc)
    facts = discover_for(spec, FIXTURES / "intel-media")
    assert "minors-change-at-reboot" not in {f.code for f in plan(facts, spec).findings}
    vm = parse_spec(
        arc + '\n[[pools]]\nname = "vm"\ngpus = ["00:02.0"]\nmapping = { id = "igpu" }\n'
        "[pools.vfio]\n"
    )
    (finding,) = [f for f in plan(facts, vm).findings if f.code == "minors-change-at-reboot"]
    assert "03:00.0: 129 -> 128" in finding.message
    assert "/dev/dri/renderDN" in finding.message and "the DRM core" in finding.message


# --- the codec and the runbook


def test_the_codec_reads_drm_lines_by_the_nodes_it_is_given() -> None:
    nodes = AMD.nodes
    assert nodes is not None and INTEL.nodes is not None
    text = (
        "dev0: /dev/dri/renderD129,gid=105\nlxc.cgroup2.devices.allow: c 226:128 rwm\n"
        "lxc.mount.entry: /dev/kfd dev/kfd none bind,optional,create=file\n"
    )
    lines = parse_lines(text)
    assert [lxcconf.gpu_minor(line, nodes) for line in lines] == [129, 128, None]
    assert all(lxcconf.is_gpu_line(line, nodes) for line in lines)
    # Intel's nodes are the DRM ones without kfd.
    assert [lxcconf.is_gpu_line(line, INTEL.nodes) for line in lines] == [True, True, False]


def test_runbook_checks_the_nodes_where_the_vendor_has_no_listing_tool() -> None:
    planned_ = example_plan("amd-rocm")
    steps = runbook(planned_, render(planned_))
    checks = [a for s in steps for a in s.actions if isinstance(a, CheckNodes)]
    assert [(c.vmid, c.expected()) for c in checks] == [
        (130, ("/dev/dri/renderD128 e2:80", "/dev/dri/renderD129 e2:81", "/dev/kfd ee:0"))
    ]
    assert not [s for s in steps if "nvidia-smi" in " ".join(s.commands)]


def test_an_empty_render_group_is_a_warning() -> None:
    spec = parse_spec(JELLYFIN)
    facts = discover_for(spec, FIXTURES / "intel-media")
    lonely = evolve_file(facts, GROUPS, "root:x:0:\nrender:x:105:\n")
    (finding,) = [f for f in plan(lonely, spec).findings if f.code == "lxc-render-group-empty"]
    assert "usermod -aG render <user>" in finding.message
    assert "lxc-render-group-empty" not in {f.code for f in plan(facts, spec).findings}


def test_nvidia_drm_nodes_are_facts_and_leave_the_container_lines_alone(tmp_path: Path) -> None:
    """With nvidia-drm loaded an NVIDIA GPU has DRM nodes too: discovery records them, the
    facts JSON gains their keys, and the container still gets /dev/nvidiaN."""
    desc = fixture_hosts.workstation()
    gpu = next(d for d in desc.devices if d.driver == "nvidia")
    devices = tuple(attrs.evolve(d, drm=DrmInfo(0, 128)) if d is gpu else d for d in desc.devices)
    write_host(attrs.evolve(desc, devices=devices), tmp_path / "host")
    facts = discover(tmp_path / "host")
    (found,) = [g for g in facts.gpus if g.driver == "nvidia"]
    assert (found.drm_card, found.drm_render, found.node_path) == (0, 128, "/dev/nvidia0")
    doc = json.loads(facts_to_json(facts))
    (entry,) = [g for g in doc["gpus"] if g["address"] == str(found.address)]
    assert (entry["drm_card"], entry["drm_render"]) == (0, 128)
    assert facts_from_json(facts_to_json(facts)) == facts


class _StatHost:
    """Answers `pct exec N -- stat -c '%n %t:%T' PATH...` as a container with these nodes."""

    def __init__(self, nodes: dict[str, tuple[int, int]]) -> None:
        self.nodes = nodes
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str]) -> Completed:
        self.ran.append(tuple(argv))
        paths = list(argv)[list(argv).index("%n %t:%T") + 1 :]
        found = [p for p in paths if p in self.nodes]
        out = "".join(f"{p} {self.nodes[p][0]:x}:{self.nodes[p][1]:x}\n" for p in found)
        err = "".join(f"stat: cannot statx '{p}'\n" for p in paths if p not in self.nodes)
        return Completed(tuple(argv), 1 if err else 0, out, err)


def _check_on(host: _StatHost, check: CheckNodes) -> None:
    doing.check_nodes(cast(doing.Applying, attrs.make_class("At", ["host"])(host)), check)


def test_apply_checks_the_nodes_inside_the_container() -> None:
    check = CheckNodes(130, ("/dev/dri/renderD128", "/dev/kfd"), ("226:128", "238:0"))
    good = _StatHost({"/dev/dri/renderD128": (226, 128), "/dev/kfd": (238, 0)})
    _check_on(good, check)
    assert good.ran == [("pct", "exec", "130", "--", "stat", "-c", "%n %t:%T", *check.paths)]
    with pytest.raises(ApplyError, match="expected") as info:
        _check_on(_StatHost({"/dev/dri/renderD128": (226, 129), "/dev/kfd": (238, 0)}), check)
    assert info.value.problems[0].code == "apply-step-failed"
    with pytest.raises(ApplyError) as gone:
        _check_on(_StatHost({"/dev/kfd": (238, 0)}), check)
    assert gone.value.problems[0].code == "command-failed"


def _nvidia_drm_host(tmp_path: Path, ct131: str) -> HostFacts:
    """kpro6 with nvidia-drm loaded (VM GPU 81:00.0 has card4/renderD132) and a CT 131."""
    desc = fixture_hosts.kpro6()
    devices = tuple(
        attrs.evolve(d, drm=DrmInfo(4, 132)) if d.address == "0000:81:00.0" else d
        for d in desc.devices
    )
    files = dict(desc.files) | {"etc/pve/lxc/131.conf": ct131}
    write_host(attrs.evolve(desc, devices=devices, files=files), tmp_path / "host")
    return discover_for(example_spec("kpro6"), tmp_path / "host")


def test_a_containers_drm_node_of_a_moving_nvidia_gpu_goes_too(tmp_path: Path) -> None:
    """Claims by every node: the VM GPU's render node in another container is removed
    like its /dev/nvidiaN would be; holding it by both stacks at once is refused."""
    spec = example_spec("kpro6")
    facts = _nvidia_drm_host(tmp_path, "arch: amd64\ndev0: /dev/dri/renderD132,mode=0666\n")
    result = plan(facts, spec)
    (removed,) = [c for c in result.containers_losing_gpus if c.vmid == 131]
    assert (removed.minors, removed.nodes.drm) == ((132,), True)
    both = "arch: amd64\ndev0: /dev/dri/renderD132\ndev1: /dev/nvidia4\n"
    with pytest.raises(PlanError) as info:
        plan(_nvidia_drm_host(tmp_path / "b", both), spec)
    (problem,) = [p for p in info.value.problems if p.code == "container-loses-gpus-of-two-stacks"]
    assert problem.subject == "etc/pve/lxc/131.conf"
    assert "(/dev/nvidiaN, /dev/dri/renderDN)" in problem.message and "pct set 131" in problem.fix
