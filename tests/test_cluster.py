"""Clusters: examples/cluster.toml over kpro6, kpro7 and pve-ws, one pci.cfg, a bundle per node.

Every file `pvegpu render` writes for the example is pinned as its own golden file
(tests/golden/test_cluster/test_cluster_file[<path with / as _>].<ext>). The acceptance
is spelled out as asserts too: pci.cfg, parsed here by hand, lists each node's devices
with the values that node's own sysfs reports; each node has its bundle; pci.cfg is in
one bundle only and the cluster MANIFEST.json names its node. The refusals (a node
without a root, a root of another host, roots that disagree on pci.cfg, a mapping over
different GPU models) and the spec's node rules are checked one by one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path, PurePosixPath

import pytest
from syrupy.assertion import SnapshotAssertion

from bundled import FIXTURES, copy_tree, spec_path
from pvegpu.cli import main
from pvegpu.errors import PlanError, SpecError
from pvegpu.host.discover import discover
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import ClusterPlan
from pvegpu.pipeline import discover_cluster, plan_and_render_cluster
from pvegpu.planning.planner import plan
from pvegpu.pvefiles import pcicfg
from pvegpu.rendering.cluster import NodeArtifacts, cluster_files
from pvegpu.spec.load import load_spec, parse_spec
from script_data import join_script, script_parts

NODES = ("kpro6", "kpro7", "pve-ws")
SPEC = spec_path("cluster")
PCI_CFG = "etc/pve/mapping/pci.cfg"


def roots(base: Path = FIXTURES) -> dict[str, Path]:
    return {node: base / node for node in NODES}


@cache
def cluster() -> tuple[ClusterPlan, NodeArtifacts, dict[str, str]]:
    spec = load_spec(SPEC)
    planned, rendered = plan_and_render_cluster(discover_cluster(spec, roots()), spec)
    files = cluster_files(planned, rendered, "examples/cluster.toml")
    return planned, rendered, {path: content for path, (content, _) in files.items()}


def _ext(path: str) -> str:
    suffix = PurePosixPath(path).suffix
    return suffix[1:] if suffix else "sh"


FILES = sorted(cluster()[2])


def test_file_list() -> None:
    """A bundle per node; pci.cfg (and its revert copy) in kpro6's only."""
    files = cluster()[2]
    for node in NODES:
        assert {f"{node}/MANIFEST.json", f"{node}/SUMMARY.md", f"{node}/topology.svg"} <= set(files)
    assert [f for f in files if f.endswith(PCI_CFG)] == [
        f"kpro6/{PCI_CFG}",
        f"kpro6/revert/{PCI_CFG}",
    ]
    assert {"SUMMARY.md", "MANIFEST.json"} <= set(files)


SPLIT_SCRIPT = "usr/local/sbin/pvegpu-vfio-split"
KPRO6_SCRIPT = (
    Path(__file__).resolve().parent
    / "golden/test_end_to_end/test_artifact[kpro6-usr_local_sbin_pvegpu-vfio-split].sh"
)


INITRAMFS_HOOK = "etc/initramfs-tools/hooks/pvegpu-vfio-split"
KPRO6_HOOK = KPRO6_SCRIPT.with_name(
    "test_artifact[kpro6-etc_initramfs-tools_hooks_pvegpu-vfio-split].sh"
)


@pytest.mark.parametrize(
    "path",
    [p for p in FILES if not p.endswith(INITRAMFS_HOOK)],
    ids=[p.replace("/", "_") for p in FILES if not p.endswith(INITRAMFS_HOOK)],
)
def test_cluster_file(path: str, golden: Callable[[str], SnapshotAssertion]) -> None:
    """Every file as reviewed. A node's split script is pinned by its data section only:
    its template text is the one pinned whole by the end-to-end kpro6 golden."""
    content = cluster()[2][path]
    if path.endswith(SPLIT_SCRIPT):
        body, _ = script_parts(KPRO6_SCRIPT.read_text(encoding="utf-8"))
        _, data = script_parts(content)
        assert data == golden(_ext(path))
        assert join_script(body, data) == content
    else:
        assert content == golden(_ext(path))


@pytest.mark.parametrize("node", NODES)
def test_initramfs_hook_is_the_end_to_end_one(node: str) -> None:
    """Each node's initramfs hook is the one pinned whole by the end-to-end kpro6 golden,
    with the node's name."""
    hook = KPRO6_HOOK.read_text(encoding="utf-8")
    assert cluster()[2][f"{node}/{INITRAMFS_HOOK}"] == hook.replace("host kpro6,", f"host {node},")


