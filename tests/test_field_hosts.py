"""Adversarial hosts from real reports (issue 29, tests/field_hosts.py): for each, the split
its admin asks for, what pvegpu finds, and what it must say: which reference reaches which
GPU, what changes meaning after the split or the reboot, what it refuses, warns about or
names as unresolved. The review texts an admin reads are golden files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

import field_hosts as fh
from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.errors import PlanError
from pvegpu.host.discover import discover
from pvegpu.model.facts import HostFacts
from pvegpu.model.references import GpuReference, ReferenceKind
from pvegpu.pci import PciAddress
from pvegpu.planning.numbering import next_boot_numbers
from pvegpu.planning.planner import plan
from pvegpu.spec.load import parse_spec
from pvegpu.testing import NvidiaInfo
from sriov_host import igpu_host

Golden = Callable[[str], SnapshotAssertion]
# Findings every split of these hosts gives that say nothing about references.
ROUTINE = frozenset({"group-members-move", "identical-device-ids"})


def facts_of(tmp_path: Path, shape: fh.FieldHost) -> HostFacts:
    return discover(shape.write(tmp_path))


def refused(facts: HostFacts, spec: str) -> list[Diagnostic]:
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(spec))
    return list(err.value.problems)


def found(facts: HostFacts, spec: str) -> list[Diagnostic]:
    return [f for f in plan(facts, parse_spec(spec)).findings if f.code not in ROUTINE]


def said(items: Sequence[Diagnostic]) -> list[tuple[str, str]]:
    return sorted((i.code, i.subject) for i in items)


def review(items: Sequence[Diagnostic]) -> str:
    """What the admin reads: each refusal with its fix, each finding with its code."""
    texts = [
        str(i) if i.severity is Severity.ERROR else f"{i.subject}: {i.message} [{i.code}]"
        for i in items
    ]
    return "\n\n".join(texts) + "\n"


def inventory(refs: Sequence[GpuReference]) -> str:
    """The references as a reviewer reads them, with the selector (hook variable, CDI
    device) each one names its GPUs by."""
    lines = []
    for r in refs:
        parts = [f"{r.kind.value} @ {r.where}: {r.text}", f"  {r.guest}"]
        if r.gpus:
            parts.append("  reaches " + ", ".join(g.short for g in r.gpus))
        for label, value in (
            ("selector", r.selector),
            ("every", r.every),
            ("binds", r.binds),
            ("unresolved", r.unresolved),
            ("inert", r.inert),
        ):
            if value is not None:
                parts.append(f"  {label}: {value}")
        lines.append("\n".join(parts))
    return "\n".join(lines) + "\n"


def refs_in(facts: HostFacts, path: str) -> list[GpuReference]:
    return [r for r in facts.references if r.path == path]


def reached(ref: GpuReference) -> list[str]:
    return [g.short for g in ref.gpus]


# --- 1. nvidia-hook-visible-all --------------------------------------------------------


def test_hook_with_all_is_every_gpu_nvidia_holds_at_each_start(
    tmp_path: Path, golden: Golden
) -> None:
    """`all` reaches both 3090s the plan gives away: refused, saying that after the split
    `all` quietly means the one GPU the driver still holds; the pre-start chown of
    /dev/nvidia* reaches every NVIDIA GPU."""
    shape = fh.nvidia_hook_visible_all()
    facts = facts_of(tmp_path, shape)
    hook, chown = refs_in(facts, "etc/pve/lxc/110.conf")
    assert (hook.kind, reached(hook)) == (
        ReferenceKind.GPU_HOOK,
        ["01:00.0", "02:00.0", "05:00.0"],
    )
    assert (chown.line, chown.every, reached(chown)) == (
        13,
        "every GPU nvidia holds",
        ["01:00.0", "02:00.0", "05:00.0"],
    )
    problems = refused(facts, shape.spec)
    assert said(problems) == [("lxc-hook-grants-pool-gpu", "etc/pve/lxc/110.conf line 12")]
    # After the split `all` still reaches the LLM container's 3090: refused either way.
    assert "then `all` is the 2 GPUs the driver still holds, not the 3" in problems[0].message
    assert review(problems) == golden("txt")


def test_hook_fixed_to_a_uuid_leaves_the_chown_of_every_node(tmp_path: Path) -> None:
    """With the fix pvegpu gives (the P2000's UUID), the plan goes through; the chown of
    every NVIDIA node at each start of CT 110 is named: it re-owns the other guests' GPUs."""
    shape = fh.nvidia_hook_visible_all()
    p2000 = next(g for g in facts_of(tmp_path / "a", shape).gpus if g.model == "Quadro P2000")
    assert p2000.uuid is not None
    conf = shape.host.files["etc/pve/lxc/110.conf"].replace("=all", f"={p2000.uuid}", 1)
    facts = facts_of(tmp_path / "b", shape.with_files({"etc/pve/lxc/110.conf": conf}))
    findings = found(facts, shape.spec)
    assert said(findings) == [("gpu-reference-moved", "etc/pve/lxc/110.conf line 13")]
    assert "reaches every GPU nvidia holds, among them 01:00.0" in findings[0].message


# --- 2. nvidia-hook-index-or-uuid ------------------------------------------------------


def test_hook_indices_follow_nvml_order_and_every_scope_it_reads(
    tmp_path: Path, golden: Golden
) -> None:
    """Index 1 is 0f:00.0 (minor 3) today and 47:00.0 once index 0 leaves; the UUID stays
    its GPU; `lxc.environment.runtime` never reaches the hook, `lxc.environment.hooks`
    does (index 3: none after the split)."""
    shape = fh.nvidia_hook_index_or_uuid()
    facts = facts_of(tmp_path, shape)
    hooks = {r.vmid: reached(r) for r in facts.references if r.kind is ReferenceKind.GPU_HOOK}
    assert hooks == {140: ["0f:00.0"], 141: ["0f:00.0"], 143: ["4e:00.0"]}
    problems = refused(facts, shape.spec)
    assert said(problems) == [
        ("lxc-hook-index-shifts", "etc/pve/lxc/141.conf line 10"),
        ("lxc-hook-index-shifts", "etc/pve/lxc/143.conf line 10"),
    ]
    # The fix keeps what the index names today (0f:00.0), not what it would shift onto.
    assert problems[0].fix.count("GPU-") == 1 and fh.A100_UUIDS[1] in problems[0].fix
    assert review(problems) == golden("txt")


def test_minors_out_of_pci_order_keep_their_order_at_the_reboot(tmp_path: Path) -> None:
    """Minors 2, 3, 0, 1 in PCI order: with 07:00.0 (minor 2) gone the driver probes the
    rest in today's order, so only 0f:00.0 moves (3 -> 2); CT 140's `c 195:3` follows."""
    shape = fh.nvidia_hook_index_or_uuid().without("etc/pve/lxc/141.conf", "etc/pve/lxc/143.conf")
    facts = facts_of(tmp_path, shape)
    numbers = next_boot_numbers(facts, [PciAddress.parse("0000:07:00.0")])
    assert [(c.before, c.after, c.gpu.short) for c in numbers.changes] == [(3, 2, "0f:00.0")]
    findings = found(facts, shape.spec)
    assert said(findings) == [("container-renumbered-at-reboot", "etc/pve/lxc/140.conf")]
    assert "/dev/nvidia3 -> /dev/nvidia2 (0f:00.0)" in findings[0].message


# --- 3. cdi-spec-index-names -----------------------------------------------------------


def test_cdi_devices_are_named_by_their_own_name_in_either_format(
    tmp_path: Path, golden: Golden
) -> None:
    """nvidia-ctk writes `name` after `containerEdits`: each node is still its device's;
    the one-line JSON spec is read too."""
    shape = fh.cdi_spec_index_names()
    facts = facts_of(tmp_path, shape)
    cdi = [r for r in facts.references if r.kind is ReferenceKind.CDI]
    by_name = {(r.path, r.line, r.node_path): r.selector for r in cdi}
    assert by_name[("var/run/cdi/nvidia.yaml", 50, "/dev/nvidia1")] == "nvidia.com/gpu=1"
    assert by_name[("var/run/cdi/nvidia.yaml", 14, "/dev/nvidia0")] == "nvidia.com/gpu=0"
    uuid = f"nvidia.com/gpu={fh.RTX4090_UUIDS[1]}"
    assert by_name[("var/run/cdi/nvidia.yaml", 68, "/dev/nvidia1")] == uuid
    assert [(r.line, r.selector, reached(r)) for r in cdi if r.path == "etc/cdi/nvidia.json"] == [
        (1, "nvidia.com/gpu=1", ["02:00.0"]),
        (1, "nvidia.com/gpu=all", ["01:00.0"]),
        (1, "nvidia.com/gpu=all", ["02:00.0"]),
    ]
    assert inventory(cdi) == golden("txt")


def test_a_stale_cdi_spec_is_named_once_with_its_devices(tmp_path: Path, golden: Golden) -> None:
    shape = fh.cdi_spec_index_names()
    findings = [f for f in found(facts_of(tmp_path, shape), shape.spec)]
    assert said(findings) == [
        ("cdi-spec-stale", "etc/cdi/nvidia.json"),
        ("cdi-spec-stale", "var/run/cdi/nvidia.yaml"),
    ]
    yaml = findings[1].message
    assert "(lines 50-52, 68-70, 89-91)" in yaml
    assert "nvidia.com/gpu=1 names no GPU (today 02:00.0)" in yaml
    assert review(findings) == golden("txt")


# --- 4. dri-dir-bind-with-per-minor-rules ----------------------------------------------


def test_dri_binds_rules_and_chowns_when_the_igpu_leaves(tmp_path: Path, golden: Golden) -> None:
    """The UHD 770 (card0, renderD128) goes to a VM and the Arc becomes card0 and
    renderD128: every container's lines for the iGPU go (two dev0 keys too), the chown of
    all of /dev/dri reaches the Arc of CT 120, and the chown of card0 names it after the
    reboot."""
    shape = fh.dri_dir_bind_with_per_minor_rules()
    facts = facts_of(tmp_path, shape)
    (chown_all,) = [r for r in refs_in(facts, "etc/pve/lxc/123.conf") if r.line == 13]
    assert (chown_all.every, reached(chown_all)) == (
        "every GPU a DRM driver holds (every /dev/dri node)",
        ["00:02.0", "03:00.0"],
    )
    findings = found(facts, shape.spec)
    assert said(findings) == [
        ("container-loses-gpus", "etc/pve/lxc/122.conf"),
        ("container-loses-gpus", "etc/pve/lxc/123.conf"),
        ("container-loses-gpus", "etc/pve/lxc/124.conf"),
        ("gpu-reference-moved", "etc/pve/lxc/123.conf line 13"),
        ("gpu-reference-renumbered", "etc/pve/lxc/123.conf line 14"),
        ("minors-change-at-reboot", "jellyfin"),
    ]
    hooks = [f for f in findings if f.subject.startswith("etc/pve/lxc/123.conf line")]
    assert "after the reboot that number is 03:00.0" in hooks[1].message
    assert review(hooks) == golden("txt")


# --- 5. drm-number-flip-and-by-path ----------------------------------------------------


def test_drm_numbers_keep_todays_probe_order_and_offset(tmp_path: Path, golden: Golden) -> None:
    """The iGPU has the higher render minor and simpledrm keeps card0: after the RX 6600
    leaves, the iGPU is renderD128 and card1 (not card0); the by-path line stays."""
    shape = fh.drm_number_flip_and_by_path()
    facts = facts_of(tmp_path, shape)
    numbers = next_boot_numbers(facts, [PciAddress.parse("0000:01:00.0")])
    assert [(c.before, c.after) for c in numbers.changes] == [(2, 1), (129, 128)]
    findings = found(facts, shape.spec)
    assert said(findings) == [
        ("container-loses-gpus", "etc/pve/lxc/105.conf"),
        ("container-renumbered-at-reboot", "etc/pve/lxc/105.conf"),
    ]
    assert review(findings) == golden("txt")


# --- 6. devN-every-nvidia-node ---------------------------------------------------------


def test_every_container_holding_every_nvidia_node(tmp_path: Path) -> None:
    """The first 3090 goes to a VM: both containers lose /dev/nvidia0 and their
    /dev/nvidia1 line moves to /dev/nvidia0 for the reboot; the shared nodes stay."""
    shape = fh.devn_every_nvidia_node()
    findings = found(facts_of(tmp_path, shape), shape.spec)
    assert said(findings) == [
        ("container-loses-gpus", "etc/pve/lxc/105.conf"),
        ("container-loses-gpus", "etc/pve/lxc/106.conf"),
        ("container-renumbered-at-reboot", "etc/pve/lxc/105.conf"),
        ("container-renumbered-at-reboot", "etc/pve/lxc/106.conf"),
    ]
    renumbered = [f for f in findings if f.code == "container-renumbered-at-reboot"]
    assert all("dev1: /dev/nvidia1 -> /dev/nvidia0" in f.message for f in renumbered)


# --- 7. cgroup-allow-all-privileged ----------------------------------------------------


def test_allow_all_is_one_refusal_for_every_gpu(tmp_path: Path, golden: Golden) -> None:
    """`a` opens every device: one refusal naming each GPU once (its NVIDIA and DRM nodes
    alike), whose fix keeps the container's other devices."""
    shape = fh.cgroup_allow_all_privileged()
    problems = refused(facts_of(tmp_path, shape), shape.spec)
    assert said(problems) == [("lxc-grants-all-gpus", "etc/pve/lxc/107.conf line 9")]
    assert "replace it with rules for the devices CT 107 needs" in problems[0].fix
    assert review(problems) == golden("txt")


@pytest.mark.parametrize("rule", ["a *:* rwm", "c *:* rwm", "a\t*:*\trwm"])
def test_every_spelling_of_every_device_is_that_refusal(tmp_path: Path, rule: str) -> None:
    shape = fh.cgroup_allow_all_privileged()
    conf = shape.host.files["etc/pve/lxc/107.conf"].replace(
        "lxc.cgroup2.devices.allow: a\n", f"lxc.cgroup2.devices.allow: {rule}\n"
    )
    shape = shape.with_files({"etc/pve/lxc/107.conf": conf})
    problems = refused(facts_of(tmp_path, shape), shape.spec)
    assert said(problems) == [("lxc-grants-all-gpus", "etc/pve/lxc/107.conf line 9")]
    assert "open every device" in problems[0].message


# --- 8. cgroup-v1-keys-pve7-8-9 --------------------------------------------------------


@pytest.mark.parametrize(
    ("hybrid", "expected"),
    [
        (False, ("lxc-cgroup-key-inert", "etc/pve/lxc/201.conf")),
        (True, ("container-loses-gpus", "etc/pve/lxc/201.conf")),
    ],
)
def test_v1_keys_by_hierarchy_and_the_autodev_hook(
    tmp_path: Path, hybrid: bool, expected: tuple[str, str]
) -> None:
    """On the unified hierarchy the v1 lines are inert (named), on a hybrid boot live
    (removed with the iGPU); either way the autodev hook that mknods the iGPU's nodes is
    named: it still acts on the VM's GPU at every start."""
    shape = fh.cgroup_v1_keys(hybrid=hybrid)
    findings = found(facts_of(tmp_path, shape), shape.spec)
    assert said(findings) == sorted(
        [
            expected,
            ("gpu-reference-moved", "etc/pve/lxc/201.conf line 12"),
            ("minors-change-at-reboot", "jellyfin"),
        ]
    )


# --- 9. dynamic-majors-and-late-nodes --------------------------------------------------


def test_units_and_rules_that_touch_no_gpu_stay_quiet(tmp_path: Path) -> None:
    """The nvidia-smi oneshot, ProxMenux's module rules and rules for majors that no GPU
    has now reach no GPU: no reference, and the split of the Frigate container's pool says
    only what its own lines need."""
    shape = fh.dynamic_majors_and_late_nodes()
    facts = facts_of(tmp_path, shape)
    paths = {r.path for r in facts.references}
    assert paths == {"etc/pve/lxc/150.conf"}
    findings = found(facts, shape.spec)
    assert said(findings) == [
        ("minors-change-at-reboot", "frigate"),
        ("nvidia-uvm-major-dynamic", "etc/pve/lxc/150.conf"),
    ]


# --- 10. vfio-move-renumbers-minors ----------------------------------------------------


def test_a_gpu_leaving_mid_bus_renumbers_every_later_line(tmp_path: Path, golden: Golden) -> None:
    """Minor 1 leaves: /dev/nvidia2 and 3 become 1 and 2, renderD130 becomes 129, in
    rules, mount entries and devN alike; a container holding one GPU by both stacks is
    refused (one patch cannot move both)."""
    shape = fh.vfio_move_renumbers_minors()
    problems = refused(facts_of(tmp_path / "a", shape), shape.spec)
    assert said(problems) == [("container-loses-gpus-of-two-stacks", "etc/pve/lxc/153.conf")]
    shape = shape.without("etc/pve/lxc/153.conf")
    findings = found(facts_of(tmp_path / "b", shape), shape.spec)
    assert said(findings) == [
        ("container-renumbered-at-reboot", "etc/pve/lxc/150.conf"),
        ("container-renumbered-at-reboot", "etc/pve/lxc/151.conf"),
        ("container-renumbered-at-reboot", "etc/pve/lxc/152.conf"),
    ]
    assert review(findings) == golden("txt")


# --- 11. vm-hookscript-driver-juggling -------------------------------------------------


def test_hookscripts_that_juggle_drivers(tmp_path: Path, golden: Golden) -> None:
    """VM 100 unbinds the 780M Jellyfin keeps: refused. The handoff VM 111's hookscript
    runs unloads nvidia (followed into /usr/local/bin): a second binder of its own GPU.
    VM 112 writes reset_method of VM 111's GPU at its starts: named."""
    shape = fh.vm_hookscript_driver_juggling()
    facts = facts_of(tmp_path / "a", shape)
    (handoff,) = refs_in(facts, "etc/pve/qemu-server/111.conf")
    assert (reached(handoff), handoff.every) == (
        ["03:00.0"],
        "every GPU nvidia holds (it unloads the module)",
    )
    problems = refused(facts, shape.spec)
    assert said(problems) == [
        ("binder-takes-host-gpu", "etc/pve/qemu-server/100.conf line 9"),
        ("vm-takes-pool-gpu", "etc/pve/qemu-server/100.conf line 10"),
    ]
    shape = shape.without("etc/pve/qemu-server/100.conf")
    findings = found(facts_of(tmp_path / "b", shape), shape.spec)
    assert said(findings) == [
        ("gpu-reference-moved", "etc/pve/qemu-server/112.conf line 9"),
        ("second-gpu-binder", "etc/pve/qemu-server/111.conf line 9"),
    ]
    assert review([*problems, *findings]) == golden("txt")


# --- 12. args-vfio-device --------------------------------------------------------------


def test_args_with_an_mdev_by_uuid_is_its_parent_gpu(tmp_path: Path) -> None:
    """vgpu_unlock's `sysfsdev=/sys/bus/mdev/devices/<uuid>` is a vGPU of the 2080 Ti the
    AI container's pool takes: refused. `args: -cpu` names no device."""
    shape = fh.args_vfio_device()
    facts = facts_of(tmp_path, shape)
    (args,) = refs_in(facts, "etc/pve/qemu-server/101.conf")
    assert (reached(args), args.unresolved) == (["01:00.0"], None)
    assert refs_in(facts, "etc/pve/qemu-server/102.conf") == []
    assert said(refused(facts, shape.spec)) == [
        ("vm-args-takes-pool-gpu", "etc/pve/qemu-server/101.conf line 9")
    ]


def test_args_with_an_mdev_that_does_not_exist_is_unresolved(tmp_path: Path) -> None:
    shape = fh.args_vfio_device()
    shape = fh.FieldHost(shape.name, attrs.evolve(shape.host, mdevs=()), shape.spec)
    facts = facts_of(tmp_path, shape)
    (args,) = refs_in(facts, "etc/pve/qemu-server/101.conf")
    assert f"mediated device {fh.VGPU_UNLOCK_MDEV}, which does not exist" in (args.unresolved or "")
    assert said(found(facts, shape.spec)) == [
        ("gpu-reference-unresolved", "etc/pve/qemu-server/101.conf line 9")
    ]


# --- 13. udev-driver-override-and-mode-rules -------------------------------------------


def test_udev_kernels_on_a_bridge_reaches_the_gpu_behind_it(tmp_path: Path) -> None:
    """anomixer's KERNELS== for the switch port matches the 3090 below it; both lines bind
    the GPU the admin wants for a container: refused (with the GPU's own refusal: it is
    on vfio-pci now). The MODE rules name the iGPU's nodes, which keep their numbers."""
    shape = fh.udev_driver_override_and_mode_rules()
    facts = facts_of(tmp_path, shape)
    bridge, own = refs_in(facts, "etc/udev/rules.d/90-vfio-pci.rules")
    assert (reached(bridge), bridge.every) == (["06:00.0"], "every device below 0000:05:08.0")
    assert reached(own) == ["06:00.0"]
    modes = refs_in(facts, "etc/udev/rules.d/59-igpu-passthrough.rules")
    assert [(str(r.node), reached(r)) for r in modes] == [
        ("226:128", ["00:02.0"]),
        ("226:1", ["00:02.0"]),
    ]
    assert said(refused(facts, shape.spec)) == [
        ("binder-takes-host-gpu", "etc/udev/rules.d/90-vfio-pci.rules line 1"),
        ("binder-takes-host-gpu", "etc/udev/rules.d/90-vfio-pci.rules line 2"),
        ("gpu-minor-unknown", "0000:06:00.0"),
    ]


def test_udev_rules_once_the_gpu_is_back_on_nvidia(tmp_path: Path) -> None:
    """With anomixer's rules gone and the 3090 back on nvidia, the ProxMenux rule races the
    split unit for the VM's GPU, and the iGPU's MODE rules by number (card1: simpledrm
    keeps card0) are right after the reboot too: nothing to say about them."""
    shape = fh.udev_driver_override_and_mode_rules().without("etc/udev/rules.d/90-vfio-pci.rules")
    devices = tuple(
        attrs.evolve(
            d,
            driver="nvidia" if d.driver == "vfio-pci" else d.driver,
            driver_override=None,
            nvidia=NvidiaInfo(model="NVIDIA GeForce RTX 3090", minor=0),
        )
        if d.address == "0000:06:00.0"
        else attrs.evolve(d, driver="snd_hda_intel")
        if d.address == "0000:06:00.1"
        else d
        for d in shape.host.devices
    )
    shape = fh.FieldHost(shape.name, attrs.evolve(shape.host, devices=devices), shape.spec)
    findings = found(facts_of(tmp_path, shape), shape.spec)
    assert said(findings) == [
        ("second-gpu-binder", "etc/udev/rules.d/10-proxmenux-vfio-bind.rules line 1")
    ]


# --- 14. boot-time-binders-sysfs-conf-and-units ----------------------------------------


def test_units_that_unload_nvidia_take_every_nvidia_gpu(tmp_path: Path) -> None:
    """The handoff units run a script that unloads nvidia: every NVIDIA GPU, the 3060 Plex
    keeps among them (refused). Without them, the sysfs.conf pin of the 5070 races the
    split unit; the nvidia-smi oneshot names no GPU."""
    shape = fh.boot_time_binders()
    facts = facts_of(tmp_path / "a", shape)
    assert refs_in(facts, "etc/systemd/system/nvidia-init.service") == []
    assert said(refused(facts, shape.spec)) == [
        ("binder-takes-host-gpu", "etc/systemd/system/gpu-to-nvidia.service line 6"),
        ("binder-takes-host-gpu", "etc/systemd/system/gpu-to-vfio.service line 7"),
    ]
    shape = shape.without(*fh.HANDOFF_UNITS)
    findings = found(facts_of(tmp_path / "b", shape), shape.spec)
    assert said(findings) == [
        ("minors-change-at-reboot", "plex"),
        ("second-gpu-binder", "etc/sysfs.conf line 1"),
    ]


# --- 15. modprobe-ids-shared-device-id -------------------------------------------------


def test_ids_and_blacklists_of_two_identical_gpus(tmp_path: Path, golden: Golden) -> None:
    """ids= on the command line and in modprobe.d take both 3090s: refused; once they are
    gone the two blacklists of nvidia (modprobe.d and the command line) are named."""
    shape = fh.modprobe_ids_shared_device_id()
    facts = facts_of(tmp_path / "a", shape)
    (cmdline,) = refs_in(facts, "proc/cmdline")
    assert (cmdline.kind, cmdline.text, cmdline.binds, reached(cmdline)) == (
        ReferenceKind.CMDLINE,
        "modprobe.blacklist=nouveau,nvidiafb,nvidia",
        "blacklist",
        ["01:00.0", "02:00.0"],
    )
    assert said(refused(facts, shape.spec)) == [
        ("gpu-minor-unknown", "0000:02:00.0"),
        ("vfio-ids-grab-host-gpu", "etc/modprobe.d/vfio.conf"),
        ("vfio-ids-grab-host-gpu", "proc/cmdline"),
    ]
    shape = fh.modprobe_ids_shared_device_id(ids_removed=True)
    findings = found(facts_of(tmp_path / "b", shape), shape.spec)
    assert said(findings) == [
        ("gpu-driver-blacklisted", "etc/modprobe.d/blacklist-gpu.conf line 2"),
        ("gpu-driver-blacklisted", "proc/cmdline"),
    ]
    assert review(findings) == golden("txt")


def test_blacklists_are_no_binders_of_gpus_going_to_vms(tmp_path: Path) -> None:
    """With both 3090s for VMs, keeping nvidia off them agrees with the split: no second
    binder to race, nothing said of the blacklists."""
    shape = fh.modprobe_ids_shared_device_id(ids_removed=True)
    spec = fh._spec(
        "pve-3090",
        fh.vm_pool("win", ["01:00.0"], 200, "rtx3090-win"),
        fh.vm_pool("linux", ["02:00.0"], 201, "rtx3090-linux"),
    )
    assert said(found(facts_of(tmp_path, shape), spec)) == []


def test_module_blacklist_on_the_command_line_is_refused(tmp_path: Path) -> None:
    """The kernel's own `module_blacklist=nvidia` never loads the module, even by name."""
    shape = fh.modprobe_ids_shared_device_id(ids_removed=True)
    cmdline = shape.host.cmdline.replace("modprobe.blacklist=", "module_blacklist=")
    shape = fh.FieldHost(shape.name, attrs.evolve(shape.host, cmdline=cmdline), shape.spec)
    problems = refused(facts_of(tmp_path, shape), shape.spec)
    assert said(problems) == [("binder-takes-host-gpu", "proc/cmdline")]
    assert "proxmox-boot-tool refresh" in problems[0].fix


# --- 16. driverctl-override ------------------------------------------------------------


def test_driverctl_override_of_a_gpu_for_a_container(tmp_path: Path) -> None:
    shape = fh.driverctl_override()
    facts = facts_of(tmp_path, shape)
    (override,) = refs_in(facts, "etc/driverctl.d/pci-0000:01:00.0")
    assert (override.kind, reached(override)) == (ReferenceKind.DRIVERCTL, ["01:00.0"])
    assert said(refused(facts, shape.spec)) == [
        ("driverctl-override-conflict", "etc/driverctl.d/pci-0000:01:00.0"),
        ("gpu-minor-unknown", "0000:01:00.0"),
    ]


# --- 22. intel-igpu-sriov-vfs ----------------------------------------------------------


def test_igpu_vfs_blocked_and_a_hookscript_moving_the_pf(tmp_path: Path) -> None:
    """VM 201's hook moves the PF Jellyfin keeps (and so destroys every VF): refused.
    Without it, the VF-block rule binds the desktop VM's VF as the split does (a second
    binder), and sysfs.conf's sriov_numvfs for the PF that stays is no binder at all."""
    shape = fh.intel_igpu_sriov_vfs()
    facts = facts_of(tmp_path / "a", shape)
    (numvfs,) = refs_in(facts, "etc/sysfs.conf")
    assert (numvfs.binds, reached(numvfs)) == ("sriov_numvfs = 7", ["00:02.0"])
    (rule,) = refs_in(facts, "etc/udev/rules.d/99-i915-vf-vfio.rules")
    assert reached(rule) == [f"00:02.{n}" for n in range(1, 8)]
    assert said(refused(facts, shape.spec)) == [
        ("binder-takes-host-gpu", "etc/pve/qemu-server/201.conf line 9")
    ]
    shape = shape.without("var/lib/vz/snippets/proxmenux-gpu-guard.sh").with_files(
        {"etc/pve/qemu-server/201.conf": fh._vm("win-vf", 201, "hostpci0: 0000:00:02.2\n")}
    )
    findings = found(facts_of(tmp_path / "b", shape), shape.spec)
    assert said(findings) == [
        ("second-gpu-binder", "etc/udev/rules.d/99-i915-vf-vfio.rules line 1")
    ]


def test_sriov_numvfs_of_a_pf_the_plan_moves_is_named(tmp_path: Path) -> None:
    """With no VFs made yet the PF may go to a VM, but sysfs.conf still makes 7 at every
    boot: named, never passed over."""
    host = igpu_host(
        0,
        files={"etc/sysfs.conf": "devices/pci0000:00/0000:00:02.0/sriov_numvfs = 7\n"},
    )
    spec = fh._spec("pve-nuc", fh.vm_pool("desktop", ["00:02.0"], 200, "igpu"))
    findings = found(facts_of(tmp_path, fh.FieldHost("pve-nuc", host, spec)), spec)
    assert ("gpu-reference-moved", "etc/sysfs.conf line 1") in said(findings)


# --- 23. amd-kfd-shared-node -----------------------------------------------------------


def test_kfd_stays_with_the_render_node_the_container_keeps(tmp_path: Path, golden: Golden) -> None:
    """The RX 9070 XT leaves: its render and card lines go, the iGPU's move to renderD128
    and card1 (simpledrm's card0 stays); /dev/kfd and card0 stay, no GPU's own."""
    shape = fh.amd_kfd_shared_node()
    facts = facts_of(tmp_path, shape)
    refs = refs_in(facts, "etc/pve/lxc/105.conf")
    assert [(r.node_path, reached(r)) for r in refs] == [
        ("/dev/dri/renderD128", ["03:00.0"]),
        ("/dev/dri/renderD129", ["7c:00.0"]),
        ("/dev/dri/card0", []),
        ("/dev/dri/card1", ["03:00.0"]),
        ("/dev/dri/card2", ["7c:00.0"]),
    ]
    findings = found(facts, shape.spec)
    assert said(findings) == [
        ("container-loses-gpus", "etc/pve/lxc/105.conf"),
        ("container-renumbered-at-reboot", "etc/pve/lxc/105.conf"),
    ]
    assert review(findings) == golden("txt")


# --- red team --------------------------------------------------------------------------


def test_every_spelling_of_a_rule_is_read_and_removed(tmp_path: Path, golden: Golden) -> None:
    """`=`, tabs, a comment after the access letters and LXC's rule by path all name the
    3090 that leaves: each is found, and the bundle's patch removes each (the `#` line is
    the container's description and stays); the hook's `0, 1` is both GPUs."""
    from pvegpu.rendering.lxc import render_lxc_configs

    shape = fh.odd_spellings()
    facts = facts_of(tmp_path, shape)
    rules = refs_in(facts, "etc/pve/lxc/130.conf")
    assert [(r.line, reached(r)) for r in rules] == [(n, ["02:00.0"]) for n in range(9, 14)]
    (hook,) = refs_in(facts, "etc/pve/lxc/131.conf")
    assert reached(hook) == ["01:00.0", "02:00.0"]
    without_hook = shape.without("etc/pve/lxc/131.conf")
    planned = plan(facts_of(tmp_path / "b", without_hook), parse_spec(shape.spec))
    (patch,) = [a for a in render_lxc_configs(planned) if a.path.endswith("130.conf")]
    assert patch.content == golden("conf")


@pytest.mark.parametrize("kind", ["fifo", "directory", "loop", "huge", "binary"])
def test_a_hook_that_is_no_readable_script_is_named_not_fatal(tmp_path: Path, kind: str) -> None:
    """A hook path that is a FIFO, a directory, a link loop, 10 MB or an ELF: discovery
    goes on, and the reference is unresolved with why."""
    shape = fh.nvidia_hook_visible_all().with_files(
        {
            "etc/pve/lxc/140.conf": fh._ct(
                "hooked", 140, "lxc.hook.pre-start: /usr/local/bin/gpu-prep.sh\n"
            ),
            "etc/pve/qemu-server/300.conf": fh._vm("vm", 300, "hookscript: local:snippets/x.sh\n"),
        }
    )
    root = shape.write(tmp_path)
    for path in (root / "usr/local/bin/gpu-prep.sh", root / "var/lib/vz/snippets/x.sh"):
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        elif kind == "loop":
            path.symlink_to(path.name)
        elif kind == "huge":
            path.write_text("echo 0000:01:00.0 > /sys/bus/pci/drivers/nvidia/unbind\n" * 200_000)
        else:
            path.write_bytes(b"\x7fELF\x02\x01\x01\0" + bytes(range(256)))
    facts = discover(root)
    hook = next(r for r in refs_in(facts, "etc/pve/lxc/140.conf"))
    script = next(r for r in refs_in(facts, "etc/pve/qemu-server/300.conf"))
    assert hook.unresolved is not None and "/usr/local/bin/gpu-prep.sh" in hook.unresolved
    assert script.unresolved is not None and "local:snippets/x.sh" in script.unresolved
    assert hook.gpus == script.gpus == ()


def test_scripts_with_crlf_dash_prefixes_links_and_continued_rules(tmp_path: Path) -> None:
    """A hookscript saved with CRLF, a unit whose ExecStart has `-`, a hook that is a link
    to the admin's script, a udev rule continued with `\\` and one with a Latin-1 byte:
    each still names the GPU it moves."""
    unbind = "echo 0000:02:00.0 > /sys/bus/pci/devices/0000:02:00.0/driver/unbind\n"
    shape = fh.devn_every_nvidia_node().with_files(
        {
            "etc/pve/qemu-server/300.conf": fh._vm("vm", 300, "hookscript: local:snippets/c.sh\n"),
            "var/lib/vz/snippets/c.sh": ("#!/bin/sh\n" + unbind).replace("\n", "\r\n"),
            "etc/systemd/system/pin.service": "[Service]\nExecStart=-/usr/local/bin/pin.sh\n",
            "usr/local/bin/pin.sh": "#!/bin/sh\n" + unbind,
            "opt/gpu/prep.sh": "#!/bin/sh\n" + unbind,
            "etc/pve/lxc/140.conf": fh._ct(
                "linked", 140, "lxc.hook.pre-start: /usr/local/bin/prep\n"
            ),
            "etc/udev/rules.d/80-gpu.rules": (
                'SUBSYSTEM=="pci", \\\n  KERNEL=="0000:02:00.0", \\\n'
                '  ATTR{driver_override}="vfio-pci"\n'
            ),
        }
    )
    root = shape.write(tmp_path)
    (root / "usr/local/bin/prep").symlink_to("/opt/gpu/prep.sh")
    (root / "etc/udev/rules.d/81-latin1.rules").write_bytes(
        b'# GPU f\xfcr die VM\nSUBSYSTEM=="pci", KERNEL=="0000:02:00.0", '
        b'ATTR{driver_override}="vfio-pci"\n'
    )
    facts = discover(root)
    for path in (
        "etc/pve/qemu-server/300.conf",
        "etc/systemd/system/pin.service",
        "etc/pve/lxc/140.conf",
        "etc/udev/rules.d/80-gpu.rules",
        "etc/udev/rules.d/81-latin1.rules",
    ):
        (ref,) = refs_in(facts, path)
        assert (reached(ref), ref.unresolved) == (["02:00.0"], None), path
        assert ref.binds is not None and "vfio-pci" not in (ref.unresolved or ""), path
    (rule,) = refs_in(facts, "etc/udev/rules.d/80-gpu.rules")
    assert rule.line == 1


def test_a_by_path_name_behind_vmd_is_its_gpu(tmp_path: Path) -> None:
    """A stable DRM name with a five-digit domain (a GPU behind Intel VMD)."""
    from test_pci_domains import VMD_GPU, vmd_host

    host = vmd_host()
    host = attrs.evolve(
        host,
        files={
            **host.files,
            "etc/pve/lxc/140.conf": "dev0: /dev/dri/by-path/pci-10000:e1:00.0-render\n"
            f"lxc.hook.pre-start: sh -c 'echo {VMD_GPU} > /sys/bus/pci/drivers/nvidia/unbind'\n",
        },
    )
    facts = facts_of(tmp_path, fh.FieldHost("pve-vmd", host, ""))
    dev, hook = refs_in(facts, "etc/pve/lxc/140.conf")
    assert reached(dev) == reached(hook) == ["10000:e1:00.0"]


def test_a_hook_in_a_pending_section_is_judged(tmp_path: Path) -> None:
    """A hand-edited `[pve:pending]` with the hook and its variable: applied at the next
    start, so refused like the main section's."""
    shape = fh.devn_every_nvidia_node().with_files(
        {
            "etc/pve/lxc/140.conf": fh._ct("pending", 140, "")
            + "\n[pve:pending]\nlxc.environment: NVIDIA_VISIBLE_DEVICES=0\n"
            "lxc.hook.mount: /usr/share/lxc/hooks/nvidia\n"
        }
    )
    facts = facts_of(tmp_path, shape)
    (hook,) = refs_in(facts, "etc/pve/lxc/140.conf")
    assert (hook.section, reached(hook)) == ("pve:pending", ["01:00.0"])
    assert ("lxc-hook-grants-pool-gpu", hook.where) in said(refused(facts, shape.spec))


def test_a_cdi_spec_pvegpu_cannot_read_is_named(tmp_path: Path) -> None:
    shape = fh.devn_every_nvidia_node().with_files(
        {"etc/cdi/broken.json": '{"cdiVersion": "0.5.0", "devices": [\n'}
    )
    facts = facts_of(tmp_path, shape)
    (ref,) = refs_in(facts, "etc/cdi/broken.json")
    assert "not a CDI spec pvegpu can read" in (ref.unresolved or "")
    assert ("gpu-reference-unresolved", "etc/cdi/broken.json") in said(found(facts, shape.spec))


def test_a_packaged_program_as_hook_is_read_as_its_command_line(tmp_path: Path) -> None:
    """`/usr/bin/nvidia-modprobe -c0 -u` (6.2-1.sh's pre-start without `sh -c`) is no
    script to open: it names no GPU, so nothing is said, and a missing binary is no
    unresolved hook."""
    shape = fh.devn_every_nvidia_node().with_files(
        {
            "etc/pve/lxc/140.conf": fh._ct(
                "modprobe", 140, "lxc.hook.pre-start: /usr/bin/nvidia-modprobe -c0 -u\n"
            )
        }
    )
    facts = facts_of(tmp_path, shape)
    assert refs_in(facts, "etc/pve/lxc/140.conf") == []


def test_a_unit_running_a_script_pvegpu_cannot_read_is_unresolved(tmp_path: Path) -> None:
    shape = fh.devn_every_nvidia_node().with_files(
        {"etc/systemd/system/gpu.service": "[Service]\nExecStart=/usr/local/bin/gone.sh\n"}
    )
    facts = facts_of(tmp_path, shape)
    (ref,) = refs_in(facts, "etc/systemd/system/gpu.service")
    assert "it runs /usr/local/bin/gone.sh, which pvegpu cannot read" in (ref.unresolved or "")
    assert ("gpu-reference-unresolved", "etc/systemd/system/gpu.service line 2") in said(
        found(facts, shape.spec)
    )


def test_rules_by_path_and_v1_rules_move_to_the_new_numbers(tmp_path: Path, golden: Golden) -> None:
    """On the hybrid host the Arc (CT 125's, not in a pool) is renderD128 after the
    reboot: its live v1 rule and its rule by path move with it in the bundle's patch."""
    from pvegpu.rendering.lxc import render_lxc_configs

    lines = (
        "lxc.cgroup.devices.allow: c 226:129 rwm\n"
        "lxc.cgroup.devices.allow: /dev/dri/renderD129 rwm\n"
        "lxc.mount.entry: /dev/dri/renderD129 dev/dri/renderD129 none bind,optional,create=file\n"
    )
    shape = fh.cgroup_v1_keys(hybrid=True).with_files(
        {"etc/pve/lxc/125.conf": fh._ct("plex", 125, lines, unprivileged=False)}
    )
    spec = fh._spec("pve-media", fh.vm_pool("nvr", ["00:02.0"], 310, "igpu-vm"))
    planned = plan(facts_of(tmp_path, shape), parse_spec(spec))
    assert ("container-renumbered-at-reboot", "etc/pve/lxc/125.conf") in said(planned.findings)
    (patch,) = [a for a in render_lxc_configs(planned) if a.path.endswith("125.conf")]
    assert patch.content == golden("conf")
