"""What the next boot changes: the kernel it runs, the GPU driver module that kernel
loads, and the containers whose NVIDIA userspace will not match it, read before the
reboot (hosts of tests/upgrade_host.py, written with pvegpu.testing)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

import fixture_hosts
import upgrade_host as up
from bundled import KPRO6_LXC_ONLY, WORKSTATION_VM, spec_path
from pvegpu.apply.check import check
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import DiscoveryError, PlanError
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json, facts_to_json
from pvegpu.host.grubcfg import chosen_kernel, grubenv, parse_grub_cfg
from pvegpu.host.kernels import version_key
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.facts import HostFacts
from pvegpu.model.kernels import KernelChoice, Kernels, ModuleOrigin, NextModule
from pvegpu.model.plan import Plan
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.planning.planner import plan
from pvegpu.rendering.review import Step, runbook
from pvegpu.spec.load import load_spec, parse_spec
from pvegpu.testing import DkmsBuild, GrubSpec, HostSpec, KernelSpec, KernelsSpec
from pvegpu.testing.kernels import GRUB_ROOT_ID, grub_cfg

Golden = Callable[[str], SnapshotAssertion]
VIDEO = "kernel/drivers/video/nvidia.ko"
NEXT_BOOT_CODES = (
    "next-boot-kernel",
    "next-boot-unknown",
    "next-boot-driver",
    "next-boot-driver-missing",
    "next-boot-driver-unknown",
    "container-driver-next-boot",
    "container-driver-next-boot-unchecked",
    "container-uvm-major-next-boot",
)


def _facts(tmp_path: Path, spec: HostSpec) -> HostFacts:
    return discover(up.write(spec, tmp_path / "host"))


def _ours(findings: Sequence[Diagnostic]) -> list[tuple[str, str]]:
    return [(f.code, f.subject) for f in findings if f.code in NEXT_BOOT_CODES]


def _kpro6(tmp_path: Path, spec: HostSpec, example: str = "kpro6") -> Plan:
    """examples/<example>.toml planned on `spec` as the CLI does (its serving files)."""
    loaded = load_spec(spec_path(example))
    return plan(discover_for(loaded, up.write(spec, tmp_path / "host")), loaded)


# ---------------------------------------------------------------------------- parsers


def test_releases_sort_as_sort_v() -> None:
    releases = ["6.8.12-10-pve", "6.14.8-2-pve", "6.8.12-9-pve", "6.17.2-1-pve"]
    assert sorted(releases, key=version_key) == [
        "6.8.12-9-pve",
        "6.8.12-10-pve",
        "6.14.8-2-pve",
        "6.17.2-1-pve",
    ]


def test_grub_default_by_index_path_id_title_and_fallback() -> None:
    """GRUB_DEFAULT's forms resolve to the entry's kernel; an unknown one boots entry 0."""
    releases = ["6.8.12-4-pve", "6.14.8-2-pve"]
    menu = parse_grub_cfg(grub_cfg(releases, GrubSpec()))
    assert menu.default == "0"
    advanced = f"gnulinux-advanced-{GRUB_ROOT_ID}"
    titles = "Advanced options for Proxmox VE GNU/Linux>Proxmox VE GNU/Linux, with Linux"
    cases = {
        "0": "6.14.8-2-pve",
        "1>1": "6.8.12-4-pve",
        f"{advanced}>gnulinux-6.8.12-4-pve-advanced-{GRUB_ROOT_ID}": "6.8.12-4-pve",
        f"{titles} 6.8.12-4-pve": "6.8.12-4-pve",
        "1": "6.14.8-2-pve",  # the submenu itself: its first entry
        "gnulinux-9.9-advanced-x": "6.14.8-2-pve",  # no such entry: GRUB boots entry 0
        "7": "6.14.8-2-pve",
    }
    assert {d: chosen_kernel(menu, d) for d in cases} == cases
    saved = parse_grub_cfg(grub_cfg(releases, GrubSpec(default="saved")))
    assert saved.default == "${saved_entry}"
    env = grubenv("# GRUB Environment Block\nsaved_entry=1>1\nnext_entry=\n" + "#" * 900)
    assert env == {"saved_entry": "1>1", "next_entry": ""}
    with pytest.raises(ValueError, match="never closed"):
        parse_grub_cfg("menuentry 'x' {\n  linux /boot/vmlinuz-1\n")
    with pytest.raises(ValueError, match="line 1"):
        parse_grub_cfg("menuentry 'x {\n")


# ---------------------------------------------------------------------------- discovery


def test_discovery_reads_the_kernels_and_the_dkms_build(tmp_path: Path) -> None:
    """The running kernel, the installed ones in version order, the newest as the next
    boot (proxmox-boot-tool, no pin) and the nvidia build DKMS installed for it."""
    facts = _facts(tmp_path, up.kpro6_upgrade())
    assert facts.boot.kernels == Kernels(
        running=up.RUNNING,
        installed=(up.RUNNING, up.NEWER),
        next_boot=up.NEWER,
        choice=KernelChoice.NEWEST,
        modules=(
            NextModule(
                "nvidia",
                ModuleOrigin.DKMS,
                version=up.NEW,
                path=f"lib/modules/{up.NEWER}/updates/dkms/nvidia.ko",
                dkms=f"var/lib/dkms/nvidia/{up.NEW}/{up.NEWER}",
            ),
        ),
    )
    # The userspace of every GPU container is read while the upgrade is pending.
    assert facts.file(f"{up.CT}/var/lib/dpkg/status") is not None
    text = facts_to_json(facts)
    assert '"kernels"' in text and facts_from_json(text) == facts


@pytest.mark.parametrize(
    ("pins", "expected"),
    [
        ((up.RUNNING, None), (up.RUNNING, KernelChoice.PIN, "etc/kernel/proxmox-boot-pin")),
        (
            (up.NEWER, up.RUNNING),
            (up.RUNNING, KernelChoice.NEXT_BOOT_PIN, "etc/kernel/next-boot-pin"),
        ),
        # A pin of a kernel that is gone: systemd-boot boots the newest.
        (("6.5.13-6-pve", None), (up.NEWER, KernelChoice.NEWEST, None)),
    ],
    ids=["pin", "next-boot-pin", "stale-pin"],
)
def test_proxmox_boot_tool_pins(
    tmp_path: Path,
    pins: tuple[str, str | None],
    expected: tuple[str, KernelChoice, str | None],
) -> None:
    """(pin, next-boot pin) -> (next boot, what chose it, the file)."""
    base = up.kpro6_upgrade().kernels
    assert base is not None
    pinned = attrs.evolve(base, pin=pins[0], next_boot_pin=pins[1])
    kernels = _facts(tmp_path, up.kpro6_upgrade(kernels=pinned)).boot.kernels
    assert (kernels.next_boot, kernels.choice, kernels.decided_by) == expected


@pytest.mark.parametrize(
    ("grub", "expected"),
    [
        (GrubSpec(), (up.RUNNING, KernelChoice.GRUB_DEFAULT, "boot/grub/grub.cfg")),
        (
            # What `proxmox-boot-tool kernel pin` writes on a GRUB host, after update-grub.
            GrubSpec(
                default=f"gnulinux-advanced-{GRUB_ROOT_ID}>"
                f"gnulinux-{up.WS_RUNNING}-advanced-{GRUB_ROOT_ID}"
            ),
            (up.WS_RUNNING, KernelChoice.GRUB_DEFAULT, "boot/grub/grub.cfg"),
        ),
        (
            GrubSpec(default="saved", saved_entry="1>1"),
            (up.WS_RUNNING, KernelChoice.GRUB_DEFAULT, "boot/grub/grubenv"),
        ),
        (
            GrubSpec(default="saved", saved_entry="1>1", next_entry="0"),
            (up.RUNNING, KernelChoice.GRUB_NEXT_ENTRY, "boot/grub/grubenv"),
        ),
    ],
    ids=["default-0", "pinned-id", "saved", "grub-reboot"],
)
def test_grub_hosts(
    tmp_path: Path, grub: GrubSpec, expected: tuple[str, KernelChoice, str]
) -> None:
    kernels = _facts(tmp_path, up.workstation_grub(grub)).boot.kernels
    assert (kernels.next_boot, kernels.choice, kernels.decided_by) == expected


def test_module_origins(tmp_path: Path) -> None:
    """DKMS's installed build (Debian's nvidia-current, compressed), not a build left
    uninstalled; a module installed without DKMS; none at all."""
    debian = DkmsBuild(
        version=up.NEW, module="nvidia-current", files=("nvidia-current",), suffix=".ko.zst"
    )
    built_only = DkmsBuild(version="595.10.01", installed=False)
    spec = up.kpro6_upgrade(
        kernels=KernelsSpec(
            running=up.RUNNING,
            installed=(KernelSpec(release=up.NEWER, dkms=(built_only, debian)),),
        )
    )
    module = _facts(tmp_path / "dkms", spec).boot.kernels.modules[0]
    assert (module.origin, module.version, module.path) == (
        ModuleOrigin.DKMS,
        up.NEW,
        f"lib/modules/{up.NEWER}/updates/dkms/nvidia-current.ko.zst",
    )
    other = _facts(tmp_path / "run", up.workstation_grub(newer_module=True))
    assert other.boot.kernels.modules == (
        NextModule("nvidia", ModuleOrigin.OTHER, path=f"lib/modules/{up.RUNNING}/{VIDEO}"),
    )
    none = _facts(tmp_path / "none", up.workstation_grub()).boot.kernels.modules
    assert none == (NextModule("nvidia", ModuleOrigin.NONE),)


def test_hosts_without_kernels_read_as_before(tmp_path: Path) -> None:
    """No osrelease, no /boot: no `kernels` in the facts (every committed fixture), nor
    in the `boot` object of a host with boot files."""
    booted = attrs.evolve(
        fixture_hosts.kpro6(), files={**fixture_hosts.kpro6().files, **up.SYSTEMD_BOOT}
    )
    facts = _facts(tmp_path, booted)
    assert facts.boot.kernels == Kernels() and facts.boot.boot_tool
    text = facts_to_json(facts)
    assert '"boot"' in text and '"kernels"' not in text
    assert facts_from_json(text) == facts
    # An Intel-only host names no nvidia module, whatever its kernels.
    intel = attrs.evolve(
        fixture_hosts.intel_media(),
        kernels=KernelsSpec(running=up.RUNNING, installed=(KernelSpec(release=up.RUNNING),)),
    )
    assert _facts(tmp_path / "intel", intel).boot.kernels.modules == ()


@pytest.mark.parametrize(
    ("path", "text", "message"),
    [
        ("proc/sys/kernel/osrelease", "6.8 /x\n", "kernel release"),
        ("boot/grub/grub.cfg", "menuentry 'x' {\n", "never closed"),
    ],
)
def test_bad_files_are_refused_by_name(tmp_path: Path, path: str, text: str, message: str) -> None:
    spec = up.workstation_grub(GrubSpec())
    root = up.write(spec, tmp_path / "host")
    (root / path).write_text(text)
    with pytest.raises(DiscoveryError) as err:
        discover(root)
    problem = err.value.problems[0]
    assert (problem.code, problem.subject) == ("bad-value", path)
    assert message in problem.message


def test_snapshot_carries_the_kernels(tmp_path: Path) -> None:
    """Kernel images and modules travel as empty files, DKMS's link as a link."""
    facts = _facts(tmp_path, up.kpro6_upgrade())
    snapshot(tmp_path / "host", tmp_path / "s.tar.gz")
    unpacked = discover(unpack(tmp_path / "s.tar.gz", tmp_path / "unpacked"))
    assert unpacked.boot.kernels == facts.boot.kernels
    assert unpacked.file(f"{up.CT}/var/lib/dpkg/status") == facts.file(
        f"{up.CT}/var/lib/dpkg/status"
    )


