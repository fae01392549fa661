"""The fixture hosts of the vendors' DRM nodes in containers, and what their examples give
each container (issue: every GPU vendor in containers).

- `nvidia-drm` (examples/nvidia-drm.toml): two RTX 4090 on nvidia with nvidia-drm loaded,
  so each has a DRM card and render node next to /dev/nvidiaN. One stays for an
  unprivileged container (devN), one moves to a VM, and a third container holds the
  moving GPU's render node.
- `intel-arc` (examples/intel-arc.toml): an Arc B580 on xe as the only GPU, next to a
  BMC's ASPEED display (card0, no render node), for a privileged container in raw mode
  with its card node too; the container holds every DRM node today (`c 226:*`).

Each container config is checked line by line (node, major:minor, gid), then read back
the way pve-container reads it: the project's guest-config parser (pvefiles.guestconf,
the section and line rules of pve-container) and the LXC codec (pvefiles.lxcconf), plus
pve-container's devN property format and LXC's mount-entry fields, spelled out here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bundled import FIXTURES, copy_tree, example_plan, fixture_root, host_facts
from pvegpu.engines import installed_files
from pvegpu.errors import PlanError
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.plan import Plan
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import lxcconf
from pvegpu.pvefiles.guestconf import LineKind, parse_lines, split_sections
from pvegpu.rendering.registry import render
from pvegpu.rendering.review.actions import CheckNodes
from pvegpu.rendering.review.apply_steps import runbook
from pvegpu.spec.load import parse_spec
from pvegpu.vendors import vendor_of
from pvegpu.vendors.bmc import is_bmc_display
from pvegpu.vendors.intel import INTEL
from pvegpu.vendors.nvidia import NVIDIA

CT140 = "etc/pve/lxc/140.conf"
CT141 = "etc/pve/lxc/141.conf"
CT150 = "etc/pve/lxc/150.conf"
VM410 = "etc/pve/qemu-server/410.conf"


def rendered(plan_: Plan, path: str) -> str:
    (config,) = [a for a in render(plan_) if a.path == path and a.bundle == "apply"]
    return config.content


def base(facts: HostFacts, path: str) -> str:
    found = facts.file(path)
    assert found is not None, path
    return found.content


def lines(text: str) -> list[str]:
    return [line.raw.rstrip("\n") for line in parse_lines(text)]


def gpu_lines(text: str) -> list[str]:
    """The device lines of a container config: devN entries and raw cgroup/mount lines."""
    return [
        line
        for line in lines(text)
        if re.match(r"dev[0-9]+:", line) or line.startswith(("lxc.cgroup2.devices", "lxc.mount"))
    ]


# --- pve-container's reading of a container config

# pve-container's devN property: `[path=]<absolute path>` then its options, which it
# prints in alphabetical order: deny-write=<0|1>, gid=<uint>, mode=<octal>, uid=<uint>.
_DEV_OPTIONS = {
    "deny-write": re.compile(r"[01]"),
    "gid": re.compile(r"[0-9]+"),
    "mode": re.compile(r"0?[0-7]{3}"),
    "uid": re.compile(r"[0-9]+"),
}
# LXC's lxc.mount.entry is an fstab line: source, target relative to the rootfs, type,
# options (and two optional numbers). A device bind mount of one node creates a file.
_MOUNT = re.compile(r"(/dev/\S+) (dev/\S+) none bind,optional,create=file")
_ALLOW = re.compile(r"c ([0-9]+):([0-9]+) rwm")


def accepted_by_proxmox(text: str) -> None:
    """The config reads back as pve-container reads it: one main section, every line a
    description, a key or a raw lxc.* key (none it would warn about and skip), the normal
    keys sorted as it writes them and before every raw key, each key once, each devN a
    valid device property and each raw device line a per-node rule or bind mount."""
    # These containers have no snapshot or pending section: all of it is the main one.
    sections = split_sections(text)
    assert [s.name for s in sections] == [None]
    main = sections[0]
    parsed = main.lines
    assert [line.raw for line in parsed if line.kind is LineKind.OTHER] == []
    kinds = [line.kind for line in parsed if line.kind is not LineKind.BLANK]
    assert kinds == sorted(kinds, key=[LineKind.COMMENT, LineKind.KEY, LineKind.RAW].index)
    keys = [line.key for line in parsed if line.kind is LineKind.KEY]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    for line in parsed:
        if line.kind is LineKind.KEY and re.fullmatch(r"dev[0-9]+", line.key):
            assert int(line.key[3:]) <= 255, line.raw
            path, *options = line.value.split(",")
            assert path.removeprefix("path=").startswith("/dev/"), line.raw
            names = [option.partition("=")[0] for option in options]
            assert names == sorted(names), line.raw
            for option in options:
                name, _, value = option.partition("=")
                assert _DEV_OPTIONS[name].fullmatch(value), line.raw
        elif line.key == "lxc.mount.entry":
            match = _MOUNT.fullmatch(line.value)
            assert match and match[2] == match[1][1:], line.raw
        elif line.key == "lxc.cgroup2.devices.allow":
            assert _ALLOW.fullmatch(line.value), line.raw


def test_the_proxmox_reading_refuses_what_pve_container_would_not_take() -> None:
    """Control: each rule of accepted_by_proxmox rejects a config that breaks it."""
    good = "#x\narch: amd64\ndev0: /dev/dri/renderD128,gid=105,mode=0666\n"
    accepted_by_proxmox(good)
    bad = [
        good + "[snap]\narch: amd64\n",
        good + "a stray line\n",
        good.replace("arch", "zzz"),
        good + "lxc.cgroup2.devices.allow: c 226:128 rwm\nhostname: x\n",
        good.replace("gid=105,mode=0666", "mode=0666,gid=105"),
        good.replace("mode=0666", "mode=rw"),
        good.replace("dev0", "dev256"),
        good + "lxc.cgroup2.devices.allow: c 226:* rwm\n",
        good + "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir\n",
    ]
    for text in bad:
        with pytest.raises(AssertionError):
            accepted_by_proxmox(text)


# --- nvidia-drm: NVIDIA's DRM nodes are facts; CUDA's nodes go to the container


def test_nvidia_drm_host_has_drm_nodes_next_to_the_nvidia_minors() -> None:
    facts = host_facts("nvidia-drm")
    assert [
        (g.address.short, g.driver, g.node_minor, g.drm_card, g.drm_render) for g in facts.gpus
    ] == [("01:00.0", "nvidia", 0, 0, 128), ("02:00.0", "nvidia", 1, 1, 129)]
    assert [g.vendor for g in facts.gpus] == [NVIDIA, NVIDIA]
    assert [g.node_path for g in facts.gpus] == ["/dev/nvidia0", "/dev/nvidia1"]
    # The char majors as a real host has them: nvidia fixed, nvidia-uvm dynamic, drm 226.
    majors = {name: facts.char_major(name) for name in ("nvidia", "nvidia-uvm", "drm")}
    assert majors == {"nvidia": 195, "nvidia-uvm": 508, "drm": 226}
    # The fixture is a host with nvidia-drm loaded, as the kernel lists its modules.
    modules = (fixture_root("nvidia-drm") / "proc/modules").read_text().splitlines()
    assert "nvidia_drm" in [line.split(" ", 1)[0] for line in modules]


def test_nvidia_drm_container_gets_the_cuda_nodes_only() -> None:
    """CT 140 (unprivileged) gets /dev/nvidia0 (195:0) and the shared NVIDIA nodes as devN
    entries, mode 0666 and no gid (the host's 0666 nodes need none); not the GPU's
    DRM nodes, and nothing of the GPU that goes to the VM."""
    result = example_plan("nvidia-drm")
    text = rendered(result, CT140)
    assert gpu_lines(text) == [
        "dev0: /dev/nvidia0,mode=0666",
        "dev1: /dev/nvidiactl,mode=0666",
        "dev2: /dev/nvidia-uvm,mode=0666",
        "dev3: /dev/nvidia-uvm-tools,mode=0666",
    ]
    assert [line for line in lines(text) if not line.startswith("dev")] == lines(
        base(result.facts, CT140)
    )
    nodes = NVIDIA.nodes
    assert nodes is not None
    # The project's codec reads the GPU line back as minor 0 of the NVIDIA major.
    assert [lxcconf.gpu_minor(line, nodes) for line in parse_lines(text)].count(0) == 1
    assert nodes.major == 195


def test_nvidia_drm_render_node_in_another_container_goes_with_the_gpu() -> None:
    """CT 141 holds the VM GPU's render node (renderD129): that line is removed, every
    other line is kept, and the revert bundle has it back."""
    result = example_plan("nvidia-drm")
    (removed,) = result.containers_losing_gpus
    assert (removed.vmid, removed.minors, removed.keys, removed.nodes.drm) == (
        141,
        (129,),
        ("dev0",),
        True,
    )
    before = base(result.facts, CT141)
    assert "dev0: /dev/dri/renderD129,gid=104,mode=0660" in lines(before)
    after = rendered(result, CT141)
    assert lines(after) == [line for line in lines(before) if not line.startswith("dev0:")]
    (revert,) = [a for a in render(result) if a.path == CT141 and a.bundle == "revert"]
    assert revert.content == before


def test_nvidia_drm_loss_names_the_node_the_container_holds() -> None:
    (finding,) = [
        f for f in example_plan("nvidia-drm").findings if f.code == "container-loses-gpus"
    ]
    assert finding.subject == CT141
    assert "/dev/dri/renderD129 (02:00.0)" in finding.message
    assert "/dev/nvidia1" not in finding.message


def test_nvidia_drm_runbook_checks_every_node_of_the_moving_gpu() -> None:
    """With nvidia-drm loaded a process (CT 141's Frigate) can hold the GPU by its render
    or card node too: the holder check lists them with /dev/nvidia1."""
    (summary,) = [a for a in render(example_plan("nvidia-drm")) if a.path == "SUMMARY.md"]
    assert "fuser -v /dev/nvidia1 /dev/dri/renderD129 /dev/dri/card1\n" in summary.content


def test_nvidia_drm_vm_gets_the_second_gpu_by_its_mapping() -> None:
    result = example_plan("nvidia-drm")
    assert [line for line in lines(rendered(result, VM410)) if line.startswith("hostpci")] == [
        "hostpci0: mapping=rtx4090-vm,pcie=1"
    ]
    assert lines(rendered(result, "etc/pve/mapping/pci.cfg")) == [
        "rtx4090-vm",
        "\tmap id=10de:2684,iommugroup=5,node=pve-stream,path=0000:02:00,subsystem-id=1043:889d",
        "\tdescription RTX 4090 for the gaming VM",
        "",
    ]


# --- intel-arc: an Arc on xe, raw lines with the card node, next to a BMC's display


def test_intel_arc_host_numbers_the_arc_after_the_bmc() -> None:
    """The BMC's ast display is card0 with no render node; the Arc is card1/renderD128."""
    facts = host_facts("intel-arc")
    assert [(g.address.short, g.driver, g.drm_card, g.drm_render) for g in facts.gpus] == [
        ("06:00.0", "ast", 0, None),
        ("19:00.0", "xe", 1, 128),
    ]
    bmc, arc = facts.gpus
    assert (vendor_of(bmc.function), vendor_of(arc.function)) == (None, INTEL)
    assert arc.node_path == "/dev/dri/renderD128"
    assert facts.char_major("drm") == 226


def test_intel_arc_container_gets_its_render_and_card_node_by_minor() -> None:
    """CT 150 (privileged, raw, display = true): a cgroup rule and a bind mount for
    renderD128 (226:128) and card1 (226:1). The helper script's `c 226:*` and its bind of
    all of /dev/dri (which also reach the BMC's card0) are gone; the rest is kept."""
    result = example_plan("intel-arc")
    before = base(result.facts, CT150)
    assert gpu_lines(before) == [
        "lxc.cgroup2.devices.allow: c 226:* rwm",
        "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir",
    ]
    text = rendered(result, CT150)
    assert gpu_lines(text) == [
        "lxc.cgroup2.devices.allow: c 226:128 rwm",
        "lxc.cgroup2.devices.allow: c 226:1 rwm",
        "lxc.mount.entry: /dev/dri/renderD128 dev/dri/renderD128 none bind,optional,create=file",
        "lxc.mount.entry: /dev/dri/card1 dev/dri/card1 none bind,optional,create=file",
    ]
    assert [line for line in lines(text) if line not in gpu_lines(text)] == [
        line for line in lines(before) if line not in gpu_lines(before)
    ]
    nodes = INTEL.nodes
    assert nodes is not None
    parsed = parse_lines(text)
    assert [lxcconf.gpu_minor(line, nodes) for line in parsed if line.kind is LineKind.RAW] == [
        128,
        1,
        128,
        1,
    ]
    assert not any(lxcconf.grants_every_gpu(line, nodes) for line in parsed)
    assert not GuestConfig(ConfigFile("etc/pve/lxc/1.conf", text)).unprivileged


def test_intel_arc_runbook_checks_both_nodes_by_number() -> None:
    result = example_plan("intel-arc")
    checks = [a for s in runbook(result, render(result)) for a in s.actions]
    (check,) = [a for a in checks if isinstance(a, CheckNodes)]
    assert (check.vmid, check.paths, check.numbers) == (
        150,
        ("/dev/dri/renderD128", "/dev/dri/card1"),
        ("226:128", "226:1"),
    )


def _unprivileged_arc(tmp_path: Path) -> Path:
    root = copy_tree(FIXTURES / "intel-arc", tmp_path / "host")
    config = root / "etc/pve/nodes/pve-nvr/lxc/150.conf"
    config.write_text(config.read_text() + "unprivileged: 1\n")
    return root


ARC_DEV = """\
node = "pve-nvr"

[[pools]]
name = "nvr"
gpus = ["19:00.0"]

[pools.lxc]
vmid = 150
display = true
"""


def test_intel_arc_unprivileged_dev_entries_need_the_containers_group(tmp_path: Path) -> None:
    """Unprivileged, in devN mode: CT 150's root file system is an LVM volume pvegpu does
    not read, so its render group is unknown; refused with the fix, unless the spec names
    the gid, which both nodes then get."""
    root = _unprivileged_arc(tmp_path)
    spec = parse_spec(ARC_DEV)
    with pytest.raises(PlanError) as info:
        plan(discover_for(spec, root), spec)
    assert [(p.code, p.subject) for p in info.value.problems] == [("lxc-render-gid-unknown", CT150)]
    (problem,) = info.value.problems
    assert "getent group render" in problem.fix
    # Nothing where `pct mount` puts it either, and the fix says to mount it there.
    assert "nothing at /var/lib/lxc/150/rootfs/etc/group" in problem.message
    assert "local-lvm is lvmthin storage" in problem.message
    assert "stop CT 150, `pct mount 150`" in problem.fix
    assert "reads /var/lib/lxc/150/rootfs/etc/group" in problem.fix
    named = parse_spec(ARC_DEV.replace("display = true", "display = true\ngid = 993"))
    text = rendered(plan(discover_for(named, root), named), CT150)
    assert gpu_lines(text) == [
        "dev0: /dev/dri/renderD128,gid=993,mode=0666",
        "dev1: /dev/dri/card1,gid=993,mode=0666",
    ]
    accepted_by_proxmox(text)


def test_the_group_is_read_where_pct_mount_puts_it(tmp_path: Path) -> None:
    """Following the refusal's fix: `pct mount 150` mounts the LVM volume at
    /var/lib/lxc/150/rootfs; planned again, the devN entries get its render gid (and a
    snapshot taken with the spec carries the file)."""
    root = _unprivileged_arc(tmp_path)
    group = root / "var/lib/lxc/150/rootfs/etc/group"
    group.parent.mkdir(parents=True)
    group.write_text("root:x:0:\nvideo:x:44:\nrender:x:992:frigate\nfrigate:x:1000:\n")
    spec = parse_spec(ARC_DEV)
    facts = discover_for(spec, root)
    assert facts.file("var/lib/lxc/150/rootfs/etc/group") is not None
    assert gpu_lines(rendered(plan(facts, spec), CT150)) == [
        "dev0: /dev/dri/renderD128,gid=992,mode=0666",
        "dev1: /dev/dri/card1,gid=992,mode=0666",
    ]
    taken = snapshot(root, tmp_path / "s.tar.gz", spec, installed_files)
    assert taken.error is None
    unpacked = unpack(taken.path, tmp_path / "unpacked")
    assert (unpacked / "var/lib/lxc/150/rootfs/etc/group").read_text() == group.read_text()


# --- both: every container config the examples write, as pve-container reads it


@pytest.mark.parametrize(
    ("example", "path"),
    [
        ("nvidia-drm", CT140),
        ("nvidia-drm", CT141),
        ("intel-arc", CT150),
        ("amd-instinct", CT150),
        ("amd-rocm", "etc/pve/lxc/130.conf"),
        ("intel-media", "etc/pve/lxc/120.conf"),
        ("intel-media", "etc/pve/lxc/121.conf"),
    ],
)
def test_container_configs_are_accepted_by_proxmox(example: str, path: str) -> None:
    result = example_plan(example)
    accepted_by_proxmox(rendered(result, path))
    # The file as it was passes too, so the check reads Proxmox's own files.
    if example == "nvidia-drm":
        accepted_by_proxmox(base(result.facts, path))


def test_display_on_nvidia_is_refused_not_dropped() -> None:
    """NVIDIA's container nodes have no display node: `display = true` is said to be
    impossible rather than silently ignored."""
    spec = parse_spec(
        'node = "pve-stream"\n\n[[pools]]\nname = "stream"\ngpus = ["01:00.0"]\n\n'
        "[pools.lxc]\nvmid = 140\ndisplay = true\n"
    )
    with pytest.raises(PlanError) as info:
        plan(discover_for(spec, FIXTURES / "nvidia-drm"), spec)
    (problem,) = info.value.problems
    assert (problem.code, problem.subject) == ("lxc-display-unsupported", "pools[0].lxc.display")


# --- a BMC's display is listed, never pooled


BMC_COUNT = 'node = "pve-nvr"\n\n[[pools]]\nname = "nvr"\ncount = 1\n\n[pools.lxc]\nvmid = 150\n'


def test_count_passes_over_the_bmc_display() -> None:
    """The BMC's ast display (06:00.0) sorts before the Arc: `count = 1` takes the Arc."""
    spec = parse_spec(BMC_COUNT.replace("vmid = 150", 'vmid = 150\ndevices = "raw"'))
    facts = discover_for(spec, FIXTURES / "intel-arc")
    bmc, arc = facts.gpus
    assert bmc.bmc_display and not arc.bmc_display
    (pool,) = plan(facts, spec).pools
    assert [g.address.short for g in pool.gpus] == ["19:00.0"]


def test_naming_the_bmc_display_is_refused() -> None:
    spec = parse_spec(BMC_COUNT.replace("count = 1", 'gpus = ["06:00.0"]'))
    with pytest.raises(PlanError) as info:
        plan(discover_for(spec, FIXTURES / "intel-arc"), spec)
    (problem,) = info.value.problems
    assert (problem.code, problem.subject) == ("address-is-bmc-display", "pools[0].gpus[0]")
    assert problem.fix == "GPUs here: 19:00.0"


@pytest.mark.parametrize(
    ("vendor", "device", "driver", "bmc"),
    [
        (0x1A03, 0x2000, "ast", True),
        (0x1A03, 0x2000, "vfio-pci", True),  # by its ids when not on its driver
        (0x102B, 0x0536, None, True),  # Matrox G200eW3, a Dell BMC's
        (0x102B, 0x0525, None, False),  # a Matrox G400 card: not a BMC's
        (0x102B, 0x0525, "mgag200", True),  # bound to a BMC display driver
        (0x19E5, 0x1711, "hibmc-drm", True),
        (0x10DE, 0x2BB5, "nvidia", False),
    ],
)
def test_bmc_displays_by_driver_or_ids(vendor: int, device: int, driver: str, bmc: bool) -> None:
    assert is_bmc_display(vendor, device, driver) is bmc
