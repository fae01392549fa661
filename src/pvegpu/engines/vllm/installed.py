"""The vLLM release a server runs: the one installed for the unit's python, else the spec's.

As for SGLang (`engines.sglang.installed`): discovery has put the
`vllm-<v>.dist-info/METADATA` of the unit's interpreter into the facts when the
container's root filesystem is readable (and, for a release pvegpu ships no table for,
the sources its table is read from). Installed and the spec names none or the same: the
installed one; installed and the spec names another: refused (`vllm-version-mismatch`);
not installed or unread: the spec's, then required. The site-packages it was found in
also says where pip put the `vllm` console script the unit runs.
"""

from __future__ import annotations

import posixpath
import re

import attrs

from pvegpu.engines.sglang.installed import (
    PYTHON_DIR,
    SITE_NAMES,
    metadata_version,
    python_prefixes,
)
from pvegpu.engines.vllm.options import (
    OptionTable,
    load_table,
    shipped_versions,
    table_from_sources,
    unknown_version,
)
from pvegpu.errors import RenderError
from pvegpu.model.facts import HostFacts
from pvegpu.serving.checks import Checks

DIST_INFO = re.compile(r"vllm-(?P<version>[^-/]+)\.dist-info")
SERVE_SOURCE = "vllm/engine/arg_utils.py"
"""The file an installed release's table cannot be read without."""


@attrs.frozen
class InstalledVllm:
    version: str
    site: str
    """The site-packages directory, relative to the host root."""
    metadata: str


@attrs.frozen
class Release:
    """The release the unit is rendered for, its table, and the console script to run."""

    version: str
    table: OptionTable | None
    executable: str


def installed_vllm(facts: HostFacts, rootfs: str, python: str) -> tuple[InstalledVllm, ...]:
    """Every vLLM dist-info of `python` in the container at `rootfs` the facts hold."""
    prefixes = "|".join(re.escape(p) for p in python_prefixes(python))
    pattern = re.compile(
        rf"{re.escape(rootfs)}/(?:{prefixes})/lib/{PYTHON_DIR.pattern}/"
        rf"(?:{'|'.join(SITE_NAMES)})/{DIST_INFO.pattern}/METADATA"
    )
    found = []
    for file in facts.files:
        if pattern.fullmatch(file.path) and (version := metadata_version(file.content)):
            site = posixpath.dirname(posixpath.dirname(file.path))
            found.append(InstalledVllm(version, site, file.path))
    return tuple(found)


def executable(python: str, rootfs: str | None, installed: InstalledVllm | None) -> str:
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
    spec = checks.spec
    found = installed_vllm(checks.facts, rootfs, spec.python) if rootfs is not None else ()
    vmid = checks.pool.lxc.vmid if checks.pool.lxc is not None else 0
    if len({i.version for i in found}) > 1:
        listed = ", ".join(f"{i.version} ({i.metadata})" for i in found)
        checks.problem(
            "vllm-installs-conflict",
            f"{spec.python} sees more than one vLLM: {listed}",
            f"uninstall all but one: pct exec {vmid} -- {spec.python} -m pip uninstall vllm",
            subject=f"{checks.where}.python",
        )
        return None
    installed = found[0] if found else None
    if installed is not None and spec.version not in (None, installed.version):
        checks.problem(
            "vllm-version-mismatch",
            f"version {spec.version} in the spec, but {spec.python} in container {vmid} "
            f"runs vLLM {installed.version} ({installed.metadata})",
            f'set version = "{installed.version}" or remove version (the installed release '
            f"is used), or install {spec.version}: pct exec {vmid} -- {spec.python} -m pip "
            f"install vllm=={spec.version}",
            subject=f"{checks.where}.version",
        )
        return None
    version = installed.version if installed is not None else spec.version
    if version is None:
        where = (
            "the container's root file system was not read"
            if rootfs is None
            else f"no vllm-*.dist-info for {spec.python} under /{rootfs}"
        )
        checks.problem(
            "vllm-version-missing",
            f"no vLLM release to render for: the spec names none and {where}",
            f'set version = "<release>" (e.g. "{shipped_versions()[-1]}"), or '
            "container_rootfs so pvegpu reads the release installed for python",
            subject=f"{checks.where}.version",
        )
        return None
    script = executable(spec.python, rootfs, installed)
    try:
        return Release(version, _table(checks.facts, version, installed), script)
    except RenderError as err:
        checks.render_problems.extend(
            attrs.evolve(p, subject=f"{checks.where}.version") for p in err.problems
        )
        return Release(version, None, script)


def _table(facts: HostFacts, version: str, installed: InstalledVllm | None) -> OptionTable:
    if version in shipped_versions() or installed is None:
        return load_table(version)
    texts = {f.path: f.content for f in facts.files if f.path.startswith(installed.site + "/")}
    if f"{installed.site}/{SERVE_SOURCE}" not in texts:
        raise unknown_version(version, f"not shipped, and {installed.site} has no {SERVE_SOURCE}")
    return table_from_sources(lambda path: texts.get(f"{installed.site}/{path}"), version)
