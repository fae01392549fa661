"""The boot units that ready the containers' GPUs (rendering/boot_units.py), run for real.

Both scripts honour ROOT, so they run here under dash on a copy of the fixture host
driver-upgrade (a module and host userspace of 590.48.01, CT 160 on its own 580.95.05
with `userspace = "host"`): the staging script stages, follows an upgrade, refuses a
version whose files are missing and is removed by the revert; the nodes script finds the
nodes it is meant to make, and says which are missing. Then the story end to end with
apply's fake host: apply, a driver upgrade and the next boot, check, revert.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import attrs
import pytest

from apply_fake import FakeHost
from bundled import FIXTURES, copy_tree, example_facts, example_plan, example_spec
from linters import DASH, needs_dash
from pvegpu.apply.bundle import Bundle, bundle_from_files
from pvegpu.apply.check import check
from pvegpu.apply.run import apply_bundle
from pvegpu.apply.undo import revert
from pvegpu.diagnostic import Severity
from pvegpu.errors import PlanError
from pvegpu.host.discover import discover
from pvegpu.model.artifact import HOST, Artifact
from pvegpu.model.facts import ConfigFile
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.plan import Plan
from pvegpu.model.schema import UserspacePolicy
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import lxcconf
from pvegpu.rendering.boot_units import boot_nodes
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.bundle_layout import bundle_files
from pvegpu.rendering.registry import render
from pvegpu.rendering.review.apply_doc import manifest_header
from pvegpu.vendors import CONTAINER_NODES
from sysfs_sim import KernelSim, natural_drivers

HOST_NAME = "driver-upgrade"
CT = 160
LIBDIR = "usr/lib/x86_64-linux-gnu"
STAGE = "var/lib/pvegpu/userspace"
STAGING = "usr/local/sbin/pvegpu-driver-userspace"
USERSPACE_UNIT = "etc/systemd/system/pvegpu-driver-userspace.service"
NODES = "usr/local/sbin/pvegpu-device-nodes"
LOADED = "590.48.01"
NEXT = "595.45.04"
REQUIRED = ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler")


@cache
def artifacts() -> dict[str, Artifact]:
    """driver-upgrade's host files, by path."""
    rendered = render(example_plan(HOST_NAME))
    return {a.path: a for a in rendered if a.target == HOST and a.bundle == "apply"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A copy of the fixture host with the bundle's two scripts installed."""
    made = copy_tree(FIXTURES / HOST_NAME, tmp_path / "root")
    for path in (STAGING, NODES):
        script = made / path
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(artifacts()[path].content)
        script.chmod(0o755)
    return made


def run(root: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert DASH is not None
    return subprocess.run(
        [DASH, str(root / script), *args],
        env={"ROOT": str(root), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        check=False,
    )


def upgrade(root: Path, version: str = NEXT) -> None:
    """The host's driver goes to `version` (the .run installer replaces its userspace),
    and the next boot loads its module."""
    libdir = root / LIBDIR
    for old in libdir.glob(f"*.so.{LOADED}"):
        old.rename(libdir / old.name.replace(LOADED, version))
    for link in libdir.iterdir():
        if link.is_symlink() and LOADED in Path(link).readlink().as_posix():
            target = Path(link).readlink().as_posix().replace(LOADED, version)
            link.unlink()
            link.symlink_to(target)
    (root / "sys/module/nvidia/version").write_text(f"{version}\n")
    banner = root / "proc/driver/nvidia/version"
    banner.write_text(banner.read_text().replace(LOADED, version))


def staged(root: Path) -> dict[str, str]:
    """What `current` holds: name -> `link <target>` or `file`, under lib/ and bin/."""
    current = root / STAGE / "current"
    found = {}
    for part in ("lib", "bin"):
        for path in sorted((current / part).iterdir()):
            rel = f"{part}/{path.name}"
            found[rel] = f"link {Path(path).readlink().as_posix()}" if path.is_symlink() else "file"
    return found


# --- the staging script ---------------------------------------------------------------


@needs_dash
def test_stages_exactly_the_loaded_versions_files(root: Path) -> None:
    """The loaded version's libraries (hardlinked: the host's very files), the host's links
    that end at them, and the tools; never a daemon, another version's file or link, or a
    link that leaves the directory."""
    libdir = root / LIBDIR
    (libdir / "libnvidia-ml.so.580.95.05").write_text("left by the old driver\n")
    (libdir / "libnvidia-ml.so.580").symlink_to("libnvidia-ml.so.580.95.05")
    (libdir / "libnvidia-cfg.so.2").symlink_to(f"/{LIBDIR}/libnvidia-cfg.so.{LOADED}")
    done = run(root, STAGING)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"pvegpu-driver-userspace: staged {LOADED} in {root}/{STAGE}/{LOADED}\n"
    assert Path(root / STAGE / "current").readlink().as_posix() == LOADED
    found = staged(root)
    assert found["lib/libcuda.so.1"] == f"link libcuda.so.{LOADED}"
    assert found["lib/libcuda.so"] == "link libcuda.so.1"
    assert found["lib/libnvidia-nvvm.so.4"] == f"link libnvidia-nvvm.so.{LOADED}"
    assert found[f"lib/libnvidia-gpucomp.so.{LOADED}"] == "file"
    for name in REQUIRED:
        assert found[f"lib/{name}.so.{LOADED}"] == "file"
    assert not [n for n in found if "580" in n or n == "lib/libnvidia-cfg.so.2"]
    assert [n for n in found if n.startswith("bin/")] == [
        "bin/nvidia-cuda-mps-control",
        "bin/nvidia-cuda-mps-server",
        "bin/nvidia-debugdump",
        "bin/nvidia-smi",
    ]
    same = root / STAGE / LOADED / "lib" / f"libcuda.so.{LOADED}"
    assert same.stat().st_ino == (libdir / f"libcuda.so.{LOADED}").stat().st_ino
    assert run(root, STAGING, "status").stdout == f"loaded: {LOADED}\nstaged: {LOADED}\n"


@needs_dash
def test_a_second_run_keeps_the_stage_and_an_upgrade_replaces_it(root: Path) -> None:
    """Staging again changes nothing (a running container keeps its files); after the
    upgrade and the reboot into the new module, current moves to the new version's files
    and the old version's directory goes."""
    assert run(root, STAGING).returncode == 0
    inode = (root / STAGE / LOADED / "lib" / f"libcuda.so.{LOADED}").stat().st_ino
    again = run(root, STAGING)
    assert again.stdout == f"pvegpu-driver-userspace: {LOADED} already staged\n"
    assert (root / STAGE / LOADED / "lib" / f"libcuda.so.{LOADED}").stat().st_ino == inode
    upgrade(root)
    status = run(root, STAGING, "status")
    assert (status.returncode, status.stdout) == (1, f"loaded: {NEXT}\nstaged: {LOADED}\n")
    assert run(root, STAGING).returncode == 0
    assert sorted(p.name for p in (root / STAGE).iterdir()) == [NEXT, "current"]
    assert staged(root)["lib/libcuda.so.1"] == f"link libcuda.so.{NEXT}"


@needs_dash
def test_refuses_a_loaded_version_whose_files_are_missing(root: Path) -> None:
    """The module went to a version whose userspace is not on the host (the upgrade's
    packages half installed): refused, naming each missing file, and current removed so
    no container starts on the old version's userspace."""
    assert run(root, STAGING).returncode == 0
    (root / "sys/module/nvidia/version").write_text(f"{NEXT}\n")
    done = run(root, STAGING)
    assert done.returncode == 4
    for name in REQUIRED:
        assert f"/{LIBDIR}/{name}.so.{NEXT}" in done.stderr
    assert f"install sh NVIDIA-Linux-x86_64-{NEXT}.run --no-kernel-modules" in done.stderr
    assert not (root / STAGE / "current").is_symlink()
    (root / "sys/module/nvidia/version").unlink()
    done = run(root, STAGING)
    assert done.returncode == 3 and "no nvidia module is loaded" in done.stderr


@needs_dash
def test_remove_takes_the_whole_stage(root: Path) -> None:
    assert run(root, STAGING).returncode == 0
    assert run(root, STAGING, "remove").returncode == 0
    assert not (root / STAGE).exists()
    assert (root / "var/lib/pvegpu").is_dir()


# --- the nodes script ------------------------------------------------------------------


@needs_dash
def test_nodes_script_runs_each_command_once_and_names_what_is_missing(root: Path) -> None:
    """Under ROOT the commands are printed (each once, uvm's for both of its nodes), and a
    node that does not exist under ROOT/dev is named; once all exist, it succeeds."""
    done = run(root, NODES)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "would run: nvidia-modprobe -c=0",
        "would run: nvidia-modprobe -c=1",
        "would run: nvidia-modprobe -c=255",
        "would run: nvidia-modprobe -u -c=0",
    ]
    assert "missing: /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm" in done.stderr
    for node in boot_nodes(example_plan(HOST_NAME)):
        made = root / node.path.lstrip("/")
        made.parent.mkdir(parents=True, exist_ok=True)
        made.touch()
    assert run(root, NODES).returncode == 0
    status = run(root, NODES, "status")
    assert status.returncode == 0 and status.stdout.endswith("/dev/nvidia-uvm-tools present\n")
    (root / "dev/nvidia-uvm").unlink()
    status = run(root, NODES, "status")
    assert status.returncode == 1 and "/dev/nvidia-uvm missing\n" in status.stdout


def test_boot_nodes_per_vendor() -> None:
    """NVIDIA's are made by nvidia-modprobe; AMD's render nodes by amdgpu as it binds,
    its kfd by loading amdgpu; Intel's render nodes need nothing, so no unit at all."""
    made = {n.path: n.command for n in boot_nodes(example_plan(HOST_NAME))}
    assert made["/dev/nvidia1"] == ("nvidia-modprobe", "-c=1")
    assert made["/dev/nvidia-uvm-tools"] == ("nvidia-modprobe", "-u", "-c=0")
    amd = {n.path: n.command for n in boot_nodes(example_plan("amd-rocm"))}
    assert amd == {
        "/dev/dri/renderD128": None,
        "/dev/dri/renderD129": None,
        "/dev/kfd": ("modprobe", "amdgpu"),
    }
    intel = render(example_plan("intel-media"))
    assert not [a for a in intel if "pvegpu-device-nodes" in a.path]


# --- the plan ------------------------------------------------------------------------


def plan_with(userspace: UserspacePolicy, facts_root: Path | None = None) -> Plan:
    spec = example_spec(HOST_NAME)
    pool = spec.pools[0]
    assert pool.lxc is not None
    spec = attrs.evolve(
        spec, pools=(attrs.evolve(pool, lxc=attrs.evolve(pool.lxc, userspace=userspace)),)
    )
    facts = example_facts(HOST_NAME) if facts_root is None else discover_for(spec, facts_root)
    return plan(facts, spec)


def test_the_default_refuses_the_mismatch_and_names_the_way_out() -> None:
    """userspace = "container" (the default): the container's 580.95.05 under the 590.48.01
    module is refused, and the fix names userspace = "host" besides the apt line."""
    with pytest.raises(PlanError) as err:
        plan_with(UserspacePolicy.CONTAINER)
    (problem,) = err.value.problems
    assert problem.code == "container-driver-mismatch"
    assert "libnvidia-compute-590=590.48.01-*" in problem.fix
    assert 'or set userspace = "host" in [pools.lxc]' in problem.fix


def test_host_userspace_missing_on_the_host_is_refused(tmp_path: Path) -> None:
    """The module is loaded but its userspace is not in the host root (a DKMS-only
    install): refused at plan time, naming the files, with the way to install them."""
    copy = copy_tree(FIXTURES / HOST_NAME, tmp_path / "root")
    (copy / LIBDIR / f"libnvidia-ptxjitcompiler.so.{LOADED}").unlink()
    (copy / "usr/bin/nvidia-smi").unlink()
    with pytest.raises(PlanError) as err:
        plan_with(UserspacePolicy.HOST, copy)
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == (
        "host-userspace-missing",
        f"{LIBDIR}/libnvidia-ptxjitcompiler.so.{LOADED}",
    )
    assert f"/{LIBDIR}/libnvidia-ptxjitcompiler.so.{LOADED}, /usr/bin/nvidia-smi" in (
        problem.message
    )
    assert problem.fix.startswith(f"install sh NVIDIA-Linux-x86_64-{LOADED}.run")


def test_no_module_loaded_is_refused(tmp_path: Path) -> None:
    copy = copy_tree(FIXTURES / HOST_NAME, tmp_path / "root")
    shutil.rmtree(copy / "sys/module/nvidia")
    (copy / "proc/driver/nvidia/version").unlink()
    with pytest.raises(PlanError) as err:
        plan_with(UserspacePolicy.HOST, copy)
    codes = {(p.code, p.subject) for p in err.value.problems}
    assert ("host-userspace-missing", "sys/module/nvidia/version") in codes


def test_a_vendor_without_a_host_userspace_is_refused() -> None:
    """ROCm is released apart from amdgpu: there is no host userspace of the module."""
    spec = example_spec("amd-rocm")
    pool = spec.pools[0]
    assert pool.lxc is not None
    lxc = attrs.evolve(pool.lxc, userspace=UserspacePolicy.HOST)
    spec = attrs.evolve(spec, pools=(attrs.evolve(pool, lxc=lxc), *spec.pools[1:]))
    with pytest.raises(PlanError) as err:
        plan(example_facts("amd-rocm"), spec)
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == (
        "userspace-host-unsupported",
        "pools[0].lxc.userspace",
    )
    assert "NVIDIA GPUs only" in problem.message and "AMD's" in problem.message


def test_the_mount_is_a_gpu_line_of_the_pool() -> None:
    """With userspace = "host" the container gets the read-only bind mount of the staged
    directory; back to "container", the patch takes it out again."""
    mount = "lxc.mount.entry: /var/lib/pvegpu/userspace/current opt/pvegpu/driver none bind,ro"
    with_host = [a for a in render(plan_with(UserspacePolicy.HOST)) if a.path.endswith("160.conf")]
    assert f"{mount},create=dir\n" in with_host[0].content
    facts = example_facts(HOST_NAME)
    conf = facts.file("etc/pve/lxc/160.conf")
    assert conf is not None
    mounted = attrs.evolve(conf, content=with_host[0].content)
    files = tuple(mounted if f.path == conf.path else f for f in facts.files)
    # The container now runs the host's 590.48.01 too: put its own on that version.
    facts = attrs.evolve(facts, files=files)
    spec = example_spec(HOST_NAME)
    pool = spec.pools[0]
    assert pool.lxc is not None
    lxc = attrs.evolve(pool.lxc, userspace=UserspacePolicy.CONTAINER, serving=None)
    back = plan(facts, attrs.evolve(spec, pools=(attrs.evolve(pool, lxc=lxc),)))
    (config,) = [a for a in render(back) if a.path == conf.path and a.bundle == "apply"]
    assert "/var/lib/pvegpu/userspace" not in config.content
    assert not [a for a in render(back) if "pvegpu-driver-userspace" in a.path]


def test_the_server_runs_the_staged_userspace_first() -> None:
    """Its unit puts the staged libraries first and the staged tools first on PATH; a PATH
    the spec sets keeps its directories after them."""
    unit = next(
        a.content for a in render(example_plan(HOST_NAME)) if a.path.endswith("vllm.service")
    )
    assert 'Environment="LD_LIBRARY_PATH=/opt/pvegpu/driver/lib"\n' in unit
    assert 'Environment="PATH=/opt/pvegpu/driver/bin:/usr/local/sbin:' in unit
    spec = example_spec(HOST_NAME)
    pool = spec.pools[0]
    assert pool.lxc is not None and pool.lxc.serving is not None
    serving = attrs.evolve(pool.lxc.serving, environment=(("PATH", "/opt/vllm/bin:/usr/bin"),))
    lxc = attrs.evolve(pool.lxc, serving=serving)
    mine = plan(example_facts(HOST_NAME), attrs.evolve(spec, pools=(attrs.evolve(pool, lxc=lxc),)))
    unit = next(a.content for a in render(mine) if a.path.endswith("vllm.service"))
    assert 'Environment="PATH=/opt/pvegpu/driver/bin:/opt/vllm/bin:/usr/bin"\n' in unit
    assert unit.count("PATH=") == 2  # LD_LIBRARY_PATH and PATH, once each
    kpro6 = next(a.content for a in render(example_plan("kpro6")) if a.path.endswith(".service"))
    assert "/opt/pvegpu" not in kpro6


# --- the story, end to end, with apply's fake host --------------------------------------


@cache
def bundle() -> Bundle:
    spec = example_spec(HOST_NAME)
    planned, rendered = plan_and_render(discover_for(spec, FIXTURES / HOST_NAME), spec)
    return bundle_from_files(
        bundle_files(rendered, **manifest_header(planned, rendered, f"{HOST_NAME}.toml"))
    )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Path, FakeHost]]:
    root = copy_tree(FIXTURES / HOST_NAME, tmp_path / "node")
    spec = example_spec(HOST_NAME)
    kernel = KernelSim(root, natural_drivers(plan(discover_for(spec, root), spec)))
    rootfs = "rpool/data/subvol-160-disk-0"
    yield root, FakeHost(root, kernel, {CT: rootfs}, active={CT: {"vllm"}})
    kernel.close()


