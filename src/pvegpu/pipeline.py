"""The whole pipeline in two calls: read the host for a spec, then plan and render."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pvegpu.engines import installed_files, spec_engines
from pvegpu.host.container_units import read_container_units
from pvegpu.host.discover import read_host
from pvegpu.host.reader import RootReader
from pvegpu.host.serving_files import add_serving_files, read_serving
from pvegpu.model.artifact import Artifact
from pvegpu.model.facts import HostFacts
from pvegpu.model.plan import Plan
from pvegpu.model.schema import Spec
from pvegpu.planning.planner import plan

if TYPE_CHECKING:
    from pvegpu.diagnostic import Diagnostic
    from pvegpu.model.current import CurrentPool, CurrentSplit
    from pvegpu.model.observed import ObservedHost
    from pvegpu.model.plan import ClusterPlan
    from pvegpu.planning.host_checks import RunningUnit
    from pvegpu.rendering.cluster import NodeArtifacts
    from pvegpu.rendering.review.reconcile import Reconciliation


def parse_spec(text: str, source: str = "<spec>") -> Spec:
    """The spec in TOML `text`, judged with what every engine of the registry adds to it
    (its name, its own keys): the loader of the CLI, the API and the Ansible module."""
    from pvegpu.spec.load import parse_spec as parse

    return parse(text, source, engines=spec_engines())


def load_spec(path: Path) -> Spec:
    """The spec file `path`, judged as `parse_spec` judges it."""
    from pvegpu.spec.load import load_spec as load

    return load(path, engines=spec_engines())


def spec_from_data(raw: Mapping[str, Any], source: str = "<spec>") -> Spec:
    """A spec given as data (an Ansible task's `spec:`), judged as `parse_spec` judges it."""
    from pvegpu.spec.load import spec_from_data as from_data

    return from_data(raw, source, engines=spec_engines())


def discover_for(spec: Spec, root: Path = Path("/")) -> HostFacts:
    """Host facts plus the files this spec's servers need (model config, container rootfs)
    and the enabled units of the containers whose GPUs it may change.

    The only I/O of the pipeline: after this, planning and rendering are pure. The
    readings share one `RootReader`: one set of rules, links and directories looked up once.
    Each server's engine, asked through the registry, names the files of its release
    installed in the container, which that reader reads.
    """
    reader = RootReader(root)
    facts = add_serving_files(read_host(reader), read_serving(reader, spec, installed_files))
    # The units of the containers whose GPUs the plan may change (their own servers).
    return add_serving_files(facts, read_container_units(reader, spec, facts))


def init_host(root: Path) -> tuple[CurrentSplit, str]:
    """`pvegpu init`: the host's current split and its spec text. The containers of its
    pools are read again for their units, so the spec names the servers they run.

    The spec is planned before it is returned: a pool whose plan changes an existing file
    (a line the pool writes otherwise than the host has it, a node of the container's
    the pool does not write) has its GPUs left out, with the file and line that would
    change, and the rest is planned again. So what init writes plans to no change of an
    existing file, as docs/cli.md promises, whatever `planning.current` did not foresee."""
    from pvegpu.pci import PciAddress
    from pvegpu.planning.current import current_split
    from pvegpu.rendering.init_spec import render_current

    reader = RootReader(root)
    base = read_host(reader)
    withheld: dict[PciAddress, str] = {}
    while True:
        facts, split = base, current_split(base, withheld)
        if not split.pools:
            return split, render_current(facts, split)
        spec = parse_spec(render_current(facts, split))
        facts = add_serving_files(base, read_container_units(reader, spec, base))
        split = current_split(facts, withheld)
        text = render_current(facts, split)
        changes = _changed_files(reader, facts, parse_spec(text)) if split.pools else {}
        more = {
            gpu: f"planning a pool of it changes {path} ({line}): init writes no pool "
            "that changes a file, so it is left as it is"
            for path, line in changes.items()
            for pool in _pools_of(split, path)
            for gpu in pool.gpus
            if gpu not in withheld
        }
        if not more:
            return split, text
        withheld.update(more)


def _changed_files(reader: RootReader, facts: HostFacts, spec: Spec) -> dict[str, str]:
    """The existing host files planning the spec changes, each with its first changed line
    (`-dev4: /dev/nvidia-modeset,mode=0666`); none where the plan is refused (plan says
    why)."""
    import difflib

    from pvegpu.errors import PvegpuError
    from pvegpu.model.artifact import HOST, REVERT_BUNDLE

    try:
        _, artifacts = plan_and_render(facts, spec)
    except PvegpuError:
        return {}
    changed = {}
    for artifact in artifacts:
        if artifact.target != HOST or artifact.bundle == REVERT_BUNDLE:
            continue
        before = artifact.base.content if artifact.base else reader.read(artifact.path)
        if before is None or before == artifact.content:
            continue
        diff = difflib.unified_diff(
            before.splitlines(), artifact.content.splitlines(), lineterm="", n=0
        )
        first = next((d for d in diff if d[:1] in "+-" and d[:3] not in ("---", "+++")), "")
        changed[artifact.path] = f"`{first}`" if first else "its bytes"
    return changed


def _pools_of(split: CurrentSplit, path: str) -> list[CurrentPool]:
    """The pools of the split a changed file belongs to: the guest's whose config it is,
    the pools with a mapping for pci.cfg, every pool for any other file."""
    import re

    from pvegpu.model.plan import PoolKind

    guest = re.search(r"(?:^|/)(lxc|qemu-server)/(\d+)\.conf$", path)
    if guest is not None:
        kind = PoolKind.LXC if guest[1] == "lxc" else PoolKind.VFIO
        found = [p for p in split.pools if p.kind is kind and p.vmid == int(guest[2])]
    elif path.endswith("mapping/pci.cfg"):
        found = [p for p in split.pools if p.mapping is not None]
    else:
        found = []
    return found or list(split.pools)


def plan_and_render(facts: HostFacts, spec: Spec) -> tuple[Plan, tuple[Artifact, ...]]:
    # Imported here: `pvegpu check --root` runs the pipeline's discovery and the planner's
    # judgement of the host, and renders nothing (no jinja2, no template cache).
    from pvegpu.rendering.registry import render

    planned = plan(facts, spec)
    return planned, render(planned)


def render_bundle(
    facts: HostFacts, spec: Spec, source: str
) -> tuple[Plan, dict[str, tuple[str, int]]]:
    """Plan and render into the files `pvegpu render --out` writes (path -> content, mode),
    in memory, MANIFEST.json with its apply steps: what `apply --spec` and the Ansible
    module `pvegpu.proxmox.gpu_split` apply. `source` names the spec in MANIFEST.json."""
    from pvegpu.rendering.bundle_layout import bundle_files
    from pvegpu.rendering.review.apply_doc import manifest_header

    planned, artifacts = plan_and_render(facts, spec)
    return planned, bundle_files(artifacts, **manifest_header(planned, artifacts, source))


def reconcile_host(
    spec: Spec, root: Path, applied: Sequence[dict[str, Any]]
) -> tuple[Plan, tuple[Artifact, ...], Reconciliation]:
    """The applied spec planned on the host as it is now, and what of it `pvegpu apply
    --reconcile` writes against the applied bundle's functions (`applied`)."""
    from pvegpu.rendering.review.reconcile import reconcile

    planned, artifacts = plan_and_render(discover_for(spec, root), spec)
    return planned, artifacts, reconcile(planned, artifacts, applied)


def reconcile_bundle(
    planned: Plan, artifacts: Sequence[Artifact], found: Reconciliation, source: str
) -> dict[str, tuple[str, int]]:
    """The files of a reconcile's bundle (path -> content, mode): the files it writes and
    a MANIFEST.json whose steps are the reconcile's."""
    from pvegpu.rendering.bundle_layout import bundle_files
    from pvegpu.rendering.review.reconcile import reconcile_document

    return bundle_files(
        found.writes,
        node=planned.facts.node,
        spec=source,
        apply=reconcile_document(planned, artifacts, found),
    )


def discover_cluster(spec: Spec, roots: Mapping[str, Path]) -> dict[str, HostFacts]:
    """Each node's facts from its root (by node name), with the files its own pools'
    servers need. The nodes are checked against the spec by `plan_cluster`."""
    return {node: discover_for(spec.for_node(node), root) for node, root in roots.items()}


def plan_and_render_cluster(
    facts: Mapping[str, HostFacts], spec: Spec
) -> tuple[ClusterPlan, NodeArtifacts]:
    # Imported here: a single node's run never loads the cluster planner and renderer.
    from pvegpu.planning.cluster import plan_cluster
    from pvegpu.rendering.cluster import render_cluster

    planned = plan_cluster(facts, spec)
    return planned, render_cluster(planned)


def render_cluster_bundles(
    facts: Mapping[str, HostFacts], spec: Spec, source: str
) -> tuple[ClusterPlan, dict[str, dict[str, tuple[str, int]]]]:
    """The cluster planned once, and each node's bundle as the files `pvegpu render`
    writes under OUT/<node>/ (pci.cfg in the writer's alone), in memory, by node: what the
    Ansible module `pvegpu.proxmox.gpu_cluster_plan` hands each node."""
    from pvegpu.rendering.cluster import cluster_files

    planned, rendered = plan_and_render_cluster(facts, spec)
    files = cluster_files(planned, rendered, source)
    bundles: dict[str, dict[str, tuple[str, int]]] = {node: {} for node in planned.nodes}
    for rel, value in files.items():
        node, _, inside = rel.partition("/")
        if inside and node in bundles:
            bundles[node][inside] = value
    return planned, bundles


def check_host(
    root: Path, servers: Mapping[int, Collection[str]] | None = None, node: str | None = None
) -> tuple[HostFacts, ObservedHost, tuple[Diagnostic, ...]]:
    """`pvegpu check`'s discovery and judgement of the host as it is: its facts, what it
    reads beyond them (containers, /dev, the staged userspace) and the planner's findings
    on both. `servers`: the units a plan serves, by vmid; their P2P is the plan's, which
    check compares with the unit instead of judging it on the facts alone, where the plan
    is this host's (`node`: the node it was made for)."""
    from pvegpu.host.observed import read_observed
    from pvegpu.planning.host_checks import host_checks

    reader = RootReader(root)
    facts = read_host(reader)
    observed = read_observed(reader, facts, servers)
    planned = {
        (vmid, unit)
        for vmid, units in (servers or {}).items()
        for unit in units
        if node is None or node == facts.node
    }
    return facts, observed, tuple(host_checks(facts, observed, planned))


def running_unit(observed: ObservedHost, vmid: int, unit: str) -> RunningUnit | None:
    """The server `<unit>.service` runs in CT `vmid`, as the planner reads a unit."""
    from pvegpu.planning.host_checks import running_unit as running

    return running(observed, vmid, unit)
