"""The whole tool on the committed fixture hosts and the specs in examples/.

Each example goes through the real pipeline (`discover_for` + `plan_and_render`), and
every file `pvegpu render --out` would write, the two MANIFEST.json included, is pinned
as its own golden file with its real extension:
tests/golden/test_end_to_end/test_artifact[<example>-<path with / as _>].<ext>. The
split script, the same template text for every example, is pinned whole once (kpro6);
the others pin its data section (test_split_script_data[<example>].sh) and are checked
to be kpro6's script with that data put in.
The acceptance checks of the reference split (kpro6) are spelled out as asserts too,
parsed independently of pvegpu's own parsers, and the generated script and units go
through shellcheck and systemd-analyze.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

import pytest
from syrupy.assertion import SnapshotAssertion

from bundled import FIXTURES, REPO, copy_tree, example_spec, spec_path
from linters import (
    SYSTEM_UNITS,
    needs_shellcheck,
    needs_systemd,
    shellcheck,
    verify,
    verify_files,
)
from pvegpu.model.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.model.rootfs import STORAGE_CFG, locate_rootfs
from pvegpu.model.schema import Spec
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.bundle_layout import bundle_files as bundle_contents
from pvegpu.rendering.registry import render
from pvegpu.rendering.split import UNIT_PATH
from pvegpu.spec.load import load_spec
from script_data import join_script, script_parts
from test_discover import _Shuffled
from test_split_unit import install_root

GOLDEN = Path(__file__).resolve().parent / "golden" / "test_end_to_end"

SPLIT = (
    "usr/local/sbin/pvegpu-vfio-split",
    "etc/systemd/system/pvegpu-vfio-split.service",
    "etc/modprobe.d/pvegpu-vfio.conf",
    "etc/initramfs-tools/hooks/pvegpu-vfio-split",
)
HOOK = SPLIT[3]
NODES = ("usr/local/sbin/pvegpu-device-nodes", "etc/systemd/system/pvegpu-device-nodes.service")
"""The boot unit that makes the containers' device nodes: every NVIDIA or AMD container pool."""
USERSPACE = (
    "usr/local/sbin/pvegpu-driver-userspace",
    "etc/systemd/system/pvegpu-driver-userspace.service",
)
"""The boot unit that stages the host's driver userspace: a pool with userspace = "host"."""
REVIEW_FILES = ("SUMMARY.md", "topology.svg", "MANIFEST.json", "revert/MANIFEST.json")
SERVING = "ct/129/etc/systemd/system/sglang-qwen.service"


class Example(NamedTuple):
    host: str
    """Fixture host under fixtures/sysfs/ the example is written for."""
    files: tuple[str, ...]
    """Every file `pvegpu render --out OUT` writes, relative to OUT."""


