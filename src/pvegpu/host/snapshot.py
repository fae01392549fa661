"""Capture exactly what discovery reads from a host into a reproducible .tar.gz.

`snapshot(root, out)` runs discovery with a trace and archives every file it read (with
the bytes it read), every symlink it followed or listed (as a symlink, same text) and
every directory it listed, with their parent directories. Unpacked anywhere, the archive
is a root on which `discover` returns the same facts: a bug report, or a new fixture.

File sizes come from the bytes read, never from stat: sysfs reports 4096 and procfs 0
for files whose content is a few bytes. The archive is deterministic (sorted entries,
mtime 0, uid/gid 0, no file name in the gzip header), so the same host state gives the same bytes.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import attrs

from pvegpu.errors import DiscoveryError
from pvegpu.host.discover import Trace, discover
from pvegpu.host.facts import HostFacts
from pvegpu.serving import read_serving_files, with_serving_files
from pvegpu.spec.schema import Spec


@attrs.frozen
class Snapshot:
    """What `snapshot` wrote. A broken tree is archived up to the first problem."""

    path: Path
    entries: int
    facts: HostFacts | None
    error: DiscoveryError | None = None


def snapshot(root: Path, out: Path, spec: Spec | None = None) -> Snapshot:
    """Archive what discovery reads under `root` into `out` (.tar.gz).

    With a spec, also what planning its servers reads (`discover_for`): the model's
    config.json and index, the container's dpkg status, NVIDIA library names and unit.
    Weight shards and libraries are archived as empty files: their names are what the
    checks use (the checkpoint size comes from model.safetensors.index.json).

    Discovery errors do not stop the capture: whatever was read before the problem is
    archived (that is what a bug report needs) and the error is returned, not raised.
    """
    trace = Trace()
    facts: HostFacts | None = None
    error: DiscoveryError | None = None
    try:
        facts = discover(root, trace=trace)
    except DiscoveryError as err:
        error = err
    if spec is not None:
        found = read_serving_files(root, spec)
        for file in found.files:
            trace.files[file.path] = file.content.encode()
        for stat in found.stats:
            trace.files.setdefault(stat.path, b"")
        if facts is not None:
            facts = with_serving_files(facts, root, spec)
    members = _members(trace)
    out.parent.mkdir(parents=True, exist_ok=True)
    with (
        out.open("wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for info, data in members:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return Snapshot(out, len(members), facts, error)


def _members(trace: Trace) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    dirs = set(trace.dirs)
    for path in [*trace.files, *trace.links, *trace.dirs]:
        parts = path.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    dirs.discard("")
    # A path seen as a link is kept as the link, even if discovery also listed through it.
    dirs -= set(trace.links)
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for path in sorted({*dirs, *trace.files, *trace.links}):
        info = tarfile.TarInfo(path)
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        data = None
        if path in trace.links:
            info.type = tarfile.SYMTYPE
            info.linkname = trace.links[path]
            info.mode = 0o777
        elif path in trace.files:
            data = trace.files[path]
            info.size = len(data)
            info.mode = 0o644
        else:
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
        entries.append((info, data))
    return entries


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack a snapshot into `dest` (created) and return it, ready for `discover(dest)`."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        # The "data" filter refuses absolute names and links leaving `dest`.
        tar.extractall(dest, filter="data")
    return dest
