"""Maintainer tool: build the vLLM option tables pvegpu ships, from the published wheels.

    python tools/vllm_tables.py                       # the releases pvegpu covers (below)
    python tools/vllm_tables.py --versions 0.34.0     # one more release
    python tools/vllm_tables.py --compare DIR         # check against real parser dumps
    python tools/vllm_tables.py --dump-script         # print the dump script for DIR

Coverage: the first release with `vllm serve` (0.5.2) and the latest patch of every minor
release from 0.5 to the newest PyPI serves. Each wheel is fetched with `pip download
vllm==<v> --no-deps --only-binary :all:` (no torch, nothing installed) into a cache
directory and read as a zip: `pvegpu.engines.vllm.option_reader` evaluates, with `ast`,
the serve subcommand, `make_arg_parser`, `FrontendArgs`, `EngineArgs.add_cli_args` and the
config dataclasses they take fields from, the same reader pvegpu uses for a release
installed in a container that it ships no table for. The result replaces
src/pvegpu/engines/vllm/data/tables.json.gz: every distinct entry once, each release a
list of entry indices (see `pvegpu.engines.vllm.options`).

`--compare DIR` reads `vllm-<v>.json` files written by `--dump-script`'s script, run in an
environment where that release is installed (it imports vLLM: never here), and prints
where the generated table parses a line differently from vLLM's own parser.

This is not on pvegpu's runtime path: only this tool touches the network (pip).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from pvegpu.engines.common.releases import version_key  # noqa: E402
from pvegpu.engines.common.tables import pack_bundle, unpack_bundle  # noqa: E402
from pvegpu.engines.vllm.option_reader import read_option_table  # noqa: E402

BUNDLE = REPO / "src/pvegpu/engines/vllm/data/tables.json.gz"
FIRST = "0.5.2"
"""The first release whose `vllm` console script has `serve` (0.5.1 has no vllm/scripts.py)."""
KINDS = ("dest", "action", "type", "nargs", "choices")
"""What decides how a command line parses; defaults and help do not."""
COMPARED_TYPES = frozenset({"int", "float", "loads"})
"""Converters the checker applies; any other is compared as 'some converter'."""

DUMP_SCRIPT = """\
# Run with the python of an environment where vLLM is installed (it imports vllm):
#   python dump.py > vllm-$(python -c "import vllm; print(vllm.__version__)").json
import argparse, json, sys
import vllm
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:  # before the utils package split
    from vllm.utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    sub = FlexibleArgumentParser().add_subparsers()
    parser = ServeSubcommand().subparser_init(sub)
except ImportError:  # 0.5-0.6
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    parser = make_arg_parser(FlexibleArgumentParser())
args, positionals = [], []
for a in parser._actions:
    if not a.option_strings:
        positionals.append(a.dest)
        continue
    args.append({
        "options": list(a.option_strings), "dest": a.dest,
        "action": type(a).__name__, "nargs": a.nargs,
        "type": getattr(a.type, "__name__", None),
        "choices": None if a.choices is None else [str(c) for c in a.choices],
    })
json.dump({"vllm_version": vllm.__version__, "positionals": positionals,
           "args": args}, sys.stdout, indent=1)
"""


def served_releases() -> list[str]:
    """FIRST and the newest release of each minor series from 0.5 on, oldest first."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "vllm"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"Available versions: (.*)", out)
    if match is None:
        raise SystemExit(f"pip index versions vllm said nothing usable:\n{out}")
    return covered([v.strip() for v in match.group(1).split(",")])


def covered(served: Iterable[str]) -> list[str]:
    """The releases of `served` pvegpu ships tables for (pure: the test checks the rule)."""
    first = version_key(FIRST)
    newest: dict[tuple[int, ...], str] = {}
    for version in served:
        if not re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", version):
            continue  # pre-releases and dev builds
        key = version_key(version)
        if key < first:
            continue
        series = key[:2]
        if series not in newest or (key, version) > (version_key(newest[series]), newest[series]):
            newest[series] = version
    chosen = {FIRST, *newest.values()} if version_key(FIRST)[:2] in newest else set()
    return sorted(chosen or newest.values(), key=lambda v: (version_key(v), v))


def fetch(version: str, cache: Path) -> Path:
    """The wheel of `version` in `cache`, downloaded (without dependencies) when missing."""
    found = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if not found:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
        only = ["--only-binary", ":all:", "-d", str(cache), f"vllm=={version}"]
        subprocess.run([*pip, *only], check=True)
        found = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download gave no wheel for vllm {version}")
    return found[0]