def _map_lines(text: str) -> dict[str, list[dict[str, str]]]:
    """pci.cfg's map lines by mapping id, read without pvegpu's parser."""
    found: dict[str, list[dict[str, str]]] = {}
    current = ""
    for line in text.splitlines():
        if line and not line[0].isspace():
            current = line.strip()
        elif line.strip().startswith("map "):
            fields = dict(part.split("=", 1) for part in line.strip()[4:].split(","))
            found.setdefault(current, []).append(fields)
    return found


def test_one_pci_cfg_with_each_nodes_sysfs_values() -> None:
    """The acceptance: pro6000-vm holds kpro6's and kpro7's NUMA 1 GPUs, each line with
    the id, IOMMU group and subsystem id its own node's sysfs reports."""
    text = cluster()[2][f"kpro6/{PCI_CFG}"]
    maps = _map_lines(text)
    facts = {node: discover(FIXTURES / node) for node in NODES}
    expected = [
        {
            "id": g.vendor_device,
            "iommugroup": str(g.iommu_group),
            "node": node,
            "path": g.address.slot,
            "subsystem-id": g.function.subsystem_id,
        }
        for node in ("kpro6", "kpro7")
        for g in facts[node].gpus
        if g.numa_node == 1
    ]
    assert maps["pro6000-vm"] == expected
    assert {m["subsystem-id"] for m in maps["pro6000-vm"] if m["node"] == "kpro7"} == {"10de:204e"}
    assert [m["node"] for m in maps["a4000"]] == ["pve-ws"]
    # kpro6's ConnectX mapping, which no pool names, is kept as it was.
    assert maps["nic-cx6"] == _map_lines(facts["kpro6"].file(PCI_CFG).content)["nic-cx6"]  # type: ignore[union-attr]


def test_manifest_names_the_node_of_every_file() -> None:
    doc = json.loads(cluster()[2]["MANIFEST.json"])
    assert doc["schema"] == "pvegpu.cluster/1"
    assert [n["node"] for n in doc["nodes"]] == list(NODES)
    assert doc["pci_cfg"] == {"node": "kpro6", "file": f"kpro6/{PCI_CFG}"}
    for entry in doc["artifacts"]:
        assert entry["node"] in NODES
        assert entry["file"] is None or entry["file"].startswith(f"{entry['node']}/")
    shared = [e for e in doc["artifacts"] if e["path"] == PCI_CFG and e["bundle"] == "apply"]
    assert [e["node"] for e in shared] == ["kpro6"]


def test_subsystem_difference_is_a_finding() -> None:
    planned = cluster()[0]
    assert [(f.code, f.subject) for f in planned.findings] == [
        ("mapping-subsystem-differs", f"{PCI_CFG} mapping 'pro6000-vm'")
    ]
    assert "10de:204e on kpro7" in planned.findings[0].message


def test_summary_has_a_cluster_table_and_a_picture_per_node() -> None:
    summary = cluster()[2]["SUMMARY.md"]
    assert "| node | GPUs | pools | mappings | files | findings | bundle |" in summary
    for node in NODES:
        assert f"]({node}/topology.svg)" in summary


def _facts(overrides: dict[str, Path] | None = None) -> dict[str, HostFacts]:
    spec = load_spec(SPEC)
    return discover_cluster(spec, {**roots(), **(overrides or {})})


def _codes(error: PlanError | SpecError) -> list[tuple[str, str]]:
    return [(p.code, p.subject) for p in error.problems]


def test_refusals_of_roots() -> None:
    spec = load_spec(SPEC)
    facts = _facts()
    with pytest.raises(PlanError) as missing:
        plan_and_render_cluster({k: v for k, v in facts.items() if k != "kpro7"}, spec)
    assert _codes(missing.value) == [("node-without-root", "kpro7")]
    with pytest.raises(PlanError) as swapped:
        plan_and_render_cluster({**facts, "kpro7": facts["kpro6"]}, spec)
    assert _codes(swapped.value) == [("root-node-mismatch", "kpro7")]


def test_a_missing_root_does_not_stop_the_other_nodes_plans() -> None:
    """kpro7 has no root, so it is not planned; kpro6 and pve-ws still are, and their
    problems come in the same refusal."""
    spec = parse_spec(SPEC.read_text().replace('gpus = ["0000:39:00.0"]', 'gpus = ["38:00.0"]'))
    facts = {k: v for k, v in _facts().items() if k != "kpro7"}
    with pytest.raises(PlanError) as err:
        plan_and_render_cluster(facts, spec)
    assert _codes(err.value) == [
        ("node-without-root", "kpro7"),
        ("address-not-on-host", "pve-ws: pools[3].gpus[0]"),
    ]


