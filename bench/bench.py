"""Speed targets of the pure pipeline, checked here and never by timed unit tests.

    make bench        (or: .venv/bin/python bench/bench.py [--runs N])

Targets (median wall time on the 2-core CI machine, one process, warm page cache):
- kpro6 fixture, discover + plan + render of examples/kpro6.toml: under 0.2 s;
- a synthetic large host (32 GPUs with audio over 2 NUMA nodes, 400 other functions
  behind bridges): under 1 s. A real EPYC/Xeon host has 100-300 PCI functions.
Exits 1 when a target is missed, printing what was measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pvegpu.host.discover import discover
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.spec.load import load_spec, parse_spec
from pvegpu.spec.schema import Spec
from pvegpu.testing import (
    DeviceSpec,
    HostSpec,
    IommuUnit,
    Link,
    NvidiaInfo,
    NvidiaModule,
    write_host,
)

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"kpro6": 0.2, "large": 1.0}

LARGE_SPEC = """
node = "big"
[[pools]]
name = "ct"
numa_node = 0
[pools.lxc]
vmid = 300
[[pools]]
name = "vm"
numa_node = 1
mapping = { id = "big-vm" }
[pools.vfio]
"""


def large_host() -> HostSpec:
    devices: list[DeviceSpec] = []
    group = 1
    for i in range(32):
        bus = 0x10 + i * 4
        node = 0 if i < 16 else 1
        port = f"0000:{bus - 1:02x}:01.0"
        devices.append(
            DeviceSpec(
                address=port,
                vendor=0x1022,
                device=0x14AB,
                pci_class=0x060400,
                numa_node=node,
                driver="pcieport",
                iommu_group=group,
                link=Link(),
            )
        )
        for fn, (dev, cls, drv) in enumerate(
            ((0x2BB5, 0x030200, "nvidia"), (0x22E8, 0x040300, "snd_hda_intel"))
        ):
            devices.append(
                DeviceSpec(
                    address=f"0000:{bus:02x}:00.{fn}",
                    vendor=0x10DE,
                    device=dev,
                    pci_class=cls,
                    parent=port,
                    subsystem_vendor=0x10DE,
                    subsystem_device=0x204B,
                    numa_node=node,
                    driver=drv,
                    iommu_group=group + 1,
                    link=Link(),
                    nvidia=NvidiaInfo(model="NVIDIA RTX PRO 6000", minor=i) if fn == 0 else None,
                )
            )
        group += 2
    for j in range(400):
        devices.append(
            DeviceSpec(
                address=f"0001:{j // 8:02x}:{j % 8:02x}.0",
                vendor=0x8086,
                device=0x1533,
                pci_class=0x020000,
                numa_node=j % 2,
                driver="igb",
                iommu_group=group,
            )
        )
        group += 1
    return HostSpec(
        hostname="big",
        cmdline="BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1",
        devices=tuple(devices),
        numa=("0-63", "64-127"),
        iommu_units=(IommuUnit("ivhd0"),),
        sev_snp=False,
        nvidia=NvidiaModule(version="590.48.01"),
        files={"etc/pve/lxc/300.conf": "arch: amd64\nhostname: big\nmemory: 65536\n"},
    )


def median_of(runs: int, step: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, root: Path, spec: Spec, runs: int) -> tuple[str, float]:
    facts = discover_for(spec, root)
    planned = plan(facts, spec)
    d = median_of(runs, lambda: discover(root))
    p = median_of(runs, lambda: plan(facts, spec))
    r = median_of(runs, lambda: render(planned))
    total = median_of(runs, lambda: render(plan(discover_for(spec, root), spec)))
    print(
        f"{name:6} discover {d * 1e3:7.1f} ms  plan {p * 1e3:6.1f} ms  "
        f"render {r * 1e3:6.1f} ms  total {total * 1e3:7.1f} ms  "
        f"(target {TARGETS[name] * 1e3:.0f} ms, {len(facts.functions)} functions)"
    )
    return name, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    results = [
        measure(
            "kpro6",
            REPO / "fixtures/sysfs/kpro6",
            load_spec(REPO / "examples/kpro6.toml"),
            args.runs,
        )
    ]
    with tempfile.TemporaryDirectory() as tmp:
        write_host(large_host(), Path(tmp))
        results.append(measure("large", Path(tmp), parse_spec(LARGE_SPEC), args.runs))
    missed = [(n, t) for n, t in results if t > TARGETS[n]]
    for name, total in missed:
        print(f"MISSED: {name} took {total:.3f} s, target {TARGETS[name]} s", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