def codes(root: Path, with_bundle: bool = True) -> set[str]:
    report = check(root, bundle() if with_bundle else None)
    return {f.code for f in report.findings if f.severity is not Severity.INFO}


@needs_dash
def test_apply_a_driver_upgrade_and_the_next_boot_then_revert(
    node: tuple[Path, FakeHost],
) -> None:
    """Apply: the nodes are made, the userspace staged, both units enabled, and check finds
    nothing. Then the host's driver goes to 595.45.04 and the host reboots: check reports
    the stale stage until the boot unit runs again, with nothing done in the container.
    A node that goes missing is reported. Revert removes the stage and the units."""
    root, host = node
    lines: list[str] = []
    apply_bundle(host, bundle(), lines.append)
    assert Path(root / STAGE / "current").readlink().as_posix() == LOADED
    for unit in ("pvegpu-device-nodes.service", "pvegpu-driver-userspace.service"):
        assert (root / "etc/systemd/system/multi-user.target.wants" / unit).is_symlink()
    assert (root / "dev/nvidia-uvm").exists()
    assert codes(root) == set()
    container = root / "rpool/data/subvol-160-disk-0"
    before = sorted(p.relative_to(container).as_posix() for p in container.rglob("*"))

    upgrade(root)
    assert codes(root) == {"host-userspace-stale"}
    host._systemctl(("restart", "pvegpu-driver-userspace.service"))  # the next boot
    assert codes(root) == set()
    assert staged(root)["lib/libcuda.so.1"] == f"link libcuda.so.{NEXT}"
    assert sorted(p.relative_to(container).as_posix() for p in container.rglob("*")) == before

    (root / "dev/nvidia-uvm").unlink()
    report = check(root, bundle())
    (missing,) = [f for f in report.findings if f.code == "device-node-missing"]
    assert missing.subject == "etc/pve/lxc/160.conf line 7"
    assert "nvidia-modprobe -u -c=0" in missing.message
    assert "`pct start 160` fails" in missing.message

    (root / "etc/systemd/system/multi-user.target.wants/pvegpu-device-nodes.service").unlink()
    assert "boot-unit-disabled" in codes(root)

    revert(host, lines.append)
    assert not (root / STAGE).exists()
    assert not (root / STAGING).exists() and not (root / NODES).exists()
    conf = (root / "etc/pve/lxc/160.conf").read_text()
    assert "/var/lib/pvegpu" not in conf