@pytest.mark.parametrize(
    ("refusals", "kind"),
    [({"kpro6": SpecError}, SpecError), ({"kpro6": SpecError, "pve-ws": PlanError}, PlanError)],
)
def test_every_node_is_planned_whatever_another_node_raised(
    monkeypatch: pytest.MonkeyPatch,
    refusals: dict[str, type[PlanError | SpecError]],
    kind: type[PlanError | SpecError],
) -> None:
    """A node refused for its option tables alone (a spec error) does not stop the other
    nodes' plans; the refusal is a spec error only if no node's plan is refused."""
    from pvegpu.planning import cluster as planning_cluster

    def refused(facts: HostFacts, spec: object) -> object:
        if facts.node in refusals:
            raise refusals[facts.node].one("some-code", "pools[0]", "refused")
        return plan(facts, spec)  # type: ignore[arg-type]

    monkeypatch.setattr(planning_cluster, "plan", refused)
    with pytest.raises(kind) as err:
        planning_cluster.plan_cluster(_facts(), load_spec(SPEC))
    assert type(err.value) is kind
    # Each node's first pool, as the cluster spec numbers it.
    first = {"kpro6": "pools[0]", "pve-ws": "pools[3]"}
    assert _codes(err.value) == [("some-code", f"{n}: {first[n]}") for n in refusals]


def test_roots_that_disagree_on_pci_cfg_are_refused() -> None:
    """The plain workstation fixture has no pci.cfg: not the cluster's state."""
    spec = load_spec(SPEC)
    with pytest.raises(PlanError) as err:
        plan_and_render_cluster(_facts({"pve-ws": FIXTURES / "workstation"}), spec)
    assert _codes(err.value) == [("pcicfg-differs", PCI_CFG)]


def test_a_mapping_over_other_gpu_models_is_refused() -> None:
    text = SPEC.read_text().replace('id = "a4000", description', 'id = "pro6000-vm", description')
    text = text.replace(
        '"RTX A4000 for the Windows CAD VM"', '"VM passthrough GPUs on NUMA 1 (vfio-pci)"'
    )
    with pytest.raises(PlanError) as err:
        plan_and_render_cluster(_facts(), parse_spec(text))
    assert _codes(err.value) == [("mapping-devices-differ", f"{PCI_CFG} mapping 'pro6000-vm'")]
    assert "10de:24b0 on pve-ws" in err.value.problems[0].message


def test_node_problems_name_the_cluster_spec_path() -> None:
    text = SPEC.read_text().replace(
        'node = "kpro7"\nnuma_node = 1', 'node = "kpro7"\nnuma_node = 5'
    )
    with pytest.raises(PlanError) as err:
        plan_and_render_cluster(_facts(), parse_spec(text))
    assert _codes(err.value) == [("pool-empty", "kpro7: pools[2].numa_node")]


def test_lines_of_nodes_outside_the_plan_stay_byte_for_byte(tmp_path: Path) -> None:
    """A kpro5 line in pro6000-vm, written in an order pvegpu never writes, survives."""
    foreign = "path=0000:81:00,node=kpro5,id=10de:2bb5,iommugroup=40,subsystem-id=10de:204b"
    base = (FIXTURES / "kpro6" / PCI_CFG).read_text()
    text = base + f"pro6000-vm\n\tmap {foreign}\n\n"
    copies = {}
    for node in NODES:
        copies[node] = copy_tree(FIXTURES / node, tmp_path / node)
        (copies[node] / PCI_CFG).write_text(text)
    spec = load_spec(SPEC)
    _, rendered = plan_and_render_cluster(discover_cluster(spec, copies), spec)
    written = next(a for a in dict(rendered)["kpro6"] if a.path == PCI_CFG and a.bundle == "apply")
    section = next(s for s in pcicfg.parse(written.content) if s.id == "pro6000-vm")
    assert [m.value for m in section.maps if m.node == "kpro5"] == [foreign]
    assert sorted({m.node for m in section.maps}) == ["kpro5", "kpro6", "kpro7"]