# ---------------------------------------------------------------------------- planning


def test_the_upgrade_story(tmp_path: Path) -> None:
    """580 loaded, 590 built for the default next kernel, CT 129 on 580: the plan passes
    (the runbook restarts CT 129 on 580) and says what the reboot breaks."""
    planned = _kpro6(tmp_path, up.kpro6_upgrade())
    assert _ours(planned.findings) == [
        ("next-boot-kernel", f"boot/vmlinuz-{up.NEWER}"),
        ("next-boot-driver", f"var/lib/dkms/nvidia/{up.NEW}/{up.NEWER}"),
        ("container-driver-next-boot", f"{up.LIBS}"),
    ]
    ct = next(f for f in planned.findings if f.code == "container-driver-next-boot")
    assert "libnvidia-compute-590=590.48.01-*" in ct.message
    assert 'userspace = "host" on pool sglang' in ct.message
    steps = runbook(planned, plan_and_render(planned.facts, planned.spec)[1])
    upgrade = _step(steps, "After the next reboot of kpro6, which loads nvidia 590.48.01")
    assert upgrade.commands[0].startswith("pct exec 129 -- sh -c 'apt install libnvidia")
    assert "systemctl restart sglang-qwen" in upgrade.expect


def test_the_upgrade_is_recorded_on_the_plan_and_the_runbook_writes_the_record(
    tmp_path: Path,
) -> None:
    """CT 129's upgrade is decided by plan() (`Plan.host_changes`), and the runbook's
    step formats that record: it decides no upgrade of its own."""
    planned = _kpro6(tmp_path, up.kpro6_upgrade())
    (upgrade,) = planned.host_changes.userspace_upgrades
    assert upgrade.vmid == 129
    assert upgrade.command.startswith("pct exec 129 -- sh -c 'apt install libnvidia")
    artifacts = plan_and_render(planned.facts, planned.spec)[1]
    title = "After the next reboot of kpro6, which loads nvidia 590.48.01"
    assert _step(runbook(planned, artifacts), title).commands[0] == upgrade.command
    recorded = attrs.evolve(
        planned,
        host_changes=attrs.evolve(
            planned.host_changes, userspace_upgrades=(attrs.evolve(upgrade, command="true"),)
        ),
    )
    assert _step(runbook(recorded, artifacts), title).commands[0] == "true"
    nothing = attrs.evolve(
        planned, host_changes=attrs.evolve(planned.host_changes, userspace_upgrades=())
    )
    assert not any(s.title.startswith(title) for s in runbook(nothing, artifacts))


