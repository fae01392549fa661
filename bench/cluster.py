"""Cluster planning speed (issue 13): 64 nodes x 8 GPUs planned and rendered in under 1 s.

    .venv/bin/python bench/cluster.py [--runs N]      (`make bench` runs it too)

One synthetic node (8 RTX PRO 6000 with their audio functions behind root ports, four
per NUMA node) is written with `pvegpu.testing.write_host` and discovered once; every
node of a cluster gets those facts under its own name, with the cluster's pci.cfg as it
stands after a previous apply (two mappings, `gpu-a` and `gpu-b`, with four map lines of
every node each). The cluster spec gives each node two vfio pools of four GPUs, one per
mapping, each for its own VM. What is timed, in this process, is `plan_cluster` +
`render_cluster` + `cluster_files` (everything `pvegpu render` does between discovery
and the disk), best of `runs`, at 1, 8, 64 and 256 nodes; the report gives each time
and its ratio to one node (linear is the node count).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from pvegpu.host.discover import discover
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.pipeline import parse_spec
from pvegpu.planning.cluster import plan_cluster
from pvegpu.pvefiles import pcicfg
from pvegpu.rendering.cluster import cluster_files, render_cluster
from pvegpu.testing import (
    DeviceSpec,
    HostSpec,
    IommuUnit,
    Link,
    NvidiaInfo,
    NvidiaModule,
    write_host,
)

NODE_COUNTS = (1, 8, 64, 256)
TARGET_NODES = 64
TARGET_S = 1.0
GPUS = 8
FIRST_VMID = 1000
_GEN5 = Link("32.0 GT/s PCIe", 16)

Add = Callable[[str, str, str, str, str, bool], None]
"""bench.Report.add: (work, pvegpu, reference, ratio, target, ok)."""


def node_host() -> HostSpec:
    """Eight GPUs with their audio, each behind its own root port, four per NUMA node."""
    devices: list[DeviceSpec] = []
    for index in range(GPUS):
        node, port = index // 4, f"0000:00:{index + 1:02x}.0"
        devices.append(
            DeviceSpec(
                address=port, vendor=0x1022, device=0x14AB, pci_class=0x060400,
                numa_node=node, driver="pcieport", iommu_group=100 + index, link=_GEN5,
            )
        )  # fmt: skip
        for function, device, pci_class, driver in (
            (0, 0x2BB5, 0x030200, "nvidia"),
            (1, 0x22E8, 0x040300, "snd_hda_intel"),
        ):
            devices.append(
                DeviceSpec(
                    address=f"0000:{index + 1:02x}:00.{function}", parent=port,
                    vendor=0x10DE, device=device, pci_class=pci_class,
                    subsystem_vendor=0x10DE, subsystem_device=0x204B, numa_node=node,
                    driver=driver, iommu_group=index, link=_GEN5,
                    nvidia=NvidiaInfo(model="NVIDIA RTX PRO 6000", minor=index)
                    if function == 0 else None,
                )
            )  # fmt: skip
    return HostSpec(
        hostname="node",
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.14.8-2-pve root=/dev/sda1 amd_iommu=on",
        numa=("0-31", "32-63"),
        iommu_units=(IommuUnit("ivhd0"),),
        sev_snp=False,
        nvidia=NvidiaModule(version="590.48.01"),
        devices=tuple(devices),
    )


def _names(count: int) -> list[str]:
    return [f"n{i:03d}" for i in range(count)]


def cluster_spec(count: int) -> str:
    lines = [f"nodes = [{', '.join(repr(n) for n in _names(count))}]".replace("'", '"'), ""]
    for i, node in enumerate(_names(count)):
        for numa, mapping in ((0, "gpu-a"), (1, "gpu-b")):
            lines += [
                "[[pools]]",
                f'name = "{node}-{mapping}"',
                f'node = "{node}"',
                f"numa_node = {numa}",
                f'mapping = {{ id = "{mapping}" }}',
                f"vfio = {{ vm = {{ vmid = {FIRST_VMID + 2 * i + numa} }} }}",
                "",
            ]
    return "\n".join(lines)


def _pci_cfg(facts: HostFacts, count: int) -> str:
    """The cluster's pci.cfg after a previous apply: every node's lines in both mappings."""
    text = ""
    for mapping, numa in (("gpu-a", 0), ("gpu-b", 1)):
        text += f"{mapping}\n"
        for node in _names(count):
            for gpu in (g for g in facts.gpus if g.numa_node == numa):
                text += (
                    f"\tmap id={gpu.vendor_device},iommugroup={gpu.iommu_group},node={node},"
                    f"path={gpu.address.slot},subsystem-id={gpu.function.subsystem_id}\n"
                )
        text += "\n"
    return text


def cluster_facts(facts: HostFacts, count: int) -> dict[str, HostFacts]:
    shared = ConfigFile(pcicfg.PATH, _pci_cfg(facts, count))
    files = (*(f for f in facts.files if f.path != pcicfg.PATH), shared)
    return {node: attrs.evolve(facts, node=node, files=files) for node in _names(count)}


def time_cluster(facts: HostFacts, count: int, runs: int) -> float:
    """Best of `runs`: plan, render and lay out the bundle files of `count` nodes."""
    spec = parse_spec(cluster_spec(count), f"cluster-{count}.toml")
    best = float("inf")
    for _ in range(runs):
        by_node = cluster_facts(facts, count)  # fresh facts: no lookup index carried over
        gc.collect()
        started = time.perf_counter()
        planned = plan_cluster(by_node, spec)
        files = cluster_files(planned, render_cluster(planned), "cluster.toml")
        best = min(best, time.perf_counter() - started)
        assert f"{_names(count)[0]}/{pcicfg.PATH}" in files
    return best


def bench_cluster(add: Add, runs: int, scratch: Path) -> dict[int, float]:
    root = scratch / "cluster-node"
    write_host(node_host(), root)
    facts = discover(root)
    times = {
        n: time_cluster(facts, n, runs if n <= TARGET_NODES else max(1, runs // 3))
        for n in NODE_COUNTS
    }
    one = times[1]
    for count in NODE_COUNTS[1:]:
        seconds = times[count]
        is_target = count == TARGET_NODES
        add(
            f"plan + render of {count} nodes x {GPUS} GPUs (cluster)",
            f"{seconds * 1e3:.0f} ms",
            f"1 node {one * 1e3:.1f} ms; linear {count}x",
            f"{seconds / one:.1f}x",
            f"< {TARGET_S:g} s" if is_target else "-",
            seconds < TARGET_S if is_target else True,
        )
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per size (default 3)")
    args = parser.parse_args()
    missed = 0

    def add(work: str, ours: str, reference: str, ratio: str, target: str, ok: bool) -> None:
        nonlocal missed
        missed += not ok
        print(
            f"  {work}: {ours} vs {reference} -> {ratio} (target {target})",
            "ok" if ok else "MISSED",
        )

    with tempfile.TemporaryDirectory(prefix="pvegpu-bench-cluster-") as tmp:
        bench_cluster(add, args.runs, Path(tmp))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
