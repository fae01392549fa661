"""render_split's artifacts: the boot unit (checked by systemd-analyze), the modprobe.d hook
(run against the simulated kernel), and what render_split refuses to render."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

import pvegpu.rendering.split as rendering_split
from bundled import FIXTURES, KPRO6_LXC_ONLY, REPO, copy_tree, example_plan
from linters import SYSTEM_UNITS, SYSTEMCTL, needs_systemd, verify
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError
from pvegpu.model.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.model.facts import ConfigFile, HostFacts, PciFunction, VfioIdsSetting
from pvegpu.model.plan import Plan
from pvegpu.model.schema import Spec
from pvegpu.pci import PciAddress
from pvegpu.planning import planner
from pvegpu.planning.split import revert_driver
from pvegpu.rendering.registry import render
from pvegpu.rendering.split import (
    INITRAMFS_HOOK_PATH,
    MODPROBE_PATH,
    SCRIPT_PATH,
    UNIT_PATH,
    render_split,
)
from pvegpu.vendors.nvidia import NVIDIA
from sysfs_sim import (
    KernelSim,
    copy_host,
    fixture_plan,
    natural_drivers,
    root_plan,
    set_attr,
    unload_driver,
)

VM = tuple(f"{slot}.{fn}" for slot in ("0000:81:00", "0000:91:00", "0000:e1:00", "0000:f1:00")
           for fn in (0, 1))  # fmt: skip
HOST_SIDE = tuple(f"{slot}.{fn}" for slot in ("0000:01:00", "0000:11:00", "0000:61:00",
                  "0000:71:00") for fn in (0, 1))  # fmt: skip
HOST_DRIVER = {"0": "nvidia", "1": "snd_hda_intel"}


@pytest.fixture(scope="module")
def artifacts(kpro6_plan: Plan) -> dict[str, Artifact]:
    return {a.path: a for a in render_split(kpro6_plan)}


def directives(unit: str) -> dict[tuple[str, str], list[str]]:
    """(section, key) -> values in order; repeated keys accumulate, as systemd reads them."""
    out: dict[tuple[str, str], list[str]] = {}
    section = ""
    for line in unit.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault((section, key), []).append(value)
    return out


def install_root(base: Path, artifacts: dict[str, Artifact]) -> Path:
    """A root holding the unit and an executable script where ExecStart points."""
    root = base / "root"
    for path in (SCRIPT_PATH, UNIT_PATH):
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(artifacts[path].content)
        target.chmod(artifacts[path].mode)
    return root


# --- render_split as an API


def test_render_split_artifacts(artifacts: dict[str, Artifact]) -> None:
    """Script and initramfs hook 0755, unit and modprobe file 0644, all on the host,
    reasons one line each."""
    assert list(artifacts) == [SCRIPT_PATH, UNIT_PATH, MODPROBE_PATH, INITRAMFS_HOOK_PATH]
    assert SCRIPT_PATH == "usr/local/sbin/pvegpu-vfio-split"
    assert UNIT_PATH == "etc/systemd/system/pvegpu-vfio-split.service"
    assert MODPROBE_PATH == "etc/modprobe.d/pvegpu-vfio.conf"
    assert INITRAMFS_HOOK_PATH == "etc/initramfs-tools/hooks/pvegpu-vfio-split"
    assert [a.mode for a in artifacts.values()] == [0o755, 0o644, 0o644, 0o755]
    for artifact in artifacts.values():
        assert artifact.target == HOST
        assert artifact.base is None
        assert artifact.reason and "\n" not in artifact.reason
        assert artifact.content.endswith("\n")


def test_no_vfio_pool_renders_nothing() -> None:
    """A plan that moves nothing to vfio-pci needs no script, unit or hook."""
    plan = fixture_plan("kpro6", KPRO6_LXC_ONLY)
    assert plan.vfio_pools == ()
    assert render_split(plan) == ()


def test_render_is_pure_and_same_after_the_split(kpro6_plan: Plan) -> None:
    """Same plan, same bytes; and the host after the split renders the very same files."""
    first = render_split(kpro6_plan)
    assert render_split(kpro6_plan) == first
    assert render_split(fixture_plan("kpro6-split")) == first


def test_script_data_lists_groups_and_pins(artifacts: dict[str, Artifact]) -> None:
    """The script carries address, id, NUMA, group and host driver of each function."""
    script = artifacts[SCRIPT_PATH].content
    assert "\n0000:81:00.0 10de:2bb5 1 40 nvidia\n0000:81:00.1 10de:22e8 1 40 snd_hda_intel\n" in (
        script
    )
    assert "\n0000:f1:00.1 10de:22e8 1 43 snd_hda_intel\n" in script
    assert "\n0000:01:00.0 10de:2bb5 0 nvidia\n0000:01:00.1 10de:22e8 0 snd_hda_intel\n" in script
    assert "0000:c1:00.0" not in script  # the NIC is in no pool and never named


def _installed(root: Path, artifacts: tuple[Artifact, ...]) -> None:
    for artifact in artifacts:
        target = root / artifact.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(artifact.content)


def test_render_over_installed_files_patches_them(kpro6_plan: Plan, tmp_path: Path) -> None:
    """Discovery reads the installed split files back: rendered again over a copy of kpro6
    holding them, each artifact is a no-op patch whose base is the installed file."""
    first = render_split(kpro6_plan)
    root = tmp_path / "kpro6"
    copy_tree(FIXTURES / "kpro6", root)
    _installed(root, first)
    second = render_split(root_plan(root))
    assert [(a.path, a.content) for a in second] == [(a.path, a.content) for a in first]
    for artifact in second:
        assert artifact.base == ConfigFile(artifact.path, artifact.content)
        assert artifact.is_patch


def test_patched_split_files_are_restored_on_revert(kpro6_plan: Plan, tmp_path: Path) -> None:
    """Over older installed split files, the revert bundle restores them instead of
    deleting them, and the summary lists them as patched."""
    root = tmp_path / "kpro6"
    copy_tree(FIXTURES / "kpro6", root)
    old = tuple(
        attrs.evolve(a, content=a.content.replace("generated by pvegpu", "generated earlier"))
        for a in render_split(kpro6_plan)
    )
    _installed(root, old)
    artifacts = render(root_plan(root))
    paths = (SCRIPT_PATH, UNIT_PATH, MODPROBE_PATH, INITRAMFS_HOOK_PATH)
    applied = {a.path: a for a in artifacts if a.bundle != REVERT_BUNDLE and a.path in paths}
    reverts = {a.path: a for a in artifacts if a.bundle == REVERT_BUNDLE and a.path in paths}
    summary = next(a for a in artifacts if a.target == REVIEW and a.path == "SUMMARY.md")
    for before in old:
        assert applied[before.path].base == ConfigFile(before.path, before.content)
        assert applied[before.path].content != before.content
        assert not reverts[before.path].delete
        assert reverts[before.path].content == before.content
        assert f"| patched | `/{before.path}` |" in summary.content


def test_render_after_the_split_keeps_vfio_pci_revert_target(tmp_path: Path) -> None:
    """Rendered again on the workstation after bind (A4000 held by vfio-pci overrides),
    the revert target stays vfio-pci: vfio-pci.ids= claims the A4000 either way."""
    root = tmp_path / "workstation"
    copy_tree(FIXTURES / "workstation", root)
    for address in ("0000:39:00.0", "0000:39:00.1"):
        set_attr(root, address, "driver_override", "vfio-pci")
    spec = (REPO / "examples/workstation.toml").read_text()
    after = render_split(root_plan(root, spec, "workstation"))
    assert after == render_split(example_plan("workstation"))
    assert "\n0000:39:00.0 10de:24b0 -1 6 vfio-pci\n" in after[0].content


@pytest.mark.parametrize(
    ("driver", "override", "ids", "expected"),
    [
        ("vfio-pci", None, (), "vfio-pci"),  # bound by ids= or new_id before the split
        ("nvidia", None, (), "nvidia"),
        ("nvidia", None, ("10de:24b0",), "nvidia"),  # discovery saw it: that wins
        ("vfio-pci", "vfio-pci", (), "nvidia"),  # the split itself: vendor table
        ("vfio-pci", "vfio-pci", ("10de:24b0",), "vfio-pci"),
        ("vfio-pci", "vfio-pci", ("10de:24b0:10de:14ad",), "vfio-pci"),
        ("vfio-pci", "vfio-pci", ("10de:24b0:ffffffff:ffffffff:030000:ff0000",), "vfio-pci"),
        ("vfio-pci", "vfio-pci", ("10de:24b0:1028:14ad",), "nvidia"),  # other subvendor
        ("vfio-pci", "vfio-pci", ("10de:24b0:10de:14ad:040300:ffffff",), "nvidia"),  # class
        ("vfio-pci", "vfio-pci", ("10de:24b1",), "nvidia"),
        (None, None, ("10de:24b0",), "vfio-pci"),  # unbound: where a probe takes it
        (None, None, (), "nvidia"),
    ],
)
def test_revert_driver(
    driver: str | None, override: str | None, ids: tuple[str, ...], expected: str
) -> None:
    """revert_driver: discovery's driver, vfio-pci only if it was there or ids= claims it."""
    plan = example_plan("workstation")
    a4000 = plan.facts.function(PciAddress.parse("0000:39:00.0"))
    assert a4000 is not None and a4000.subsystem_id == "10de:14ad"
    function = attrs.evolve(a4000, driver=driver, driver_override=override)
    facts = attrs.evolve(plan.facts, vfio_ids=(VfioIdsSetting("proc/cmdline", ids),))
    assert revert_driver(facts, function) == expected