# --- discovery and the config codec ----------------------------------------------------


def test_discovery_lists_only_the_loaded_versions_files(tmp_path: Path) -> None:
    """Another version's library and link, a link out of the directory and a daemon are
    not the loaded driver's userspace; the rest is, by path, links with their text."""
    copy = copy_tree(FIXTURES / HOST_NAME, tmp_path / "root")
    libdir = copy / LIBDIR
    (libdir / "libnvidia-ml.so.580.95.05").write_text("left by the old driver\n")
    (libdir / "libnvidia-ml.so.580").symlink_to("libnvidia-ml.so.580.95.05")
    (libdir / "libnvidia-cfg.so.2").symlink_to(f"/{LIBDIR}/libnvidia-cfg.so.{LOADED}")
    found = {f.path: f.link for f in discover(copy).driver_userspace}
    assert found[f"{LIBDIR}/libcuda.so.1"] == f"libcuda.so.{LOADED}"
    assert found[f"{LIBDIR}/libcuda.so"] == "libcuda.so.1"
    assert found[f"{LIBDIR}/libcuda.so.{LOADED}"] is None
    assert "usr/bin/nvidia-smi" in found
    assert not [p for p in found if "580" in p or p.endswith(("cfg.so.2", "persistenced"))]
    assert discover(FIXTURES / "nvidia-drm").driver_userspace == ()  # none installed