def test_a_driver_upgrade_for_the_running_kernel(tmp_path: Path) -> None:
    """`apt` replaced 580 by 590 and DKMS rebuilt it for the running kernel, which boots
    again: the driver changes, the kernel does not."""
    build = KernelSpec(release=up.RUNNING, dkms=(DkmsBuild(version=up.NEW),))
    kernels = KernelsSpec(running=up.RUNNING, installed=(build,))
    planned = plan(_facts(tmp_path, up.kpro6_upgrade(kernels=kernels)), parse_spec(KPRO6_LXC_ONLY))
    assert _ours(planned.findings) == [
        ("next-boot-driver", f"var/lib/dkms/nvidia/{up.NEW}/{up.RUNNING}"),
        ("container-driver-next-boot", up.LIBS),
    ]


def test_a_container_already_on_the_next_version_is_refused_until_the_reboot(
    tmp_path: Path,
) -> None:
    """The runbook restarts CT 129 now, on the loaded module: 590 userspace is refused."""
    with pytest.raises(PlanError) as err:
        _kpro6(tmp_path, up.kpro6_upgrade(userspace=up.NEW))
    assert [p.code for p in err.value.problems] == ["container-driver-mismatch"]


def _swapped(example: str) -> str:
    """An example with its NUMA nodes swapped: the container's GPUs renumber at the
    reboot (minors-change-at-reboot), so the runbook reboots before starting it."""
    text = spec_path(example).read_text()
    return (
        text.replace("numa_node = 0", "numa_node = 2")
        .replace("numa_node = 1", "numa_node = 0")
        .replace("numa_node = 2", "numa_node = 1")
    )


