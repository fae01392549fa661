"""Issue 9 items 3-4 on kpro6 variants: the unit as systemd sees it, the container's files
found without a spec key, and a container whose files cannot be read from the host.

Each variant is kpro6 (fixture_hosts) with a few files changed, written with
`pvegpu.testing.write_host` and run through the whole pipeline: discovery, plan, render,
runbook, revert.sh (under dash, with logging stand-ins for pct and systemctl).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

import fixture_hosts
from bundled import EXAMPLES
from pvegpu.diagnostic import Severity
from pvegpu.errors import PlanError
from pvegpu.model.artifact import HOST, REVERT_BUNDLE, Artifact
from pvegpu.model.paths import SPLIT_SCRIPT
from pvegpu.model.plan import Plan
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.review.apply_steps import runbook
from pvegpu.rendering.review.manual_revert import revert_steps
from pvegpu.serving.unitfile import (
    ENVIRONMENT,
    EXEC_START,
    SERVICE,
    environment_pairs,
    exec_words,
    merge_units,
)
from pvegpu.spec.load import parse_spec
from pvegpu.testing import write_host

CT = "rpool/data/subvol-129-disk-0"
SECRET = "[Service]\nEnvironment=HF_TOKEN=hf_x NCCL_P2P_DISABLE=0\n"
UNIT = "etc/systemd/system/sglang-qwen.service"
DROPIN_DIR = f"{UNIT}.d"
OVERRIDE = """\
[Service]
Environment=NCCL_P2P_DISABLE=0
ExecStart=
ExecStart=/root/ml-env/bin/python3 -m sglang.launch_server \\
    --model-path /shared/models/Qwen3.5-122B-A10B --tp 8 --host 0.0.0.0 --port 30000
