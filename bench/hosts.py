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

from pvegpu.testing import HostSpec, mixed_host, synthetic, write_host

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


def gpu_host(gpus: int) -> HostSpec:
    """Only GPUs (each with its audio function behind its own root port), alternating
    NUMA nodes: the host of the 2,048-GPU scale target, built the way `mixed_host`
    builds its GPU slots."""
    numbers = synthetic._Numbering()
    devices = []
    for slot in range(gpus):
        domain, index = divmod(slot, synthetic.PORTS_PER_DOMAIN)
        port = synthetic._port(domain, index, slot % 2, numbers)
        devices += [port, *synthetic._gpu(port.address, index + 1, slot % 2, numbers)]
    return attrs.evolve(mixed_host(1), hostname="gpus", devices=tuple(devices))


def split_spec(host: HostSpec, per_pool: int = GPUS_PER_POOL) -> tuple[str, dict[str, str]]:
    """Pools of GPUS_PER_POOL GPUs: NUMA 0 to containers, NUMA 1 to vfio-pci mappings.

    Pools and guests grow with the GPUs, so the plan's cost per pool shows too. Returns
    the TOML and the container configs the containers' pools need on the host.
    """
    gpus = sorted((d for d in host.devices if d.nvidia), key=lambda d: d.pci_address)
    lines = [f'node = "{host.hostname}"', ""]
    files: dict[str, str] = {}
    for node in (0, 1):
        on_node = [g.address for g in gpus if g.numa_node == node]
        for index in range(0, len(on_node) - per_pool + 1, per_pool):
            chosen = ", ".join(f'"{a}"' for a in on_node[index : index + per_pool])
            name = f"numa{node}-{index // per_pool}"
            lines += ["[[pools]]", f'name = "{name}"', f"gpus = [{chosen}]"]
            if node == 0:
                vmid = FIRST_VMID + len(files)
                lines += ["[pools.lxc]", f"vmid = {vmid}", ""]
                files[f"etc/pve/lxc/{vmid}.conf"] = CT_CONFIG.format(vmid=vmid)
            else:
                lines += [f'mapping = {{ id = "{name}" }}', "[pools.vfio]", ""]
    return "\n".join(lines), files


def build(functions: int, scratch: Path, *, gpus_only: int = 0) -> BenchHost:
    """The mixed host of `functions` PCI functions with pools of four GPUs; with
    `gpus_only`, a host of that many GPUs in pools of 64 instead."""
    host = gpu_host(gpus_only) if gpus_only else mixed_host(functions)
    spec, files = split_spec(host, 64 if gpus_only else GPUS_PER_POOL)
    host = attrs.evolve(host, files=files)
    functions = len(host.devices)
    name = f"gpus-{gpus_only}" if gpus_only else f"host-{functions}"
    root = scratch / name
    write_host(host, root)
    spec_path = scratch / f"split-{name}.toml"
    spec_path.write_text(spec)
    gpus = sum(d.nvidia is not None for d in host.devices)
    return BenchHost(functions, gpus, spec.count("[[pools]]"), root, spec_path)