def test_a_runbook_that_reboots_judges_against_the_next_boot(tmp_path: Path) -> None:
    """The containers start after the runbook's reboot, on 590: 580 userspace is refused
    (it would fail after it), 590 passes although 580 is loaded now."""
    spec = parse_spec(_swapped("kpro6"))
    old = up.write(up.kpro6_upgrade(), tmp_path / "old")
    with pytest.raises(PlanError) as err:
        plan(discover_for(spec, old), spec)
    problem = err.value.problems[0]
    assert problem.code == "container-driver-mismatch"
    assert "after the runbook's reboot is 590.48.01" in problem.message
    assert "libnvidia-compute-590=590.48.01-*" in problem.fix
    new = up.write(up.kpro6_upgrade(userspace=up.NEW), tmp_path / "new")
    planned = plan(discover_for(spec, new), spec)
    assert "container-driver-next-boot" not in {f.code for f in planned.findings}
    steps = runbook(planned, plan_and_render(planned.facts, spec)[1])
    reboot = _step(steps, "Reboot kpro6")
    assert "This reboot also loads nvidia 590.48.01" in reboot.expect


def test_a_pinned_kernel_without_a_module(tmp_path: Path) -> None:
    """The pinned (running) kernel lost its nvidia build: no driver after the reboot."""
    planned = plan(_facts(tmp_path, up.pinned()), parse_spec(KPRO6_LXC_ONLY))
    assert _ours(planned.findings) == [("next-boot-driver-missing", f"lib/modules/{up.RUNNING}")]
    missing = planned.findings[[f.code for f in planned.findings].index("next-boot-driver-missing")]
    assert f"dkms autoinstall -k {up.RUNNING}" in missing.message
    assert f"kernel pin {up.RUNNING}" not in missing.message  # the running one already


