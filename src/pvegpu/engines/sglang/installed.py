"""The SGLang release a server runs and its option table.

Which release (installed for the unit's python, else the spec's) is decided as for every
engine (`engines.common.installed`, codes `sglang-version-mismatch` and the like); the
option table is SGLang's: the shipped one, else one read from the installed sources
(`sglang/srt/server_args.py`), else a refusal (`sglang-version-unknown`) naming how to
add the release.
"""

from __future__ import annotations

import attrs

from pvegpu.engines.common.installed import Distribution, InstalledRelease, chosen_release
from pvegpu.engines.sglang.options import (
    OptionTable,
    load_table,
    shipped_versions,
    table_from_sources,
    unknown_version,
)
from pvegpu.errors import RenderError
from pvegpu.serving.checks import Checks

SGLANG = Distribution("sglang", "SGLang", lambda: shipped_versions()[-1])


def serving_release(checks: Checks, rootfs: str | None) -> tuple[str | None, OptionTable | None]:
    """The release the server runs and its option table; (None, None) with a problem.

    `rootfs`: the container's root file system as found (its storage, else the spec's
    container_rootfs); None when it was not read.
    """
    chosen = chosen_release(checks, rootfs, SGLANG)
    if chosen is None:
        return None, None
    version, installed = chosen
    try:
        return version, _table(version, installed)
    except RenderError as err:
        checks.add_spec_errors(
            attrs.evolve(p, subject=f"{checks.where}.version") for p in err.problems
        )
        return version, None


def _table(version: str, installed: InstalledRelease | None) -> OptionTable:
    if version in shipped_versions() or installed is None:
        return load_table(version)
    if "sglang/srt/server_args.py" not in installed.sources:
        raise unknown_version(version, f"not shipped, and {installed.site} has no server_args.py")
    return table_from_sources(installed.sources.get, version)
