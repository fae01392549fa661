"""Build pvegpu's Debian package and run things in a Debian 13 (trixie) chroot.

    python3 tools/debian_package.py build            # make deb: dist/pvegpu_<v>_all.deb
    python3 tools/debian_package.py suite -q -n 2    # make test-py313: the suite on 3.13

`build` runs dpkg-buildpackage (debhelper + pybuild's pyproject plugin, debian/) in a
copy of the checkout's files under build/deb/, so the working tree gets no build output,
and leaves exactly one package in dist/. `suite` installs that package with apt into a
fresh copy of a cached trixie chroot, so attrs, cattrs and jinja2 are Debian's, adds
Debian's pytest, syrupy, hypothesis, shellcheck and systemd, and runs the checkout's
suite there on Debian's python3 (3.13). tests/deb/test_deb_chroot.py uses the same
chroot.

The chroot is made once with `debootstrap --variant=minbase trixie` into
$PVEGPU_DEB_CACHE/trixie (default ~/.cache/pvegpu-deb) and never changed after: each run
works in its own copy, deleted at the end. apt's downloaded packages are kept in
$PVEGPU_DEB_CACHE/archives between runs. Each command runs in a private mount namespace
(unshare), so the /proc and /dev mounted into a copy go away with the process even when
it is killed. Needs root, debootstrap and unshare, and deb.debian.org reachable.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
BUILD_PACKAGES = (
    "dpkg-dev",
    "debhelper",
    "dh-python",
    "pybuild-plugin-pyproject",
    "python3-all",
    "python3-attr",
    "python3-setuptools",
)
"""What `make deb` needs on the build host: debian/control's Build-Depends and dpkg-dev."""
SUITE_PACKAGES = (
    "python3-pytest",
    "python3-pytest-xdist",
    "python3-syrupy",
    "python3-hypothesis",
    "python3-packaging",
    "shellcheck",
    "systemd",
    "pciutils",
    "patch",
    "make",
    "git",
    # tests/test_cli_completion.py runs the completions in their shells and renders the
    # man page; under CI=true a missing one fails.
    "zsh",
    "fish",
    "groff-base",
    # tests/test_packaging.py asks setuptools' own package discovery what pyproject finds.
    "python3-setuptools",
)
"""Debian 13's own test tools for the suite (pyproject's test extra, from the archive):
the runtime libraries come with the package itself."""
CHROOT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "DEBIAN_FRONTEND": "noninteractive",
}


class UnavailableError(Exception):
    """A tool or the network the run needs is not there (the message says which)."""


def cache_dir() -> Path:
    return Path(os.environ.get("PVEGPU_DEB_CACHE", Path.home() / ".cache/pvegpu-deb"))


def version() -> str:
    """The version debian/changelog gives, which must be pvegpu.__version__."""
    first = (REPO / "debian/changelog").read_text().splitlines()[0]
    found = re.match(r"pvegpu \(([^)]+)\)", first)
    if found is None:
        raise SystemExit(f"debian/changelog: no version in {first!r}")
    return found.group(1)