"""
SPEC_ROOTFS = f'container_rootfs = "{CT}"\n'
DASH = shutil.which("dash")


def variant(
    tmp_path: Path,
    files: Mapping[str, str] = {},
    *,
    symlinks: Mapping[str, str] = {},
    drop: tuple[str, ...] = (),
    spec_rootfs: bool = True,
) -> tuple[Plan, tuple[Artifact, ...]]:
    """kpro6 with `files` added or replaced and `drop` removed, planned with the example."""
    host = fixture_hosts.kpro6()
    tree = {p: t for p, t in {**host.files, **files}.items() if p not in drop}
    host = attrs.evolve(host, files=tree, symlinks={**host.symlinks, **symlinks})
    root = tmp_path / "root"
    write_host(host, root)
    text = (EXAMPLES / "kpro6.toml").read_text(encoding="utf-8")
    assert SPEC_ROOTFS in text
    spec = parse_spec(text if spec_rootfs else text.replace(SPEC_ROOTFS, ""))
    return plan_and_render(discover_for(spec, root), spec)


def ct_artifact(artifacts: tuple[Artifact, ...], path: str, bundle: str = "apply") -> Artifact:
    (found,) = (
        a for a in artifacts if a.target == "ct:129" and a.path == path and a.bundle == bundle
    )
    return found


def warnings(plan: Plan) -> dict[str, str]:
    return {f.code: f.message for f in plan.findings if f.severity is Severity.WARNING}


def lvm(files: Mapping[str, str] = {}) -> dict[str, str]:
    """CT 129 on lvmthin: its root file system is a block device, no directory on the host."""
    conf = fixture_hosts.kpro6().files["etc/pve/lxc/129.conf"]
    return {
        "etc/pve/lxc/129.conf": conf.replace(
            "local-zfs:subvol-129-disk-0", "local-lvm:vm-129-disk-0"
        ),
        "etc/pve/storage.cfg": fixture_hosts.STORAGE_LVM,
        **files,
    }


# ------------------------------------------------------------------ item 3: drop-ins


def test_dropin_overriding_p2p_and_tp_is_switched_off(tmp_path: Path) -> None:
    """override.conf with NCCL_P2P_DISABLE=0 and `--tp 8` on an SEV-SNP host: today only a
    generic warning; now its lines are switched off and the service as systemd will merge
    it runs the rendered command with P2P off."""
    plan, artifacts = variant(tmp_path, {f"{CT}/{DROPIN_DIR}/override.conf": OVERRIDE})
    assert "serving-dropin-neutralized" in warnings(plan)
    assert "serving-unit-dropins" not in warnings(plan)
    dropin = ct_artifact(artifacts, f"{DROPIN_DIR}/override.conf")
    assert dropin.base is not None and dropin.base.content == OVERRIDE
    unit = ct_artifact(artifacts, UNIT)
    merged = merge_units((unit.content, dropin.content))
    environment = dict(environment_pairs(merged.values(SERVICE, ENVIRONMENT)))
    assert environment["NCCL_P2P_DISABLE"] == "1"
    (exec_start,) = merged.values(SERVICE, EXEC_START)
    argv = exec_words(exec_start)
    assert argv[argv.index("--tp-size") + 1] == "4" and "--tp" not in argv
    # The revert puts the drop-in back as it was.
    revert = ct_artifact(artifacts, f"{DROPIN_DIR}/override.conf", REVERT_BUNDLE)
    assert (revert.content, revert.delete) == (OVERRIDE, False)


def test_dropin_in_usr_lib_is_read_and_hidden_by_an_etc_copy(tmp_path: Path) -> None:
    """systemd reads /usr/lib/systemd/system/<unit>.d too; pvegpu read only /etc's."""
    vendor = f"{CT}/usr/lib/systemd/system/sglang-qwen.service.d/50-numa.conf"
    text = "[Service]\nCPUAffinity=0-127\nNice=-5\n"
    plan, artifacts = variant(tmp_path, {vendor: text})
    assert (
        "usr/lib/systemd/system/sglang-qwen.service.d/50-numa.conf"
        in (warnings(plan)["serving-dropin-neutralized"])
    )
    shadow = ct_artifact(artifacts, f"{DROPIN_DIR}/50-numa.conf")
    assert shadow.base is None  # a new file in /etc: the revert removes it
    assert "#pvegpu# CPUAffinity=0-127" in shadow.content and "\nNice=-5\n" in shadow.content
    revert = ct_artifact(artifacts, f"{DROPIN_DIR}/50-numa.conf", REVERT_BUNDLE)
    assert revert.delete
    steps = {s.title: s.commands for s in runbook(plan, artifacts)}
    install = steps["Install the new files in CT 129 while it still runs"]
    assert install[0] == f"pct exec 129 -- mkdir -p /{DROPIN_DIR}"


def test_unit_only_in_usr_lib_is_what_the_new_unit_is_compared_with(tmp_path: Path) -> None:
    """No /etc copy: systemd runs /usr/lib's. The rendered /etc unit is new (the revert
    removes it, and /usr/lib's runs again), and what it drops is judged against /usr/lib's."""
    old = fixture_hosts.kpro6().files[f"{CT}/{UNIT}"] + "\n[Service]\nNice=-5\n"
    plan, artifacts = variant(
        tmp_path,
        {f"{CT}/usr/lib/systemd/system/sglang-qwen.service": old},
        drop=(f"{CT}/{UNIT}",),
    )
    assert ct_artifact(artifacts, UNIT).base is None
    assert ct_artifact(artifacts, UNIT, REVERT_BUNDLE).delete
    assert "`Nice=-5`" in warnings(plan)["serving-drops-settings"]


def test_masked_dropin_hides_the_vendor_one(tmp_path: Path) -> None:
    """/etc's same-named drop-in linked to /dev/null masks /usr/lib's: nothing to judge,
    and the host's /dev/null (a device) is never opened."""
    vendor = f"{CT}/usr/lib/systemd/system/sglang-qwen.service.d/50-numa.conf"
    plan, _ = variant(
        tmp_path,
        {vendor: "[Service]\nCPUAffinity=0-127\n"},
        symlinks={f"{CT}/{DROPIN_DIR}/50-numa.conf": "/dev/null"},
    )
    assert "serving-dropin-neutralized" not in warnings(plan)
    assert "serving-unit-dropins" not in warnings(plan)