def test_grub_host_stories(tmp_path: Path) -> None:
    """GRUB boots the newest kernel, which the .run (no DKMS) never reached: missing; with
    the running kernel pinned, nothing; the .run also in the newer kernel: unread."""
    ws = WORKSTATION_VM
    facts = _facts(tmp_path / "a", up.workstation_grub())
    planned = plan(facts, parse_spec(ws))
    assert _ours(planned.findings) == [
        ("next-boot-kernel", "boot/grub/grub.cfg"),
        ("next-boot-driver-missing", f"lib/modules/{up.RUNNING}"),
    ]
    missing = next(f for f in planned.findings if f.code == "next-boot-driver-missing")
    assert f"proxmox-boot-tool kernel pin {up.WS_RUNNING}" in missing.message
    pinned = GrubSpec(default=f"gnulinux-advanced-{GRUB_ROOT_ID}>1")
    facts = _facts(tmp_path / "b", up.workstation_grub(pinned))
    assert _ours(plan(facts, parse_spec(ws)).findings) == []
    facts = _facts(tmp_path / "c", up.workstation_grub(newer_module=True))
    assert _ours(plan(facts, parse_spec(ws)).findings) == [
        ("next-boot-kernel", "boot/grub/grub.cfg"),
        ("next-boot-driver-unknown", f"lib/modules/{up.RUNNING}/{VIDEO}"),
    ]


def test_other_containers_and_raw_majors(tmp_path: Path) -> None:
    """A container outside the plan holding a GPU node with its own 580 userspace, one
    whose files cannot be read, and the raw-style pool container's uvm rule."""
    ct = "rpool/data/subvol-140-disk-0"
    other = (
        "arch: amd64\nhostname: notebook\nostype: ubuntu\n"
        "rootfs: local-zfs:subvol-140-disk-0,size=32G\n"
        "dev0: /dev/nvidia4,mode=0666\ndev1: /dev/nvidiactl,mode=0666\n"
    )
    block = other.replace("local-zfs:subvol-140-disk-0", "local-zfs:vm-150-disk-0")
    spec = up.kpro6_upgrade(
        files={
            "etc/pve/lxc/140.conf": other,
            "etc/pve/lxc/150.conf": block.replace("nvidia4", "nvidia5"),
            f"{ct}/usr/lib/x86_64-linux-gnu/libcuda.so.{up.OLD}": "",
            f"{ct}/var/lib/dpkg/status": up.dpkg_status(up.OLD),
        }
    )
    planned = _kpro6(tmp_path, spec, "kpro6-raw")
    found = _ours(planned.findings)
    assert ("container-driver-next-boot", f"{ct}/usr/lib/x86_64-linux-gnu") in found
    assert ("container-driver-next-boot-unchecked", "etc/pve/lxc/150.conf") in found
    assert ("container-uvm-major-next-boot", "etc/pve/lxc/129.conf") in found
    notebook = next(f for f in planned.findings if f.subject.startswith(ct))
    assert 'a pool with userspace = "host"' in notebook.message


def _raw(vmid: int, rootfs: str, minors: Sequence[int]) -> str:
    """A container config handing over GPU nodes the raw way, uvm by its major (509)."""
    nodes = [f"/dev/nvidia{m}" for m in minors] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    rules = [f"c 195:{m} rwm" for m in (*minors, 255)] + ["c 509:* rwm"]
    return (
        f"arch: amd64\nhostname: ct{vmid}\nostype: ubuntu\nrootfs: {rootfs},size=32G\n"
        + "".join(f"lxc.cgroup2.devices.allow: {r}\n" for r in rules)
        + "".join(f"lxc.mount.entry: {n} {n[1:]} none bind,optional,create=file\n" for n in nodes)
    )


def test_a_next_boot_grub_cannot_name_is_said(tmp_path: Path) -> None:
    """grub.cfg older than /boot (its first entry's kernel was removed): unknown, said."""
    root = up.write(up.workstation_grub(), tmp_path / "host")
    (root / "boot/grub/grub.cfg").write_text(
        grub_cfg([up.WS_RUNNING, up.RUNNING, "6.20.1-1-pve"], GrubSpec())
    )
    facts = discover(root)
    assert facts.boot.kernels.next_boot is None
    assert "has no /boot/vmlinuz-6.20.1-1-pve" in facts.boot.kernels.unknown
    planned = plan(facts, parse_spec(WORKSTATION_VM))
    assert _ours(planned.findings) == [("next-boot-unknown", "boot/grub/grub.cfg")]