def _with_group_member(plan: Plan, group_id: int, address: str) -> Plan:
    nic = plan.facts.function(PciAddress.parse(address))
    assert nic is not None
    facts = attrs.evolve(
        plan.facts,
        functions=tuple(
            attrs.evolve(f, iommu_group=group_id) if f is nic else f for f in plan.facts.functions
        ),
        iommu_groups=tuple(
            attrs.evolve(g, members=tuple(sorted((*g.members, nic.address))))
            if g.id == group_id
            else g
            for g in plan.facts.iommu_groups
        ),
    )
    return attrs.evolve(plan, facts=facts)


def _function_edit(plan: Plan, edit: Callable[[PciFunction], PciFunction]) -> HostFacts:
    """The plan's facts with `edit` applied to every function, GPUs' own included."""
    facts = plan.facts
    return attrs.evolve(
        facts,
        functions=tuple(edit(f) for f in facts.functions),
        gpus=tuple(
            attrs.evolve(g, function=edit(g.function), companions=tuple(map(edit, g.companions)))
            for g in facts.gpus
        ),
    )


def _refused(facts: HostFacts, spec: Spec) -> list[Diagnostic]:
    with pytest.raises(PlanError) as caught:
        planner.plan(facts, spec)
    return list(caught.value.problems)


