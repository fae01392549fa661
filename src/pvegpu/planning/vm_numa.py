"""A VM's own NUMA pinning judged against its GPUs' node, as a container's cpuset is.

With `numa = true` in the pool's `vm` table the plan writes the VM's `affinity` and
`numa0` itself (planning/guests.py). Without it the VM keeps what its config says:
`affinity: <host CPUs>` pins its vCPU threads, `numaN: ...,hostnodes=<nodes>,...` binds
its memory. Either one beyond the node its GPUs are on puts every DMA and every launch
across the socket link, which is the container's `lxc-cores-beyond-node` /
`lxc-cpuset-kept` warning for a VM.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.model.facts import HostFacts, NumaNode
from pvegpu.model.guests import guests
from pvegpu.model.plan import Pool, PoolKind, VmGuest
from pvegpu.pci import CpuList
from pvegpu.pvefiles.guestconf import LineKind

_NUMA_KEY = re.compile(r"numa[0-9]+")
_NODE_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_FIX = "set numa = true in the pool's vm table (pvegpu then pins the VM to the GPUs' node)"


def _pinned(facts: HostFacts, pool: Pool) -> tuple[VmGuest, NumaNode] | None:
    """The pool's VM whose own pinning is kept, and its GPUs' one known node."""
    vm = pool.vm
    if pool.kind is not PoolKind.VFIO or vm is None or vm.config is None or vm.numa:
        return None
    nodes = {g.numa_node for g in pool.gpus}
    if len(nodes) != 1 or None in nodes:
        return None  # no one node to judge by (pool-spans-numa-nodes says so)
    node = next((n for n in facts.numa_nodes if n.id in nodes), None)
    return None if node is None else (vm, node)


def _lines(facts: HostFacts, vm: VmGuest) -> list[tuple[str, str]]:
    assert vm.config is not None  # _pinned checked it
    return [
        (line.key, line.value.strip())
        for line in guests(facts).config(vm.config).main
        if line.kind is LineKind.KEY and (line.key == "affinity" or _NUMA_KEY.fullmatch(line.key))
    ]


def hostnodes(value: str) -> tuple[int, ...] | None:
    """The host nodes of a `numaN` value (`hostnodes=0-1;3`); None when it names none."""
    for option in value.split(","):
        key, _, text = option.partition("=")
        if key.strip() != "hostnodes":
            continue
        nodes: list[int] = []
        for part in text.split(";"):
            match = _NODE_RANGE.fullmatch(part.strip())
            if match is None:
                raise ValueError(f"hostnodes={text} is not a list of node ranges (0-1;3)")
            first, last = int(match[1]), int(match[2] or match[1])
            if last < first:
                raise ValueError(f"hostnodes={text}: range {part} runs backwards")
            nodes.extend(range(first, last + 1))
        return tuple(nodes)
    return None


def vm_numa_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """The pinning values of a kept VM config that are no CPU or node list."""
    for pool in pools:
        found = _pinned(facts, pool)
        if found is None:
            continue
        vm, _ = found
        for key, value in _lines(facts, vm):
            try:
                _ = CpuList.parse(value) if key == "affinity" else hostnodes(value)
            except ValueError as err:
                yield Diagnostic.error(
                    "vm-numa-unreadable",
                    f"{vm.config_path}: {key}",
                    f"{value!r} cannot be read: {err}",
                    f"fix the line (qm set {vm.vmid} --{key} ...) or " + _FIX,
                )


def vm_numa_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """A kept `affinity` or `numaN` beyond the node of the VM's GPUs."""
    for pool in pools:
        found = _pinned(facts, pool)
        if found is None:
            continue
        vm, node = found
        for key, value in _lines(facts, vm):
            try:
                if key == "affinity":
                    outside = sorted(set(CpuList.parse(value).cpus) - set(node.cpus.cpus))
                    if outside:
                        yield Diagnostic(
                            Severity.WARNING,
                            "vm-affinity-beyond-node",
                            vm.config_path,
                            f"affinity: {value} holds {len(outside)} CPUs outside NUMA node "
                            f"{node.id} ({node.cpus}), where the VM's GPUs are: set affinity "
                            f"to {node.cpus} or a part of it, or {_FIX}",
                        )
                    continue
                nodes = hostnodes(value)
            except ValueError:
                continue  # refused by vm_numa_problems
            others = sorted(set(nodes or ()) - {node.id})
            if others:
                yield Diagnostic(
                    Severity.WARNING,
                    "vm-numa-beyond-node",
                    vm.config_path,
                    f"{key}: {value} binds the VM's memory to host node"
                    f"{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}, not "
                    f"NUMA node {node.id} where its GPUs are: set hostnodes={node.id}, or " + _FIX,
                )
