"""RED TEAM 31: `pvegpu init` on host shapes admins really run, each one a defect found.

One test per defect. Each builds its host in tmp_path (tests/field_hosts.py's desktop
with two RTX 3090s, or its AMD host), runs `pvegpu init`, then plans the spec init wrote
on the same root: docs/cli.md promises that planning it "moves no GPU to another driver,
gives no guest other GPUs and changes no existing file", and that every GPU a guest
holds that init cannot express is named, with why, in the file and on stderr.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from field_hosts import RTX3090, _ct, _nvidia_desktop, _vm
from pvegpu.cli import main
from pvegpu.cli.arguments import build_parser
from pvegpu.cli.completion import bash_completion
from pvegpu.cli.diffs import current
from pvegpu.model.artifact import REVERT_BUNDLE, REVIEW
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.spec.load import load_spec
from pvegpu.testing import write_host
from test_cli_completion import _bash

CARDS = (
    ("0000:01:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
    ("0000:02:00.0", RTX3090, "NVIDIA GeForce RTX 3090"),
)
MAP_02 = "\tmap id=10de:2204,iommugroup=4,node=pve-rt,path=0000:02:00,subsystem-id=1458:403b\n"
GPU = "0000:01:00.0"
MAP_01 = "\tmap id=10de:2204,iommugroup=2,node=pve-rt,path=0000:01:00,subsystem-id=1458:403b\n"


def _dev(minor: int, options: str = ",mode=0666") -> str:
    """devN lines giving GPU `minor` and NVIDIA's shared nodes, as the tutorials write them."""
    nodes = (f"nvidia{minor}", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
    return "".join(f"dev{i}: /dev/{n}{options}\n" for i, n in enumerate(nodes))


def _raw(uvm_rule: str, extra_rules: str = "", extra_mounts: str = "") -> str:
    """Raw cgroup2 rules and bind mounts for GPU 0, as the Proxmox forum guides write them."""
    mounts = ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
    return (
        "lxc.cgroup2.devices.allow: c 195:0 rwm\nlxc.cgroup2.devices.allow: c 195:255 rwm\n"
        + extra_rules
        + uvm_rule
        + "".join(
            f"lxc.mount.entry: /dev/{m} dev/{m} none bind,optional,create=file\n" for m in mounts
        )
        + extra_mounts
    )


def _host(tmp_path: Path, files: dict[str, str], drivers: list[str] | None = None) -> Path:
    root = tmp_path / "root"
    write_host(_nvidia_desktop("pve-rt", CARDS, files=files, drivers=drivers), root)
    return root


def _init(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    out = tmp_path / "spec.toml"
    assert main(["init", "--root", str(root), "--out", str(out)]) == 0
    return out, capsys.readouterr().err


def _changed(root: Path, spec_path: Path) -> list[str]:
    """The existing host files planning the spec changes (it should be none). A spec init
    wrote without pools plans nothing, so it changes nothing."""
    if "\n# No pool:" in spec_path.read_text(encoding="utf-8"):
        return []
    spec = load_spec(spec_path)
    _, artifacts = plan_and_render(discover_for(spec, root), spec)
    return [
        f"{a.target}:{a.path}"
        for a in artifacts
        if a.target != REVIEW
        and a.bundle != REVERT_BUNDLE
        and (before := current(root, a)) is not None
        and before != a.content
    ]


def _accounted(spec_path: Path, err: str, gpu: str) -> bool:
    """The GPU is in a pool of the spec, or init said why not on stderr."""
    return f'  "{gpu}",' in spec_path.read_text(encoding="utf-8") or f"not expressed: {gpu}:" in err


def test_redteam31_mapping_listing_more_gpus_than_the_vm_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 1. VM 200 has one `hostpci0: mapping=both`; mapping `both` lists
    two GPUs (Proxmox gives the VM one of them, whichever is free at its start). init
    writes a vfio pool of both GPUs for VM 200, and planning it adds `hostpci1:
    mapping=both`: the VM gets a second GPU, against "gives no guest other GPUs"."""
    root = _host(
        tmp_path,
        {
            "etc/pve/qemu-server/200.conf": _vm("win", 200, "hostpci0: mapping=both,pcie=1\n"),
            "etc/pve/mapping/pci.cfg": "both\n" + MAP_01 + MAP_02 + "\n",
        },
        drivers=["vfio-pci", "vfio-pci"],
    )
    spec, err = _init(root, tmp_path, capsys)
    assert _changed(root, spec) == []
    pooled = 'mapping = { id = "both" }' in spec.read_text(encoding="utf-8")
    assert pooled or ("not expressed: 0000:01:00.0" in err and "not expressed: 0000:02:00.0" in err)


def test_redteam31_raw_uvm_rule_by_wildcard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 2. A privileged container given GPU 0 by raw lines, nvidia-uvm
    by `c 509:* rwm` (the forum guides' spelling). init writes a raw pool, and planning it
    rewrites that rule to `c 509:0 rwm` + `c 509:1 rwm`: an existing file changes."""
    root = _host(
        tmp_path,
        {
            "etc/pve/lxc/101.conf": _ct(
                "raw", 101, _raw("lxc.cgroup2.devices.allow: c 509:* rwm\n"), unprivileged=False
            )
        },
    )
    spec, err = _init(root, tmp_path, capsys)
    assert _changed(root, spec) == []
    assert _accounted(spec, err, GPU)


def test_redteam31_dev_options_mode_before_gid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 3. devN lines written `mode=0660,gid=44` (by hand; Proxmox
    prints `gid=44,mode=0660`): init writes mode and gid, and planning rewrites every line
    to `gid=44,mode=0660`, the same grant: an existing file changes for nothing."""
    root = _host(tmp_path, {"etc/pve/lxc/101.conf": _ct("a", 101, _dev(0, ",mode=0660,gid=44"))})
    spec, err = _init(root, tmp_path, capsys)
    assert _changed(root, spec) == []
    assert _accounted(spec, err, GPU)


def test_redteam31_vm_hostpci_line_appended_at_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 4. VM 200's `hostpci0: mapping=g2` appended after its other keys
    (how the guides say to edit /etc/pve/qemu-server/200.conf). init writes a vfio pool
    of it; planning moves the same line up to Proxmox's key order: an existing file
    changes (a container's devN lines keep their place; a VM's line does not)."""
    root = _host(
        tmp_path,
        {
            "etc/pve/qemu-server/200.conf": _vm("win", 200, "hostpci0: mapping=g2,pcie=1\n"),
            "etc/pve/mapping/pci.cfg": "g2\n" + MAP_02 + "\n",
        },
        drivers=["nvidia", "vfio-pci"],
    )
    spec, err = _init(root, tmp_path, capsys)
    assert _changed(root, spec) == []
    assert _accounted(spec, err, "0000:02:00.0")


@pytest.mark.parametrize("style", ["dev", "raw"])
def test_redteam31_nvidia_modeset_node_dropped(
    style: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 5. A container given /dev/nvidia-modeset besides its GPU (the
    Plex/Jellyfin NVENC guides add it), by a devN line or by a 195:254 rule and a bind
    mount. init writes a pool for it, and planning silently removes the modeset lines
    (no finding says so): an existing file changes and the container loses a node."""
    lines = (
        _dev(0) + "dev4: /dev/nvidia-modeset,mode=0666\n"
        if style == "dev"
        else _raw(
            "lxc.cgroup2.devices.allow: c 509:0 rwm\nlxc.cgroup2.devices.allow: c 509:1 rwm\n",
            "lxc.cgroup2.devices.allow: c 195:254 rwm\n",
            "lxc.mount.entry: /dev/nvidia-modeset dev/nvidia-modeset none "
            "bind,optional,create=file\n",
        )
    )
    root = _host(tmp_path, {"etc/pve/lxc/101.conf": _ct("a", 101, lines, unprivileged=False)})
    spec, err = _init(root, tmp_path, capsys)
    assert _changed(root, spec) == []
    assert _accounted(spec, err, GPU)


def test_redteam31_pending_hostpci_gpu_called_free(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 6. CT 101 holds 01:00.0; VM 200's pending section (`qm set 200
    -hostpci0 0000:02:00` while it runs) gives it 02:00.0 at its next start. init lists
    02:00.0 under "Free GPUs (host driver, no guest)" and says nothing of the pending
    line: an admin who pools it for a container clashes with the VM's next start."""
    vm = _vm("w", 200) + "\n[PENDING]\nhostpci0: 0000:02:00,pcie=1\n"
    root = _host(
        tmp_path,
        {"etc/pve/lxc/101.conf": _ct("a", 101, _dev(0)), "etc/pve/qemu-server/200.conf": vm},
    )
    spec, err = _init(root, tmp_path, capsys)
    text = spec.read_text(encoding="utf-8")
    assert "Free GPUs (host driver, no guest): none" in text
    assert "02:00.0" in err and "pending" in err.lower()


def test_redteam31_container_pool_on_a_vm_id_is_one_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 7. A container pool whose vmid is VM 110's (workstation): the
    refusal says vmid-is-a-vm, and also lxc-config-missing, whose fix `pct create 110`
    Proxmox refuses (the id is the VM's). docs/cli.md: one problem per mistake."""
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'node = "pve-ws"\n\n[[pools]]\nname = "a"\ngpus = ["17:00.0"]\n\n[pools.lxc]\nvmid = 110\n',
        encoding="utf-8",
    )
    root = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs" / "workstation"
    assert main(["plan", "--root", str(root), "--spec", str(spec), "--json"]) == 5
    doc = json.loads(capsys.readouterr().out)
    assert [p["code"] for p in doc["problems"]] == ["vmid-is-a-vm"]


def test_redteam31_vm_with_a_mapping_per_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 8. VM 200 holds both GPUs, each by a mapping of its own
    (`hostpci0: mapping=g1`, `hostpci1: mapping=g2`: one mapping per device, as the GUI's
    resource mappings are often made). init wrote two pools both named vm200 for VM 200,
    refused its own spec (exit 4, spec-duplicate-guest, spec-duplicate-pool) and wrote
    nothing."""
    vm = _vm("w", 200).replace(
        "cpu: host\n", "cpu: host\nhostpci0: mapping=g1,pcie=1\nhostpci1: mapping=g2,pcie=1\n"
    )
    root = _host(
        tmp_path,
        {
            "etc/pve/qemu-server/200.conf": vm,
            "etc/pve/mapping/pci.cfg": "g1\n" + MAP_01 + "\ng2\n" + MAP_02 + "\n",
        },
        drivers=["vfio-pci", "vfio-pci"],
    )
    spec, err = _init(root, tmp_path, capsys)
    assert _changed(root, spec) == []
    assert _accounted(spec, err, GPU) and _accounted(spec, err, "0000:02:00.0")


def test_redteam31_unused_mapping_named_like_a_container_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 9. CT 101 holds 01:00.0; 02:00.0 is on vfio-pci in mapping
    `ct101`, which no VM uses. init names the container's pool ct101 and the unused
    mapping's pool by its id, ct101 too, refuses its own spec (exit 4,
    spec-duplicate-pool) and writes nothing."""
    root = _host(
        tmp_path,
        {
            "etc/pve/lxc/101.conf": _ct("a", 101, _dev(0)),
            "etc/pve/mapping/pci.cfg": "ct101\n" + MAP_02 + "\n",
        },
        drivers=["nvidia", "vfio-pci"],
    )
    spec, err = _init(root, tmp_path, capsys)
    assert _changed(root, spec) == []
    assert _accounted(spec, err, GPU) and _accounted(spec, err, "0000:02:00.0")


def test_redteam31_unused_mapping_with_a_long_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 10. 02:00.0 on vfio-pci in an unused mapping whose id has 71
    characters (Proxmox and the spec take mapping ids up to 128): init names the pool by
    the id, refuses its own spec (exit 4: a pool name has at most 64 characters) and
    writes nothing."""
    mapping = "g" + "x" * 70
    root = _host(
        tmp_path,
        {"etc/pve/mapping/pci.cfg": f"{mapping}\n{MAP_02}\n"},
        drivers=["nvidia", "vfio-pci"],
    )
    spec, err = _init(root, tmp_path, capsys)
    assert _changed(root, spec) == []
    assert _accounted(spec, err, "0000:02:00.0")
    assert f'id = "{mapping}"' in spec.read_text(encoding="utf-8")


def test_redteam31_container_and_vm_pool_on_one_id_cannot_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 11. A container pool and a VM pool both naming guest 110: the
    refusal's fix says "merge the two pools into one", which no spec can (a pool is a
    container's or a VM's). The fix must say that one of the two ids is wrong."""
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'node = "pve-ws"\n\n[[pools]]\nname = "a"\ngpus = ["17:00.0"]\n\n[pools.lxc]\n'
        'vmid = 110\n\n[[pools]]\nname = "b"\ngpus = ["39:00.0"]\nmapping = { id = "bb" }\n\n'
        "[pools.vfio]\n\n[pools.vfio.vm]\nvmid = 110\n",
        encoding="utf-8",
    )
    root = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs" / "workstation"
    assert main(["plan", "--root", str(root), "--spec", str(spec), "--json"]) == 4
    (problem,) = json.loads(capsys.readouterr().out)["problems"]
    assert problem["code"] == "spec-duplicate-guest"
    assert "merge" not in problem["fix"]


def test_redteam31_summary_counts_a_function_already_on_vfio_as_moving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RED TEAM 31, defect 12. 02:00.0 and its audio 02:00.1 are on vfio-pci already (VM
    200's), 01:00.0 and 01:00.1 on nvidia and snd_hda_intel. A pool giving both GPUs to
    VM 200: the summary's moves line says `01:00.0 nvidia -> vfio-pci (and 2 functions
    of their IOMMU groups)`, counting 02:00.1, which stays on vfio-pci; 1 moves."""
    vm = _vm("w", 200).replace("cpu: host\n", "cpu: host\nhostpci0: mapping=g2,pcie=1\n")
    root = _host(
        tmp_path,
        {"etc/pve/qemu-server/200.conf": vm, "etc/pve/mapping/pci.cfg": "g2\n" + MAP_02 + "\n"},
        drivers=["nvidia", "vfio-pci"],
    )
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'node = "pve-rt"\n\n[[pools]]\nname = "vm"\ngpus = ["01:00.0", "02:00.0"]\n'
        'mapping = { id = "g2" }\n\n[pools.vfio]\n\n[pools.vfio.vm]\nvmid = 200\n',
        encoding="utf-8",
    )
    assert main(["plan", "--root", str(root), "--spec", str(spec), "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "  moves: 01:00.0 nvidia -> vfio-pci (and 1 function of their IOMMU groups)\n" in out


@pytest.mark.parametrize("command", ["plan", "render"])
def test_redteam31_bash_completes_color_with_paths(command: str, tmp_path: Path) -> None:
    """RED TEAM 31, defect 13. `pvegpu plan --color <TAB>` offers the files of the
    directory: the completion scripts (bash, zsh, fish) complete a path after every
    option that takes a value, written when every such option named a file, before
    `--color {auto,always,never}`. Its choices are what it takes."""
    (tmp_path / "kpro6.toml").write_text("", encoding="utf-8")
    offered = _bash(bash_completion(build_parser()), ["pvegpu", command, "--color", ""], tmp_path)
    assert offered == ["always", "auto", "never"]