def test_group_with_unplanned_member_is_refused_by_plan(kpro6_plan: Plan) -> None:
    """A VM group that also holds a NIC is refused by plan(), once, naming the GPU: the
    split renderer does not check it again."""
    facts = _with_group_member(kpro6_plan, 41, "0000:c1:00.0").facts
    assert [(p.code, p.subject) for p in _refused(facts, kpro6_plan.spec)] == [
        ("foreign-device-in-group", "0000:91:00.0")
    ]


def test_gpu_without_group_is_one_problem_with_one_fix(kpro6_plan: Plan) -> None:
    """A vfio GPU (with a mapping) whose IOMMU group is missing: one problem, not one
    from the pool's functions, one from its mapping and one from the split script."""
    gpu = PciAddress.parse("0000:81:00.0")
    facts = _function_edit(
        kpro6_plan, lambda f: attrs.evolve(f, iommu_group=None) if f.address == gpu else f
    )
    facts = attrs.evolve(
        facts,
        iommu_groups=tuple(
            attrs.evolve(g, members=tuple(a for a in g.members if a != gpu))
            for g in facts.iommu_groups
        ),
    )
    (problem,) = _refused(facts, kpro6_plan.spec)
    assert (problem.code, problem.subject) == ("gpu-without-iommu-group", str(gpu))
    assert "enable the IOMMU" in problem.fix


