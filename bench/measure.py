"""Whole processes timed side by side: wall and CPU time of each run, and peak memory.

Each run is spawned directly (no shell), its output sent to /dev/null, and reaped with
wait4. Commands compared with each other run alternately, so a busy moment on the
machine slows both and their ratio stays fair; medians leave out the odd slow run.

Peak memory is not the ru_maxrss of those runs: a process spawned from this one starts
on a copy of (or, with vfork, on) this interpreter's memory, and the kernel carries that
high-water mark across exec. GNU time forks from its own small image, so its %M is the
command's own peak; without it, a bare `python -I -S` launcher does the same, at the
cost of counting its few MiB as a floor.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field


class BenchError(RuntimeError):
    """A measured command failed or ran out of time: its ratio would mean nothing."""


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu: float = 0.0
    """User + system CPU seconds of the process (wait4's rusage): less swayed than wall
    time by other people's work on a loaded machine."""


@dataclass
class Series:
    """Every run of one command."""

    name: str
    argv: tuple[str, ...]
    runs: list[Run] = field(default_factory=list)
    ok_codes: tuple[int, ...] = (0,)
    """Exit statuses that are a result, not a failure (`pvegpu check`: 8 and 9 report
    findings)."""

    @property
    def spread(self) -> tuple[float, float]:
        """The fastest and slowest wall time of the runs."""
        return min(r.seconds for r in self.runs), max(r.seconds for r in self.runs)

    @property
    def seconds(self) -> float:
        return statistics.median(r.seconds for r in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu for r in self.runs)


def run_once(argv: Sequence[str], timeout_s: float, ok_codes: Sequence[int] = (0,)) -> Run:
    """Spawn argv, stdout to /dev/null, and wait for it: its wall time and peak memory."""
    actions = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
    start = time.perf_counter()
    pid = os.posix_spawnp(argv[0], list(argv), os.environ, file_actions=actions)
    timer = threading.Timer(timeout_s, os.kill, (pid, signal.SIGKILL))
    timer.start()
    try:
        _, status, usage = os.wait4(pid, 0)
    finally:
        timer.cancel()
    seconds = time.perf_counter() - start
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        raise BenchError(f"{' '.join(argv)}: no result within {timeout_s:.0f} s")
    if os.waitstatus_to_exitcode(status) not in ok_codes:
        code = os.waitstatus_to_exitcode(status)
        raise BenchError(f"{' '.join(argv)}: exit status {code}; run it by hand to see why")
    return Run(seconds, usage.ru_utime + usage.ru_stime)


def alternate(series: Sequence[Series], runs: int, timeout_s: float) -> None:
    """One untimed warm-up run each (page cache, bytecode cache), then `runs` rounds."""
    for s in series:
        run_once(s.argv, timeout_s, s.ok_codes)
    for _ in range(runs):
        for s in series:
            s.runs.append(run_once(s.argv, timeout_s, s.ok_codes))


_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_mib(argv: Sequence[str], runs: int = 3) -> tuple[float, str]:
    """Median peak resident set of argv in MiB, and how it was measured."""
    gnu_time = shutil.which("time", path="/usr/bin:/bin")
    samples = []
    for _ in range(runs):
        if gnu_time is not None:
            with tempfile.NamedTemporaryFile("r") as report:
                wrapped = [gnu_time, "-f", "%M", "-o", report.name, *argv]
                subprocess.run(wrapped, stdout=subprocess.DEVNULL, check=True)
                samples.append(int(report.read().split()[-1]))
        else:
            launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, *argv]
            done = subprocess.run(launcher, capture_output=True, text=True, check=True)
            samples.append(int(done.stderr.split()[-1]))
    how = "GNU time" if gnu_time is not None else "python launcher, its few MiB included"
    return statistics.median(samples) / 1024, how
