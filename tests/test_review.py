"""SUMMARY.md and the review data behind it: layout, changed files, runbook, revert."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import pytest

from bundled import example_plan, spec_plan
from pvegpu.engines import health_url
from pvegpu.model.artifact import HOST, REVIEW, Artifact
from pvegpu.model.facts import ConfigFile
from pvegpu.model.plan import Plan
from pvegpu.pci import PciAddress
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.registry import RENDERERS
from pvegpu.rendering.revert import render_revert
from pvegpu.rendering.review import (
    BACKUP_DIR,
    HEALTH_TIMEOUT_S,
    SPLIT_SCRIPT,
    ChangeKind,
    Step,
    change_kind,
    changed_files,
    driver_check,
    layout,
    revert_steps,
    runbook,
)
from pvegpu.rendering.review.render import SUMMARY, cell, render_review, render_summary
from pvegpu.spec.load import parse_spec
from pvegpu.vendors.nvidia import smi_bus_id

REPO = Path(__file__).resolve().parent.parent
KPRO6_SPEC = REPO / "examples" / "kpro6.toml"
FIXTURES = REPO / "fixtures" / "sysfs"
UNIT_PATH = "etc/systemd/system/sglang-qwen.service"
ROOTFS = "rpool/data/subvol-129-disk-0"

LXC_ONLY = """
node = "kpro6"
[[pools]]
name = "sglang"
numa_node = 0
[pools.lxc]
vmid = 129
"""

# ---------------------------------------------------------------------------- helpers


def _artifacts(planned: Plan) -> tuple[Artifact, ...]:
    """Installed files from the real renderers, then the revert bundle made from them."""
    applied = tuple(a for renderer in RENDERERS for a in renderer(planned))
    return (*applied, *render_revert(planned, applied))


@pytest.fixture
def kpro6_artifacts(kpro6: Plan) -> tuple[Artifact, ...]:
    return _artifacts(kpro6)


def _commands(steps: Sequence[Step]) -> list[str]:
    return [c for s in steps for c in s.commands]


def _index(steps: Sequence[Step], command: str) -> int:
    return next(i for i, s in enumerate(steps) if command in s.commands)


def _sh(command: str, env_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if env_path is not None:
        env["PATH"] = f"{env_path}:{env['PATH']}"
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60, check=False
    )


# ---------------------------------------------------------------------------- golden


def test_summary_kpro6_is_review_only(kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]) -> None:
    """SUMMARY.md is installed nowhere (its text: tests/golden/test_end_to_end/*kpro6-SUMMARY*)."""
    summary = render_summary(kpro6, kpro6_artifacts)
    assert (summary.path, summary.target) == (SUMMARY, REVIEW)


def test_summary_has_every_section(kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]) -> None:
    """Title with node, facts line, layout, files, findings, runbook, attach, revert, topology."""
    text = render_summary(kpro6, kpro6_artifacts).content
    assert text.startswith("# GPU split on kpro6\n")
    assert "IOMMU: translated" in text and "SEV-SNP: on" in text and "590.48.01" in text
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Layout",
        "## What changes",
        "## Findings",
        "## Runbook",
        "## Attaching the VM GPUs",
        "## Revert",
        "## Topology",
    ]
    assert "\n```mermaid\nflowchart LR\n" in text
    assert text.endswith("```\n")


def test_render_review_returns_summary_and_svg(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]
) -> None:
    """render_review gives SUMMARY.md and topology.svg, both for the reviewer only."""
    review = render_review(kpro6, kpro6_artifacts)
    assert [(a.path, a.target) for a in review] == [
        ("SUMMARY.md", REVIEW),
        ("topology.svg", REVIEW),
    ]


# ---------------------------------------------------------------------------- layout


def test_layout_kpro6(kpro6: Plan) -> None:
    """Eight rows in PCI order: NUMA 0 stays on nvidia for LXC 129, NUMA 1 moves to vfio-pci."""
    rows = layout(kpro6)
    assert [r.address.short for r in rows] == [
        "01:00.0",
        "11:00.0",
        "61:00.0",
        "71:00.0",
        "81:00.0",
        "91:00.0",
        "e1:00.0",
        "f1:00.0",
    ]
    assert [r.index for r in rows] == list(range(8))
    assert {(r.numa, r.driver, r.purpose) for r in rows[:4]} == {
        ("0", "nvidia", "LXC 129 (sglang, TP=4); mapping pro6000")
    }
    assert {(r.numa, r.driver, r.purpose) for r in rows[4:]} == {
        ("1", "nvidia -> vfio-pci", "mapping pro6000-vm, no VM yet")
    }


def test_layout_vm_and_unpooled_gpu(workstation: Plan) -> None:
    """A GPU in no pool is `unchanged`; a VM pool names its VM and mapping."""
    first, second = layout(workstation)
    assert (first.pool, first.driver, first.purpose) == (None, "nvidia", "unchanged (in no pool)")
    assert (second.numa, second.driver, second.purpose) == (
        "-",
        "vfio-pci",
        "VM 110 via mapping ws-gpu",
    )


# ---------------------------------------------------------------------------- files


def test_change_kinds(kpro6: Plan) -> None:
    """Patched with a base, unchanged when equal to it, new when absent, replaced otherwise."""
    facts = kpro6.facts
    conf = facts.file("etc/pve/lxc/129.conf")
    assert conf is not None
    assert change_kind(facts, Artifact(conf.path, "x\n", "r", base=conf)) is ChangeKind.PATCHED
    assert change_kind(facts, Artifact(conf.path, conf.content, "r", base=conf)) is (
        ChangeKind.UNCHANGED
    )
    assert change_kind(facts, Artifact("etc/new.conf", "x\n", "r")) is ChangeKind.NEW
    assert change_kind(facts, Artifact(conf.path, "x\n", "r")) is ChangeKind.REPLACED


def test_changed_files_order_and_targets(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]
) -> None:
    """Proxmox files first, then system files, then the container's; revert/ never listed."""
    files = changed_files(kpro6, kpro6_artifacts)
    assert [(f.where, f.kind) for f in files] == [
        ("/etc/pve/lxc/129.conf", ChangeKind.PATCHED),
        ("/etc/pve/mapping/pci.cfg", ChangeKind.PATCHED),
        ("/etc/initramfs-tools/hooks/pvegpu-vfio-split", ChangeKind.NEW),
        ("/etc/modprobe.d/pvegpu-vfio.conf", ChangeKind.NEW),
        ("/etc/systemd/system/pvegpu-device-nodes.service", ChangeKind.NEW),
        ("/etc/systemd/system/pvegpu-vfio-split.service", ChangeKind.NEW),
        ("/usr/local/sbin/pvegpu-device-nodes", ChangeKind.NEW),
        ("/usr/local/sbin/pvegpu-vfio-split", ChangeKind.NEW),
        (f"CT 129:/{UNIT_PATH}", ChangeKind.PATCHED),
    ]


def test_cell_escapes_pipes() -> None:
    """A `|` in a reason cannot break the markdown table."""
    assert cell("a | b\nc") == "a \\| b c"


# ---------------------------------------------------------------------------- runbook


def test_runbook_order_kpro6(kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]) -> None:
    """Server, unit push, CT stop, bind, configs, CT start, GPU check, server, health: in order."""
    steps = runbook(kpro6, kpro6_artifacts)
    order = [
        _index(steps, "pct exec 129 -- systemctl stop sglang-qwen"),
        _index(steps, f"pct push 129 ct/129/{UNIT_PATH} /{UNIT_PATH} --perms 0644"),
        _index(steps, "pct stop 129"),
        _index(steps, "install -D -m 0755 usr/local/sbin/pvegpu-vfio-split " + SPLIT_SCRIPT),
        _index(steps, f"{SPLIT_SCRIPT} bind"),
        _index(steps, "cp etc/pve/lxc/129.conf /etc/pve/lxc/129.conf"),
        _index(steps, "pct start 129"),
        _index(steps, "pct exec 129 -- nvidia-smi -L"),
        _index(steps, "pct exec 129 -- systemctl start sglang-qwen"),
    ]
    assert order == sorted(order) and len(set(order)) == len(order)
    bind = steps[_index(steps, f"{SPLIT_SCRIPT} bind")]
    assert bind.commands[:4] == (
        "systemctl daemon-reload",
        "systemctl enable pvegpu-vfio-split.service",
        f"{SPLIT_SCRIPT} bind",
        f"{SPLIT_SCRIPT} status",
    )
    assert "health" in steps[-2].commands[0]
    assert steps[-1].title.startswith("At the next reboot")


def test_gpu_check_gives_exact_count_and_addresses(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]
) -> None:
    """Inside CT 129 nvidia-smi must show exactly the four NUMA 0 GPUs, in nvidia-smi's form."""
    steps = runbook(kpro6, kpro6_artifacts)
    check = steps[_index(steps, "pct exec 129 -- nvidia-smi -L")]
    assert "exactly 4 GPUs" in check.expect
    assert check.output == (
        "0, 00000000:01:00.0",
        "1, 00000000:11:00.0",
        "2, 00000000:61:00.0",
        "3, 00000000:71:00.0",
    )


def test_bind_expects_every_group_member_on_vfio(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]
) -> None:
    """The sysfs check after the bind lists each VM GPU and its audio function on vfio-pci."""
    steps = runbook(kpro6, kpro6_artifacts)
    bind = steps[_index(steps, f"{SPLIT_SCRIPT} bind")]
    assert bind.output == tuple(
        f"0000:{bus}:00.{fn} vfio-pci" for bus in ("81", "91", "e1", "f1") for fn in (0, 1)
    )


def test_holders_checked_before_unbinding(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]
) -> None:
    """The device nodes of the GPUs that leave nvidia are checked for holders."""
    assert "fuser -v /dev/nvidia4 /dev/nvidia5 /dev/nvidia6 /dev/nvidia7" in _commands(
        runbook(kpro6, kpro6_artifacts)
    )


def test_no_vfio_pool_no_bind_steps() -> None:
    """A plan without a VM pool has no split script, no holder check and no attach section."""
    planned = spec_plan("kpro6", LXC_ONLY)
    artifacts = _artifacts(planned)
    commands = _commands(runbook(planned, artifacts)) + _commands(revert_steps(planned, artifacts))
    assert not [c for c in commands if "vfio" in c or "fuser" in c or "update-initramfs" in c]
    assert "pct stop 129" in commands and "pct start 129" in commands
    assert "## Attaching the VM GPUs" not in render_summary(planned, artifacts).content


def test_no_serving_no_server_steps() -> None:
    """A container without a server gets its GPU check but no stop/start/health of a unit."""
    planned = spec_plan("kpro6", LXC_ONLY)
    commands = _commands(runbook(planned, _artifacts(planned)))
    assert not [c for c in commands if "systemctl stop" in c or "systemctl start" in c]
    assert not [c for c in commands if "/health" in c]
    assert "pct exec 129 -- nvidia-smi -L" in commands


def test_vm_plan_starts_and_stops_the_vm(workstation: Plan) -> None:
    """An existing VM is started after the bind and stopped before the revert."""
    artifacts = _artifacts(workstation)
    # The last step checks the split after a reboot; the VM start comes just before it.
    apply_commands = _commands(runbook(workstation, artifacts)[:-1])
    assert apply_commands[-1] == "qm start 110"
    assert apply_commands.index(f"{SPLIT_SCRIPT} bind") < apply_commands.index("qm start 110")
    revert_commands = _commands(revert_steps(workstation, artifacts))
    assert revert_commands.index("qm stop 110") < revert_commands.index(f"{SPLIT_SCRIPT} revert")
    assert "VM 110's config is patched above" in render_summary(workstation, artifacts).content


def test_vm_not_created_yet_gets_lines_and_snippet(fixture_root: Callable[[str], Path]) -> None:
    """For a VM Proxmox has not created, the summary gives `qm set` and the review snippet."""
    text = KPRO6_SPEC.read_text().replace("[pools.vfio]", "[pools.vfio]\nvm = { vmid = 300 }")
    spec = parse_spec(text)
    planned = plan(discover_for(spec, fixture_root("kpro6")), spec)
    artifacts = _artifacts(planned)
    summary = render_summary(planned, artifacts).content
    assert "VM 300 does not exist yet" in summary
    assert "`snippets/qemu-server/300.conf`" in summary
    assert "qm set 300 --hostpci0 mapping=pro6000-vm,pcie=1 --hostpci1" in summary
    assert "qm start 300" not in _commands(runbook(planned, artifacts))


# ---------------------------------------------------------------------------- revert check


def test_revert_checks_nvidia_smi_when_gpus_return_to_nvidia(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]
) -> None:
    """kpro6's VM GPUs go back to nvidia: nvidia-smi lists all eight host GPUs again."""
    steps = revert_steps(kpro6, kpro6_artifacts)
    check = steps[_index(steps, "nvidia-smi -L")]
    assert check.expect == "Lists 8 GPUs, as before the change."


@pytest.mark.parametrize("host", ["mixed", "workstation"])
def test_revert_skips_nvidia_smi_when_no_gpu_returns_to_nvidia(
    host: str, workstation: Plan
) -> None:
    """A Radeon back to amdgpu, a GPU that was on vfio-pci before: only the sysfs readout."""
    planned = workstation if host == "workstation" else example_plan("mixed")
    artifacts = _artifacts(planned)
    steps = revert_steps(planned, artifacts)
    assert not [c for c in _commands(steps) if "nvidia-smi" in c]
    readout = steps[_index(steps, f"{SPLIT_SCRIPT} revert")]
    expected = "amdgpu" if host == "mixed" else "vfio-pci"
    assert f"{planned.pools[0].gpus[0].address} {expected}" in readout.output
    assert "nvidia-smi" not in render_summary(planned, artifacts).content.split("## Revert")[1]


def test_counts_agree_with_their_nouns(kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]) -> None:
    """One GPU `moves` and is `1 GPU`; the facts line counts GPUs and nodes the same way."""
    mixed = example_plan("mixed")
    text = render_summary(mixed, _artifacts(mixed)).content
    assert "- **radeon**: 1 GPU on NUMA 0 (04:00.0) moves to vfio-pci," in text
    assert "· 2 GPUs on 1 NUMA node\n" in text
    kpro6_text = render_summary(kpro6, kpro6_artifacts).content
    assert "4 GPUs on NUMA 1 (81:00.0, 91:00.0, e1:00.0, f1:00.0) move to vfio-pci" in kpro6_text
    assert "4 GPUs on NUMA 0 (01:00.0, 11:00.0, 61:00.0, 71:00.0) stay on nvidia" in kpro6_text
    assert "· 8 GPUs on 2 NUMA nodes\n" in kpro6_text


# ---------------------------------------------------------------------------- commands


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:30000/health"),
        ("::", "http://127.0.0.1:30000/health"),
        ("10.1.230.174", "http://10.1.230.174:30000/health"),
        ("fd00::5", "http://[fd00::5]:30000/health"),
    ],
)
def test_health_url(kpro6: Plan, host: str, url: str) -> None:
    """A wildcard listen address is polled on loopback, a specific one on itself."""
    serving = kpro6.lxc_pools[0].serving
    assert serving is not None and serving.port == 30000
    assert health_url(attrs.evolve(serving, host=host)) == url


def test_smi_bus_id_is_uppercase_with_long_domain() -> None:
    """nvidia-smi prints `00000000:E1:00.0`, not the kernel's `0000:e1:00.0`."""
    assert smi_bus_id(PciAddress.parse("0000:e1:00.0")) == "00000000:E1:00.0"


def _fake_tools(tmp_path: Path, pct_succeeds_after: int) -> Path:
    """`pct` that fails N times then succeeds, and a `sleep` that does not wait."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    counter = tmp_path / "calls"
    (bin_dir / "pct").write_text(
        "#!/bin/sh\n"
        f'n=$(cat {counter} 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > {counter}\n'
        f'[ "$n" -gt {pct_succeeds_after} ]\n'
    )
    (bin_dir / "sleep").write_text("#!/bin/sh\nexec /bin/sleep 0.05\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


def test_health_wait_polls_until_healthy(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...], tmp_path: Path
) -> None:
    """The health loop retries a failing endpoint and prints `healthy` once it answers."""
    wait = runbook(kpro6, kpro6_artifacts)[-2].commands[0]  # [-1]: the reboot check
    assert wait.startswith(f"timeout {HEALTH_TIMEOUT_S} ")
    result = _sh(wait, _fake_tools(tmp_path, pct_succeeds_after=2))
    assert (result.returncode, result.stdout) == (0, "healthy\n")
    assert (tmp_path / "calls").read_text() == "3\n"


def test_health_wait_is_bounded(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...], tmp_path: Path
) -> None:
    """A server that never answers ends the wait with timeout's 124, not an endless loop."""
    wait = runbook(kpro6, kpro6_artifacts)[-2].commands[0]  # [-1]: the reboot check
    short = wait.replace(f"timeout {HEALTH_TIMEOUT_S} ", "timeout 0.2 ", 1)  # coreutils'
    assert short != wait
    result = _sh(short, _fake_tools(tmp_path, pct_succeeds_after=10**6))
    assert result.returncode == 124
    assert "healthy" not in result.stdout


def test_driver_check_reads_sysfs(fixture_root: Callable[[str], Path], tmp_path: Path) -> None:
    """The driver one-liner prints each function's driver link target, `unbound` for none."""
    addresses = [PciAddress.parse("0000:81:00.0"), PciAddress.parse("0000:81:00.1")]
    command = driver_check(addresses)
    bound = _sh(command.replace('"/sys/', f'"{fixture_root("kpro6")}/sys/'))
    assert bound.stdout == "0000:81:00.0 nvidia\n0000:81:00.1 snd_hda_intel\n"
    for address in addresses:
        (tmp_path / "sys/bus/pci/devices" / str(address)).mkdir(parents=True)
    unbound = _sh(command.replace('"/sys/', f'"{tmp_path}/sys/'))
    assert (unbound.stdout, unbound.stderr) == (
        "0000:81:00.0 unbound\n0000:81:00.1 unbound\n",
        "",
    )


def test_stale_check_passes_on_the_discovered_file(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...], tmp_path: Path
) -> None:
    """The sha256 check accepts the file as discovered and rejects one edited since."""
    check = runbook(kpro6, kpro6_artifacts)[1]
    command = next(c for c in check.commands if "/etc/pve/lxc/129.conf" in c)
    conf = kpro6.facts.file("etc/pve/lxc/129.conf")
    assert conf is not None
    live = tmp_path / "etc/pve/lxc/129.conf"
    live.parent.mkdir(parents=True)
    live.write_text(conf.content)
    local = command.replace("  /etc/", f"  {tmp_path}/etc/")
    assert _sh(local).returncode == 0
    live.write_text(conf.content + "onboot: 0\n")
    assert _sh(local).returncode != 0


def test_every_command_passes_shellcheck(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...], tmp_path: Path
) -> None:
    """Every runbook and revert command is valid, warning-free POSIX sh."""
    commands = _commands(runbook(kpro6, kpro6_artifacts)) + _commands(
        revert_steps(kpro6, kpro6_artifacts)
    )
    script = tmp_path / "runbook.sh"
    script.write_text("#!/bin/sh\nset -eu\n" + "\n".join(commands) + "\n")
    shellcheck = Path(sys.executable).parent / "shellcheck"
    result = subprocess.run(
        [str(shellcheck), "--shell=sh", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_every_bundle_path_exists_in_the_written_bundle(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...], tmp_path: Path
) -> None:
    """Each file the runbook or revert copies from the bundle is where write_bundle puts it."""
    out = tmp_path / "out"
    write_bundle((*kpro6_artifacts, *render_review(kpro6, kpro6_artifacts)), out, node="kpro6")
    sources = []
    for command in _commands(runbook(kpro6, kpro6_artifacts)) + _commands(
        revert_steps(kpro6, kpro6_artifacts)
    ):
        words = command.split()
        if words[0] in ("cp", "install"):
            sources.append(words[-2])
        elif words[:2] == ["pct", "push"]:
            sources.append(words[3])
    relative = [s for s in sources if not s.startswith("/")]
    assert len(relative) == 12
    assert [s for s in relative if not (out / s).is_file()] == []
    assert (out / "MANIFEST.json").is_file() and (out / SUMMARY).is_file()


# ---------------------------------------------------------------------------- revert


def test_revert_restores_from_the_revert_bundle(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]
) -> None:
    """Patched files come back from revert/, created files are removed, the unit is pushed back."""
    steps = revert_steps(kpro6, kpro6_artifacts)
    commands = _commands(steps)
    assert "cp revert/etc/pve/lxc/129.conf /etc/pve/lxc/129.conf" in commands
    assert "rm /usr/local/sbin/pvegpu-vfio-split" in commands
    assert f"pct push 129 revert/ct/129/{UNIT_PATH} /{UNIT_PATH} --perms 0644" in commands
    assert commands.index(f"{SPLIT_SCRIPT} revert") < commands.index(
        "cp revert/etc/pve/lxc/129.conf /etc/pve/lxc/129.conf"
    )
    split = steps[_index(steps, f"{SPLIT_SCRIPT} revert")]
    assert split.commands[0] == "systemctl disable pvegpu-vfio-split.service"
    assert split.output[:2] == ("0000:81:00.0 nvidia", "0000:81:00.1 snd_hda_intel")
    assert steps[-1].expect == "Lists 8 GPUs, as before the change."


def test_replaced_file_is_saved_and_restored(kpro6: Plan) -> None:
    """A host file overwritten without a base is saved first and restored from the save."""
    facts = attrs.evolve(
        kpro6.facts,
        files=(*kpro6.facts.files, ConfigFile("etc/modprobe.d/pvegpu-vfio.conf", "old\n")),
    )
    planned = attrs.evolve(kpro6, facts=facts)
    # render_split now patches an installed file (base = discovery's copy); a renderer
    # that writes without reading is what REPLACED is for, so the base is dropped here.
    applied = tuple(
        attrs.evolve(a, base=None) if a.path == "etc/modprobe.d/pvegpu-vfio.conf" else a
        for renderer in RENDERERS
        for a in renderer(planned)
    )
    artifacts = (*applied, *render_revert(planned, applied))
    steps = runbook(planned, artifacts)
    save = next(s for s in steps if s.title.startswith("Save"))
    assert save.commands == (
        f"mkdir -p {BACKUP_DIR}",
        f"cp --parents /etc/modprobe.d/pvegpu-vfio.conf {BACKUP_DIR}/",
    )
    assert _index(steps, save.commands[1]) < _index(steps, "pct stop 129")
    restore = f"cp {BACKUP_DIR}/etc/modprobe.d/pvegpu-vfio.conf /etc/modprobe.d/pvegpu-vfio.conf"
    assert restore in _commands(revert_steps(planned, artifacts))
    assert "**replaced whole**" in render_summary(planned, artifacts).content


def test_host_target_files_only_listed_once(
    kpro6: Plan, kpro6_artifacts: tuple[Artifact, ...]
) -> None:
    """Each installed file is written by exactly one runbook command."""
    installed = [a for a in kpro6_artifacts if a.bundle == "apply" and a.target == HOST]
    commands = _commands(runbook(kpro6, kpro6_artifacts))
    for artifact in installed:
        writers = [c for c in commands if c.endswith(f" /{artifact.path}")]
        assert len(writers) == 1, artifact.path
