"""The next boot: boot-loader command lines and module lists, judged like /proc/cmdline;
the runbook applies boot changes with this host's command and reboots where a finding
says the plan holds only until then."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

import fixture_hosts
from bundled import KPRO6_LXC_ONLY, KPRO6_SPEC, WORKSTATION_VM, host_facts
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError
from pvegpu.host import sysfs
from pvegpu.host.discover import discover
from pvegpu.host.facts_json import facts_from_json, facts_to_json
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.artifact import Artifact
from pvegpu.model.bootconfig import BootLoader, BootModule, KernelCmdline, ModuleStage
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import RENDERERS
from pvegpu.rendering.revert import render_revert
from pvegpu.rendering.review import Step, revert_steps, runbook
from pvegpu.spec.load import parse_spec
from pvegpu.testing import HostSpec, write_host

Golden = Callable[[str], SnapshotAssertion]
KPRO6_CMDLINE = "root=ZFS=rpool/ROOT/pve-1 boot=zfs amd_iommu=on iommu=nopt"
SYSTEMD_BOOT = {
    "etc/kernel/cmdline": KPRO6_CMDLINE + "\n",
    "etc/kernel/proxmox-boot-uuids": "1A2B-3C4D\n",
}
GRUB = {"etc/default/grub": 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'}


def _host(
    tmp_path: Path, base: HostSpec, files: Mapping[str, str], links: Mapping[str, str] = {}
) -> HostFacts:
    """`base` with extra files and links, written under `tmp_path` and discovered."""
    variant = attrs.evolve(base, files={**base.files, **files}, symlinks={**base.symlinks, **links})
    root = tmp_path / "host"
    write_host(variant, root)
    return discover(root)


def kpro6(tmp_path: Path, files: Mapping[str, str], links: Mapping[str, str] = {}) -> HostFacts:
    return _host(tmp_path, fixture_hosts.kpro6(), files, links)


def _refusals(facts: HostFacts, spec: str = KPRO6_SPEC) -> list[Diagnostic]:
    with pytest.raises(PlanError) as err:
        plan(facts, parse_spec(spec))
    return list(err.value.problems)


def _codes(problems: Sequence[Diagnostic]) -> list[tuple[str, str]]:
    return [(p.code, p.subject) for p in problems]


def _artifacts(planned: Plan) -> tuple[Artifact, ...]:
    applied = tuple(a for renderer in RENDERERS for a in renderer(planned))
    return (*applied, *render_revert(planned, applied))


def _step(steps: Sequence[Step], title: str) -> Step:
    return next(s for s in steps if s.title.startswith(title))


# ---------------------------------------------------------------------------- parsers


def test_shell_assignments_follow_sh() -> None:
    """Quotes, escapes, $VAR/${VAR} and earlier files' values, as grub-mkconfig's sh sees them."""
    text = (
        "# GRUB_CMDLINE_LINUX=commented\n"
        'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX a=\\"1\\" \\$b"\n'
        "export GRUB_CMDLINE_LINUX_DEFAULT='quiet $x'  # trailing\n"
        'EXTRA=c\nGRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} $EXTRA\nd"\n'
        "if [ -x /x ]; then GRUB_X=1; fi\n"
    )
    made = sysfs.shell_assignments(text, {"GRUB_CMDLINE_LINUX": "root=/dev/sda"})
    assert made == {
        "GRUB_CMDLINE_LINUX": 'root=/dev/sda a="1" $b c\nd',
        "GRUB_CMDLINE_LINUX_DEFAULT": "quiet $x",
        "EXTRA": "c",
    }
    with pytest.raises(ValueError, match="never closed"):
        sysfs.shell_assignments('GRUB_CMDLINE_LINUX="open\n', {})


def test_module_lists_and_kernel_params() -> None:
    """First word per line, comments skipped; parameter keys with `-` read as `_`."""
    assert sysfs.module_names("# c\n; c\n\nnvidia NVreg_X=1\n  vfio-pci\n") == (
        "nvidia",
        "vfio-pci",
    )
    assert sysfs.kernel_params('vfio-pci.ids=10de:2bb5 quiet a="b"') == (
        ("vfio_pci.ids", "10de:2bb5"),
        ("quiet", ""),
        ("a", "b"),
    )


# ---------------------------------------------------------------------------- discovery


def test_discovery_reads_the_next_boot(tmp_path: Path) -> None:
    """Boot loader from the files present; GRUB values after every grub.d file; module
    lists with /etc/modules read once although modules-load.d links to it."""
    facts = kpro6(
        tmp_path,
        {
            **GRUB,
            "etc/default/grub.d/50-a.cfg": (
                'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT a"\n'
            ),
            "etc/default/grub.d/60-b.cfg": 'GRUB_CMDLINE_LINUX="b"\n',
            "etc/default/grub.d/note.txt": 'GRUB_CMDLINE_LINUX="ignored"\n',
            "etc/initramfs-tools/modules": "# initramfs\nzfs\n",
            "etc/modules": "vfio\n",
            "etc/modules-load.d/nvidia.conf": "nvidia-drm\n",
        },
        {"etc/modules-load.d/modules.conf": "../modules"},
    )
    boot = facts.boot
    assert (boot.loader, boot.boot_tool) == (BootLoader.GRUB, False)
    assert boot.cmdlines == (
        KernelCmdline("etc/default/grub.d/60-b.cfg", "b", "GRUB_CMDLINE_LINUX"),
        KernelCmdline("etc/default/grub.d/50-a.cfg", "quiet a", "GRUB_CMDLINE_LINUX_DEFAULT"),
    )
    assert boot.modules == (
        BootModule("etc/initramfs-tools/modules", "zfs"),
        BootModule("etc/modules", "vfio"),
        BootModule("etc/modules-load.d/nvidia.conf", "nvidia-drm"),
    )
    assert [m.stage for m in boot.modules] == [ModuleStage.INITRAMFS] + [
        ModuleStage.MODULES_LOAD
    ] * 2
    assert facts_from_json(facts_to_json(facts)) == facts
    booted = kpro6(tmp_path / "b", SYSTEMD_BOOT)
    assert (booted.boot.loader, booted.boot.boot_tool) == (BootLoader.SYSTEMD_BOOT, True)
    assert booted.boot.cmdlines == (KernelCmdline("etc/kernel/cmdline", KPRO6_CMDLINE),)


def test_snapshot_carries_the_next_boot(tmp_path: Path) -> None:
    """The boot files are read through the reader, so a snapshot plans like the host."""
    facts = kpro6(tmp_path, {**SYSTEMD_BOOT, "etc/initramfs-tools/modules": "nvidia\n"})
    snapshot(tmp_path / "host", tmp_path / "s.tar.gz")
    unpacked = discover(unpack(tmp_path / "s.tar.gz", tmp_path / "unpacked"))
    assert unpacked.boot == facts.boot and unpacked.boot.modules


def test_hosts_without_boot_files_keep_their_facts_json() -> None:
    """No boot file read: `boot` is left out of the facts document, which reads back equal."""
    facts = host_facts("kpro6")
    assert facts.boot.loader is None and not facts.boot.cmdlines
    assert '"boot"' not in facts_to_json(facts)
    assert facts_from_json(facts_to_json(facts)) == facts


# ---------------------------------------------------------------------------- judgments


@pytest.mark.parametrize(
    ("files", "subject"),
    [
        ({"etc/kernel/cmdline": KPRO6_CMDLINE + " vfio-pci.ids=10de:2bb5\n"}, "etc/kernel/cmdline"),
        (
            {"etc/default/grub": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet vfio-pci.ids=10de:2bb5"\n'},
            "etc/default/grub",
        ),
        (
            {
                **GRUB,
                "etc/default/grub.d/90-vfio.cfg": (
                    'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX vfio_pci.ids=10de:2bb5,10de:22e8"\n'
                ),
            },
            "etc/default/grub.d/90-vfio.cfg",
        ),
    ],
    ids=["kernel-cmdline", "grub", "grub.d"],
)
def test_next_boot_vfio_ids_are_refused(
    tmp_path: Path, files: Mapping[str, str], subject: str
) -> None:
    """vfio-pci.ids= for the next boot takes the container's twins too: refused as today's."""
    problems = _refusals(kpro6(tmp_path, files))
    assert _codes(problems) == [("vfio-ids-grab-host-gpu", subject)]
    assert "for the next boot" in problems[0].message
    apply = "proxmox-boot-tool refresh" if subject == "etc/kernel/cmdline" else "update-grub"
    assert f"run `{apply}`" in problems[0].fix


def test_a_later_grub_file_that_drops_the_ids_passes(tmp_path: Path) -> None:
    """Later grub.d files override earlier ones: what grub-mkconfig ends with is judged."""
    facts = kpro6(
        tmp_path,
        {
            "etc/default/grub": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet vfio-pci.ids=10de:2bb5"\n',
            "etc/default/grub.d/99-split.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n',
        },
    )
    assert plan(facts, parse_spec(KPRO6_SPEC)).pools


def test_gpu_driver_in_the_initramfs_is_refused(tmp_path: Path) -> None:
    """nvidia from the initramfs binds the VM GPUs before the split unit can pin them."""
    facts = kpro6(tmp_path, {**SYSTEMD_BOOT, "etc/initramfs-tools/modules": "zfs\nnvidia-drm\n"})
    problems = _refusals(facts)
    assert _codes(problems) == [("boot-driver-in-initramfs", "etc/initramfs-tools/modules")]
    assert "0000:81:00.0" in problems[0].message and "0000:01:00.0" not in problems[0].message
    assert "update-initramfs -u -k all && proxmox-boot-tool refresh" in problems[0].fix
    # Host-side GPUs only: nvidia from the initramfs is what they want anyway.
    assert plan(facts, parse_spec(KPRO6_LXC_ONLY)).pools


def test_gpu_driver_from_modules_load_is_noted(tmp_path: Path) -> None:
    """systemd-modules-load runs after the split unit: a note, not a refusal."""
    facts = kpro6(
        tmp_path, {"etc/modules-load.d/nvidia.conf": "nvidia\n", "etc/modules": "nvidia\n"}
    )
    found = plan(facts, parse_spec(KPRO6_SPEC)).findings
    assert [(f.code, f.subject) for f in found if f.code.startswith("boot-")] == [
        ("boot-driver-after-split", "etc/modules"),
        ("boot-driver-after-split", "etc/modules-load.d/nvidia.conf"),
    ]


def test_iommu_off_for_the_next_boot_is_refused(tmp_path: Path) -> None:
    """amd_iommu=off on kpro6 (AMD) is refused; intel_iommu=off there changes nothing."""
    off = kpro6(tmp_path, {"etc/kernel/cmdline": KPRO6_CMDLINE + " amd_iommu=off\n"})
    assert _codes(_refusals(off)) == [("boot-iommu-off", "etc/kernel/cmdline")]
    other = kpro6(tmp_path / "b", {"etc/kernel/cmdline": KPRO6_CMDLINE + " intel_iommu=off\n"})
    assert plan(other, parse_spec(KPRO6_SPEC)).pools


def test_intel_iommu_off_on_the_workstation_is_refused(tmp_path: Path) -> None:
    """The workstation (VT-d) with intel_iommu=off in GRUB; a later `on` would win."""
    grub = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=off"\n'
    facts = _host(tmp_path, fixture_hosts.workstation(), {"etc/default/grub": grub})
    assert _codes(_refusals(facts, WORKSTATION_VM)) == [("boot-iommu-off", "etc/default/grub")]
    grub = 'GRUB_CMDLINE_LINUX_DEFAULT="intel_iommu=off intel_iommu=on"\n'
    facts = _host(tmp_path / "b", fixture_hosts.workstation(), {"etc/default/grub": grub})
    assert plan(facts, parse_spec(WORKSTATION_VM)).pools


def test_iommu_pt_with_sev_snp(tmp_path: Path) -> None:
    """SNP refuses passthrough: refused with a VM pool, a warning without; nopt after pt wins."""
    facts = kpro6(tmp_path, {"etc/kernel/cmdline": KPRO6_CMDLINE + " iommu=pt\n"})
    assert _codes(_refusals(facts)) == [("boot-iommu-passthrough", "etc/kernel/cmdline")]
    found = plan(facts, parse_spec(KPRO6_LXC_ONLY)).findings
    assert [(f.severity, f.code) for f in found if f.code.startswith("boot-")] == [
        ("warning", "boot-iommu-passthrough")
    ]
    cancelled = kpro6(tmp_path / "b", {"etc/kernel/cmdline": "iommu=pt iommu=nopt\n"})
    assert plan(cancelled, parse_spec(KPRO6_SPEC)).pools


# ---------------------------------------------------------------------------- runbook


@pytest.mark.parametrize(
    ("files", "commands", "boots_with"),
    [
        (SYSTEMD_BOOT, ("update-initramfs -u -k all", "proxmox-boot-tool refresh"), "systemd-boot"),
        (GRUB, ("update-initramfs -u -k all",), "GRUB (/etc/default/grub)"),
    ],
    ids=["systemd-boot", "grub"],
)
def test_runbook_applies_boot_changes_the_host_way(
    tmp_path: Path, files: Mapping[str, str], commands: tuple[str, ...], boots_with: str
) -> None:
    """The modprobe.d hook goes into the initramfs this host boots, and the revert's out."""
    planned = plan(kpro6(tmp_path, files), parse_spec(KPRO6_SPEC))
    artifacts = _artifacts(planned)
    install = _step(runbook(planned, artifacts), "Install the host files")
    assert install.commands[-len(commands) :] == commands
    assert install.commands[-len(commands) - 1].startswith("install ")
    assert f"This host boots with {boots_with}" in install.expect
    restore = _step(revert_steps(planned, artifacts), "Put the host files back")
    assert restore.commands[-len(commands) :] == commands


