"""The Ansible collection driven as an admin drives it (docs/ansible.md): the example
playbook examples/ansible/site.yml over the three nodes of examples/cluster.toml, with
ansible_connection=local, against copies of their fixture trees.

- `--check --diff` reports each node changed with one diff per file (and its drivers),
  and changes nothing: every root is compared file by file before and after;
- a real run, with apply's fake host where commands would run
  (tests/ansible/ansible_fake_host.py, named by the modules' test seam), installs each
  bundle and moves the drivers; a second run reports `changed=false` and changes nothing;
  `pvegpu_state=absent` reverts every node to its fixture tree, and again is no change;
- refusals fail the task with pvegpu's codes, subjects and fixes, and a Python without
  pvegpu says how to install it.

`make test-ansible` runs this file (ansible-core in .venv-ansible, whose bin/ it names in
PVEGPU_ANSIBLE_BIN); `make test` does not collect it (not a test_*.py name). Without
ansible-playbook the tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bundled import FIXTURES, copy_tree
from pvegpu.apply.bundle import read_bundle_dir

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples/ansible"
HERE = Path(__file__).resolve().parent
NODES = ("kpro6", "kpro7", "pve-ws")
SKIP = (
    "var/lib/pvegpu/",
    "run/",
    "var/lock/",
    "etc/pve/priv/",
    "sys/bus/pci/drivers/vfio-pci/",
    "dev/",
)
"""Not compared with the fixture after a revert: apply's own state and the bundle kept
for `pvegpu check`, the lock files Proxmox's tools leave too, the vfio-pci driver that
the split loaded (a revert does not unload a module), and the device nodes the
containers' boot unit made (nvidia-modprobe's nodes stay in devtmpfs until the next
boot; test_apply.py skips them alike)."""


def _bin() -> Path:
    given = os.environ.get("PVEGPU_ANSIBLE_BIN")
    found = Path(given) if given else None
    if found is None and (which := shutil.which("ansible-playbook")) is not None:
        found = Path(which).parent
    if found is None or not (found / "ansible-playbook").is_file():
        if os.environ.get("CI") == "true":
            pytest.fail("ansible-playbook is missing: make test-ansible installs ansible-core")
        pytest.skip("ansible-playbook is missing: run make test-ansible")
    return found


class Play:
    """One ansible-playbook run of the example, with its output and each host's last
    task result (the tree callback: for a node that is gpu_split's)."""

    def __init__(self, tmp: Path, name: str, args: list[str], env: dict[str, str]) -> None:
        tree = tmp / f"tree-{name}"
        started = time.monotonic()
        proc = subprocess.run(
            [str(_bin() / "ansible-playbook"), "-i", "inventory.ini", "site.yml", *args],
            cwd=EXAMPLE,
            env={
                **os.environ,
                "ANSIBLE_COLLECTIONS_PATH": str(REPO),
                "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree",
                "ANSIBLE_CALLBACK_TREE_DIR": str(tree),
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_FORCE_COLOR": "0",
                **env,
            },
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        self.seconds = time.monotonic() - started
        self.rc = proc.returncode
        self.output = proc.stdout + proc.stderr
        # The transcript the lead quotes: make test-ansible prints it with -s; kept too.
        (tmp / f"{name}.out").write_text(self.output)
        print(f"\n===== {name}: rc {self.rc}, {self.seconds:.1f} s\n{self.output}")
        self.results: dict[str, dict[str, Any]] = (
            {path.name: json.loads(path.read_text()) for path in tree.iterdir()}
            if tree.is_dir()
            else {}
        )

    def shown(self, host: str) -> str:
        """What the default callback printed for `host` (its diffs, its warnings): the
        lines before each of its `ok:`/`changed:` lines, after the previous host's."""
        blocks: dict[str, list[str]] = {}
        pending: list[str] = []
        for line in self.output.splitlines():
            if m := re.match(r"^(?:ok|changed|fatal|skipping): \[([^\]]+)\]", line):
                blocks.setdefault(m.group(1), []).extend(pending)
                pending = []
            else:
                pending.append(line)
        return "\n".join(blocks.get(host, []))

    def diffed(self, host: str) -> set[str]:
        """The files (and `PCI drivers (sysfs)`) --diff showed for `host`."""
        return {
            re.sub(r" \((?:absent|removed|not readable now[^)]*)\)$", "", m)
            for m in re.findall(r"^\+\+\+ after: (.*)$", self.shown(host), re.MULTILINE)
        }

    def recap(self, host: str) -> dict[str, int]:
        line = re.search(rf"^{re.escape(host)}\s+:(.*)$", self.output, re.MULTILINE)
        assert line is not None, self.output
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1))}


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.roots = tmp / "roots"
        for node in NODES:
            copy_tree(FIXTURES / node, self.roots / node)
        self.work = tmp / "work"
        self.runs = 0

    def play(self, *args: str, fake: bool = False) -> Play:
        self.runs += 1
        env = {}
        if fake:
            # The modules' test seam: the host is the fake one, under the temporary root.
            tests = [str(HERE), str(HERE.parent)]
            env = {
                "PVEGPU_ANSIBLE_TEST_HOST": "ansible_fake_host:host",
                "PYTHONPATH": os.pathsep.join([*tests, os.environ.get("PYTHONPATH", "")]),
            }
        extra = [
            "-e", f"pvegpu_roots_dir={self.roots}",
            "-e", f"pvegpu_work_dir={self.work}",
            "-e", f"pvegpu_python={sys.executable}",
        ]  # fmt: skip
        return Play(self.tmp, f"run{self.runs}", [*extra, *args], env)

    def tree(self, node: str, *, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
        return tree(self.roots / node, skip)

    def commands(self, node: str) -> list[list[str]]:
        log = self.roots / f"{node}.commands"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file and link under root by relative path (links as their target)."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in [*filenames, *(d for d in dirnames if (base / d).is_symlink())]:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if rel.startswith(skip):
                continue
            found[rel] = (
                b"-> " + os.fsencode(path.readlink()) if path.is_symlink() else path.read_bytes()
            )
    return found


def run_files(result: dict[str, Any]) -> set[str]:
    return set(result["files"])


READ_ONLY = ("status", "is-active", "is-enabled", "nvidia-smi", "cat", "test", "curl")


def mutating(commands: list[list[str]]) -> list[list[str]]:
    return [c for c in commands if not any(word in READ_ONLY for word in c[:6])]


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


DRIVERS = "PCI drivers (sysfs)"


def test_check_diff_reports_each_node_changed_and_changes_nothing(cluster: Cluster) -> None:
    before = {node: cluster.tree(node) for node in NODES}
    run = cluster.play("--check", "--diff")
    assert run.rc == 0, run.output
    expected = {
        "kpro6": {"/etc/pve/lxc/129.conf", "/etc/pve/mapping/pci.cfg"},
        "kpro7": set(),  # its map lines are in kpro6's pci.cfg: pmxcfs shares the file
        "pve-ws": {"/etc/pve/qemu-server/110.conf"},
    }
    for node in NODES:
        result = run.results[node]
        assert result["changed"] is True, result
        # One before/after per changed file, and the files are exactly those that change.
        drivers = {DRIVERS} if result["rebinds"] else set()
        assert run.diffed(node) == set(result["files"]) | drivers, run.shown(node)
        assert expected[node] <= set(result["files"])
        assert ("/etc/pve/mapping/pci.cfg" in result["files"]) == (node == "kpro6")
        assert "/usr/local/sbin/pvegpu-vfio-split" in result["files"]
        assert run.recap(node)["changed"] == 1, run.output
        assert cluster.tree(node) == before[node], f"check mode changed {node}'s tree"
    # kpro6 and kpro7 move their NUMA 1 GPUs; pve-ws's A4000 is on vfio-pci already.
    assert [r["after"] for r in run.results["kpro6"]["rebinds"]] == ["vfio-pci"] * 8
    shown = run.shown("kpro6")
    assert "-0000:81:00.0 nvidia\n" in shown and "+0000:81:00.0 vfio-pci\n" in shown
    assert len(run.results["kpro7"]["rebinds"]) == 8
    assert run.results["pve-ws"]["rebinds"] == []
    # kpro6 writes the cluster's pci.cfg: kpro7's map lines are added in it.
    pcicfg = shown.split("+++ after: /etc/pve/mapping/pci.cfg", 1)[1].split("--- before:", 1)[0]
    assert re.search(r"^\+.*node=kpro7", pcicfg, re.MULTILINE), pcicfg
    # The plan's warning reaches the admin as an Ansible warning.
    assert "[snapshot-grants-pool-gpus]" in run.output
    assert run.recap("localhost")["changed"] == 0


def test_a_run_applies_then_changes_nothing_and_absent_reverts(cluster: Cluster) -> None:
    fixture = {node: tree(FIXTURES / node) for node in NODES}
    first = cluster.play("--diff", fake=True)
    assert first.rc == 0, first.output
    applied = {node: cluster.tree(node) for node in NODES}
    for node in NODES:
        result = first.results[node]
        assert result["changed"] is True and first.recap(node)["changed"] == 1, first.output
        assert any(line.startswith("applied ") for line in result["log"]), result["log"]
        # The node keeps the bundle it was given (for `pvegpu check --bundle`), and
        # every host file of it is now on the node.
        kept = read_bundle_dir(cluster.roots / node / "var/lib/pvegpu/bundle")
        assert kept.id == result["bundle_id"]
        for entry in kept.entries:
            # etc/pve/lxc and qemu-server lead to etc/pve/nodes/<node>/, as on a node.
            got = (cluster.roots / node / entry.path).read_bytes()
            assert got == entry.content, (node, entry.path)
        assert run_files(result) == {f"/{e.path}" for e in kept.entries}
        for rebind in result["rebinds"]:
            link = cluster.roots / node / "sys/bus/pci/devices" / rebind["address"] / "driver"
            assert link.readlink().name == rebind["after"], (node, rebind)
    assert ["pct", "stop", "129"] in cluster.commands("kpro6")
    assert ["/usr/local/sbin/pvegpu-vfio-split", "bind"] in cluster.commands("kpro7")
    # pmxcfs: kpro6 wrote the cluster's pci.cfg, and every node reads that one file.
    pcicfg = applied["kpro6"]["etc/pve/mapping/pci.cfg"]
    assert all(applied[n]["etc/pve/mapping/pci.cfg"] == pcicfg for n in NODES)
    assert pcicfg != fixture["kpro6"]["etc/pve/mapping/pci.cfg"]

    done = {node: len(cluster.commands(node)) for node in NODES}
    second = cluster.play("--diff", fake=True)
    assert second.rc == 0, second.output
    for node in NODES:
        assert second.results[node]["changed"] is False, second.results[node]
        assert second.results[node]["files"] == [] and second.results[node]["rebinds"] == []
        assert second.recap(node)["changed"] == 0, second.output
        assert cluster.tree(node) == applied[node]
        assert mutating(cluster.commands(node)[done[node] :]) == []
    assert second.recap("localhost")["changed"] == 0

    revert = cluster.play("--diff", "-e", "pvegpu_state=absent", fake=True)
    assert revert.rc == 0, revert.output
    for node in NODES:
        assert revert.results[node]["changed"] is True, revert.results[node]
        assert cluster.tree(node, skip=SKIP) == {
            k: v for k, v in fixture[node].items() if not k.startswith(SKIP)
        }, f"{node} is not back to its fixture tree"
    assert ["pct", "start", "129"] in cluster.commands("kpro6")
    again = cluster.play("-e", "pvegpu_state=absent", fake=True)
    assert again.rc == 0, again.output
    assert all(again.results[n]["changed"] is False for n in NODES), again.results


def _adhoc(tmp: Path, python: str, args: dict[str, Any]) -> dict[str, Any]:
    """One gpu_split task on localhost (ansible's ad-hoc command): its result, and
    `rc` the command's exit status (non-zero: the task failed)."""
    tree_dir = tmp / "adhoc"
    shutil.rmtree(tree_dir, ignore_errors=True)
    proc = subprocess.run(
        [
            str(_bin() / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
            "-e", f"ansible_python_interpreter={python}",
            "-m", "pvegpu.proxmox.gpu_split", "-a", json.dumps(args), "-t", str(tree_dir),
        ],
        env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO), "ANSIBLE_NOCOLOR": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    result: dict[str, Any] = json.loads((tree_dir / "localhost").read_text())
    return {**result, "rc": proc.returncode}


def test_refusals_fail_with_codes_and_fixes(cluster: Cluster) -> None:
    root = str(cluster.roots / "kpro6")
    # A pool on a NUMA node the host does not have: the plan refuses, nothing is written.
    vfio = {"vm": {"vmid": 200}}
    spec: dict[str, Any] = {
        "node": "kpro6",
        "pools": [{"name": "vm", "numa_node": 5, "mapping": {"id": "pro6000-vm"}, "vfio": vfio}],
    }
    before = cluster.tree("kpro6")
    refused = _adhoc(cluster.tmp, sys.executable, {"spec": spec, "root": root})
    assert refused["rc"] != 0 and refused["exit_code"] == 5, refused
    codes = [p["code"] for p in refused["problems"]]
    assert "pool-empty" in codes, refused
    assert all(p["fix"] for p in refused["problems"]), refused
    assert "[pool-empty]" in refused["msg"]
    # A plan that holds, applied to a root that is not / without the fake host: apply
    # refuses before any change, as `pvegpu apply` does off the node.
    spec["pools"][0]["numa_node"] = 1
    off_node = _adhoc(cluster.tmp, sys.executable, {"spec": spec, "root": root})
    assert off_node["rc"] != 0, off_node
    assert [p["code"] for p in off_node["problems"]] == ["apply-not-live"], off_node
    assert cluster.tree("kpro6") == before
    # A cluster spec is planned once for all nodes (gpu_cluster_plan), not node by node;
    # the path is read on the controller by the action plugin.
    cluster_spec = str(REPO / "examples/cluster.toml")
    whole = _adhoc(cluster.tmp, sys.executable, {"spec": cluster_spec, "root": root})
    assert [p["code"] for p in whole["problems"]] == ["cluster-spec"], whole
    assert whole["problems"][0]["subject"] == cluster_spec
    # A bundle that is not one: refused as `pvegpu apply --bundle` refuses one (exit 4).
    junk = _adhoc(cluster.tmp, sys.executable, {"bundle": {"MANIFEST.json": "{}"}, "root": root})
    assert [p["code"] for p in junk["problems"]] == ["bundle-invalid"], junk
    assert junk["exit_code"] == 4
    assert cluster.tree("kpro6") == before


def test_a_node_without_pvegpu_is_told_how_to_install_it(cluster: Cluster) -> None:
    # ansible's own Python has no pvegpu.
    python = str(_bin() / "python")
    result = _adhoc(cluster.tmp, python, {"spec": {"node": "x", "pools": []}, "root": "/"})
    assert result["rc"] != 0, result
    assert result["code"] == "pvegpu-missing"
    assert "apt install" in result["msg"] and "ansible_python_interpreter" in result["msg"]