def test_function_on_both_sides_is_refused_by_plan(kpro6_plan: Plan) -> None:
    """Two display functions of one group, each GPU in a pool of its own kind (a dual-head
    card split between VM and container): plan() refuses both functions."""
    vm, host = PciAddress.parse("0000:81:00.0"), PciAddress.parse("0000:01:00.0")
    facts = kpro6_plan.facts
    vm_group = facts.function(vm).iommu_group  # type: ignore[union-attr]
    facts = _function_edit(
        kpro6_plan, lambda f: attrs.evolve(f, iommu_group=vm_group) if f.address == host else f
    )
    by_address = {g.address: g for g in facts.gpus}
    facts = attrs.evolve(
        facts,
        gpus=tuple(
            attrs.evolve(g, companions=(*g.companions, by_address[host].function))
            if g.address == vm
            else attrs.evolve(g, companions=(by_address[vm].function,))
            if g.address == host
            else g
            for g in facts.gpus
        ),
        iommu_groups=tuple(
            attrs.evolve(g, members=tuple(sorted((*g.members, host))))
            if g.id == vm_group
            else attrs.evolve(g, members=tuple(a for a in g.members if a != host))
            for g in facts.iommu_groups
        ),
    )
    both = [p for p in _refused(facts, kpro6_plan.spec) if p.code == "split-function-in-two-pools"]
    assert [p.subject for p in both] == [str(host), str(vm)]


@pytest.mark.parametrize("address", ["0000:81:00.1", "0000:01:00.1"])
def test_bad_driver_name_is_refused_by_plan(kpro6_plan: Plan, address: str) -> None:
    """A driver name the script cannot carry as data, on a function that moves or on one
    pinned to the host, is refused by plan() (the renderer writes it as it is)."""
    target = PciAddress.parse(address)
    facts = _function_edit(
        kpro6_plan, lambda f: attrs.evolve(f, driver="snd hda;x") if f.address == target else f
    )
    assert [(p.code, p.subject) for p in _refused(facts, kpro6_plan.spec)] == [
        ("split-bad-driver-name", "snd hda;x")
    ]


def test_split_renderer_never_refuses() -> None:
    """Every refusal of the split is plan()'s (planning/split.py, the IOMMU group checks
    of planning/planner.py): the renderer only formats an accepted plan."""
    assert "raise" not in inspect.getsource(rendering_split)


# --- the unit


def test_unit_runs_override_before_any_gpu_driver(artifacts: dict[str, Artifact]) -> None:
    """Oneshot, early (no default deps), before modules-load/udev trigger/persistenced."""
    unit = directives(artifacts[UNIT_PATH].content)
    assert unit[("Service", "ExecStart")] == ["/usr/local/sbin/pvegpu-vfio-split override"]
    assert unit[("Service", "Type")] == ["oneshot"]
    assert unit[("Service", "RemainAfterExit")] == ["yes"]
    assert unit[("Unit", "DefaultDependencies")] == ["no"]
    before = " ".join(unit[("Unit", "Before")]).split()
    for name in (
        "systemd-modules-load.service",
        "systemd-udev-trigger.service",
        "nvidia-persistenced.service",
        "sysinit.target",
        "shutdown.target",
    ):
        assert name in before
    assert unit[("Unit", "Conflicts")] == ["shutdown.target"]
    assert ("Unit", "After") not in unit
    assert unit[("Install", "WantedBy")] == ["sysinit.target"]


@needs_systemd
def test_unit_passes_systemd_analyze_verify(artifacts: dict[str, Artifact], tmp_path: Path) -> None:
    """systemd-analyze verify, with ExecStart resolved inside --root, says nothing at all."""
    root = install_root(tmp_path, artifacts)
    result = verify(root, root / UNIT_PATH)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_systemd
@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        ("missing-script", "is not executable"),
        ("unknown-key", "Unknown key"),
    ],
)
def test_verify_catches_broken_units(
    artifacts: dict[str, Artifact], tmp_path: Path, breakage: str, expected: str
) -> None:
    """Control: the same verify call reports a missing ExecStart binary and a typo."""
    root = install_root(tmp_path, artifacts)
    if breakage == "missing-script":
        (root / SCRIPT_PATH).unlink()
    else:
        unit = root / UNIT_PATH
        unit.write_text(unit.read_text().replace("RemainAfterExit=", "RemainAfterExitt="))
    result = verify(root, root / UNIT_PATH)
    assert expected in result.stdout + result.stderr


