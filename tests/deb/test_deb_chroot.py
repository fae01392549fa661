"""The Debian package as a Proxmox VE 9 admin installs it (`make test-deb`).

`make deb` has built dist/pvegpu_<version>_all.deb (tools/debian_package.py). These
tests read its control fields and file list, run lintian on it, then install it with
`apt-get install ./pvegpu_<version>_all.deb` into a fresh copy of a Debian 13 (trixie)
minbase chroot, so that python3, attrs, cattrs and jinja2 are the ones Debian ships,
and run `pvegpu --version`, `discover`, `render` and `check` there on the bundled kpro6
fixture: their output and the rendered bundle must be byte for byte what this checkout
writes. Last, the package is purged and must leave nothing behind.

Not collected by the default run (pyproject's norecursedirs): it needs root, debootstrap
and deb.debian.org, and about a minute. Without them it is skipped, except under
CI=true, where it fails.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn

import pytest

import pvegpu
from bundled import FIXTURES, REPO
from pvegpu.cli import build_parser

IN_CI = os.environ.get("CI", "").lower() in ("true", "1")
DEBIAN_NAMES = {"attrs": "python3-attr", "cattrs": "python3-cattr", "jinja2": "python3-jinja2"}
"""Debian's package of each runtime dependency pyproject.toml names."""
SITE = "usr/lib/python3/dist-packages"
WORK = "/srv/pvegpu"
"""Where the fixture and the spec lie in the chroot, at the checkout's relative paths."""
REFERENCE = ("render", "--root", "fixtures/sysfs/kpro6", "--spec", "examples/kpro6.toml")


def unavailable(reason: str) -> NoReturn:
    """Skip, except under CI: there a package test that did not run is a failure."""
    if IN_CI:
        pytest.fail(f"CI=true: the Debian package test must run, but {reason}")
    pytest.skip(reason)


def _load_tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# tools/ is no package: mypy knows the two by the files `mypy src tests tools` names.
if TYPE_CHECKING:
    import cli_docs
    import debian_package as tool
else:
    tool = _load_tool("debian_package")
    cli_docs = _load_tool("cli_docs")


@pytest.fixture(scope="module")
def deb() -> Path:
    """The one package `make deb` left in dist/, for this version."""
    built = sorted((REPO / "dist").glob("pvegpu_*.deb"))
    if not built:
        unavailable("no dist/pvegpu_*.deb: run `make deb` (make test-deb does)")
    assert [p.name for p in built] == [f"pvegpu_{pvegpu.__version__}_all.deb"]
    return built[0]


def _dpkg_deb(*argv: str | Path) -> bytes:
    if shutil.which("dpkg-deb") is None:
        unavailable("dpkg-deb is not installed")
    return subprocess.run(["dpkg-deb", *map(str, argv)], capture_output=True, check=True).stdout


def _members(deb: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(_dpkg_deb("--fsys-tarfile", deb))) as data:
        return {m.name.removeprefix("./").rstrip("/"): m for m in data.getmembers()}


def _member_bytes(deb: Path, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(_dpkg_deb("--fsys-tarfile", deb))) as data:
        extracted = data.extractfile(f"./{name}")
        assert extracted is not None, name
        return extracted.read()


def test_control_fields(deb: Path) -> None:
    fields = {
        name: _dpkg_deb("-f", deb, name).decode().strip()
        for name in ("Package", "Version", "Architecture", "Depends")
    }
    assert fields["Package"] == "pvegpu"
    assert fields["Version"] == pvegpu.__version__
    assert fields["Architecture"] == "all"
    depends = {
        match.group(1): match.group(2)
        for match in re.finditer(r"([a-z0-9.+-]+)(?::any)?(?: \(([^)]*)\))?", fields["Depends"])
    }
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # The floors are pyproject's (docs/install.md states them), each a Debian package.
    wanted = {"python3": f">= {project['requires-python'].removeprefix('>=')}"}
    for requirement in project["dependencies"]:
        found = re.fullmatch(r"([a-z0-9]+)>=([0-9.]+)", requirement)
        assert found is not None, requirement
        wanted[DEBIAN_NAMES[found.group(1)]] = f">= {found.group(2)}"
    assert {name: depends.get(name) for name in wanted} == wanted
    # Nothing else: no package that only pip could provide (python3:any counts as python3).
    assert set(depends) == set(wanted), fields["Depends"]


