"""Where a command's start-up goes: `python bench/startup.py [--runs N]`; `make bench`
prints the same table for `discover --json` and `render` of kpro6.

Each run is a fresh process that times, with in-process clocks: the interpreter's own
start (a `python -c pass` next to it), the import of the dependencies the import floor
names, then the command itself, split into the import of each module (its own body,
without the modules it imports), the attrs classes and enums created in those bodies,
and the work after the imports. Medians of the runs; the hooks cost a few percent, so
the parts add up to a little more than the bench's wall time of the same command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hosts import scratch_dir

REPO = Path(__file__).resolve().parent.parent
KPRO6 = (REPO / "fixtures/sysfs/kpro6", REPO / "examples/kpro6.toml")

_CHILD = r"""
import contextlib, enum, io, json, sys, time
t0 = time.perf_counter()
for name in sys.argv[1].split(","):
    __import__(name)
floor = time.perf_counter() - t0
import importlib._bootstrap_external as external
import attr._make
times = {"modules": {}, "attrs": 0.0, "attrs n": 0, "enum": 0.0, "enum n": 0}
depth = []

def exec_module(self, module, _exec=external._LoaderBasics.exec_module):
    start = time.perf_counter()
    depth.append(0.0)
    try:
        _exec(self, module)
    finally:
        took = time.perf_counter() - start
        inner = depth.pop()
        times["modules"][module.__name__] = took - inner
        if depth:
            depth[-1] += took

def build_class(self, _build=attr._make._ClassBuilder.build_class):
    start = time.perf_counter()
    try:
        return _build(self)
    finally:
        times["attrs"] += time.perf_counter() - start
        times["attrs n"] += 1

def builder(self, *args, _init=attr._make._ClassBuilder.__init__, **kwargs):
    start = time.perf_counter()
    _init(self, *args, **kwargs)
    times["attrs"] += time.perf_counter() - start

def enum_new(*args, _new=enum.EnumType.__new__, **kwargs):
    start = time.perf_counter()
    try:
        return _new(*args, **kwargs)
    finally:
        times["enum"] += time.perf_counter() - start
        times["enum n"] += 1

external._LoaderBasics.exec_module = exec_module
attr._make._ClassBuilder.build_class = build_class
attr._make._ClassBuilder.__init__ = builder
enum.EnumType.__new__ = enum_new
t1 = time.perf_counter()
from pvegpu.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        times["exit"] = main(sys.argv[2:])
    except SystemExit as exit:
        times["exit"] = exit.code
times["command"] = time.perf_counter() - t1
times["floor"] = floor
print(json.dumps(times), file=sys.stderr)
"""


def _one(floor: tuple[str, ...], argv: list[str]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, ",".join(floor), *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()[-500:]}")
    raw: dict[str, Any] = json.loads(done.stderr.strip().splitlines()[-1])
    if raw.pop("exit") not in (0, None):
        raise RuntimeError(f"{' '.join(argv)}: failed; run it by hand to see why")
    modules: dict[str, float] = raw.pop("modules")
    ours = {k: v for k, v in modules.items() if k == "pvegpu" or k.startswith("pvegpu.")}
    raw["pvegpu"] = sum(ours.values())
    raw["pvegpu n"] = len(ours)
    raw["other"] = sum(modules.values()) - raw["pvegpu"]
    raw["work"] = raw["command"] - sum(modules.values())
    return raw


def _interpreter(runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def breakdown(title: str, floor: tuple[str, ...], argv: list[str], runs: int) -> str:
    _one(floor, argv)  # warm-up: page cache, bytecode, the templates' cache
    samples = [_one(floor, argv) for _ in range(runs)]
    interpreter = _interpreter(runs)

    def median(key: str) -> float:
        return statistics.median(s[key] for s in samples)

    def ms(key: str) -> str:
        fastest = min(s[key] for s in samples)
        return f"{median(key) * 1e3:6.1f} ms ({fastest * 1e3:.1f})"

    rows = [
        ("interpreter and site (python -c pass)", f"{interpreter * 1e3:6.1f} ms"),
        (f"import {', '.join(floor)}", ms("floor")),
        (f"pvegpu's own module bodies ({median('pvegpu n'):.0f})", ms("pvegpu")),
        (f"  of which attrs classes ({median('attrs n'):.0f})", ms("attrs")),
        (f"  of which enum classes ({median('enum n'):.0f})", ms("enum")),
        ("other modules the command imports", ms("other")),
        ("the command's work, after its imports", ms("work")),
    ]
    width = max(len(label) for label, _ in rows)
    head = f"start-up of {title}, median (fastest) of {runs} fresh processes:"
    return "\n".join([head, *(f"  {label.ljust(width)}  {value}" for label, value in rows)])


def report(runs: int) -> str:
    """The breakdown of discover and render of kpro6 (the environment as the bench sets
    it: bytecode written and read, as an installed package's is)."""
    root, spec = (str(p) for p in KPRO6)
    discover = breakdown(
        "`pvegpu discover --json` of kpro6",
        ("attrs",),
        ["discover", "--root", root, "--json"],
        runs,
    )
    with scratch_dir() as scratch:  # tmpfs, as the bench's: the previous OUT is removed
        render = breakdown(
            "`pvegpu render` of kpro6",
            ("attrs", "cattrs", "jinja2"),
            ["render", "--root", root, "--spec", spec, "--out", f"{scratch}/out"],
            runs,
        )
    return f"{discover}\n{render}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="processes per command (default 7)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pvegpu-pycache-") as pycache:
        # As bench.py's run_as_installed: bytecode, not a compile per run.
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = pycache
        print(report(args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
