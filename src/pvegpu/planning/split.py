"""What the vfio split script needs decided before it is written: where `revert` takes
each VM function, and the refusals of values the script could not carry.

The script's data names each moved function's driver before and after the split and
pins each host-side function to its host driver. plan() refuses here whatever would make
that data wrong (a function on both sides) or unsafe as shell data (a driver name sysfs
would not use), so rendering/split.py only formats an accepted plan.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator

from pvegpu.diagnostic import Diagnostic
from pvegpu.hardware import VFIO_DRIVER, host_driver
from pvegpu.model.facts import HostFacts, PciFunction
from pvegpu.model.plan import Pool, PoolKind

_DRIVER_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def revert_driver(facts: HostFacts, function: PciFunction) -> str | None:
    """The driver `revert` returns a VM function to: the one it had before the split.

    Bound to vfio-pci without a vfio-pci override, the function was there before the
    split (`vfio-pci.ids=`, `options vfio-pci ids=`, or Proxmox's `new_id` at VM start):
    revert leaves it on vfio-pci. Unbound, or held on vfio-pci by an override (this
    split, rendered again after it was applied), discovery did not see the driver it
    came from: the one a probe gives it, vfio-pci where an ids= setting claims its
    vendor:device, else its host driver (`host_driver`). None: not known.
    """
    if function.driver == VFIO_DRIVER and function.driver_override != VFIO_DRIVER:
        return VFIO_DRIVER
    if function.driver not in (None, VFIO_DRIVER):
        return function.driver
    if any(setting.claimed(function) for setting in facts.vfio_ids):
        return VFIO_DRIVER
    return host_driver(function)


def split_problems(facts: HostFacts, pools: Iterable[Pool]) -> Iterator[Diagnostic]:
    """Functions both moved and pinned, then driver names the script cannot carry."""
    pools = tuple(pools)
    yield from _on_both_sides(pools)
    yield from _bad_driver_names(facts, pools)
    yield from _removable(pools)


def _on_both_sides(pools: tuple[Pool, ...]) -> Iterator[Diagnostic]:
    # A GPU selected by two pools is already `gpu-in-two-pools`: its functions are not
    # reported again. What is left is a function two GPUs share (a dual-head card's
    # display functions in one slot and group), each GPU in a pool of its own kind.
    selected = Counter(g.address for p in pools for g in p.gpus)
    reported = {
        f.address for p in pools for g in p.gpus if selected[g.address] > 1 for f in g.functions
    }
    vm = {f.address for p in pools if p.kind is PoolKind.VFIO for f in p.functions}
    host = {f.address for p in pools if p.kind is PoolKind.LXC for f in p.functions}
    for address in sorted((vm & host) - reported):
        yield Diagnostic.error(
            "split-function-in-two-pools",
            str(address),
            "is planned for vfio-pci and for the host at once",
            "put the GPUs that share it in one pool: vfio-pci takes their group whole",
        )


def _bad_driver_names(facts: HostFacts, pools: tuple[Pool, ...]) -> Iterator[Diagnostic]:
    # Driver names end up in shell data and modprobe.d lines: only what sysfs uses. These
    # are the names rendering/split.py writes: host and revert drivers of the functions
    # that move, host drivers of those pinned to the host (bridges are in neither).
    if not any(p.moves_to_vfio for p in pools):
        return  # nothing moves to vfio-pci, no script: nothing names these drivers
    drivers: set[str | None] = set()
    for pool in pools:
        for function in pool.functions:
            if function.is_bridge:
                continue
            drivers.add(host_driver(function))
            if pool.kind is PoolKind.VFIO:
                drivers.add(revert_driver(facts, function))
    for driver in sorted(d for d in drivers if d is not None):
        if not _DRIVER_NAME.fullmatch(driver):
            yield Diagnostic.error(
                "split-bad-driver-name",
                driver,
                "is not a kernel driver name",
                "check the driver links discovery read",
            )


def _removable(pools: tuple[Pool, ...]) -> Iterator[Diagnostic]:
    """A GPU behind a Thunderbolt/USB4 port (`removable`) in any pool of a split.

    It appears once its enclosure is connected and authorized (boltd), often after
    pvegpu-vfio-split.service ran at boot, and maybe on another bus. The script checks
    every listed function before it writes anything: at a boot the GPU is missing from,
    it refuses the whole split, and every pool's GPUs stay on their host drivers.
    """
    if not any(p.kind is PoolKind.VFIO for p in pools):
        return  # no vfio pool, no split script
    for pool in pools:
        for gpu in pool.gpus:
            if not any(f.removable for f in gpu.functions):
                continue
            vmid = pool.vm.vmid if pool.vm is not None else "<vmid>"
            hand = (
                f"pass it to the VM by a hostpci line of its own (qm set {vmid} --hostpciN "
                f"{gpu.address.slot},pcie=1): qemu-server binds it to vfio-pci at each VM "
                "start while it is connected"
                if pool.kind is PoolKind.VFIO
                else "give the container its device nodes by hand (pct set <vmid> --devN ...)"
            )
            yield Diagnostic.error(
                "gpu-removable",
                str(gpu.address),
                f"pool {pool.name!r}: sits behind a Thunderbolt/USB4 port (removable), so it "
                "appears only once its enclosure is connected and authorized, often after "
                "pvegpu-vfio-split.service ran at boot, and maybe on another bus; at a boot "
                "it is missing from, the split script refuses the whole split and every "
                "pool's GPUs stay on their host drivers",
                f"leave it out of the pools and {hand}",
            )