def test_it_ships_the_program_its_data_and_its_docs(deb: Path) -> None:
    members = _members(deb)
    program = members["usr/bin/pvegpu"]
    assert program.isfile() and program.mode == 0o755
    # Every module, template and table the checkout has, where Debian's python3 finds
    # them; templating.py loads the templates as the package pvegpu.templates.
    source = REPO / "src/pvegpu"
    wanted = {f"{SITE}/pvegpu/{p.relative_to(source)}" for p in source.rglob("*.py")}
    # templates/ is src/pvegpu/templates through a symlink, which rglob does not follow.
    templates = (REPO / "templates").glob("*")
    wanted |= {f"{SITE}/pvegpu/templates/{p.name}" for p in templates if p.suffix in (".j2", ".py")}
    # The engines' option tables (engines/*/data/tables.json.gz), as the checkout has them.
    tables = sorted(source.rglob("*.json.gz"))
    assert REPO / "src/pvegpu/engines/sglang/data/tables.json.gz" in tables
    wanted |= {f"{SITE}/pvegpu/{p.relative_to(source)}" for p in tables}
    wanted.add(f"{SITE}/pvegpu/py.typed")
    assert len(wanted) > 150
    assert sorted(wanted - set(members)) == []
    shipped_py = {n for n in members if n.startswith(f"{SITE}/pvegpu/") and n.endswith(".py")}
    assert shipped_py <= wanted, "the package ships modules the checkout does not have"
    for table in tables:
        shipped = _member_bytes(deb, f"{SITE}/pvegpu/{table.relative_to(source)}")
        assert shipped == table.read_bytes(), table
    # No bytecode in the package: py3compile writes it on the node for its python3.
    assert not [n for n in members if n.endswith(".pyc")]


def test_the_man_page_and_completion_are_the_generated_ones(deb: Path) -> None:
    page = gzip.decompress(_member_bytes(deb, "usr/share/man/man1/pvegpu.1.gz")).decode()
    assert page == cli_docs.man_page(build_parser())
    completion = _member_bytes(deb, "usr/share/bash-completion/completions/pvegpu").decode()
    assert completion == cli_docs.bash_completion(build_parser())
    # zsh and fish read their vendor directories, where Debian's packages install theirs.
    zsh = _member_bytes(deb, "usr/share/zsh/vendor-completions/_pvegpu").decode()
    assert zsh == cli_docs.zsh_completion(build_parser())
    fish = _member_bytes(deb, "usr/share/fish/vendor_completions.d/pvegpu.fish").decode()
    assert fish == cli_docs.fish_completion(build_parser())
    # The docs the page's SEE ALSO points to, and every other one, at their checkout paths.
    members = _members(deb)
    named = re.findall(r"(README\.md|docs/[a-z-]+\.md)", page.split(".SH SEE ALSO", 1)[1])
    assert len(named) >= 3
    docs = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")} | {"README.md", *named}
    assert sorted(d for d in docs if f"usr/share/doc/pvegpu/{d}" not in members) == []