EXAMPLES: dict[str, Example] = {
    "kpro6": Example(
        "kpro6",
        (
            *NODES,
            "etc/pve/lxc/129.conf",
            "etc/pve/mapping/pci.cfg",
            *SPLIT,
            SERVING,
            "revert/etc/pve/lxc/129.conf",
            "revert/etc/pve/mapping/pci.cfg",
            f"revert/{SERVING}",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "kpro6-raw": Example(
        "kpro6",
        (
            *NODES,
            "etc/pve/lxc/129.conf",
            "etc/pve/mapping/pci.cfg",
            "snippets/qemu-server/200.conf",
            *SPLIT,
            SERVING,
            "revert/etc/pve/lxc/129.conf",
            "revert/etc/pve/mapping/pci.cfg",
            f"revert/{SERVING}",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "kpro6-vllm": Example(
        "kpro6",
        (
            *NODES,
            "etc/pve/lxc/129.conf",
            "etc/pve/mapping/pci.cfg",
            *SPLIT,
            "ct/129/etc/systemd/system/vllm-qwen.service",
            "revert/etc/pve/lxc/129.conf",
            "revert/etc/pve/mapping/pci.cfg",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "workstation": Example(
        "workstation",
        (
            "etc/pve/mapping/pci.cfg",
            "etc/pve/qemu-server/110.conf",
            *SPLIT,
            "revert/etc/pve/qemu-server/110.conf",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "intel-media": Example(
        "intel-media",
        (
            "etc/pve/lxc/120.conf",
            "etc/pve/lxc/121.conf",
            "etc/pve/mapping/pci.cfg",
            "etc/pve/qemu-server/310.conf",
            *SPLIT,
            "revert/etc/pve/lxc/120.conf",
            "revert/etc/pve/lxc/121.conf",
            "revert/etc/pve/qemu-server/310.conf",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "amd-rocm": Example(
        "amd-rocm",
        (
            *NODES,
            "etc/pve/lxc/130.conf",
            "revert/etc/pve/lxc/130.conf",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "amd-instinct": Example(
        "amd-instinct",
        (
            *NODES,
            "etc/pve/lxc/150.conf",
            "etc/pve/mapping/pci.cfg",
            "etc/pve/qemu-server/450.conf",
            *SPLIT,
            "ct/150/etc/systemd/system/sglang-qwen.service",
            "revert/etc/pve/lxc/150.conf",
            "revert/etc/pve/qemu-server/450.conf",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "nvidia-drm": Example(
        "nvidia-drm",
        (
            *NODES,
            "etc/pve/lxc/140.conf",
            "etc/pve/lxc/141.conf",
            "etc/pve/mapping/pci.cfg",
            "etc/pve/qemu-server/410.conf",
            *SPLIT,
            "revert/etc/pve/lxc/140.conf",
            "revert/etc/pve/lxc/141.conf",
            "revert/etc/pve/qemu-server/410.conf",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "driver-upgrade": Example(
        "driver-upgrade",
        (
            "etc/pve/lxc/160.conf",
            *NODES,
            *USERSPACE,
            "ct/160/etc/systemd/system/vllm.service",
            "revert/etc/pve/lxc/160.conf",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "intel-arc": Example(
        "intel-arc",
        (
            "etc/pve/lxc/150.conf",
            "revert/etc/pve/lxc/150.conf",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "vgpu-l40s": Example(
        "vgpu-l40s",
        (
            "etc/pve/mapping/pci.cfg",
            "etc/pve/qemu-server/301.conf",
            "etc/pve/qemu-server/320.conf",
            *SPLIT,
            "revert/etc/pve/qemu-server/301.conf",
            "revert/etc/pve/qemu-server/320.conf",
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
    "mixed": Example(
        "mixed",
        (
            "etc/pve/mapping/pci.cfg",
            "snippets/qemu-server/300.conf",
            *SPLIT,
            "revert/revert.sh",
            *REVIEW_FILES,
        ),
    ),
}


SPLIT_EXAMPLES = [name for name, example in EXAMPLES.items() if SPLIT[0] in example.files]
"""The examples with a vfio pool: the others render no split (amd-rocm: a container only)."""


def golden_ext(path: str) -> str:
    """The file's own extension; the split script has none and is a shell script."""
    suffix = PurePosixPath(path).suffix
    return suffix[1:] if suffix else "sh"


def golden_id(name: str, path: str) -> str:
    return f"{name}-{path.replace('/', '_')}"


class Rendered(NamedTuple):
    spec: Spec
    facts: HostFacts
    plan: Plan
    artifacts: tuple[Artifact, ...]
    files: dict[str, str]
    """OUT-relative path -> content, exactly what `pvegpu render --out OUT` writes."""

    def artifact(self, path: str, target: str = HOST, bundle: str = "apply") -> Artifact:
        return next(
            a
            for a in self.artifacts
            if a.path == path and a.target == target and a.bundle == bundle
        )


def bundle_files(artifacts: tuple[Artifact, ...], **header: Any) -> dict[str, str]:
    """In memory, what write_bundle puts under OUT (checked against the disk below)."""
    return {path: content for path, (content, _) in bundle_contents(artifacts, **header).items()}


def header(name: str, facts: HostFacts) -> dict[str, Any]:
    return {"node": facts.node, "spec": f"examples/{name}.toml"}


def run_pipeline(name: str, root: Path | None = None) -> Rendered:
    spec = load_spec(spec_path(name))
    facts = discover_for(spec, root or FIXTURES / EXAMPLES[name].host)
    plan, artifacts = plan_and_render(facts, spec)
    return Rendered(spec, facts, plan, artifacts, bundle_files(artifacts, **header(name, facts)))


@cache
def rendered(name: str) -> Rendered:
    return run_pipeline(name)


FULL_SCRIPT = "kpro6"
"""The example whose split script is pinned whole; the others pin only its data section."""
GOLDEN_CASES = [
    pytest.param(name, path, id=golden_id(name, path))
    for name, example in EXAMPLES.items()
    for path in sorted(example.files)
    if path not in (SPLIT[0], HOOK) or name == FULL_SCRIPT
]
# --- every artifact, as a file


def test_examples_are_all_covered() -> None:
    """Every examples/*.toml has an end-to-end case here, and every case a spec file
    (the cluster example, three nodes at once, has its own: tests/test_cluster.py)."""
    stems = [p.stem for p in (REPO / "examples").glob("*.toml") if p.stem != "cluster"]
    assert sorted(stems) == sorted(EXAMPLES)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_rendered_file_list(name: str) -> None:
    """Each example renders exactly the files listed for it (one golden per file)."""
    assert sorted(rendered(name).files) == sorted(EXAMPLES[name].files)


@pytest.mark.parametrize(("name", "path"), GOLDEN_CASES)
def test_artifact(name: str, path: str, golden: Callable[[str], SnapshotAssertion]) -> None:
    """Each rendered file, byte for byte, is reviewed as the file it stands for."""
    content = rendered(name).files[path]
    if golden_ext(path) == "sh":
        assert content.startswith("#!/bin/sh\n")
    assert content == golden(golden_ext(path))


@pytest.mark.parametrize("name", [n for n in SPLIT_EXAMPLES if n != FULL_SCRIPT])
def test_split_script_data(name: str, golden: Callable[[str], SnapshotAssertion]) -> None:
    """The split script of every other example is kpro6's, pinned whole above, with its own
    data section (host name, VFIO and HOST tables), pinned here as a file of its own."""
    full = GOLDEN / f"test_artifact[{golden_id(FULL_SCRIPT, SPLIT[0])}].sh"
    body, _ = script_parts(full.read_text(encoding="utf-8"))
    script = rendered(name).files[SPLIT[0]]
    _, data = script_parts(script)
    assert data == golden("sh")
    assert join_script(body, data) == script


@pytest.mark.parametrize("name", [n for n in SPLIT_EXAMPLES if n != FULL_SCRIPT])
def test_initramfs_hook_differs_by_host_name_only(name: str) -> None:
    """The initramfs hook is kpro6's, pinned whole above, with this host's name."""
    node = rendered(name).facts.node
    hook = rendered(FULL_SCRIPT).files[HOOK]
    assert rendered(name).files[HOOK] == hook.replace("host kpro6,", f"host {node},")


def test_script_parts_round_trip() -> None:
    """Control: script_parts splits kpro6's script losslessly, and data differs by host."""
    script = rendered(FULL_SCRIPT).files[SPLIT[0]]
    body, data = script_parts(script)
    assert join_script(body, data) == script
    assert "10de:2bb5" in data and "10de:2bb5" not in body
    assert "kpro6" not in body
    assert data != script_parts(rendered("workstation").files[SPLIT[0]])[1]


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_write_bundle_writes_the_golden_files(name: str, tmp_path: Path) -> None:
    """write_bundle (what `render --out` calls) writes exactly the files pinned here."""
    result = rendered(name)
    written = write_bundle(result.artifacts, tmp_path, **header(name, result.facts))
    on_disk = {p.relative_to(tmp_path).as_posix(): p.read_text(encoding="utf-8") for p in written}
    assert on_disk == result.files


# --- the acceptance checks of the reference split (kpro6 + examples/kpro6.toml)

GPU_NODE = re.compile(r"^dev\d+: (/dev/nvidia\d+)(,|$)")


def _gpu_nodes(lines: list[str]) -> list[str]:
    return [m[1] for m in map(GPU_NODE.match, lines) if m]


def _main_and_rest(text: str, snapshot: str) -> tuple[list[str], str]:
    main, marker, rest = text.partition(f"\n[{snapshot}]\n")
    assert marker, f"no [{snapshot}] section"
    return main.splitlines(), marker + rest


def test_kpro6_lxc_keeps_exactly_the_numa0_gpus() -> None:
    """129.conf: /dev/nvidia0..3 only; every other line and [pre-split] byte for byte."""
    conf = rendered("kpro6").artifact("etc/pve/lxc/129.conf")
    assert conf.base is not None
    main, snapshot = _main_and_rest(conf.content, "pre-split")
    base_main, base_snapshot = _main_and_rest(conf.base.content, "pre-split")
    assert snapshot == base_snapshot
    assert _gpu_nodes(main) == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]
    assert [line for line in main if line.startswith("dev")] == [
        "dev0: /dev/nvidia0,mode=0666",
        "dev1: /dev/nvidia1,mode=0666",
        "dev2: /dev/nvidia2,mode=0666",
        "dev3: /dev/nvidia3,mode=0666",
        "dev4: /dev/nvidiactl,mode=0666",
        "dev5: /dev/nvidia-uvm,mode=0666",
        "dev6: /dev/nvidia-uvm-tools,mode=0666",
    ]
    # Besides the devN lines, the only new line pins the container to NUMA 0's CPUs.
    non_gpu = [line for line in main if not line.startswith("dev")]
    assert non_gpu == [
        *(line for line in base_main if not line.startswith("dev")),
        "lxc.cgroup2.cpuset.cpus: 0-31,64-95",
    ]
    # The fixture's container had all eight: the four of NUMA 1 are what goes.
    assert _gpu_nodes(base_main) == [f"/dev/nvidia{i}" for i in range(8)]


def _pci_cfg_sections(text: str) -> dict[str, list[dict[str, str]]]:
    """mapping id -> its `map` lines as key/value dicts (independent of pvefiles.pcicfg)."""
    sections: dict[str, list[dict[str, str]]] = {}
    current: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line:
            continue
        if not line[0].isspace():
            current = sections.setdefault(line, [])
            continue
        key, _, value = line.strip().partition(" ")
        if key == "map":
            current.append(dict(part.split("=", 1) for part in value.split(",")))
    return sections


def test_kpro6_vm_mapping_matches_discovery() -> None:
    """pci.cfg's pro6000-vm maps 81, 91, e1, f1 with discovery's ids and IOMMU groups."""
    result = rendered("kpro6")
    sections = _pci_cfg_sections(result.artifact("etc/pve/mapping/pci.cfg").content)
    assert list(sections) == ["nic-cx6", "pro6000", "pro6000-vm"]
    maps = sections["pro6000-vm"]
    assert [m["path"] for m in maps] == ["0000:81:00", "0000:91:00", "0000:e1:00", "0000:f1:00"]
    by_slot = {str(g.address)[:-2]: g for g in result.facts.gpus}
    for entry in maps:
        gpu = by_slot[entry["path"]]
        assert entry == {
            "id": gpu.vendor_device,
            "iommugroup": str(gpu.iommu_group),
            "node": "kpro6",
            "path": entry["path"],
            "subsystem-id": gpu.function.subsystem_id,
        }
        assert gpu.numa_node == 1
    assert [m["path"] for m in sections["pro6000"]] == [
        "0000:01:00",
        "0000:11:00",
        "0000:61:00",
        "0000:71:00",
    ]
    # The mapping no pool names is carried over untouched.
    base = result.facts.file("etc/pve/mapping/pci.cfg")
    assert base is not None
    assert sections["nic-cx6"] == _pci_cfg_sections(base.content)["nic-cx6"]


@pytest.mark.parametrize(
    ("name", "tp_option"), [("kpro6", "--tp-size 4"), ("kpro6-raw", "--tp-size 4")]
)
def test_serving_unit_tp_option(name: str, tp_option: str) -> None:
    """The serving unit sets TP=4 by the version's canonical option, never the `--tp` prefix."""
    unit = rendered(name).files[SERVING]
    assert f"    {tp_option} \\\n" in unit
    assert "--tp " not in unit
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in unit


def test_kpro6_raw_lxc_lines_are_per_minor() -> None:
    """kpro6-raw: cgroup rules per GPU minor (never c 195:*), uvm's major from /proc/devices."""
    conf = rendered("kpro6-raw").artifact("etc/pve/lxc/129.conf")
    main, _ = _main_and_rest(conf.content, "pre-split")
    allow = [
        line.split(": ", 1)[1] for line in main if line.startswith("lxc.cgroup2.devices.allow")
    ]
    uvm = rendered("kpro6-raw").facts.char_major("nvidia-uvm")
    assert allow == [
        *(f"c 195:{minor} rwm" for minor in (0, 1, 2, 3, 255)),
        f"c {uvm}:0 rwm",
        f"c {uvm}:1 rwm",
    ]
    assert not [line for line in main if line.startswith("dev")]


# --- linters on the generated shell and units


# The split scripts of the other examples are kpro6's outside their quoted data
# (test_split_script_data): checking kpro6's checks theirs. revert.sh differs per example.
SHELL_CASES = [
    pytest.param(name, path, id=golden_id(name, path))
    for name, path in [
        (FULL_SCRIPT, SPLIT[0]),
        (FULL_SCRIPT, HOOK),
        *((n, "revert/revert.sh") for n in EXAMPLES),
        *((n, NODES[0]) for n, e in EXAMPLES.items() if NODES[0] in e.files),
        *((n, USERSPACE[0]) for n, e in EXAMPLES.items() if USERSPACE[0] in e.files),
    ]
]


@needs_shellcheck
@pytest.mark.parametrize(("name", "path"), SHELL_CASES)
def test_shell_passes_shellcheck(name: str, path: str, tmp_path: Path) -> None:
    """The split script, its initramfs hook and every example's revert.sh pass
    `shellcheck -s sh -S style`."""
    script = tmp_path / PurePosixPath(path).name
    script.write_text(rendered(name).files[path])
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout


@needs_systemd
@pytest.mark.parametrize("name", SPLIT_EXAMPLES)
def test_split_unit_passes_systemd_analyze(name: str, tmp_path: Path) -> None:
    """pvegpu-vfio-split.service verifies cleanly with its script installed under --root."""
    artifacts = {
        a.path: a for a in rendered(name).artifacts if a.target == HOST and a.bundle == "apply"
    }
    root = install_root(tmp_path, artifacts)
    result = verify(root, root / UNIT_PATH)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


BOOT_UNIT_EXAMPLES = [n for n, e in EXAMPLES.items() if NODES[1] in e.files]


@needs_systemd
@pytest.mark.skipif(SYSTEM_UNITS is None, reason="no systemd units here to verify against")
@pytest.mark.parametrize("name", BOOT_UNIT_EXAMPLES)
def test_boot_units_pass_systemd_analyze(name: str, tmp_path: Path) -> None:
    """The device nodes and driver userspace units verify cleanly among the stock units
    (they order themselves against multi-user.target and basic.target), scripts installed."""
    assert SYSTEM_UNITS is not None
    assert "driver-upgrade" in BOOT_UNIT_EXAMPLES
    result = rendered(name)
    root = tmp_path / "root"
    copy_tree(SYSTEM_UNITS, root / "usr/lib/systemd/system")
    units = []
    for script, unit in (NODES, USERSPACE):
        if script not in result.files:
            continue
        for path in (script, unit):
            artifact = result.artifact(path)
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(artifact.content)
            target.chmod(artifact.mode)
        units.append(root / unit)
    check = verify_files(root, units)
    assert (check.returncode, check.stdout + check.stderr) == (0, "")


@needs_systemd
@pytest.mark.skipif(SYSTEM_UNITS is None, reason="no systemd units here to verify against")
@pytest.mark.parametrize("name", ["kpro6", "kpro6-raw"])
def test_serving_unit_passes_systemd_analyze(name: str, tmp_path: Path) -> None:
    """The container's sglang unit verifies cleanly among stock units, ExecStart resolved."""
    assert SYSTEM_UNITS is not None
    result = rendered(name)
    serving = result.artifact("etc/systemd/system/sglang-qwen.service", target="ct:129")
    root = tmp_path / "ct"
    copy_tree(SYSTEM_UNITS, root / "usr/lib/systemd/system")
    unit = root / serving.path
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(serving.content)
    python = root / "root/ml-env/bin/python3"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    check = verify(root, unit)
    assert (check.returncode, check.stdout + check.stderr) == (0, "")


# --- properties of the whole tool


@contextmanager
def shuffled_listings(seed: int) -> Iterator[list[int]]:
    """os.listdir, os.scandir and Path.iterdir return their entries in a seeded random
    order; yields a one-element list counting the listings made."""
    rng = random.Random(seed)
    calls = [0]
    real_listdir, real_scandir, real_iterdir = os.listdir, os.scandir, Path.iterdir

    def listdir(path: Any = ".") -> list[str]:
        calls[0] += 1
        names = real_listdir(path)
        rng.shuffle(names)
        return names

    def scandir(path: Any = ".") -> _Shuffled:
        calls[0] += 1
        with real_scandir(path) as it:
            entries = list(it)
        rng.shuffle(entries)
        return _Shuffled(entries)

    def iterdir(self: Path) -> Iterator[Path]:
        calls[0] += 1
        entries = list(real_iterdir(self))
        rng.shuffle(entries)
        return iter(entries)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "listdir", listdir)
        mp.setattr(os, "scandir", scandir)
        mp.setattr(Path, "iterdir", iterdir)
        yield calls


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_listing_order_does_not_change_any_artifact(name: str, seed: int) -> None:
    """Whatever order directories are listed in, every artifact is the same."""
    with shuffled_listings(seed) as calls:
        result = run_pipeline(name)
    assert calls[0] > 0, "the pipeline listed no directory through the patched calls"
    assert result.artifacts == rendered(name).artifacts
    assert result.files == rendered(name).files


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_rendering_twice_equals_once(name: str) -> None:
    """plan_and_render and render are pure: the same inputs give the same artifacts."""
    result = rendered(name)
    plan, artifacts = plan_and_render(result.facts, result.spec)
    assert plan == result.plan
    assert artifacts == result.artifacts
    assert render(result.plan) == result.artifacts


def _install(result: Rendered, root: Path) -> None:
    """Write the apply bundle's host and container files where they live under root."""
    rootfs = {
        p.lxc.vmid: p.lxc.serving.container_rootfs
        for p in result.spec.pools
        if p.lxc is not None and p.lxc.serving is not None and p.lxc.serving.container_rootfs
    }
    for artifact in result.artifacts:
        if artifact.bundle == REVERT_BUNDLE or artifact.target == REVIEW:
            continue
        if artifact.target == HOST:
            target = root / artifact.path
        else:
            vmid = int(artifact.target.removeprefix("ct:"))
            # The spec's container_rootfs, else where its rootfs: line and storage.cfg say.
            where = (
                rootfs.get(vmid)
                or locate_rootfs(
                    vmid,
                    (root / f"etc/pve/lxc/{vmid}.conf").read_text(encoding="utf-8"),
                    (root / STORAGE_CFG).read_text(encoding="utf-8"),
                ).path
            )
            assert where is not None, f"CT {vmid}: no root file system to install into"
            target = root / where / artifact.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(artifact.content, encoding="utf-8")


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_patching_a_patched_root_changes_nothing(name: str, tmp_path: Path) -> None:
    """Rendering over a root holding the rendered files gives the same files, as no-op patches."""
    first = rendered(name)
    root = tmp_path / "root"
    copy_tree(FIXTURES / EXAMPLES[name].host, root)
    _install(first, root)
    second = run_pipeline(name, root)
    # Another container's lines for a GPU that moves are gone once installed: nothing is
    # left to remove, so the second round leaves that config alone (checked below).
    released = {c.config_path for c in first.plan.containers_losing_gpus}
    installed = [
        a
        for a in first.artifacts
        if a.bundle != REVERT_BUNDLE and a.target != REVIEW and a.path not in released
    ]
    again = {
        (a.target, a.path): a
        for a in second.artifacts
        if a.bundle != REVERT_BUNDLE and a.target != REVIEW
    }
    assert sorted(again) == sorted((a.target, a.path) for a in installed)
    for artifact in installed:
        twice = again[(artifact.target, artifact.path)]
        assert twice.content == artifact.content, artifact.path
        if artifact.path.startswith("etc/pve/") or artifact.target != HOST:
            # Guest configs, pci.cfg and container units are read back by discovery, so
            # the second round patches them, and the patch changes nothing.
            assert twice.base is not None, f"{artifact.path}: written, yet not read back"
            assert twice.base.content == twice.content, artifact.path
    assert not {path for target, path in again if target == HOST} & released


def test_kpro6_split_host_renders_the_same_host_files() -> None:
    """On kpro6-split, kpro6.toml finds 129.conf as planned and renders the same other files."""
    spec = example_spec("kpro6")
    _, after = plan_and_render(discover_for(spec, FIXTURES / "kpro6-split"), spec)
    before = rendered("kpro6").artifacts

    def host_files(artifacts: tuple[Artifact, ...]) -> dict[str, str]:
        return {a.path: a.content for a in artifacts if a.target == HOST and a.bundle == "apply"}

    conf_path = "etc/pve/lxc/129.conf"
    assert host_files(after).keys() == host_files(before).keys()
    assert {k: v for k, v in host_files(after).items() if k != conf_path} == {
        k: v for k, v in host_files(before).items() if k != conf_path
    }
    conf = next(a for a in after if a.path == conf_path and a.bundle == "apply")
    assert conf.base is not None and conf.base.content == conf.content
    assert conf.reason.startswith("LXC 129 already has exactly these GPU lines")


# --- regressions found in review of the rendered files


def test_workstation_vm_gets_the_a4000_once() -> None:
    """VM 110's raw-address hostpci0 for the A4000 becomes the mapping (x-vga kept), once."""
    conf = rendered("workstation").files["etc/pve/qemu-server/110.conf"]
    hostpci = [line for line in conf.splitlines() if line.startswith("hostpci")]
    assert hostpci == ["hostpci0: mapping=a4000,pcie=1,x-vga=1"]