PERSISTENCED_STANDIN = """\
[Unit]
Description=Stand-in for the NVIDIA persistence daemon (as packaged: default dependencies)

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""


@needs_systemd
@pytest.mark.skipif(SYSTEMCTL is None or SYSTEM_UNITS is None, reason="no systemd units here")
@pytest.mark.parametrize("cycle", [False, True], ids=["as-rendered", "control-with-cycle"])
def test_enabled_unit_has_no_ordering_cycle(
    artifacts: dict[str, Artifact], tmp_path: Path, cycle: bool
) -> None:
    """Enabled among this system's real units, the boot transaction has no ordering cycle;
    the control adds After=basic.target and must be reported as one."""
    assert SYSTEM_UNITS is not None and SYSTEMCTL is not None
    root = install_root(tmp_path, artifacts)
    copy_tree(SYSTEM_UNITS, root / "usr/lib/systemd/system")
    (root / "etc/systemd/system/nvidia-persistenced.service").write_text(PERSISTENCED_STANDIN)
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-persistenced").write_text("#!/bin/sh\n")
    (root / "usr/bin/nvidia-persistenced").chmod(0o755)
    if cycle:
        unit = root / UNIT_PATH
        unit.write_text(unit.read_text().replace("[Service]", "After=basic.target\n\n[Service]"))
    enable = subprocess.run(
        [SYSTEMCTL, f"--root={root}", "enable", "pvegpu-vfio-split.service",
         "nvidia-persistenced.service"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert enable.returncode == 0, enable.stderr
    assert (root / "etc/systemd/system/sysinit.target.wants/pvegpu-vfio-split.service").is_symlink()
    result = verify(root, root / "usr/lib/systemd/system/multi-user.target")
    report = result.stdout + result.stderr
    if cycle:
        assert "ordering cycle" in report and "pvegpu-vfio-split.service" in report
    else:
        assert result.returncode == 0, report
        assert "pvegpu" not in report and "cycle" not in report


# --- hosts without NVIDIA VM GPUs


@pytest.fixture(scope="module")
def mixed() -> dict[str, Artifact]:
    return {a.path: a for a in render_split(example_plan("mixed"))}


@pytest.fixture(scope="module")
def amd_only() -> dict[str, Artifact]:
    """mixed without its NVIDIA card: the Radeon is the host's only GPU."""
    plan = example_plan("mixed")
    facts = attrs.evolve(
        plan.facts, gpus=tuple(g for g in plan.facts.gpus if g.vendor is not NVIDIA)
    )
    return {a.path: a for a in render_split(attrs.evolve(plan, facts=facts))}


def _comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("#"))


def test_mixed_host_names_amdgpu(mixed: dict[str, Artifact]) -> None:
    """Radeon to vfio-pci: softdeps for amdgpu and snd_hda_intel, no nvidia in the
    modprobe file, the unit's comment names the real drivers; the host's other GPU is an
    NVIDIA one, so the unit still orders itself before nvidia-persistenced."""
    modprobe = mixed[MODPROBE_PATH].content
    assert [line for line in modprobe.splitlines() if line.startswith("softdep")] == [
        "softdep amdgpu pre: vfio-pci",
        "softdep snd_hda_intel pre: vfio-pci",
    ]
    assert "nvidia" not in modprobe
    unit = mixed[UNIT_PATH].content
    assert "the VM functions' host drivers (amdgpu, snd_hda_intel) never bind them" in unit
    assert "nvidia-persistenced.service" in directives(unit)[("Unit", "Before")][0].split()
    assert "nvidia-persistenced" in mixed[UNIT_PATH].reason


