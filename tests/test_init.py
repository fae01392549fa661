"""`pvegpu init`: the host's current split as a spec, round-tripped through `plan`.

The round trip runs on every fixture host: init, then plan the spec it wrote on the same
root. Where init wrote pools, the plan must move no GPU to another driver, give no guest
other GPUs, and change no existing file byte; the only new files are pvegpu's own boot
files. Where init wrote no pool (the spec cannot
plan) or left a GPU out, the test checks that init said so in the file and on stderr.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from pvegpu.cli import main
from pvegpu.cli.diffs import current
from pvegpu.errors import SpecError
from pvegpu.host.discover import discover
from pvegpu.model.artifact import HOST, REVERT_BUNDLE, REVIEW
from pvegpu.model.current import CurrentSplit
from pvegpu.model.paths import (
    OWN_SCRIPTS,
    OWN_UNITS,
    SPLIT_INITRAMFS_HOOK,
    SPLIT_MODPROBE,
    SPLIT_UDEV_RULE,
)
from pvegpu.model.references import Holder
from pvegpu.pipeline import discover_for, init_host, plan_and_render
from pvegpu.planning.current import current_split, poolable
from pvegpu.spec.load import load_spec

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"
HOSTS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
OWN_FILES = frozenset(
    {*OWN_SCRIPTS, *OWN_UNITS, SPLIT_MODPROBE, SPLIT_INITRAMFS_HOOK, SPLIT_UDEV_RULE}
)
"""Files pvegpu adds for its pools that change no GPU's driver or guest by being there."""


