"""`pvegpu apply` and `pvegpu revert` on a copy of kpro6, with recorded commands and the
simulated kernel (tests/apply_fake.py): preflight refusals, dry run, a second apply, and
a kill after every single effect, then a rerun or a revert."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import attrs
import pytest

from apply_fake import READ_ONLY, FakeHost, Killed
from bundled import FIXTURES, copy_tree, example_spec
from pvegpu.apply.bundle import Bundle, bundle_from_files
from pvegpu.apply.run import apply_bundle
from pvegpu.apply.undo import revert
from pvegpu.errors import ApplyError
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.rendering.bundle_layout import bundle_files
from pvegpu.rendering.review.apply_doc import manifest_header
from sysfs_sim import KernelSim, natural_drivers

CT = 129
ROOTFS = "rpool/data/subvol-129-disk-0"
UNIT = "sglang-qwen"
SKIP = ("sys/", "dev/", "var/lib/pvegpu/", "run/", "var/lock/", "etc/pve/priv/")
"""Not compared as files: sysfs (the kernel's state is compared instead), the device
nodes the nodes unit made (a revert leaves them, as a reboot would), apply's own state,
and the lock files Proxmox's tools leave too."""


@cache
def rendered() -> tuple[Bundle, dict[str, str | None]]:
    """kpro6's bundle rendered in memory (as `apply --spec` does) and its natural drivers;
    every copy of the fixture gets the same, so it is made once."""
    spec = example_spec("kpro6")
    plan, artifacts = plan_and_render(discover_for(spec, FIXTURES / "kpro6"), spec)
    files = bundle_files(artifacts, **manifest_header(plan, artifacts, "kpro6.toml"))
    return bundle_from_files(files), natural_drivers(plan)


class Setup:
    def __init__(self, tmp: Path, name: str = "host") -> None:
        self.root = copy_tree(FIXTURES / "kpro6", tmp / name)
        self.bundle, natural = rendered()
        self.kernel = KernelSim(self.root, natural)
        self.lines: list[str] = []

    def host(self, **options: object) -> FakeHost:
        return FakeHost(
            self.root,
            self.kernel,
            {CT: ROOTFS},
            active={CT: {UNIT}},
            **options,  # type: ignore[arg-type]
        )

    def apply(self, host: FakeHost, *, dry_run: bool = False) -> None:
        apply_bundle(host, self.bundle, self.lines.append, dry_run=dry_run)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.kernel.close()


def tree(root: Path) -> dict[str, bytes]:
    """Every file and link under root, by relative path (not SKIP, not the kernel's)."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in [*filenames, *(d for d in dirnames if (base / d).is_symlink())]:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if rel.startswith(SKIP) or rel.startswith("ctl-"):
                continue
            if path.is_symlink():
                found[rel] = b"-> " + os.fsencode(path.readlink())
            else:
                found[rel] = path.read_bytes()
    return found


def installed(setup: Setup) -> dict[str, bytes]:
    """Tree path -> the bundle's content, for every installed file (guest configs live
    under etc/pve/nodes/<node>/, where etc/pve/lxc leads, as on a Proxmox node)."""
    return {
        (
            e.path.replace("etc/pve/lxc/", "etc/pve/nodes/kpro6/lxc/")
            if e.target == "host"
            else f"{ROOTFS}/{e.path}"
        ): e.content
        for e in setup.bundle.entries
    }


def test_apply_installs_the_bundle_moves_gpus_and_verifies(setup: Setup) -> None:
    host = setup.host()
    apply_bundle(host, setup.bundle, setup.lines.append)
    now = tree(setup.root)
    for path, content in installed(setup).items():
        assert now[path] == content, path
    vm = [f["address"] for f in setup.bundle.functions if f["driver_after"] == "vfio-pci"]
    assert len(vm) == 8 and all(setup.kernel.driver(a) == "vfio-pci" for a in vm)
    assert host.running[CT] and UNIT in host.active[CT]
    assert host.visible[CT] == [0, 1, 2, 3]
    assert "etc/systemd/system/sysinit.target.wants/pvegpu-vfio-split.service" in now
    assert any(line.startswith("verified:") for line in setup.lines)
    # The server was stopped before the container, and the bind ran after both.
    order = [c for c in host.mutating() if c[0] != "pct" or c[1] != "push"]
    stop = order.index(("pct", "exec", "129", "--", "systemctl", "stop", UNIT))
    ct_stop = order.index(("pct", "stop", "129"))
    bind = order.index(("/usr/local/sbin/pvegpu-vfio-split", "bind"))
    assert stop < ct_stop < bind


def _served(bundle: Bundle, **changed: object) -> Bundle:
    serving = tuple({**s, **changed} for s in bundle.serving)
    return attrs.evolve(bundle, contract=attrs.evolve(bundle.contract, serving=serving))


def test_verify_counts_the_servers_gpus_not_its_tp(setup: Setup) -> None:
    """A server of TP 2 over the pool's 4 GPUs (PP 2, or vLLM's PCP 2) is verified by the 4
    GPUs it runs on, which the container lists; TP alone would call it a failure."""
    pipelined = _served(setup.bundle, tp_size=2)
    apply_bundle(setup.host(), pipelined, setup.lines.append)
    assert any(line.startswith("verified:") for line in setup.lines)


def test_verify_names_a_container_listing_other_gpus_than_the_server_runs_on(
    setup: Setup,
) -> None:
    fewer = _served(setup.bundle, cuda_visible_devices="0,1")
    with pytest.raises(ApplyError) as err:
        apply_bundle(setup.host(), fewer, setup.lines.append)
    assert [(p.code, p.subject, p.message) for p in err.value.problems] == [
        ("verify-failed", "CT 129", "nvidia-smi -L lists 4 GPUs, the server runs on 2")
    ]


def test_second_apply_is_a_no_op(setup: Setup) -> None:
    again = setup.host()
    apply_bundle(again, setup.bundle, setup.lines.append)
    before, kernel = tree(setup.root), setup.kernel.state()
    again.commands.clear()
    lines: list[str] = []
    apply_bundle(again, setup.bundle, lines.append)
    assert tree(setup.root) == before and setup.kernel.state() == kernel
    assert again.mutating() == []
    results = [line.strip() for line in lines if line.strip().startswith("->")]
    assert results and all(r.startswith(("-> already done", "-> left to you")) for r in results)


def test_dry_run_changes_nothing(setup: Setup) -> None:
    before, kernel = tree(setup.root), setup.kernel.state()
    host = setup.host()
    apply_bundle(host, setup.bundle, setup.lines.append, dry_run=True)
    assert tree(setup.root) == before and setup.kernel.state() == kernel
    assert host.mutating() == [] and host.effects == 0
    assert "  $ /usr/local/sbin/pvegpu-vfio-split bind" in setup.lines
    assert "dry run: nothing was changed" in setup.lines


def _refused(setup: Setup) -> ApplyError:
    before = tree(setup.root)
    host = setup.host()
    with pytest.raises(ApplyError) as err:
        apply_bundle(host, setup.bundle, setup.lines.append)
    assert tree(setup.root) == before and host.effects == 0, "refused, yet changed something"
    return err.value


def test_drift_is_refused_naming_the_file(setup: Setup) -> None:
    conf = setup.root / "etc/pve/lxc/129.conf"
    conf.write_text(conf.read_text() + "onboot: 1\n")
    problems = _refused(setup).problems
    assert [(p.code, p.subject) for p in problems] == [("file-changed", "/etc/pve/lxc/129.conf")]
    assert "render again" in problems[0].fix


def test_container_file_drift_is_refused(setup: Setup) -> None:
    unit = setup.root / ROOTFS / "etc/systemd/system/sglang-qwen.service"
    unit.write_text(unit.read_text().replace("RestartSec=10", "RestartSec=5"))
    [problem] = _refused(setup).problems
    assert problem.subject == "CT 129:/etc/systemd/system/sglang-qwen.service"


def test_wrong_node_and_guest_lock_are_refused(setup: Setup) -> None:
    (setup.root / "etc/hostname").write_text("kpro7\n")
    conf = setup.root / "etc/pve/lxc/129.conf"
    text = conf.read_text()
    conf.write_text(text.replace("\n", "\nlock: backup\n", 1))
    codes = {p.code for p in _refused(setup).problems}
    # The lock line also changes the file's sha256: the patch is stale too.
    assert {"wrong-node", "guest-locked", "file-changed"} <= codes


def test_changed_driver_is_refused(setup: Setup) -> None:
    link = setup.root / "sys/bus/pci/devices/0000:81:00.1/driver"
    link.unlink()
    [problem] = _refused(setup).problems
    assert (problem.code, problem.subject) == ("driver-changed", "0000:81:00.1")


def _hold(root: Path, pid: int, device: str, cgroup: str) -> None:
    proc = root / "proc" / str(pid)
    (proc / "fd").mkdir(parents=True)
    (proc / "fd/7").symlink_to(device)
    (proc / "comm").write_text("dcgm-exporter\n")
    (proc / "cgroup").write_text(cgroup)


def test_a_process_holding_a_moving_gpu_is_named(setup: Setup) -> None:
    _hold(setup.root, 4242, "/dev/nvidia5", "0::/system.slice/dcgm-exporter.service\n")
    _hold(setup.root, 4343, "/dev/nvidia6", "0::/lxc/129/ns/system.slice/sglang-qwen.service\n")
    [problem] = _refused(setup).problems
    assert (problem.code, problem.subject) == ("gpu-held", "/dev/nvidia5")
    assert "4242 (dcgm-exporter)" in problem.message


@cache
def reference_run() -> tuple[dict[str, bytes], tuple[tuple[int, int, int], ...]]:
    """The tree after a complete apply, and per step (first effect, last effect, step)."""
    tmp = Path(tempfile.mkdtemp(dir=os.environ.get("PYTEST_DEBUG_TEMPROOT")))
    setup = Setup(tmp, "reference")
    try:
        host = setup.host()
        setup.apply(host)
        return tree(setup.root), tuple(sorted(host.step_effects.values()))
    finally:
        setup.kernel.close()
        shutil.rmtree(tmp)


STEPS = range(len(rendered()[0].steps))


# The quick run kills every other step, at one of the four (where, finish) points in
# turn; the thorough run (tests/depth.py, in CI) tries all four at every step.
QUICK = (
    ("end", "rerun"),
    None,
    ("middle", "revert"),
    None,
    ("end", "revert"),
    None,
    ("middle", "rerun"),
    None,
)
KILL_POINTS = [
    pytest.param(
        step,
        where,
        finish,
        id=f"{step}-{where}-{finish}",
        marks=() if QUICK[step % len(QUICK)] == (where, finish) else pytest.mark.thorough,
    )
    for step in STEPS
    for where in ("end", "middle")
    for finish in ("rerun", "revert")
]


@pytest.mark.parametrize(("step", "where", "finish"), KILL_POINTS)
def test_kill_at_each_step_then_rerun_or_revert(
    tmp_path_factory: pytest.TempPathFactory, step: int, where: str, finish: str
) -> None:
    """Killed after a step's last effect, or in the middle of its effects: every file is
    wholly old or wholly new; applying again completes to the same tree as an
    uninterrupted apply; reverting gives back the original tree, byte for byte, the
    original drivers, and the container running its server."""
    applied, spans = reference_run()
    first, last = next((s for s in spans if s[2] == step), (0, 0, step))[:2]
    if last == 0:
        pytest.skip("a step apply leaves to the admin (no effects)")
    kill = last if where == "end" else (first + last) // 2
    setup = Setup(tmp_path_factory.mktemp("killed"))
    try:
        original, kernel = tree(setup.root), setup.kernel.state()
        host = setup.host(kill_after=kill)
        with pytest.raises(Killed):
            setup.apply(host)
        now = tree(setup.root)
        for path, new in installed(setup).items():
            assert now.get(path) in (original.get(path), new), path
        if finish == "rerun":
            setup.apply(host)
            assert tree(setup.root) == applied
        else:
            revert(host, setup.lines.append)
            assert tree(setup.root) == original
            assert setup.kernel.state() == kernel
            assert host.running[CT] and host.active[CT] == {UNIT}
    finally:
        setup.kernel.close()


def test_revert_after_a_complete_apply(setup: Setup) -> None:
    original, kernel = tree(setup.root), setup.kernel.state()
    host = setup.host()
    setup.apply(host)
    revert(host, setup.lines.append)
    assert tree(setup.root) == original and setup.kernel.state() == kernel
    assert host.running[CT] and host.active[CT] == {UNIT}
    revert(host, setup.lines.append)  # a second revert finds nothing to do
    assert setup.lines[-1].endswith("already reverted; nothing to do")


def test_revert_puts_the_old_unit_back_before_the_container_restarts(setup: Setup) -> None:
    """The server's previous unit goes back while the container still runs, before it is
    stopped and started again: an enabled unit starts with its container, so the new one
    must never be what the restart starts."""
    host = setup.host()
    setup.apply(host)
    start = len(host.commands)
    revert(host, setup.lines.append)
    undone = [c for c in host.commands[start:] if not any(w in READ_ONLY for w in c[:6])]
    ct = str(CT)
    push = next(i for i, c in enumerate(undone) if c[:3] == ("pct", "push", ct) and UNIT in c[4])
    stop = undone.index(("pct", "stop", ct))
    restart = undone.index(("pct", "start", ct))
    assert push < stop < restart, undone
    assert undone.index(("pct", "exec", ct, "--", "systemctl", "stop", UNIT)) < push