def test_a_container_that_leaves_every_pool_loses_the_mount_too() -> None:
    """The staged userspace's bind mount is one of the container's shared GPU lines: when
    the container keeps no GPU, it goes with nvidiactl and nvidia-uvm."""
    text = (
        "arch: amd64\ndev0: /dev/nvidia0,mode=0666\ndev1: /dev/nvidiactl,mode=0666\n"
        "hostname: llm\n"
        "lxc.mount.entry: /var/lib/pvegpu/userspace/current opt/pvegpu/driver none "
        "bind,ro,create=dir\n"
    )
    assert GuestConfig(ConfigFile("etc/pve/lxc/129.conf", text)).host_userspace
    left = lxcconf.remove_gpu_nodes(text, CONTAINER_NODES, (0,), CONTAINER_NODES.majors(()))
    assert left == "arch: amd64\nhostname: llm\n"
    kept = lxcconf.remove_gpu_nodes(text, CONTAINER_NODES, (3,))
    assert kept == text


@needs_dash
def test_revert_sh_dry_run_removes_the_stage_from_the_copy(tmp_path: Path) -> None:
    """revert.sh with ROOT set: the units' disabling is printed, the staging script's
    `remove` runs against the copy (it honours ROOT), and the scripts, units and the
    container's mount go from the copy, nothing outside it."""
    rendered = render(example_plan(HOST_NAME))
    out = tmp_path / "out"
    write_bundle(rendered, out, node="pve-llm")
    root = copy_tree(FIXTURES / HOST_NAME, tmp_path / "root")
    for artifact in rendered:
        if artifact.target == HOST and artifact.bundle == "apply":
            path = root / artifact.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(artifact.content)
            path.chmod(artifact.mode)
    assert run(root, STAGING).returncode == 0
    assert DASH is not None
    done = subprocess.run(
        [DASH, str(out / "revert/revert.sh")],
        env={"ROOT": str(root), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    assert "would run: systemctl disable pvegpu-driver-userspace.service\n" in done.stdout
    assert f"pvegpu-driver-userspace: removed {root}/{STAGE}\n" in done.stdout
    assert not (root / STAGE).exists()
    assert not (root / STAGING).exists() and not (root / NODES).exists()
    assert "/var/lib/pvegpu" not in (root / "etc/pve/lxc/160.conf").read_text()


def test_over_installed_boot_units_each_artifact_patches_its_own_copy() -> None:
    """A host with the four boot files of an earlier run: each artifact's base is the
    installed copy of its own path (model/own_files.py), so its diff and its revert start
    from what the host has."""
    facts = example_facts(HOST_NAME)
    units = "etc/systemd/system/pvegpu-device-nodes.service", USERSPACE_UNIT
    paths = (NODES, STAGING, *units)
    old = tuple(ConfigFile(path, f"# {path} of an earlier run\n") for path in paths)
    kept = tuple(f for f in facts.files if f.path not in paths)
    earlier = attrs.evolve(facts, files=(*kept, *old))
    rendered = render(plan(earlier, example_spec(HOST_NAME)))
    applied = [a for a in rendered if a.target == HOST and a.bundle == "apply"]
    bases = {a.path: a.base for a in applied if a.path in paths}
    assert bases == {file.path: file for file in old}