def test_runbook_ends_with_a_reboot_check(kpro6: Plan) -> None:
    """The split changes the boot: the last step checks it comes back after a reboot."""
    last = runbook(kpro6, _artifacts(kpro6))[-1]
    assert last.title == "At the next reboot of kpro6, check that the split comes back by itself"
    assert last.commands[:2] == (
        "systemctl is-active pvegpu-vfio-split.service",
        "/usr/local/sbin/pvegpu-vfio-split status",
    )
    assert last.output[0] == "0000:81:00.0 vfio-pci" and len(last.output) == 8


def test_minors_change_means_reboot_and_plan_again_before_the_container() -> None:
    """minors-change-at-reboot: the runbook reboots after the configs and starts nothing."""
    spec = (
        KPRO6_SPEC.replace("numa_node = 0", "numa_node = 2")
        .replace("numa_node = 1", "numa_node = 0")
        .replace("numa_node = 2", "numa_node = 1")
    )
    planned = plan(host_facts("kpro6"), parse_spec(spec))
    assert [f.code for f in planned.findings if f.reboot_first] == ["minors-change-at-reboot"]
    steps = runbook(planned, _artifacts(planned))
    titles = [s.title for s in steps]
    configs = titles.index("Write the Proxmox configuration")
    assert titles[configs + 1 :] == [
        "Reboot kpro6 before starting CT 129",
        "After the reboot, check the split and plan again",
    ]
    assert steps[configs + 1].commands == ("systemctl reboot",)
    assert steps[-1].commands[-1].startswith("pvegpu render --root / ")
    assert not any(c.startswith("pct start") for s in steps for c in s.commands)


