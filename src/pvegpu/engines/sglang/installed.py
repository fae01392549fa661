"""The SGLang release a server runs: the one installed for the unit's python, else the spec's.

When the container's root filesystem is readable, discovery has put the
`sglang-<v>.dist-info/METADATA` of the unit's interpreter into the facts (and, for a
release pvegpu ships no table for, the sources its table is read from). This decides,
from those facts only, which release the unit is rendered and checked for:

- installed and the spec names none, or the same: the installed one;
- installed and the spec names another: refused (`sglang-version-mismatch`), since a
  unit written for one release and run by another fails at startup or, worse, runs
  with flags that mean something else;
- not installed (or the rootfs unread): the spec's, which is then required.

The option table is the shipped one, else one read from the installed sources, else a
refusal (`sglang-version-unknown`) naming how to add the release.
"""

from __future__ import annotations

import posixpath
import re

import attrs

from pvegpu.engines.sglang.options import (
    OptionTable,
    load_table,
    shipped_versions,
    table_from_sources,
    unknown_version,
)
from pvegpu.errors import RenderError
from pvegpu.model.facts import HostFacts
from pvegpu.serving.checks import Checks

SITE_NAMES = ("site-packages", "dist-packages")
"""pip's directory in a venv or self-built python; Debian's python3 uses dist-packages."""
PYTHON_DIR = re.compile(r"python3(\.[0-9]+)?")
DIST_INFO = re.compile(r"sglang-(?P<version>[^-/]+)\.dist-info")
_METADATA_VERSION = re.compile(r"^Version:[ \t]*(\S+)[ \t]*$", re.MULTILINE)


@attrs.frozen
class InstalledSglang:
    version: str
    site: str
    """The site-packages directory, relative to the host root."""
    metadata: str


def python_prefixes(python: str) -> tuple[str, ...]:
    """Root-relative prefixes whose `lib/python3.*` hold the packages `python` imports.

    `/root/ml-env/bin/python3` -> `root/ml-env` (a venv); Debian's `/usr/bin/python3`
    also imports what `pip install` as root put under `/usr/local`.
    """
    prefix = posixpath.dirname(posixpath.dirname(python)).strip("/")
    return (prefix, "usr/local") if prefix == "usr" else (prefix,)


def metadata_version(text: str) -> str | None:
    """The `Version:` header of a dist-info METADATA (the headers end at the first blank)."""
    headers = text.split("\n\n", 1)[0]
    match = _METADATA_VERSION.search(headers)
    return match.group(1) if match else None


def installed_sglang(facts: HostFacts, rootfs: str, python: str) -> tuple[InstalledSglang, ...]:
    """Every SGLang dist-info of `python` in the container at `rootfs` the facts hold."""
    found = []
    prefixes = "|".join(re.escape(p) for p in python_prefixes(python))
    pattern = re.compile(
        rf"{re.escape(rootfs)}/(?:{prefixes})/lib/{PYTHON_DIR.pattern}/"
        rf"(?:{'|'.join(SITE_NAMES)})/{DIST_INFO.pattern}/METADATA"
    )
    for file in facts.files:
        if pattern.fullmatch(file.path) and (version := metadata_version(file.content)):
            site = posixpath.dirname(posixpath.dirname(file.path))
            found.append(InstalledSglang(version, site, file.path))
    return tuple(found)


def serving_release(checks: Checks, rootfs: str | None) -> tuple[str | None, OptionTable | None]:
    """The release the server runs and its option table; (None, None) with a problem.

    `rootfs`: the container's root file system as found (its storage, else the spec's
    container_rootfs); None when it was not read.
    """
    spec = checks.spec
    found = installed_sglang(checks.facts, rootfs, spec.python) if rootfs is not None else ()
    vmid = checks.pool.lxc.vmid if checks.pool.lxc is not None else 0
    if len({i.version for i in found}) > 1:
        listed = ", ".join(f"{i.version} ({i.metadata})" for i in found)
        checks.problem(
            "sglang-installs-conflict",
            f"{spec.python} sees more than one SGLang: {listed}",
            f"uninstall all but one: pct exec {vmid} -- {spec.python} -m pip uninstall sglang",
            subject=f"{checks.where}.python",
        )
        return None, None
    installed = found[0] if found else None
    if installed is not None and spec.version not in (None, installed.version):
        checks.problem(
            "sglang-version-mismatch",
            f"version {spec.version} in the spec, but {spec.python} in container {vmid} "
            f"runs SGLang {installed.version} ({installed.metadata})",
            f'set version = "{installed.version}" or remove version (the installed release '
            f"is used), or install {spec.version}: pct exec {vmid} -- {spec.python} -m pip "
            f"install sglang=={spec.version}",
            subject=f"{checks.where}.version",
        )
        return None, None
    version = installed.version if installed is not None else spec.version
    if version is None:
        where = (
            "the container's root file system was not read"
            if rootfs is None
            else f"no sglang-*.dist-info for {spec.python} under /{rootfs}"
        )
        checks.problem(
            "sglang-version-missing",
            f"no SGLang release to render for: the spec names none and {where}",
            'set version = "<release>" (e.g. "0.5.23"), or container_rootfs so pvegpu '
            "reads the release installed for python",
            subject=f"{checks.where}.version",
        )
        return None, None
    try:
        return version, _table(checks.facts, version, installed)
    except RenderError as err:
        checks.render_problems.extend(
            attrs.evolve(p, subject=f"{checks.where}.version") for p in err.problems
        )
        return version, None


def _table(facts: HostFacts, version: str, installed: InstalledSglang | None) -> OptionTable:
    if version in shipped_versions() or installed is None:
        return load_table(version)
    texts = {f.path: f.content for f in facts.files if f.path.startswith(installed.site + "/")}
    if f"{installed.site}/sglang/srt/server_args.py" not in texts:
        raise unknown_version(version, f"not shipped, and {installed.site} has no server_args.py")
    return table_from_sources(lambda path: texts.get(f"{installed.site}/{path}"), version)