def test_spec_rules() -> None:
    def codes(text: str) -> list[tuple[str, str]]:
        with pytest.raises(SpecError) as err:
            parse_spec(text)
        return _codes(err.value)

    pool = '[[pools]]\nname = "p"\nnuma_node = 0\nlxc = { vmid = 129 }\n'
    assert codes('nodes = ["a", "b"]\n' + pool) == [("spec-pool-without-node", "pools[0].node")]
    assert codes('nodes = ["a"]\n' + pool.replace("numa", 'node = "c"\nnuma')) == [
        ("spec-pool-node-unknown", "pools[0].node")
    ]
    assert codes('node = "a"\nnodes = ["a"]\n' + pool) == [("spec-node-and-nodes", "nodes")]
    assert codes('nodes = ["a", "a"]\n' + pool.replace("numa", 'node = "a"\nnuma')) == [
        ("spec-invalid-value", "nodes")
    ]
    assert codes(pool) == [("spec-missing-key", "node")]


def test_a_cluster_spec_is_not_planned_as_one_node() -> None:
    spec = load_spec(SPEC)
    with pytest.raises(PlanError) as err:
        plan(_facts()["kpro6"], spec)
    assert _codes(err.value) == [("cluster-spec", str(SPEC))]


def _cli(*argv: str | Path) -> int:
    return main([str(a) for a in argv])


def test_cli_renders_the_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    args = [f"--root={n}={FIXTURES / n}" for n in NODES]
    assert _cli("render", "--spec", SPEC, "--out", out, *args) == 0
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert written == set(cluster()[2])
    # Rendering again into the same OUT replaces the previous cluster bundle.
    capsys.readouterr()
    assert _cli("render", "--spec", SPEC, "--out", out, *args, "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["schema"], doc["pci_cfg_node"]) == ("pvegpu.cluster-render/1", "kpro6")
    assert sorted(doc["written"]) == sorted(cluster()[2])
    assert _cli("plan", "--spec", SPEC, *args) == 0
    assert "pci.cfg written by kpro6" in capsys.readouterr().out


def test_cli_refuses_a_missing_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = _cli("render", "--spec", SPEC, "--out", out, f"--root=kpro6={FIXTURES / 'kpro6'}")
    assert code == 5
    err = capsys.readouterr().err
    assert "[node-without-root]" in err and "kpro7" in err and "pve-ws" in err
    assert not out.exists()
    assert _cli("plan", "--spec", SPEC, "--root", FIXTURES / "kpro6") == 5
    assert "[root-needs-node]" in capsys.readouterr().err


def test_single_node_spec_takes_a_named_root(capsys: pytest.CaptureFixture[str]) -> None:
    kpro6 = spec_path("kpro6")
    assert _cli("plan", "--spec", kpro6, f"--root=kpro6={FIXTURES / 'kpro6'}") == 0
    assert "plan for node kpro6" in capsys.readouterr().out
    assert _cli("plan", "--spec", kpro6, f"--root=kpro7={FIXTURES / 'kpro7'}") == 5
    assert "[root-not-in-spec]" in capsys.readouterr().err


def test_memory_difference_is_a_finding(tmp_path: Path) -> None:
    """Container pools on two nodes share `pro6000`; kpro7's says its GPUs have 48 GiB."""
    nodes = {node: copy_tree(root, tmp_path / node) for node, root in roots().items()}
    config = nodes["kpro7"] / "etc/pve/nodes/kpro7/lxc/130.conf"
    config.parent.mkdir(parents=True, exist_ok=True)  # git keeps no empty directory
    config.write_text(
        "arch: amd64\ncores: 8\nhostname: ct130\nmemory: 65536\nostype: debian\n"
        "rootfs: local-zfs:subvol-130-disk-0,size=64G\n"
    )
    text = SPEC.read_text() + (
        '\n[[pools]]\nname = "sglang7"\nnode = "kpro7"\nnuma_node = 0\n'
        'mapping = { id = "pro6000" }\n\n[pools.lxc]\nvmid = 130\n\n'
        '[pools.lxc.serving]\nversion = "0.5.23"\nmodel_path = "/models/m"\n'
        "gpu_memory_bytes = 51539607552\n"
    )
    spec = parse_spec(text)
    planned = plan_and_render_cluster(discover_cluster(spec, nodes), spec)[0]
    (memory,) = [f for f in planned.findings if f.code == "mapping-memory-differs"]
    assert memory.subject == f"{PCI_CFG} mapping 'pro6000'"
    assert "95.6 GiB on kpro6, 48.0 GiB on kpro7" in memory.message
