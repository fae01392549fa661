"""Which node each pool is on: a single-node spec (`node`) or a cluster spec (`nodes`).

A single-node spec names its node once and its pools need not repeat it. A cluster spec
lists its nodes and every pool says which one it is on. Pools of several nodes may share
a mapping id (pci.cfg is one file for the cluster): they must then describe it alike,
since the mapping has one description, and give it the same vGPU type or none: a VM on
the mapping takes whichever of its devices is free, with the one `mdev=` of its line,
and the mapping has one `mdev` flag for all of them.
"""

from __future__ import annotations

from collections.abc import Iterator

from pvegpu.diagnostic import Diagnostic
from pvegpu.model.schema import Spec


def node_problems(spec: Spec) -> Iterator[Diagnostic]:
    """A spec with neither or both of `node` and `nodes`, pools on unknown nodes. A
    shared mapping described two ways: `shared_mapping_problems`."""
    if spec.node is None and not spec.nodes:
        yield Diagnostic.error(
            "spec-missing-key",
            "node",
            "the spec names no node",
            'add node = "<host name>", or nodes = ["...", ...] and a node on every pool',
        )
        return
    if spec.node is not None and spec.nodes:
        yield Diagnostic.error(
            "spec-node-and-nodes",
            "nodes",
            "a spec is for one node (`node`) or for several (`nodes`), not both",
            "remove node and give every pool its node, or remove nodes",
        )
        return
    known = spec.node_names
    for i, pool in enumerate(spec.pools):
        where = f"pools[{i}].node"
        if pool.node is None and spec.is_cluster:
            yield Diagnostic.error(
                "spec-pool-without-node",
                where,
                "a spec with `nodes` needs the node of every pool",
                f"add node = one of {', '.join(repr(n) for n in known)}",
            )
        elif pool.node is not None and pool.node not in known:
            yield Diagnostic.error(
                "spec-pool-node-unknown",
                where,
                f"{pool.node!r} is not "
                + ("in nodes" if spec.is_cluster else f"the spec's node {spec.node!r}"),
                f"use one of {', '.join(repr(n) for n in known)}"
                + (" or add it to nodes" if spec.is_cluster else ""),
            )


def shared_mapping_problems(spec: Spec) -> Iterator[Diagnostic]:
    """Pools sharing a mapping id that give it two vGPU types or two descriptions:
    judged whatever the spec says of its nodes."""
    described: dict[str, tuple[int, str]] = {}
    typed: dict[str, tuple[int, str | None]] = {}
    for i, pool in enumerate(spec.pools):
        mapping = pool.mapping
        if mapping is None:
            continue
        vgpu = pool.vfio.vgpu_type if pool.vfio is not None else None
        other = typed.setdefault(mapping.id, (i, vgpu))
        if other[1] != vgpu:
            yield Diagnostic.error(
                "spec-mapping-vgpu-mixed",
                f"pools[{i}].mapping.id",
                f"mapping {mapping.id!r} is "
                + (f"of vGPU type {other[1]!r}" if other[1] else "without a vGPU type")
                + f" in pools[{other[0]}] and "
                + (f"of {vgpu!r}" if vgpu else "without one")
                + " here: a VM on it takes any of its devices with its line's one mdev=, and "
                "its mdev flag is one for all of them",
                "give the pools the same vgpu_type, or each its own mapping id",
            )
        if mapping.description is None:
            continue
        first = described.setdefault(mapping.id, (i, mapping.description))
        if first[1] != mapping.description:
            yield Diagnostic.error(
                "spec-mapping-described-twice",
                f"pools[{i}].mapping.description",
                f"mapping {mapping.id!r} is described as {first[1]!r} by pools[{first[0]}]; "
                "a mapping has one description",
                "give it the same description in both pools, or in one of them only",
            )
