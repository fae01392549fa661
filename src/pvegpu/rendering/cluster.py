"""A cluster plan as one output directory: a bundle per node, the cluster file once.

Layout under OUT:
- OUT/<node>/: that node's bundle exactly as `pvegpu render` writes one for a single
  node (host files, ct/<vmid>/, revert/, SUMMARY.md, topology.svg, MANIFEST.json), so
  `pvegpu apply --bundle OUT/<node>` runs on that node unchanged;
- the cluster's pci.cfg only in the writer's bundle (OUT/<writer>/etc/pve/mapping/pci.cfg):
  pmxcfs shares /etc/pve, so one node writes it for all (planning/cluster.py);
- OUT/SUMMARY.md: the cluster table, the mappings by node, the cluster findings, the
  order to apply the bundles in, one topology picture per node;
- OUT/MANIFEST.json (`pvegpu.cluster/1`): every file with the node it belongs to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from pvegpu.model.artifact import REVERT_BUNDLE, Artifact
from pvegpu.model.plan import ClusterPlan
from pvegpu.pvefiles import pcicfg
from pvegpu.rendering.bundle_layout import MANIFEST, bundle_files, manifest_entry
from pvegpu.rendering.cluster_summary import cluster_summary
from pvegpu.rendering.outdir import Files, check_replaceable, previous_files, replace_directory
from pvegpu.rendering.registry import render
from pvegpu.rendering.review.apply_doc import manifest_header

CLUSTER_SCHEMA = "pvegpu.cluster/1"
SUMMARY = "SUMMARY.md"

NodeArtifacts = tuple[tuple[str, tuple[Artifact, ...]], ...]
"""Each node's artifacts, in the cluster's node order."""


def render_cluster(cluster: ClusterPlan) -> NodeArtifacts:
    """Every node's artifacts: its plan rendered as a single node's, pci.cfg in the
    writer's only (render_pci_cfg reads the plan's shared_pci_cfg)."""
    return tuple((p.facts.node, render(p)) for p in cluster.plans)


def _node_manifests(node: str) -> tuple[str, str]:
    return f"{node}/{MANIFEST}", f"{node}/{REVERT_BUNDLE}/{MANIFEST}"


def cluster_manifest(cluster: ClusterPlan, rendered: NodeArtifacts, spec: str) -> str:
    """OUT/MANIFEST.json: the nodes, which bundle writes pci.cfg, every file by node."""
    entries: list[dict[str, Any]] = []
    for node, artifacts in rendered:
        for artifact in sorted(artifacts, key=lambda a: (a.bundle != "apply", a.target, a.path)):
            entry = {"node": node, "bundle": artifact.bundle, **manifest_entry(artifact)}
            if entry["file"] is not None:
                inner = entry["file"]
                prefix = f"{REVERT_BUNDLE}/" if artifact.bundle == REVERT_BUNDLE else ""
                entry["file"] = f"{node}/{prefix}{inner}"
            entries.append(entry)
    shared = cluster.shared
    doc = {
        "schema": CLUSTER_SCHEMA,
        "spec": spec,
        "nodes": [
            {"node": node, "bundle": node, "manifest": _node_manifests(node)[0]}
            for node, _ in rendered
        ],
        "pci_cfg": None
        if shared is None
        else {"node": shared.writer, "file": f"{shared.writer}/{pcicfg.PATH}"},
        "artifacts": entries,
    }
    return json.dumps(doc, indent=2) + "\n"


def cluster_files(cluster: ClusterPlan, rendered: NodeArtifacts, spec: str) -> Files:
    """OUT-relative path -> (content, mode): everything `write_cluster` puts under OUT."""
    files: dict[str, tuple[str, int]] = {}
    for node, artifacts in rendered:
        header = manifest_header(cluster.plan_of(node), artifacts, spec)
        for rel, value in bundle_files(artifacts, **header).items():
            files[f"{node}/{rel}"] = value
    files[SUMMARY] = (cluster_summary(cluster, rendered), 0o644)
    files[MANIFEST] = (cluster_manifest(cluster, rendered, spec), 0o644)
    return files


def write_cluster(
    cluster: ClusterPlan, rendered: NodeArtifacts, out: Path, spec: str
) -> list[Path]:
    """Make `out` hold exactly the cluster's bundles, all or nothing (rendering/outdir.py):
    an `out` holding anything its cluster MANIFEST.json does not list is refused."""
    return replace_directory(out, cluster_files(cluster, rendered, spec), check=_check_out)


def _listed(out: Path) -> set[PurePosixPath] | None:
    try:
        doc = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        nodes: Sequence[Any] = doc.get("nodes", []) if isinstance(doc, dict) else []
        names = [n["node"] for n in nodes if isinstance(n, dict) and isinstance(n.get("node"), str)]
    except (OSError, ValueError):
        return None
    # Only names files that may be present: a name that leaves OUT matches none.
    manifests = [m for name in names for m in _node_manifests(name)]
    return previous_files(out, MANIFEST, CLUSTER_SCHEMA, also=[SUMMARY, *manifests])


def _check_out(out: Path) -> frozenset[PurePosixPath]:
    return check_replaceable(out, _listed)