# ---------------------------------------------------------------------------- golden text


def test_boot_findings_text(tmp_path: Path, golden: Golden) -> None:
    """Every new refusal and finding, as the admin reads them."""
    cases = {
        "kernel-cmdline-ids": (SYSTEMD_BOOT | {"etc/kernel/cmdline": "vfio-pci.ids=10de:2bb5\n"}),
        "grub-ids": {"etc/default/grub": 'GRUB_CMDLINE_LINUX="vfio-pci.ids=10de:2bb5"\n'},
        "initramfs": {"etc/initramfs-tools/modules": "nvidia\n"},
        "modules-load": {"etc/modules-load.d/gpu.conf": "nvidia\n"},
        "iommu-off": GRUB | {"etc/default/grub.d/x.cfg": 'GRUB_CMDLINE_LINUX="iommu=off"\n'},
        "iommu-pt": {"etc/kernel/cmdline": "iommu=pt\n"},
    }
    out: list[str] = []
    for index, (name, files) in enumerate(cases.items()):
        facts = kpro6(tmp_path / str(index), files)
        for spec in (KPRO6_SPEC, KPRO6_LXC_ONLY):
            out.append(f"## {name}, {'lxc only' if spec is KPRO6_LXC_ONLY else 'split'}")
            try:
                found = plan(facts, parse_spec(spec)).findings
                out += [
                    f"{f.severity}: {f.subject}: {f.message} [{f.code}]"
                    for f in found
                    if f.code.startswith("boot-")
                ]
            except PlanError as err:
                out += [f"refused: {p}" for p in err.problems]
    assert "\n".join(out) + "\n" == golden("txt")
