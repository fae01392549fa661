"""The release of an engine a server runs: the one installed for the unit's python, else the
spec's.

When the container's root filesystem is readable, discovery has put the
`<package>-<v>.dist-info/METADATA` of the unit's interpreter into the facts (and, for a
release pvegpu ships no table for, the sources its table is read from). This decides,
from those facts only, which release the unit is rendered and checked for:

- installed and the spec names none, or the same: the installed one;
- installed and the spec names another: refused (`<package>-version-mismatch`), since a
  unit written for one release and run by another fails at startup or, worse, runs
  with flags that mean something else;
- not installed (or the rootfs unread): the spec's, which is then required.

Every engine is a pip distribution found the same way; only its names differ
(`Distribution`), and its option table is the engine's own.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping

import attrs

from pvegpu.model.container_files import container_files
from pvegpu.model.facts import HostFacts
from pvegpu.serving.checks import Checks
from pvegpu.values import value_class

SITE_NAMES = ("site-packages", "dist-packages")
"""pip's directory in a venv or self-built python; Debian's python3 uses dist-packages."""
PYTHON_DIR = re.compile(r"python3(\.[0-9]+)?")
_METADATA_VERSION = re.compile(r"^Version:[ \t]*(\S+)[ \t]*$", re.MULTILINE)


@value_class
@attrs.frozen(eq=False, repr=False)
class Distribution:
    """An engine as pip installs it: the names its problems and fixes are worded with."""

    package: str
    """The distribution's name, as pip and its dist-info spell it: `sglang`, `vllm`."""
    title: str
    """The project's own spelling in messages: `SGLang`, `vLLM`."""
    newest_shipped: Callable[[], str]
    """The release to name in a fix when none is known; a function, so that importing an
    engine does not read its tables."""

    @property
    def dist_info(self) -> re.Pattern[str]:
        # re caches compiled patterns: asking again costs a lookup.
        return re.compile(rf"{re.escape(self.package)}-(?P<version>[^-/]+)\.dist-info")


@value_class
@attrs.frozen(eq=False, repr=False)
class InstalledRelease:
    version: str
    site: str
    """The site-packages directory, relative to the host root."""
    metadata: str
    sources: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    """The texts discovery read of that site-packages, by path there (`sglang/srt/...`):
    the sources of the release's option table when pvegpu ships none for it."""


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


def installed_releases(
    facts: HostFacts, rootfs: str, python: str, distribution: Distribution
) -> tuple[InstalledRelease, ...]:
    """Every dist-info of `distribution` for `python` in the container at `rootfs` the
    facts hold."""
    found = []
    prefixes = "|".join(re.escape(p) for p in python_prefixes(python))
    pattern = re.compile(
        rf"(?:{prefixes})/lib/{PYTHON_DIR.pattern}/"
        rf"(?:{'|'.join(SITE_NAMES)})/{distribution.dist_info.pattern}/METADATA"
    )
    files = container_files(facts).at(rootfs).files
    for inside, file in files.items():
        if pattern.fullmatch(inside) and (version := metadata_version(file.content)):
            site = posixpath.dirname(posixpath.dirname(inside))
            cut = len(site) + 1
            sources = {p[cut:]: f.content for p, f in files.items() if p.startswith(f"{site}/")}
            found.append(InstalledRelease(version, f"{rootfs}/{site}", file.path, sources))
    return tuple(found)


def chosen_release(
    checks: Checks, rootfs: str | None, distribution: Distribution
) -> tuple[str, InstalledRelease | None] | None:
    """The release the server runs and its install, if any; None with a problem.

    `rootfs`: the container's root file system as found (its storage, else the spec's
    container_rootfs); None when it was not read.
    """
    spec = checks.spec
    package, title = distribution.package, distribution.title
    found = (
        installed_releases(checks.facts, rootfs, spec.python, distribution)
        if rootfs is not None
        else ()
    )
    vmid = checks.pool.lxc.vmid if checks.pool.lxc is not None else 0
    if len({i.version for i in found}) > 1:
        listed = ", ".join(f"{i.version} ({i.metadata})" for i in found)
        checks.problem(
            f"{package}-installs-conflict",
            f"{spec.python} sees more than one {title}: {listed}",
            f"uninstall all but one: pct exec {vmid} -- {spec.python} -m pip uninstall {package}",
            subject=f"{checks.where}.python",
        )
        return None
    installed = found[0] if found else None
    if installed is not None and spec.version not in (None, installed.version):
        checks.problem(
            f"{package}-version-mismatch",
            f"version {spec.version} in the spec, but {spec.python} in container {vmid} "
            f"runs {title} {installed.version} ({installed.metadata})",
            f'set version = "{installed.version}" or remove version (the installed release '
            f"is used), or install {spec.version}: pct exec {vmid} -- {spec.python} -m pip "
            f"install {package}=={spec.version}",
            subject=f"{checks.where}.version",
        )
        return None
    version = installed.version if installed is not None else spec.version
    if version is None:
        where = (
            "the container's root file system was not read"
            if rootfs is None
            else f"no {package}-*.dist-info for {spec.python} under /{rootfs}"
        )
        checks.problem(
            f"{package}-version-missing",
            f"no {title} release to render for: the spec names none and {where}",
            f'set version = "<release>" (e.g. "{distribution.newest_shipped()}"), or '
            "container_rootfs so pvegpu reads the release installed for python",
            subject=f"{checks.where}.version",
        )
        return None
    return version, installed
