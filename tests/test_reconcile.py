"""After an upgrade (issue 30, item 5): `pvegpu check` names what the applied spec plans
otherwise on the host now, with the command that reconciles it, and `pvegpu apply
--reconcile` writes only what moves no GPU and changes no guest's GPUs; the rest is shown
and left to a reviewed render. On kpro6 with raw lines: a kernel update hands
nvidia-uvm another major."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from apply_fake import FakeHost
from bundled import FIXTURES, REPO, copy_tree, example_spec
from pvegpu.apply.bundle import Bundle, bundle_from_files
from pvegpu.apply.check import check
from pvegpu.apply.run import apply_bundle
from pvegpu.apply.undo import revert
from pvegpu.cli import main
from pvegpu.cli.check import drift
from pvegpu.pipeline import discover_for, plan_and_render, reconcile_bundle, reconcile_host
from pvegpu.rendering.bundle import write_bundle
from pvegpu.rendering.bundle_layout import bundle_files
from pvegpu.rendering.review.apply_doc import manifest_header
from sysfs_sim import KernelSim, natural_drivers

SPEC = REPO / "examples" / "kpro6-raw.toml"
CT129 = "etc/pve/lxc/129.conf"
NEW_UVM = 507


def applied_bundle() -> Bundle:
    spec = example_spec("kpro6-raw")
    planned, artifacts = plan_and_render(discover_for(spec, FIXTURES / "kpro6"), spec)
    return bundle_from_files(
        bundle_files(artifacts, **manifest_header(planned, artifacts, str(SPEC)))
    )


class Node:
    def __init__(self, tmp: Path) -> None:
        self.root = copy_tree(FIXTURES / "kpro6", tmp / "kpro6")
        spec = example_spec("kpro6-raw")
        self.kernel = KernelSim(
            self.root, natural_drivers(plan_and_render(discover_for(spec, self.root), spec)[0])
        )
        self.host = FakeHost(
            self.root,
            self.kernel,
            {129: "rpool/data/subvol-129-disk-0"},
            active={129: {"sglang-qwen"}},
        )
        self.lines: list[str] = []

    def kernel_update(self) -> None:
        """The next kernel hands nvidia-uvm major 507 instead of 509."""
        devices = self.root / "proc" / "devices"
        devices.write_text(
            re.sub(r"(?m)^509 nvidia-uvm$", f"{NEW_UVM} nvidia-uvm", devices.read_text())
        )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(tmp_path)
    yield made
    made.kernel.close()


def codes(node: Node, bundle: Bundle) -> dict[str, list[str]]:
    """What `pvegpu check --bundle out --spec kpro6-raw.toml` reports of the node."""
    args = argparse.Namespace(root=node.root, spec=SPEC, bundle=Path("out"))
    report = check(node.root, bundle, drift(args, bundle))
    found: dict[str, list[str]] = {}
    for f in report.findings:
        found.setdefault(f.code, []).append(f.subject)
    return found


def test_a_new_uvm_major_is_reconciled_and_reverted(node: Node) -> None:
    bundle = applied_bundle()
    apply_bundle(node.host, bundle, node.lines.append)
    assert "drift-reconcilable" not in codes(node, bundle)
    applied = (node.root / CT129).read_text()
    assert "c 509:0 rwm" in applied

    node.kernel_update()
    found = codes(node, bundle)
    assert found["drift-reconcilable"] == [f"/{CT129}"]
    assert "drift-needs-render" not in found

    planned, artifacts, reconciliation = reconcile_host(
        example_spec("kpro6-raw"), node.root, bundle.functions
    )
    assert [a.path for a in reconciliation.writes] == [CT129]
    assert reconciliation.moved == ()
    fix = bundle_from_files(reconcile_bundle(planned, artifacts, reconciliation, str(SPEC)))
    titles = [s.title for s in fix.steps]
    assert titles == [
        "Work on kpro6, as root, in this reconcile's directory",
        "Check that the files are still as discovered",
        "Write the containers' GPU lines as the host numbers them now",
    ]
    apply_bundle(node.host, fix, node.lines.append)
    now = (node.root / CT129).read_text()
    assert f"c {NEW_UVM}:0 rwm" in now and "c 509:0 rwm" not in now
    # Nothing but the uvm rules changed in the container's config.
    changed = [ln for ln in now.splitlines() if ln not in applied.splitlines()]
    assert changed == [
        f"lxc.cgroup2.devices.allow: c {NEW_UVM}:0 rwm",
        f"lxc.cgroup2.devices.allow: c {NEW_UVM}:1 rwm",
    ]
    assert "drift-reconcilable" not in codes(node, bundle)

    revert(node.host, node.lines.append)
    assert (node.root / CT129).read_text() == applied


def test_what_changes_a_guests_gpus_is_left_to_a_render(node: Node) -> None:
    """A container created after the apply holds a VM GPU's node: the plan now removes
    that line, which changes the container's GPUs, so reconcile leaves it."""
    bundle = applied_bundle()
    apply_bundle(node.host, bundle, node.lines.append)
    (node.root / "etc/pve/nodes/kpro6/lxc/140.conf").write_text(
        "arch: amd64\ndev0: /dev/nvidia5,mode=0666\n"
    )
    found = codes(node, bundle)
    assert found["drift-needs-render"] == ["/etc/pve/lxc/140.conf"]
    _, _, reconciliation = reconcile_host(example_spec("kpro6-raw"), node.root, bundle.functions)
    assert reconciliation.writes == ()
    (left,) = reconciliation.left
    assert "CT 140 gains or loses GPUs" in left.why


def test_the_cli_shows_and_dry_runs_a_reconcile(
    node: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = example_spec("kpro6-raw")
    planned, artifacts = plan_and_render(discover_for(spec, node.root), spec)
    out = tmp_path / "out"
    write_bundle(artifacts, out, plan=planned, spec=str(SPEC))
    for path in (CT129,):
        target = node.root / path.replace("etc/pve/lxc", "etc/pve/nodes/kpro6/lxc")
        target.write_text(
            next(a.content for a in artifacts if a.path == path and a.bundle == "apply")
        )
    node.kernel_update()
    code = main(
        ["apply", "--reconcile", "--bundle", str(out), "--root", str(node.root), "--dry-run"]
    )
    shown = capsys.readouterr().out
    assert code == 0
    assert f"+lxc.cgroup2.devices.allow: c {NEW_UVM}:0 rwm" in shown
    assert "dry run: nothing was changed" in shown
    # The same under --json: one document, the diffs and lines in it.
    argv = ["apply", "--reconcile", "--bundle", str(out), "--root", str(node.root)]
    code = main([*argv, "--dry-run", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["schema"], doc["result"]) == (0, "pvegpu.apply/1", "dry-run")
    assert any(f"+lxc.cgroup2.devices.allow: c {NEW_UVM}:0 rwm" in d["diff"] for d in doc["diffs"])
    assert "dry run: nothing was changed" in doc["messages"]
    assert main(["apply", "--reconcile", "--root", str(node.root)]) == 2