def package_version() -> str:
    text = (REPO / "src/pvegpu/__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if found is None:
        raise SystemExit("src/pvegpu/__init__.py: no __version__")
    return found.group(1)


def checkout_files() -> list[str]:
    """What a fresh clone has: the tracked files, plus new ones git would add."""
    if shutil.which("git") is None:
        raise UnavailableError("git is needed: the package is built from the files git tracks")
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    if listing.returncode != 0:
        raise UnavailableError(f"{REPO} is no git checkout: {listing.stderr.decode().strip()}")
    listed = listing.stdout.decode()
    return sorted(name for name in set(listed.split("\0")) if name and _exists(name))


def _exists(name: str) -> bool:
    return os.path.lexists(REPO / name)


def copy_checkout(dest: Path) -> None:
    """The checkout's files into `dest`, symlinks kept (src/pvegpu/templates is one)."""
    for name in checkout_files():
        source, target = REPO / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(source.readlink())
        elif source.is_file():
            shutil.copy2(source, target)


def _missing(commands: Sequence[str]) -> list[str]:
    return [name for name in commands if shutil.which(name) is None]


def _apt_install(packages: Sequence[str], why: str) -> None:
    """Install host packages as root; elsewhere say what to install and stop."""
    if os.getuid() != 0 or shutil.which("apt-get") is None:
        raise UnavailableError(
            f"{why}: run as root, or first: apt-get install {' '.join(packages)}"
        )
    print(f"debian_package: installing {' '.join(packages)} ({why})", flush=True)
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise UnavailableError(f"{' '.join(argv)} failed: {result.stderr.strip()[-2000:]}")


def build(dist: Path) -> Path:
    """dist/pvegpu_<version>_all.deb, built from a copy of the checkout."""
    if version() != package_version():
        raise SystemExit(
            f"debian/changelog says {version()}, pvegpu.__version__ {package_version()}: "
            "add a debian/changelog entry for the new version"
        )
    if not _build_dependencies_met():
        _apt_install(BUILD_PACKAGES, "the build dependencies are missing")
        if not _build_dependencies_met():
            raise UnavailableError("dpkg-checkbuilddeps: still unmet after installing them")
    # A directory of this build's own: two builds at once do not share one.
    (REPO / "build").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="deb-", dir=REPO / "build"))
    tree = work / f"pvegpu-{version()}"
    copy_checkout(tree)
    # Debian's own python3 builds a Debian package, not one a PATH (pyenv, a venv) puts
    # first; the changelog's date stands for the build time in every file.
    env = {
        **os.environ,
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "SOURCE_DATE_EPOCH": _changelog_epoch(),
    }
    env.pop("PYTHONPATH", None)
    built_ok = subprocess.run(
        ["dpkg-buildpackage", "--build=binary", "--no-sign", "-Zxz"],
        cwd=tree,
        env=env,
        check=False,
    )
    if built_ok.returncode != 0:
        # The tree is kept for a look at what failed (build/ is ignored by git).
        raise SystemExit(f"dpkg-buildpackage failed (exit {built_ok.returncode}), in {tree}")
    built = work / f"pvegpu_{version()}_all.deb"
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob("pvegpu_*.deb"):
        old.unlink()
    target = dist / built.name
    shutil.move(built, target)
    shutil.rmtree(work)
    print(f"{target}: {target.stat().st_size} bytes")
    return target


def _build_dependencies_met() -> bool:
    if shutil.which("dpkg-checkbuilddeps") is None:
        return False
    check = subprocess.run(
        ["dpkg-checkbuilddeps", str(REPO / "debian/control")],
        capture_output=True,
        check=False,
    )
    return check.returncode == 0