def wheel_files(wheel: Path) -> Callable[[str], str | None]:
    """The files of a wheel by their path inside it, read on demand (no extraction)."""
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())

    def read(path: str) -> str | None:
        return archive.read(path).decode("utf-8") if path in names else None

    return read


def read_bundle(path: Path) -> dict[str, dict[str, Any]]:
    """Release -> its table document, of an existing bundle ({} when there is none)."""
    if not path.exists():
        return {}
    return {
        version: {
            "vllm_version": version,
            "allow_abbrev": release["allow_abbrev"],
            "positionals": release["positionals"],
            "args": release["args"],
        }
        for version, release in unpack_bundle(path.read_bytes()).items()
    }


def write_bundle(path: Path, releases: dict[str, dict[str, Any]]) -> int:
    """Write the shared-entry bundle; returns its size in bytes."""
    records = {
        version: {
            "allow_abbrev": table["allow_abbrev"],
            "positionals": table["positionals"],
            "args": table["args"],
        }
        for version, table in releases.items()
    }
    data = pack_bundle(records, version_key)
    path.write_bytes(data)
    return len(data)


def differences(ours: dict[str, Any], real: dict[str, Any]) -> list[str]:
    """How a generated table differs from a real parser dump, in what parses a line.

    Options are matched by their option strings; choices compare as sets; a converter
    the checker does not apply compares only as present or absent.
    """
    mine = {tuple(a["options"]): a for a in ours["args"]}
    theirs = {tuple(a["options"]): a for a in real["args"]}
    found = [f"only generated: {', '.join(k)}" for k in sorted(set(mine) - set(theirs))]
    found += [f"only in the dump: {', '.join(k)}" for k in sorted(set(theirs) - set(mine))]
    for key in sorted(set(mine) & set(theirs)):
        for kind in KINDS:
            a, b = mine[key].get(kind), theirs[key].get(kind)
            if kind == "action":
                a, b = _action(a), _action(b)
            if kind == "type":
                a, b = (t if t in COMPARED_TYPES or t is None else "other" for t in (a, b))
            if kind == "choices" and a is not None and b is not None:
                a, b = sorted(map(str, a)), sorted(map(str, b))
            if kind == "choices" and a is None:
                continue  # unknown choices accept more: never a wrong refusal
            if a != b:
                found.append(f"{key[0]} {kind}: generated {a!r}, dump {b!r}")
    return found


def _action(name: Any) -> str:
    """`_StoreTrueAction` (a dump) and `store_true` (a table) as one word."""
    text = str(name).lstrip("_").removesuffix("Action")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", text).lower() if text[:1].isupper() else text


def build(versions: Iterable[str], cache: Path, releases: dict[str, dict[str, Any]]) -> None:
    for version in versions:
        started = time.perf_counter()
        table = read_option_table(wheel_files(fetch(version, cache)), version)
        releases[version] = table
        took = time.perf_counter() - started
        print(f"{version}: {len(table['args'])} options ({took:.2f} s)")


def compare(directory: Path, cache: Path) -> int:
    """Generate the table of each dump in `directory` from its wheel; print the differences."""
    status = 0
    for dump in sorted(directory.glob("vllm-*.json")):
        real = json.loads(dump.read_text(encoding="utf-8"))
        version = real["vllm_version"]
        ours = read_option_table(wheel_files(fetch(version, cache)), version)
        found = differences(ours, real)
        print(f"{version}: {len(ours['args'])} generated, {len(real['args'])} in the dump, "
              f"{len(found)} differences")  # fmt: skip
        for line in found:
            print(f"  {line}")
        status |= bool(found)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", help="releases (default: the covered ones)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/pvegpu-vllm-wheels")
    parser.add_argument("--bundle", type=Path, default=BUNDLE)
    parser.add_argument("--compare", type=Path, metavar="DIR", help="dumps vllm-<v>.json")
    parser.add_argument("--dump-script", action="store_true", help="print the dump script")
    args = parser.parse_args(argv)
    if args.dump_script:
        print(DUMP_SCRIPT, end="")
        return 0
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.compare is not None:
        return compare(args.compare, args.cache)
    started = time.perf_counter()
    releases = {} if args.versions is None else read_bundle(args.bundle)
    before = args.bundle.stat().st_size if args.bundle.exists() else 0
    build(args.versions or served_releases(), args.cache, releases)
    size = write_bundle(args.bundle, releases)
    took = time.perf_counter() - started
    print(f"{args.bundle.relative_to(REPO)}: {len(releases)} releases, {before} -> {size} bytes, "
          f"{took:.1f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