def test_harmless_dropin_is_still_reported(tmp_path: Path) -> None:
    plan, artifacts = variant(tmp_path, {f"{CT}/{DROPIN_DIR}/nice.conf": "[Service]\nNice=-5\n"})
    assert (
        "/etc/systemd/system/sglang-qwen.service.d/nice.conf"
        in (warnings(plan)["serving-unit-dropins"])
    )
    assert not [a for a in artifacts if a.path.startswith(DROPIN_DIR)]


def test_guarded_dropin_with_a_secret_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as err:
        variant(tmp_path, {f"{CT}/{DROPIN_DIR}/token.conf": SECRET})
    assert [p.code for p in err.value.problems] == ["serving-dropin-secret"]
    assert "hf_x" not in str(err.value)


# ------------------------------------------------------------------ item 4: the rootfs


def test_rootfs_found_on_zfs_without_the_spec_key(tmp_path: Path) -> None:
    """Today: the unit was taken as new (deleted by the revert), the driver check skipped."""
    plan, artifacts = variant(tmp_path, spec_rootfs=False)
    unit = ct_artifact(artifacts, UNIT)
    assert unit.base is not None
    assert not ct_artifact(artifacts, UNIT, REVERT_BUNDLE).delete
    (pool,) = (p for p in plan.pools if p.serving is not None)
    assert pool.serving is not None and pool.serving.container_driver is not None
    assert not {"container-rootfs-unreachable", "container-driver-unchecked"} & set(warnings(plan))


def test_rootfs_found_on_dir_storage(tmp_path: Path) -> None:
    """`dir` storage: a subvol volume is a directory under <path>/images/<vmid>/."""
    host = fixture_hosts.kpro6()
    moved_to = "var/lib/vz/images/129/subvol-129-disk-0.subvol"
    files = {p.replace(CT, moved_to): t for p, t in host.files.items() if p.startswith(CT)}
    conf = host.files["etc/pve/lxc/129.conf"].replace(
        "local-zfs:subvol-129-disk-0", "local:129/subvol-129-disk-0.subvol"
    )
    plan, artifacts = variant(
        tmp_path,
        {**files, "etc/pve/lxc/129.conf": conf},
        drop=tuple(p for p in host.files if p.startswith(CT)),
        symlinks={p.replace(CT, moved_to): t for p, t in host.symlinks.items() if p.startswith(CT)},
        spec_rootfs=False,
    )
    assert ct_artifact(artifacts, UNIT).base is not None
    assert "container-driver-unchecked" not in warnings(plan)


def test_block_storage_warns_and_pulls_the_unit_before_replacing_it(tmp_path: Path) -> None:
    """lvmthin: nothing readable. A warning; the runbook pulls the old unit into revert/
    before pushing the new one; the revert never deletes it."""
    plan, artifacts = variant(tmp_path, lvm(), spec_rootfs=False)
    found = warnings(plan)
    assert "local-lvm is lvmthin storage" in found["container-rootfs-unreachable"]
    assert "container-driver-unchecked" in found
    assert ct_artifact(artifacts, UNIT).base is None
    assert not [a for a in artifacts if a.bundle == REVERT_BUNDLE and a.path == UNIT]
    steps = runbook(plan, artifacts)
    titles = [s.title for s in steps]
    pull = titles.index(f"Copy the current /{UNIT} out of CT 129 for the revert")
    assert pull < titles.index("Install the new files in CT 129 while it still runs")
    assert any(
        f"pct pull 129 /{UNIT} revert/ct/129/{UNIT} --perms 0600" in c for c in steps[pull].commands
    )
    manual = [c for s in revert_steps(plan, artifacts) for c in s.commands]
    assert any(f"pct push 129 revert/ct/129/{UNIT} /{UNIT}" in c for c in manual)
    assert f"pct exec 129 -- rm /{UNIT}" not in manual


def test_spec_rootfs_is_the_fallback_for_block_storage(tmp_path: Path) -> None:
    """A `pct mount` path in the spec is read when the storage gives no directory."""
    plan, artifacts = variant(tmp_path, lvm(), spec_rootfs=True)
    assert ct_artifact(artifacts, UNIT).base is not None
    assert "container-rootfs-unreachable" not in warnings(plan)


