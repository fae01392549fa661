"""Maintainer tool: build the SGLang option tables pvegpu ships, from the published wheels.

    python tools/sglang_tables.py                      # every 0.5.x release PyPI serves
    python tools/sglang_tables.py --versions 0.5.24    # one more release
    python tools/sglang_tables.py --import-dump sglang-0.5.24.json   # a real parser dump
    python tools/sglang_tables.py --compare DIR        # check against dumps in DIR

Each wheel is fetched with `pip download sglang==<v> --no-deps` (no torch, nothing
installed) into a cache directory, and its `sglang/srt/server_args.py` (and the modules
it takes constants and fields from) is read with `ast` by `pvegpu.engines.sglang.option_reader`,
the same reader pvegpu uses for a release installed in a container that it ships no
table for. Tables that came from the real parser (`--import-dump`, source "parser") are
kept as they are; generated ones are source "wheel". The result replaces
src/pvegpu/engines/sglang/data/tables.json.gz: every distinct entry once, each release a list of
entry indices (see `pvegpu.engines.sglang.options`).

This is not on pvegpu's runtime path: only this tool touches the network (pip).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from pvegpu.engines.common.releases import version_key  # noqa: E402
from pvegpu.engines.common.tables import pack_bundle, unpack_bundle  # noqa: E402
from pvegpu.engines.sglang.option_reader import read_options  # noqa: E402

BUNDLE = REPO / "src/pvegpu/engines/sglang/data/tables.json.gz"
FIRST = (0, 5)
"""The oldest series pvegpu ships: 0.5.0 onward (PyPI serves 0.5.1 as the first)."""
KINDS = ("dest", "action", "type", "nargs", "choices", "required", "deprecated_alias_of")
"""What decides how a command line parses; defaults and help do not."""


def served_releases() -> list[str]:
    """Every 0.5.x release the package index lists, post releases included, oldest first."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"Available versions: (.*)", out)
    if match is None:
        raise SystemExit(f"pip index versions sglang said nothing usable:\n{out}")
    found = [v.strip() for v in match.group(1).split(",")]
    return sorted((v for v in found if version_key(v)[:2] == FIRST), key=version_key)


def fetch(version: str, cache: Path) -> Path:
    """The wheel of `version` in `cache`, downloaded (without dependencies) when missing."""
    found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not found:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
        subprocess.run([*pip, "-d", str(cache), f"sglang=={version}"], check=True)
        found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download gave no wheel for sglang {version}")
    return found[0]


def wheel_files(wheel: Path) -> Callable[[str], str | None]:
    """The files of a wheel (or a trimmed zip of its sources) by their path inside it."""
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())

    def read(path: str) -> str | None:
        return archive.read(path).decode("utf-8") if path in names else None

    return read


def table_of_wheel(wheel: Path, version: str) -> tuple[dict[str, Any], list[str]]:
    return read_options(wheel_files(wheel), version)


def differences(ours: dict[str, Any], real: dict[str, Any]) -> list[str]:
    """How a generated table differs from a real parser dump, in what parses a line.

    Options are matched by their option strings; choices compare as sets (SGLang builds
    some from a set, whose order changes between runs).
    """
    mine = {tuple(a["options"]): a for a in ours["args"]}
    theirs = {tuple(a["options"]): a for a in real["args"]}
    found = [f"only generated: {', '.join(k)}" for k in sorted(set(mine) - set(theirs))]
    found += [f"only in the dump: {', '.join(k)}" for k in sorted(set(theirs) - set(mine))]
    for key in sorted(set(mine) & set(theirs)):
        for kind in KINDS:
            a, b = mine[key][kind], theirs[key][kind]
            if kind == "choices" and a is not None and b is not None:
                a, b = sorted(map(str, a)), sorted(map(str, b))
            if a != b:
                found.append(f"{key[0]} {kind}: generated {a!r}, dump {b!r}")
    if ours["allow_abbrev"] != real["allow_abbrev"]:
        found.append(f"allow_abbrev: generated {ours['allow_abbrev']}, dump {real['allow_abbrev']}")
    return found


def read_bundle(path: Path) -> dict[str, dict[str, Any]]:
    """Release -> {"source", "table"} of an existing bundle ({} when there is none)."""
    if not path.exists():
        return {}
    return {
        version: {
            "source": release["source"],
            "table": {
                "sglang_version": version,
                "allow_abbrev": release["allow_abbrev"],
                "args": release["args"],
            },
        }
        for version, release in unpack_bundle(path.read_bytes()).items()
    }


def write_bundle(path: Path, releases: dict[str, dict[str, Any]]) -> int:
    """Write the shared-entry bundle; returns its size in bytes."""
    records = {
        version: {
            "source": release["source"],
            "allow_abbrev": release["table"]["allow_abbrev"],
            "args": release["table"]["args"],
        }
        for version, release in releases.items()
    }
    data = pack_bundle(records, version_key)
    path.write_bytes(data)
    return len(data)


def build(
    versions: Iterable[str], cache: Path, releases: dict[str, dict[str, Any]], *, force: bool
) -> None:
    for version in versions:
        if releases.get(version, {}).get("source") == "parser" and not force:
            print(f"{version}: kept (dumped from the real parser)")
            continue
        table, unresolved = table_of_wheel(fetch(version, cache), version)
        releases[version] = {"source": "wheel", "table": table}
        note = f"; choices left open: {', '.join(unresolved)}" if unresolved else ""
        print(f"{version}: {len(table['args'])} options{note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", help="releases (default: every 0.5.x served)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/pvegpu-sglang-wheels")
    parser.add_argument("--bundle", type=Path, default=BUNDLE)
    parser.add_argument("--import-dump", type=Path, nargs="*", default=[], metavar="JSON")
    parser.add_argument("--compare", type=Path, metavar="DIR", help="dumps sglang-<v>.json")
    parser.add_argument("--force", action="store_true", help="regenerate dumped releases too")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.compare is not None:
        return compare(args.compare, args.cache)
    releases = read_bundle(args.bundle)
    before = args.bundle.stat().st_size if args.bundle.exists() else 0
    for dump in args.import_dump:
        table = json.loads(dump.read_text(encoding="utf-8"))
        releases[table["sglang_version"]] = {"source": "parser", "table": table}
    build(args.versions or served_releases(), args.cache, releases, force=args.force)
    size = write_bundle(args.bundle, releases)
    print(f"{args.bundle.relative_to(REPO)}: {len(releases)} releases, {before} -> {size} bytes")
    return 0


def compare(directory: Path, cache: Path) -> int:
    """Generate the table of each dump in `directory` from its wheel; print the differences."""
    status = 0
    for dump in sorted(directory.glob("sglang-*.json")):
        real = json.loads(dump.read_text(encoding="utf-8"))
        version = real["sglang_version"]
        ours, _ = table_of_wheel(fetch(version, cache), version)
        found = differences(ours, real)
        print(
            f"{version}: {len(ours['args'])} generated, {len(real['args'])} in the dump, "
            f"{len(found)} differences"
        )
        for line in found:
            print(f"  {line}")
        status |= bool(found)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