def test_only_raw_lines_that_stay_are_judged_and_only_the_vendors_containers(
    tmp_path: Path,
) -> None:
    """CT 129's raw lines become devN entries (the plan's default): not judged; CT 160's
    raw lines stay: judged. CT 170 holds a DRM node only: NVIDIA's upgrade is not its."""
    spec = up.kpro6_upgrade(
        files={
            "etc/pve/lxc/129.conf": _raw(129, "local-zfs:subvol-129-disk-0", range(4)),
            "etc/pve/lxc/160.conf": _raw(160, "local-zfs:subvol-160-disk-0", (6,)),
            "etc/pve/lxc/170.conf": (
                "arch: amd64\nrootfs: local-zfs:vm-170-disk-0,size=8G\n"
                "dev0: /dev/dri/renderD128,gid=104\n"
            ),
        }
    )
    planned = plan(_facts(tmp_path, spec), parse_spec(KPRO6_LXC_ONLY))
    found = _ours(planned.findings)
    assert ("container-uvm-major-next-boot", "etc/pve/lxc/160.conf") in found
    assert ("container-uvm-major-next-boot", "etc/pve/lxc/129.conf") not in found
    assert not [s for _, s in found if "170" in s]


def test_no_upgrade_no_findings(tmp_path: Path) -> None:
    """The next boot runs this kernel with the loaded version: nothing to say."""
    running = KernelSpec(release=up.RUNNING, dkms=(DkmsBuild(version=up.OLD),))
    kernels = KernelsSpec(running=up.RUNNING, installed=(running,))
    planned = _kpro6(tmp_path, up.kpro6_upgrade(kernels=kernels))
    assert _ours(planned.findings) == []
    assert planned.facts.file(f"{up.CT}/var/lib/dpkg/status") is not None  # the spec's


def test_check_reports_the_pending_reboot(tmp_path: Path) -> None:
    """`pvegpu check` on the host as it is: the same findings, the container by id; a
    container on block storage holding an NVIDIA node is unchecked, a DRM-only one is
    not NVIDIA's business."""
    spec = up.kpro6_upgrade(
        files={
            "etc/pve/lxc/150.conf": (
                "arch: amd64\nrootfs: local-zfs:vm-150-disk-0,size=8G\n"
                "dev0: /dev/nvidia5,mode=0666\n"
            ),
            "etc/pve/lxc/170.conf": (
                "arch: amd64\nrootfs: local-zfs:vm-170-disk-0,size=8G\n"
                "dev0: /dev/dri/renderD128,gid=104\n"
            ),
        }
    )
    root = up.write(spec, tmp_path / "host")
    found = _ours(check(root, None).findings)
    assert found == [
        ("container-driver-next-boot", "CT 129"),
        ("container-driver-next-boot-unchecked", "etc/pve/lxc/150.conf"),
        ("next-boot-kernel", f"boot/vmlinuz-{up.NEWER}"),
        ("next-boot-driver", f"var/lib/dkms/nvidia/{up.NEW}/{up.NEWER}"),
    ]


# ---------------------------------------------------------------------------- golden text


def _step(steps: Sequence[Step], title: str) -> Step:
    return next(s for s in steps if s.title.startswith(title))


def test_next_boot_text(tmp_path: Path, golden: Golden) -> None:
    """Every new finding and the runbook's step, as the admin reads them."""
    cases: dict[str, tuple[HostSpec, str]] = {
        "upgrade": (up.kpro6_upgrade(), "kpro6"),
        "pinned": (up.pinned(), "kpro6"),
        "grub-missing": (up.workstation_grub(), ""),
        "grub-unread": (up.workstation_grub(newer_module=True), ""),
        "raw": (up.kpro6_upgrade(), "kpro6-raw"),
    }
    out: list[str] = []
    for index, (name, (host, example)) in enumerate(cases.items()):
        out.append(f"## {name}")
        if example:
            planned = _kpro6(tmp_path / str(index), host, example)
        else:
            planned = plan(_facts(tmp_path / str(index), host), parse_spec(WORKSTATION_VM))
        out += [
            f"{f.severity}: {f.subject}: {f.message} [{f.code}]"
            for f in planned.findings
            if f.code in NEXT_BOOT_CODES
        ]
        if name == "upgrade":
            steps = runbook(planned, plan_and_render(planned.facts, planned.spec)[1])
            step = _step(steps, "After the next reboot")
            out += [f"### {step.title}", *step.commands, step.expect]
    assert "\n".join(out) + "\n" == golden("txt")