def test_host_without_nvidia_gpu_never_says_nvidia(amd_only: dict[str, Artifact]) -> None:
    """No NVIDIA GPU on the host: no nvidia-persistenced ordering, and neither the unit nor
    the modprobe file nor their reasons mention nvidia."""
    unit = directives(amd_only[UNIT_PATH].content)
    assert unit[("Unit", "Before")] == [
        "systemd-modules-load.service systemd-udev-trigger.service",
        "sysinit.target shutdown.target",
    ]
    for path in (UNIT_PATH, MODPROBE_PATH):
        assert "nvidia" not in amd_only[path].content.lower()
        assert "nvidia" not in amd_only[path].reason
    assert "before modules-load and udev coldplug" in amd_only[UNIT_PATH].reason


def test_kpro6_comments_name_nvidia(artifacts: dict[str, Artifact]) -> None:
    """Control: on kpro6 the same comments name nvidia, and the hard-coded one is gone."""
    unit = _comments(artifacts[UNIT_PATH].content)
    assert "the VM functions' host drivers (nvidia, snd_hda_intel) never bind them" in unit
    assert "nvidia claims every GPU" not in _comments(artifacts[MODPROBE_PATH].content)


@needs_systemd
def test_unit_without_nvidia_passes_verify(amd_only: dict[str, Artifact], tmp_path: Path) -> None:
    """The unit without nvidia-persistenced verifies as cleanly as kpro6's."""
    root = install_root(tmp_path, amd_only)
    result = verify(root, root / UNIT_PATH)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


# --- the modprobe.d hook


def test_modprobe_lines(artifacts: dict[str, Artifact]) -> None:
    """softdep for each host driver of a VM function, a non-recursive install hook, no ids=."""
    lines = [
        line
        for line in artifacts[MODPROBE_PATH].content.splitlines()
        if line and not line.startswith("#")
    ]
    assert lines == [
        "softdep nvidia pre: vfio-pci",
        "softdep snd_hda_intel pre: vfio-pci",
        "install vfio-pci /usr/local/sbin/pvegpu-vfio-split override; "
        "/sbin/modprobe --ignore-install vfio-pci $CMDLINE_OPTS",
    ]
    for artifact in artifacts.values():
        body = "\n".join(
            line for line in artifact.content.splitlines() if not line.lstrip().startswith("#")
        )
        assert "ids=" not in body
        assert "new_id" not in body


@pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("dash") is None, reason="needs Linux and dash"
)
def test_install_hook_pins_then_loads_vfio_pci(
    kpro6_plan: Plan, artifacts: dict[str, Artifact], tmp_path: Path
) -> None:
    """The install line, run by sh as kmod does at early boot: overrides first, then the
    real load with --ignore-install (no recursion); nvidia loading next takes only the
    host side."""
    script = tmp_path / "pvegpu-vfio-split"
    script.write_text(artifacts[SCRIPT_PATH].content)
    root = copy_host("kpro6", tmp_path / "host")
    unload_driver(root, "nvidia")
    unload_driver(root, "snd_hda_intel")
    line = next(
        line
        for line in artifacts[MODPROBE_PATH].content.splitlines()
        if line.startswith("install vfio-pci ")
    )
    with KernelSim(root, natural_drivers(kpro6_plan)) as sim:
        # kmod substitutes $CMDLINE_OPTS (empty here) and hands the rest to /bin/sh.
        command = (
            line.removeprefix("install vfio-pci ")
            .replace("$CMDLINE_OPTS", "")
            .replace("/usr/local/sbin/pvegpu-vfio-split", f"dash {script}")
            .replace("/sbin/modprobe", str(sim.modprobe))
        )
        result = sim.run_command(["dash", "-c", command])
        assert result.rc == 0, result.stderr
        overrides = [w for w in result.writes if w.path.endswith("/driver_override")]
        assert [w.path for w in result.writes[:-1]] == [w.path for w in overrides]
        assert len(overrides) == len(VM) + len(HOST_SIDE)
        assert result.writes[-1].path == "modprobe"
        assert result.writes[-1].value.split() == ["--ignore-install", "vfio-pci"]
        sim.load_driver("nvidia")
        sim.load_driver("snd_hda_intel")
        state = sim.state()
        assert all(state[a] == ("vfio-pci", "vfio-pci") for a in VM)
        assert all(state[a] == (HOST_DRIVER[a[-1]],) * 2 for a in HOST_SIDE)
        assert sim.errors == []
