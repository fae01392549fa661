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
from pvegpu.host.container_units import read_container_units
from pvegpu.host.discover import discover
from pvegpu.host.reader import RootReader, Trace
from pvegpu.host.serving_files import InstalledFiles, add_serving_files, read_serving_files
from pvegpu.model.facts import HostFacts
from pvegpu.model.schema import Spec
from pvegpu.redact import redact_text
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class Snapshot:
    """What `snapshot` wrote. A broken tree is archived up to the first problem."""

    path: Path
    entries: int
    facts: HostFacts | None
    error: DiscoveryError | None = None
    redacted: tuple[str, ...] = ()
    """Archived files whose secret values (tokens, API keys, passwords) were blanked."""


def snapshot(
    root: Path, out: Path, spec: Spec | None = None, installed: InstalledFiles | None = None
) -> Snapshot:
    """Archive what discovery reads under `root` into `out` (.tar.gz).

    With a spec, also what planning its servers reads (`discover_for`): the model's
    config.json and index, the container's dpkg status, NVIDIA library names and unit,
    the files of the engine's installed release that `installed` names (required with a
    spec: `pvegpu.engines.installed_files`, as `discover_for` asks the engine), and the
    enabled units of the containers whose GPUs it may change.
    Weight shards and libraries are archived as empty files: their names are what the
    checks use (the checkpoint size comes from model.safetensors.index.json).

    Discovery errors do not stop the capture: whatever was read before the problem is
    archived (that is what a bug report needs) and the first error is returned, not raised.
    Every reading goes through `pvegpu.host.reader`, whose trace is what is archived: there
    is no second list of what was read.
    """
    if spec is not None and installed is None:
        # Without it the archive would silently lack the release the plan decides from.
        raise ValueError("a snapshot for a spec needs the engines' installed files")
    trace = Trace()
    facts: HostFacts | None = None
    error: DiscoveryError | None = None
    try:
        facts = discover(root, trace=trace)
    except DiscoveryError as err:
        error = err
    if spec is not None and installed is not None:
        try:
            found = read_serving_files(root, spec, installed, trace=trace)
            if facts is not None:
                facts = add_serving_files(facts, found)
                # And, as discover_for, the enabled units of the containers it may change.
                units = read_container_units(RootReader(root, trace), spec, facts)
                facts = add_serving_files(facts, units)
        except DiscoveryError as err:
            error = error or err
            facts = None
    members, redacted = _members(trace)
    out.parent.mkdir(parents=True, exist_ok=True)
    with (
        out.open("wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for info, data in members:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return Snapshot(out, len(members), facts, error, redacted)


def _redacted(files: dict[str, bytes]) -> tuple[dict[str, bytes], tuple[str, ...]]:
    """Files with every secret value blanked: a snapshot is attached to bug reports.

    Only text that holds a secret changes (a unit's `Environment=HF_TOKEN=...`, an
    `--api-key` value); a plan made from the archive then sees that file's sha256 differ
    from the host's, which the runbook's file check reports before anything is written.
    """
    out: dict[str, bytes] = {}
    changed: list[str] = []
    for path, data in files.items():
        text = data.decode("utf-8", errors="surrogateescape")
        clean = redact_text(text)
        if clean != text:
            changed.append(path)
            data = clean.encode("utf-8", errors="surrogateescape")
        out[path] = data
    return out, tuple(sorted(changed))


def _members(trace: Trace) -> tuple[list[tuple[tarfile.TarInfo, bytes | None]], tuple[str, ...]]:
    # Files known by size only are archived empty: their names are what the checks use.
    files, redacted = _redacted({path: b"" for path in trace.sized} | trace.files)
    dirs = set(trace.dirs)
    for path in [*files, *trace.links, *trace.dirs]:
        parts = path.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    dirs.discard("")
    # A path seen as a link is kept as the link, even if discovery also listed through it.
    dirs -= set(trace.links)
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for path in sorted({*dirs, *files, *trace.links}):
        info = tarfile.TarInfo(path)
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        data = None
        if path in trace.links:
            info.type = tarfile.SYMTYPE
            info.linkname = trace.links[path]
            info.mode = 0o777
        elif path in files:
            data = files[path]
            info.size = len(data)
            info.mode = 0o644
        else:
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
        entries.append((info, data))
    return entries, redacted


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack a snapshot into `dest` (created) and return it, ready for `discover(dest)`."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        # The "data" filter refuses absolute names and links leaving `dest`.
        tar.extractall(dest, filter=_inside_root)
    return dest


def _inside_root(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter, after an absolute link target (`systemctl enable`'s
    `/etc/systemd/system/x.service`, a mask's `/dev/null`) is written relative to the
    root: the reader takes `/` as the root (host.reader), so it reads the same file,
    and nothing extracted points out of `dest`."""
    if member.issym() and member.linkname.startswith("/"):
        up = "../" * member.name.strip("/").count("/")
        target = up + member.linkname.lstrip("/")
        member = member.replace(linkname=target or ".", deep=False)
    return tarfile.data_filter(member, dest)