STUBS = {
    "pct": 'case "$1" in status) echo "status: running";; esac',
    "qm": 'case "$1" in status) echo "status: running";; esac',
    "systemctl": "",
    "update-initramfs": "",
    "hostname": 'echo "kpro6"',
}


def run_revert(tmp_path: Path, out: Path, artifacts: tuple[Artifact, ...]) -> tuple[list[str], str]:
    """revert.sh run on the variant's tree with the change applied to its host files."""
    root = tmp_path / "root"
    for artifact in artifacts:
        if artifact.target == HOST and artifact.bundle != REVERT_BUNDLE:
            path = root / artifact.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(artifact.content)
    (root / SPLIT_SCRIPT).chmod(0o755)
    (root / "etc/hostname").write_text("kpro6\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >>"$LOG"\n{body}\n')
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "log"
    log.write_text("")
    result = subprocess.run(
        [DASH or "sh", str(out / "revert" / "revert.sh")],
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "ROOT": str(root),
            "LOG": str(log),
            "SYSFS": str(root / "sys"),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert log.read_text() == "", "a command ran under ROOT"
    # Under ROOT revert.sh runs no command and prints each one it would run.
    printed = [line.removeprefix("would run: ") for line in result.stdout.splitlines()]
    calls = [c for c in printed if c.startswith("pct") and UNIT in c]
    return calls, result.stderr


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
@pytest.mark.parametrize("pulled", ["copy", "absent", "nothing"])
def test_revert_restores_the_pulled_copy(tmp_path: Path, pulled: str) -> None:
    """revert.sh: the pulled copy is pushed back; `.absent` means the unit was new; with
    neither (the pull step never ran) the unit is left alone, never deleted."""
    _, artifacts = variant(tmp_path, lvm(), spec_rootfs=False)
    out = tmp_path / "out"
    write_bundle(artifacts, out, node="kpro6")
    copy = out / "revert/ct/129" / UNIT
    copy.parent.mkdir(parents=True, exist_ok=True)
    if pulled == "copy":
        copy.write_text("[Service]\nExecStart=/old\n")
    elif pulled == "absent":
        copy.with_name(copy.name + ".absent").write_text("")
    calls, stderr = run_revert(tmp_path, out, artifacts)
    expected: Callable[[list[str]], bool] = {
        "copy": lambda c: c == [f"pct push 129 {copy} /{UNIT}"],
        "absent": lambda c: c == [f"pct exec 129 -- rm -f /{UNIT}"],
        "nothing": lambda c: c == [],
    }[pulled]
    assert expected(calls), calls
    assert ("no copy of CT 129" in stderr) == (pulled == "nothing")


# ------------------------------------------------------------------ the findings' text


def test_new_findings_text(tmp_path: Path, golden: Callable[[str], SnapshotAssertion]) -> None:
    """The wording of every new finding, on the variants that raise them."""
    texts: list[str] = []
    cases = {
        "override": ({f"{CT}/{DROPIN_DIR}/override.conf": OVERRIDE}, True),
        "vendor": (
            {
                f"{CT}/usr/lib/systemd/system/sglang-qwen.service.d/50-numa.conf": (
                    "[Service]\nCPUAffinity=0-127\n"
                )
            },
            True,
        ),
        "lvmthin": (lvm(), False),
    }
    for name, (files, spec_rootfs) in cases.items():
        plan, _ = variant(tmp_path / name, files, spec_rootfs=spec_rootfs)
        texts += [
            f"[{name}] {f.severity} {f.code} ({f.subject}): {f.message}"
            for f in plan.findings
            if f.code.startswith(("container-", "serving-dropin", "serving-unit-dropins"))
        ]
    with pytest.raises(PlanError) as err:
        variant(
            tmp_path / "secret",
            {f"{CT}/{DROPIN_DIR}/token.conf": SECRET},
        )
    texts += [
        f"[secret] error {p.code} ({p.subject}): {p.message} Fix: {p.fix}"
        for p in err.value.problems
    ]
    assert "\n\n".join(texts) + "\n" == golden("txt")
