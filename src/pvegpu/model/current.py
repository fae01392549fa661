"""The split a host has now, as pools of a spec: the values `planning/current.py` decides
and `rendering/init_spec.py` writes as the spec `pvegpu init` prints."""

from __future__ import annotations

import attrs

from pvegpu.model.plan import PoolKind
from pvegpu.pci import PciAddress
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class CurrentServer:
    """A server one of the container's units starts."""

    unit: str
    """The unit's name (`sglang-qwen.service`)."""
    path: str
    """Its file, relative to the host root."""
    server: str
    """`SGLang` or `vLLM`."""
    size: str
    """The options that set its parallel size, as written."""
    enabled: bool
    gpus: int | None = None
    """The GPUs it opens (its parallel size), None when unknown."""


@value_class
@attrs.frozen(eq=False, repr=False)
class CurrentNote:
    """Something of the host's GPU use the spec cannot say, or says only in a comment."""

    subject: str
    """The GPU (`0000:39:00.0`), guest (`CT 129`) or file it is about."""
    message: str
    gpu: PciAddress | None = None
    """The GPU it is about, if one: the note is written at that GPU's line."""
    expressed: bool = True
    """False: the host does something the spec written cannot express (the GPU is left
    out of the pools); True: only information (a host-side binding, a pending change)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class CurrentPool:
    """One pool of the current split."""

    name: str
    kind: PoolKind
    gpus: tuple[PciAddress, ...]
    vmid: int | None
    """The container (lxc) or the VM (vfio) holding the GPUs; None: a vfio pool no VM
    uses yet."""
    devices: str | None = None
    """`dev` or `raw`: how the container's config gives the nodes (lxc pools)."""
    mode: str | None = None
    """The nodes' `mode=` its `devN` lines set (`dev` pools)."""
    gid: int | None = None
    """The nodes' `gid=` its `devN` lines set, if any (`dev` pools)."""
    mapping: str | None = None
    mapping_description: str | None = None
    held_by: tuple[str, ...] = ()
    """Where the guest's config holds them (`etc/pve/lxc/129.conf line 4`), for the comment."""
    servers: tuple[CurrentServer, ...] = ()
    """The servers the container's units start (lxc pools), said in a comment."""


@value_class
@attrs.frozen(eq=False, repr=False)
class CurrentSplit:
    """What `pvegpu init` writes: the pools of the host's current state and the notes."""

    node: str
    pools: tuple[CurrentPool, ...]
    free: tuple[PciAddress, ...]
    """GPUs on their host driver that no guest holds: a later pool may take them."""
    notes: tuple[CurrentNote, ...]
    poolable: tuple[PciAddress, ...]
    """The whole GPUs a pool may name (`planning.current.poolable`: not a BMC display,
    not a virtual function), in the facts' order: what the comments list and count."""

    @property
    def unexpressed(self) -> tuple[CurrentNote, ...]:
        return tuple(n for n in self.notes if not n.expressed)