def _changelog_epoch() -> str:
    """The changelog entry's date, so that the package's files carry no build time."""
    out = subprocess.run(
        ["dpkg-parsechangelog", "-l", str(REPO / "debian/changelog"), "-STimestamp"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip()


def base_chroot() -> Path:
    """The cached minbase trixie root, made on first use (about 20 s), then reused."""
    cache = cache_dir()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UnavailableError(f"{cache}: cannot make the chroot cache ({err.strerror})") from err
    base = cache / SUITE
    with (cache / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (base / "etc/debian_version").is_file():
            return base
        if os.getuid() != 0:
            raise UnavailableError("a chroot needs root (debootstrap, chroot, mount)")
        if _missing(["debootstrap"]):
            _apt_install(["debootstrap"], "debootstrap is missing")
        partial = cache / f"{SUITE}.partial"
        _remove_tree(partial)
        result = subprocess.run(
            ["debootstrap", "--variant=minbase", SUITE, str(partial), MIRROR],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            _remove_tree(partial)
            raise UnavailableError(f"debootstrap {SUITE} failed: {result.stdout[-2000:]}")
        partial.rename(base)
    return base


def _remove_tree(path: Path) -> None:
    """rm within one file system: never into a mount that outlived its namespace."""
    if path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


class Chroot:
    """A fresh copy of the base chroot; `run` executes a command inside it."""

    def __init__(self, root: Path, archives: Path) -> None:
        self.root = root
        self.archives = archives

    def run(
        self, *argv: str, cwd: str = "/", check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        # The mounts live in this command's own mount namespace (--propagation private):
        # they vanish with it and never show on the host.
        script = (
            'set -e; r="$1"; a="$2"; shift 2; '
            'mount -t proc proc "$r/proc"; mount --rbind /dev "$r/dev"; '
            'mount --bind "$a" "$r/var/cache/apt/archives"; exec chroot "$r" "$@"'
        )
        inner = ["env", "-i", *(f"{k}={v}" for k, v in {**CHROOT_ENV, **(env or {})}.items())]
        command = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cwd, *argv]
        result = subprocess.run(
            [
                *("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"),
                *(str(self.root), str(self.archives), *inner, *command),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"in the chroot, {' '.join(argv)} exited {result.returncode}:\n"
                f"{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
            )
        return result

    def apt_install(self, *packages: str) -> None:
        self.run("apt-get", "update", "-qq")
        self.run("apt-get", "install", "-y", "-q", *packages)


@contextlib.contextmanager
def fresh_chroot() -> Iterator[Chroot]:
    """A copy of the base chroot for one run, deleted afterwards."""
    if _missing(["unshare", "chroot"]):
        raise UnavailableError("unshare and chroot (util-linux, coreutils) are needed")
    base = base_chroot()
    archives = cache_dir() / "archives"
    (archives / "partial").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=cache_dir()))
    root = work / "root"
    try:
        subprocess.run(["cp", "-a", "--reflink=auto", str(base), str(root)], check=True)
        yield Chroot(root, archives)
    finally:
        _remove_tree(work)


def install_package(chroot: Chroot, deb: Path) -> None:
    """`apt-get install ./pvegpu_*.deb`, as docs/install.md tells an admin."""
    shutil.copy2(deb, chroot.root / "tmp" / deb.name)
    (chroot.root / "tmp" / deb.name).chmod(0o644)
    chroot.run("apt-get", "update", "-qq")
    chroot.run("apt-get", "install", "-y", "-q", f"./{deb.name}", cwd="/tmp")


def suite(deb: Path, pytest_args: Sequence[str]) -> int:
    """The checkout's suite on Debian 13's Python with Debian's libraries; its exit code."""
    started = time.monotonic()
    with fresh_chroot() as chroot:
        install_package(chroot, deb)
        chroot.apt_install(*SUITE_PACKAGES)
        src = chroot.root / "src"
        copy_checkout(src)
        # A git repository of exactly these files: tests/test_first_contact.py lists a
        # fresh clone's files with `git ls-files`.
        chroot.run("git", "init", "-q", cwd="/src")
        chroot.run("git", "add", "-A", cwd="/src")
        versions = chroot.run(
            "python3",
            "-c",
            "import sys, attrs, cattrs, jinja2; from importlib.metadata import version; "
            "print('python', sys.version.split()[0]); "
            "[print(n, version(n)) for n in ('attrs', 'cattrs', 'jinja2', 'markupsafe', "
            "'pytest', 'syrupy', 'hypothesis')]",
        ).stdout
        print(f"Debian {SUITE} chroot:\n{versions}", flush=True)
        result = chroot.run(
            "python3",
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *pytest_args,
            cwd="/src",
            check=False,
            env={"PYTHONPATH": "src", **({"CI": os.environ["CI"]} if "CI" in os.environ else {})},
        )
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
    print(f"suite in the chroot: {time.monotonic() - started:.0f} s", flush=True)
    return result.returncode


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description="pvegpu's Debian package and its chroot")
    sub = cli.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="dist/pvegpu_<version>_all.deb")
    b.add_argument("--dist", type=Path, default=REPO / "dist")
    s = sub.add_parser(
        "suite", help="the suite on Debian 13's python3, the package installed; pytest's options"
    )
    s.add_argument("--deb", type=Path, help="default: what `build` leaves in dist/")
    # Every other argument of `suite` is pytest's (`suite -q -n 2 tests/test_pci.py`).
    args, pytest_args = cli.parse_known_args(argv)
    if pytest_args and args.command != "suite":
        cli.error(f"unrecognized arguments: {' '.join(pytest_args)}")
    try:
        if args.command == "build":
            build(args.dist)
            return 0
        deb = args.deb or REPO / "dist" / f"pvegpu_{version()}_all.deb"
        if not deb.is_file():
            raise UnavailableError(f"{deb}: no such package; `make deb` builds it")
        return suite(deb.resolve(), pytest_args)
    except (UnavailableError, AssertionError) as err:
        # AssertionError: a command in the chroot failed (Chroot.run says which, with
        # its output); either way the run stops with what went wrong, not a traceback.
        print(f"debian_package: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
