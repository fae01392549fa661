"""The vLLM release a server runs: the one installed for the unit's python, else the spec's.

Decided as for every engine (`engines.common.installed`): discovery has put the
`vllm-<v>.dist-info/METADATA` of the unit's interpreter into the facts when the
container's root filesystem is readable (and, for a release pvegpu ships no table for,
the sources its table is read from). Installed and the spec names none or the same: the
installed one; installed and the spec names another: refused (`vllm-version-mismatch`);
not installed or unread: the spec's, then required. The site-packages it was found in
also says where pip put the `vllm` console script the unit runs.
"""

from __future__ import annotations

import posixpath

import attrs

from pvegpu.engines.common.installed import Distribution, InstalledRelease, chosen_release
from pvegpu.engines.vllm.options import (
    OptionTable,
    load_table,
    shipped_versions,
    table_from_sources,
    unknown_version,
)
from pvegpu.errors import RenderError
from pvegpu.serving.checks import Checks
from pvegpu.values import value_class

VLLM = Distribution("vllm", "vLLM", lambda: shipped_versions()[-1])
SERVE_SOURCE = "vllm/engine/arg_utils.py"
"""The file an installed release's table cannot be read without."""


@value_class
@attrs.frozen(eq=False, repr=False)
class Release:
    """The release the unit is rendered for, its table, and the console script to run."""

    version: str
    table: OptionTable | None
    executable: str


def executable(python: str, rootfs: str | None, installed: InstalledRelease | None) -> str:
    """The `vllm` script pip installs with the package: `<prefix>/bin/vllm` of the prefix
    whose site-packages hold it (`/usr/local/bin/vllm` for Debian's python3 and a root
    `pip install`), else the one beside `python`."""
    if installed is None or rootfs is None:
        return posixpath.join(posixpath.dirname(python), "vllm")
    inside = installed.site[len(rootfs) :]
    prefix = inside.rsplit("/lib/", 1)[0]
    return f"{prefix}/bin/vllm"


def serving_release(checks: Checks, rootfs: str | None) -> Release | None:
    """The release the server runs, its option table and script; None with a problem."""
    chosen = chosen_release(checks, rootfs, VLLM)
    if chosen is None:
        return None
    version, installed = chosen
    script = executable(checks.spec.python, rootfs, installed)
    try:
        return Release(version, _table(version, installed), script)
    except RenderError as err:
        checks.add_spec_errors(
            attrs.evolve(p, subject=f"{checks.where}.version") for p in err.problems
        )
        return Release(version, None, script)


def _table(version: str, installed: InstalledRelease | None) -> OptionTable:
    if version in shipped_versions() or installed is None:
        return load_table(version)
    if SERVE_SOURCE not in installed.sources:
        raise unknown_version(version, f"not shipped, and {installed.site} has no {SERVE_SOURCE}")
    return table_from_sources(installed.sources.get, version)
