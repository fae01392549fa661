"""The loaded GPU driver's userspace as the host root has it (`HostFacts.driver_userspace`).

What a container pool with `userspace = "host"` is handed (docs/upgrades.md): discovery
lists and stats these files (host/userspace.py), the planner checks the ones the runtime
cannot start without are there, and the bundle's staging script finds them again at
every boot, by the version loaded then.
"""

from __future__ import annotations

import attrs

from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class UserspaceFile:
    """A file of the loaded GPU driver's userspace in the host root (`Vendor.host_userspace`):
    a library of the module's exact version, a soname link to one, or a tool. Known by name
    (stat'ed, never read): what `userspace = "host"` stages for a container. Its size is
    not kept: a snapshot archives such files empty, and its facts must be the host's."""

    path: str
    """Relative to the root (`usr/lib/x86_64-linux-gnu/libcuda.so.590.48.01`)."""
    link: str | None = None
    """A link's text: a file name in the same directory (`libcuda.so.590.48.01`); None
    for a regular file."""