def _init(root: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    assert main(["init", "--root", str(root), "--out", str(out)]) == 0
    return out.read_text(encoding="utf-8"), capsys.readouterr().err


def _unwrapped(text: str) -> str:
    """The comments of `text` with their wrapped lines joined."""
    return re.sub(r"\s*\n#\s+", " ", text)


def test_every_fixture_host_has_been_listed() -> None:
    assert len(HOSTS) >= 15 and "kpro6" in HOSTS


@pytest.mark.parametrize("host", HOSTS)
def test_round_trip(host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _round_trip(FIXTURES / host, tmp_path, capsys)


def _round_trip(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[CurrentSplit, str]:
    """init, then plan what it wrote on the same root; the split and the spec's text."""
    facts = discover(root)
    split = current_split(facts)
    text, err = _init(root, tmp_path / "spec.toml", capsys)

    # Every GPU a guest holds is in a pool, or init says why it is not, there and on stderr.
    pooled = {a for p in split.pools for a in p.gpus}
    left = {n.gpu for n in split.unexpressed}
    for gpu in facts.gpus:
        held = any(
            gpu.address in r.gpus and r.holder is not Holder.HOST and not r.section
            for r in facts.references
        )
        if poolable(gpu) and held:
            assert (gpu.address in pooled) != (gpu.address in left), gpu.address
    for note in split.unexpressed:
        assert f"not expressed: {note.subject}: {note.message}" in err
        assert f"not expressed: {note.message}" in _unwrapped(text)  # at the GPU's line

    spec_path = tmp_path / "spec.toml"
    if not split.pools:
        assert "no pool: the spec needs one before it plans" in err
        assert "# No pool:" in text
        with pytest.raises(SpecError) as refused:
            load_spec(spec_path)
        assert [p.code for p in refused.value.problems] == ["spec-no-pools"]
        return split, text

    spec = load_spec(spec_path)
    plan, artifacts = plan_and_render(discover_for(spec, root), spec)
    assert [(p.name, tuple(g.address for g in p.gpus)) for p in plan.pools] == [
        (p.name, p.gpus) for p in split.pools
    ]
    for pool in plan.pools:  # nothing moves to another driver
        assert {g.driver for g in pool.gpus} == {pool.driver}, pool.name
    for artifact in artifacts:
        if artifact.target in (REVIEW,) or artifact.bundle == REVERT_BUNDLE:
            continue
        before = current(root, artifact)
        if before == artifact.content:
            continue
        # An existing file comes out byte for byte; only pvegpu's own boot files are new.
        where = f"{artifact.target}:{artifact.path}"
        assert before is None, f"{where} changes"
        assert artifact.target == HOST and artifact.path in OWN_FILES, where
    return split, text


@pytest.mark.parametrize("host", ["kpro6", "kpro6-split", "workstation", "intel-arc", "nvidia-drm"])
def test_golden(
    host: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    golden: Callable[[str], SnapshotAssertion],
) -> None:
    text, _ = _init(FIXTURES / host, tmp_path / "spec.toml", capsys)
    assert text == golden("toml")


def test_kpro6_is_container_129(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reference host before its split: all eight GPUs on nvidia in CT 129 by devN."""
    spec = load_spec(_write_init(FIXTURES / "kpro6", tmp_path, capsys))
    (pool,) = spec.pools
    assert pool.lxc is not None and pool.lxc.vmid == 129 and pool.lxc.devices == "dev"
    assert pool.gpus is not None and len(pool.gpus) == 8


def _write_init(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "spec.toml"
    _init(root, out, capsys)
    return out


def test_vm_by_mapping_is_a_vfio_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A VM holding a vfio-pci GPU by a mapping of exactly that GPU: a vfio pool with that
    mapping and VM, which plans to no change of pci.cfg or the VM's config."""
    root = _copy("workstation", tmp_path)
    vm = root / "etc/pve/qemu-server/110.conf"
    vm.write_text(
        vm.read_text().replace("hostpci0: 0000:39:00,", "hostpci0: mapping=a4000,"),
        encoding="utf-8",
    )
    (root / "etc/pve/mapping").mkdir()
    (root / "etc/pve/mapping/pci.cfg").write_text(
        "a4000\n\tmap id=10de:24b0,iommugroup=6,node=pve-ws,path=0000:39:00,"
        'subsystem-id=10de:14ad\n\tdescription CAD "A4000" GPU\n\n',
        encoding="utf-8",
    )
    _round_trip(root, tmp_path, capsys)  # pci.cfg and 110.conf unchanged among the rest
    spec = load_spec(tmp_path / "spec.toml")
    (pool,) = spec.pools
    assert pool.vfio is not None and pool.vfio.vm is not None and pool.vfio.vm.vmid == 110
    assert pool.mapping is not None and pool.mapping.id == "a4000"
    assert pool.mapping.description == 'CAD "A4000" GPU'  # quoted as TOML reads it back


def test_out_exists_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "spec.toml"
    out.write_text("mine\n", encoding="utf-8")
    assert main(["init", "--root", str(FIXTURES / "kpro6"), "--out", str(out)]) == 6
    err = capsys.readouterr().err
    assert "[output-exists]" in err and "nothing was written" in err
    assert out.read_text(encoding="utf-8") == "mine\n"


def test_out_exists_refused_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "spec.toml"
    out.symlink_to(tmp_path / "elsewhere")  # a dangling link is there too
    assert main(["init", "--root", str(FIXTURES / "kpro6"), "--out", str(out), "--json"]) == 6
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "pvegpu.refusal/1" and doc["command"] == "init"
    assert [p["code"] for p in doc["problems"]] == ["output-exists"]
    assert not (tmp_path / "elsewhere").exists()


def test_broken_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A root without a host's files exits 3, as discover does, and writes no spec."""
    out = tmp_path / "spec.toml"
    (tmp_path / "empty").mkdir()
    assert main(["init", "--root", str(tmp_path / "empty"), "--out", str(out), "--json"]) == 3
    captured = capsys.readouterr()
    assert json.loads(captured.out)["exit_code"] == 3
    assert "[missing-file]" in captured.err
    assert not out.exists()


def test_stdout_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    root = str(FIXTURES / "workstation-bios")
    assert main(["init", "--root", root]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("# pvegpu init:") and 'node = "pve-ws"' in printed.out
    assert main(["init", "--root", root, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "pvegpu.init/1" and doc["spec"] == printed.out
    assert doc["out"] is None and doc["pools"] == []
    assert {n["subject"] for n in doc["not_expressed"]} == {"0000:17:00.0", "0000:39:00.0"}


def test_json_pools(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--root", str(FIXTURES / "kpro6-split"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pools"] == [
        {
            "name": "ct129",
            "kind": "lxc",
            "gpus": ["0000:01:00.0", "0000:11:00.0", "0000:61:00.0", "0000:71:00.0"],
            "vmid": 129,
            "devices": "dev",
            "mapping": "pro6000",
        },
        {
            "name": "pro6000-vm",
            "kind": "vfio",
            "gpus": ["0000:81:00.0", "0000:91:00.0", "0000:e1:00.0", "0000:f1:00.0"],
            "vmid": None,
            "devices": None,
            "mapping": "pro6000-vm",
        },
    ]
    assert doc["not_expressed"] == []


def _copy(host: str, tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / host, root, symlinks=True)
    return root


def test_gpu_of_two_containers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A GPU two containers hold is left out, and so is every other GPU of both: a pool
    of CT 129's other three would take 01:00.0 away from it."""
    root = _copy("kpro6-split", tmp_path)
    (root / "etc/pve/lxc/130.conf").write_text(
        "arch: amd64\ndev0: /dev/nvidia0,mode=0666\nhostname: other\nostype: debian\n",
        encoding="utf-8",
    )
    split, text = _round_trip(root, tmp_path, capsys)
    assert [p.name for p in split.pools] == ["pro6000-vm"]
    why = {n.subject: n.message for n in split.unexpressed}
    assert why["0000:01:00.0"].startswith("held by CT 129 and CT 130")
    assert why["0000:11:00.0"].startswith("CT 129 also holds 01:00.0, which is not expressed")
    assert "# CT 129 holds" not in text


def test_gpu_by_args_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A VM given a GPU by its `args:` line: a pool writes hostpci lines, so it is left out."""
    root = _copy("workstation", tmp_path)
    vm = root / "etc/pve/qemu-server/110.conf"
    vm.write_text(
        vm.read_text().replace(
            "hostpci0: 0000:39:00,pcie=1,x-vga=1", "args: -device vfio-pci,host=0000:39:00.0"
        ),
        encoding="utf-8",
    )
    split, _ = _round_trip(root, tmp_path, capsys)
    (note,) = [n for n in split.unexpressed if n.subject == "0000:39:00.0"]
    assert note.message.startswith("VM 110 holds it by args")


def test_server_in_the_container_is_named() -> None:
    """kpro6-split's CT 129 still has the unit of the unsplit host: SGLang with `--tp 8`,
    on the 4 GPUs it holds now. init names it, with what it needs, and writes no serving."""
    split, text = init_host(FIXTURES / "kpro6-split")
    (server,) = split.pools[0].servers
    assert (server.unit, server.server, server.gpus) == ("sglang-qwen.service", "SGLang", 8)
    assert "It opens 8 GPUs and the container has 4" in _unwrapped(text)
    assert "[pools.lxc.serving]\n" not in text


def test_out_with_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--out with --json: the file holds exactly the document's spec, and says where."""
    out = tmp_path / "kpro6.toml"
    assert main(["init", "--root", str(FIXTURES / "kpro6"), "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["out"] == str(out) and out.read_text(encoding="utf-8") == doc["spec"]
    assert [p["name"] for p in doc["pools"]] == ["ct129"]


@pytest.mark.parametrize(
    ("options", "mode", "gid"), [(",gid=44,mode=0660", "0660", 44), (",mode=0666", "0666", None)]
)
def test_dev_lines_keep_their_mode_and_gid(
    options: str, mode: str, gid: int | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pool says the mode and gid CT 160's devN lines set, so planning rewrites none."""
    root = _copy("driver-upgrade", tmp_path)
    config = root / "etc/pve/lxc/160.conf"
    config.write_text(config.read_text().replace(",mode=0666", options), encoding="utf-8")
    _round_trip(root, tmp_path, capsys)
    (pool,) = load_spec(tmp_path / "spec.toml").pools
    assert pool.lxc is not None and (pool.lxc.mode, pool.lxc.gid) == (mode, gid)


def test_dev_lines_without_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """devN lines with no mode=: a pool would add one, so they are left out, and said."""
    root = _copy("driver-upgrade", tmp_path)
    config = root / "etc/pve/lxc/160.conf"
    config.write_text(config.read_text().replace(",mode=0666", ""), encoding="utf-8")
    split, _ = _round_trip(root, tmp_path, capsys)
    assert not split.pools
    assert all("sets no mode=" in n.message for n in split.unexpressed)
    assert len(split.unexpressed) == 2