def test_lintian_finds_nothing(deb: Path) -> None:
    """Policy-clean down to pedantic tags; the only overrides are the templates'
    (debian/pvegpu.lintian-overrides says why)."""
    if shutil.which("lintian") is None:
        unavailable("lintian is not installed (apt-get install lintian)")
    result = subprocess.run(
        ["lintian", "--pedantic", "--fail-on", "error,warning,info,pedantic", str(deb)],
        capture_output=True,
        text=True,
        check=False,
    )
    tags = [line for line in result.stdout.splitlines() if re.match(r"[EWIPX]: ", line)]
    assert (result.returncode, tags) == (0, []), result.stdout + result.stderr


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture and spec at their checkout paths, rendered by this checkout to out/."""
    work = tmp_path_factory.mktemp("reference")
    shutil.copytree(FIXTURES / "kpro6", work / "fixtures/sysfs/kpro6", symlinks=True)
    (work / "examples").mkdir()
    shutil.copy2(REPO / "examples/kpro6.toml", work / "examples/kpro6.toml")
    _checkout(work, *REFERENCE, "--out", "out")
    return work


def _checkout(cwd: Path, *argv: str, codes: tuple[int, ...] = (0,)) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "pvegpu", *argv], cwd=cwd, capture_output=True, text=True
    )
    assert result.returncode in codes, result.stdout + result.stderr
    return f"exit {result.returncode}\n{result.stdout}"


@pytest.fixture(scope="module")
def chroot(deb: Path, reference: Path) -> Iterator[tool.Chroot]:
    """Debian 13 with the package installed by apt, the fixture at WORK."""
    try:
        with tool.fresh_chroot() as chroot:
            tool.install_package(chroot, deb)
            shutil.copytree(reference / "fixtures", chroot.root / WORK[1:] / "fixtures", True)
            shutil.copytree(reference / "examples", chroot.root / WORK[1:] / "examples")
            yield chroot
    except tool.UnavailableError as err:
        unavailable(str(err))


def _in_chroot(chroot: tool.Chroot, *argv: str, codes: tuple[int, ...] = (0,)) -> str:
    result = chroot.run(*argv, cwd=WORK, check=False)
    assert result.returncode in codes, result.stdout + result.stderr
    return f"exit {result.returncode}\n{result.stdout}"


def test_installed_from_debian(chroot: tool.Chroot) -> None:
    """pvegpu and its three libraries are Debian's packages on Debian's python3."""
    assert _in_chroot(chroot, "pvegpu", "--version") == f"exit 0\npvegpu {pvegpu.__version__}\n"
    where = _in_chroot(
        chroot,
        "python3",
        "-c",
        "import sys, attrs, cattrs, jinja2, pvegpu; print(sys.version_info[:2]); "
        "[print(m.__file__) for m in (pvegpu, attrs, cattrs, jinja2)]",
    ).splitlines()
    assert where[1] == "(3, 13)"
    assert where[2] == f"/{SITE}/pvegpu/__init__.py"
    owners = _in_chroot(chroot, "dpkg", "-S", *where[2:]).splitlines()[1:]
    assert [line.split(":")[0] for line in owners] == ["pvegpu", *DEBIAN_NAMES.values()]


def test_discover_says_what_the_checkout_says(chroot: tool.Chroot, reference: Path) -> None:
    for extra in ((), ("--json",)):
        argv = ("discover", "--root", "fixtures/sysfs/kpro6", *extra)
        assert _in_chroot(chroot, "pvegpu", *argv) == _checkout(reference, *argv)


def test_render_writes_the_checkouts_bundle_byte_for_byte(
    chroot: tool.Chroot, reference: Path
) -> None:
    _in_chroot(chroot, "pvegpu", *REFERENCE, "--out", "out")
    ours = reference / "out"
    theirs = chroot.root / WORK[1:] / "out"
    assert _tree(theirs) == _tree(ours)
    assert len(_tree(ours)) > 20


def _tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under root: its kind, permission bits and bytes (a link's target)."""
    entries: dict[str, tuple[str, int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        mode = path.lstat().st_mode & 0o7777
        if path.is_symlink():
            entries[name] = ("link", mode, str(path.readlink()).encode())
        elif path.is_dir():
            entries[name] = ("dir", mode, b"")
        else:
            entries[name] = ("file", mode, path.read_bytes())
    return entries


def test_check_says_what_the_checkout_says(chroot: tool.Chroot, reference: Path) -> None:
    """`check` of the fixture against the bundle each rendered: the same findings and
    exit code (8: the fixture host has not been split, so it warns)."""
    for extra in ((), ("--json",)):
        argv = ("check", "--root", "fixtures/sysfs/kpro6", "--bundle", "out", *extra)
        theirs = _in_chroot(chroot, "pvegpu", *argv, codes=(0, 8, 9))
        assert theirs == _checkout(reference, *argv, codes=(0, 8, 9))


def test_purge_leaves_nothing(chroot: tool.Chroot) -> None:
    """Last: `apt-get purge pvegpu` takes the program, the modules with the bytecode
    py3compile wrote, the man page and the completion."""
    _in_chroot(chroot, "apt-get", "purge", "-y", "-q", "pvegpu")
    root = chroot.root
    for left in (
        "usr/bin/pvegpu",
        f"{SITE}/pvegpu",
        "usr/share/man/man1/pvegpu.1.gz",
        "usr/share/bash-completion/completions/pvegpu",
        "usr/share/doc/pvegpu",
    ):
        assert not (root / left).exists(), left
