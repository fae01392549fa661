"""Which CUDA ordinals the pool's GPUs have inside its container: the visible devices of
any engine's server (`CUDA_VISIBLE_DEVICES` with `CUDA_DEVICE_ORDER=PCI_BUS_ID`)."""

from __future__ import annotations

from collections.abc import Iterable

from pvegpu.model.facts import GPU
from pvegpu.serving.checks import Checks


def visible_indices(container_gpus: Iterable[GPU], pool_gpus: Iterable[GPU]) -> tuple[int, ...]:
    """CUDA ordinals of `pool_gpus` with CUDA_DEVICE_ORDER=PCI_BUS_ID in the container.

    CUDA numbers the GPUs a process can open in PCI bus order, so an ordinal is a GPU's
    position among the container's GPUs sorted by address.
    """
    order = sorted({g.address for g in container_gpus})
    missing = [g.address for g in pool_gpus if g.address not in order]
    if missing:
        raise ValueError(f"{', '.join(map(str, missing))} not among the container's GPUs")
    return tuple(order.index(g.address) for g in sorted(pool_gpus, key=lambda g: g.address))


def container_indices(checks: Checks, vmid: int) -> tuple[int, ...]:
    """`visible_indices` of the pool's GPUs among all the GPUs container `vmid` gets."""
    # What the container gets: the GPUs of every pool that hands GPUs to this vmid.
    container = [
        g for p in checks.pools if p.lxc is not None and p.lxc.vmid == vmid for g in p.gpus
    ]
    return visible_indices([*container, *checks.pool.gpus], checks.pool.gpus)
