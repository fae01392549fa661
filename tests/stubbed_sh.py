"""Run a generated script under dash with every command it may call stubbed: what it ran.

PATH holds only stubs that log their argv (and a few harmless real tools), so a script
under test runs end to end without touching this machine, and the calls it made show
whether each interpolated value reached its command as exactly one argument.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from linters import DASH

STUBS = ("hostname", "qm", "pct", "systemctl", "cp", "rm", "mv", "update-initramfs", "sha256sum")
HARMLESS = ("dirname", "cut", "grep")
# Each call: the fields separated by \037, ended by \036. `hostname` answers STUB_NODE,
# `pct|qm status` says running, `sha256sum` answers STUB_SHA.
_STUB = """#!/bin/sh
printf '%s\\037' "${0##*/}" "$@" >>"$STUB_LOG"
printf '\\036' >>"$STUB_LOG"
case ${0##*/} in
hostname) printf '%s\\n' "$STUB_NODE" ;;
pct | qm) [ "$1" = status ] && echo 'status: running' ;;
sha256sum) printf '%s  -\\n' "$STUB_SHA" ;;
esac
exit 0
"""


def stub(path: Path) -> None:
    """A logging stub at `path` (also for absolute paths a script runs under $ROOT)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_STUB)
    path.chmod(0o755)


def run_stubbed(
    text: str, script: Path, work: Path, environment: dict[str, str]
) -> list[list[str]]:
    """`text` written to `script` and run by dash, PATH only stubs: each call\'s argv.

    A script that prints the commands of a dry run as `would run: WORD ...` (revert.sh
    under ROOT) has those lines read back with sh's quoting rules as calls too, in order
    after the ones it ran."""
    bin_dir = work / "bin"
    for name in STUBS:
        stub(bin_dir / name)
    for name in HARMLESS:
        real = shutil.which(name)
        assert real is not None, name
        (bin_dir / name).unlink(missing_ok=True)
        (bin_dir / name).symlink_to(real)
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(text)
    log = work / "calls"
    log.write_bytes(b"")
    assert DASH is not None, "dash missing: apt install dash"
    result = subprocess.run(
        [DASH, str(script)],
        env={**environment, "PATH": str(bin_dir), "STUB_LOG": str(log)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    ran = [call.split("\037")[:-1] for call in log.read_text().split("\036")[:-1]]
    printed = [
        shlex.split(line.removeprefix("would run: "))
        for line in result.stdout.splitlines()
        if line.startswith("would run: ")
    ]
    return ran + printed
