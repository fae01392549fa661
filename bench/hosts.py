"""The synthetic hosts the benchmark reads, and a split spec generated for each.

Trees are written where files are cheapest: /dev/shm when it is a writable tmpfs (a
tree of 16,384 functions is about 300,000 small files), else the system's temp dir.
Both pvegpu and lspci read the same tree, so where it lies does not tilt their ratio.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import attrs

from pvegpu.testing import HostSpec, mixed_host, write_host

GPUS_PER_POOL = 4
FIRST_VMID = 1000
CT_CONFIG = "arch: amd64\nhostname: ct{vmid}\nmemory: 65536\nostype: debian\n"


@dataclass(frozen=True)
class BenchHost:
    functions: int
    gpus: int
    pools: int
    root: Path
    spec: Path


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    shm = Path("/dev/shm")
    where = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.TemporaryDirectory(prefix="pvegpu-bench-", dir=where)


def split_spec(host: HostSpec) -> tuple[str, dict[str, str]]:
    """Pools of GPUS_PER_POOL GPUs: NUMA 0 to containers, NUMA 1 to vfio-pci mappings.

    Pools and guests grow with the GPUs, so the plan's cost per pool shows too. Returns
    the TOML and the container configs the containers' pools need on the host.
    """
    gpus = sorted((d for d in host.devices if d.nvidia), key=lambda d: d.pci_address)
    lines = [f'node = "{host.hostname}"', ""]
    files: dict[str, str] = {}
    for node in (0, 1):
        on_node = [g.address for g in gpus if g.numa_node == node]
        for index in range(0, len(on_node) - GPUS_PER_POOL + 1, GPUS_PER_POOL):
            chosen = ", ".join(f'"{a}"' for a in on_node[index : index + GPUS_PER_POOL])
            name = f"numa{node}-{index // GPUS_PER_POOL}"
            lines += ["[[pools]]", f'name = "{name}"', f"gpus = [{chosen}]"]
            if node == 0:
                vmid = FIRST_VMID + len(files)
                lines += ["[pools.lxc]", f"vmid = {vmid}", ""]
                files[f"etc/pve/lxc/{vmid}.conf"] = CT_CONFIG.format(vmid=vmid)
            else:
                lines += [f'mapping = {{ id = "{name}" }}', "[pools.vfio]", ""]
    return "\n".join(lines), files


def build(functions: int, scratch: Path) -> BenchHost:
    host = mixed_host(functions)
    spec, files = split_spec(host)
    host = attrs.evolve(host, files=files)
    root = scratch / f"host-{functions}"
    write_host(host, root)
    spec_path = scratch / f"split-{functions}.toml"
    spec_path.write_text(spec)
    gpus = sum(d.nvidia is not None for d in host.devices)
    return BenchHost(functions, gpus, spec.count("[[pools]]"), root, spec_path)
