"""Writing rendered artifacts into an output directory for review, with MANIFEST.json.

Layout under OUT: host files at their path (OUT/etc/pve/lxc/129.conf), container files
under ct/<vmid>/, review files at the top, and the revert bundle under revert/ in the
same layout with its own MANIFEST.json. The host itself is never touched here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from pvegpu.errors import Problem, RenderError
from pvegpu.rendering.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact

MANIFEST = "MANIFEST.json"
MANIFEST_SCHEMA = "pvegpu.manifest/1"


def bundle_path(artifact: Artifact) -> PurePosixPath:
    """Where an artifact lives inside its bundle directory."""
    path = PurePosixPath(artifact.path)
    if path.is_absolute() or ".." in path.parts:
        raise RenderError.one(
            "artifact-path", artifact.path, "artifact paths must be relative and stay inside"
        )
    if artifact.target in (HOST, REVIEW):
        return path
    if artifact.target.startswith("ct:"):
        return PurePosixPath("ct", artifact.target[3:]) / path
    raise RenderError.one("artifact-target", artifact.path, f"unknown target {artifact.target!r}")


def manifest_entry(artifact: Artifact) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "target": artifact.target,
        "path": artifact.path,
        "file": None if artifact.delete else str(bundle_path(artifact)),
        "action": "remove" if artifact.delete else "write",
        "mode": f"{artifact.mode:04o}",
        "sha256": None if artifact.delete else artifact.sha256,
        "reason": artifact.reason,
    }
    if artifact.base is not None:
        entry["base_sha256"] = artifact.base.sha256
    return entry


def manifest(artifacts: Iterable[Artifact], *, within: str = "", **header: Any) -> str:
    """The MANIFEST.json of a bundle directory; `file` is relative to that directory.

    In OUT/MANIFEST.json (within="") revert entries live under revert/; in
    OUT/revert/MANIFEST.json (within="revert") they are at the top.
    """
    entries = []
    for a in sorted(artifacts, key=lambda a: (a.bundle != "apply", a.target, a.path)):
        entry = {**manifest_entry(a), "bundle": a.bundle}
        if a.bundle == REVERT_BUNDLE and within != REVERT_BUNDLE and not a.delete:
            entry["file"] = f"{REVERT_BUNDLE}/{entry['file']}"
        entries.append(entry)
    doc = {"schema": MANIFEST_SCHEMA, **header, "artifacts": entries}
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def bundle_files(artifacts: Sequence[Artifact], **header: Any) -> dict[str, tuple[str, int]]:
    """OUT-relative path -> (content, mode): everything `write_bundle` puts under OUT."""
    files: dict[str, tuple[str, int]] = {}
    for artifact in artifacts:
        if artifact.delete:
            continue
        prefix = f"{REVERT_BUNDLE}/" if artifact.bundle == REVERT_BUNDLE else ""
        files[f"{prefix}{bundle_path(artifact)}"] = (artifact.content, artifact.mode)
    files[MANIFEST] = (manifest(artifacts, **header), 0o644)
    reverts = [a for a in artifacts if a.bundle == REVERT_BUNDLE]
    if reverts:
        revert_manifest = manifest(reverts, within=REVERT_BUNDLE, **header)
        files[f"{REVERT_BUNDLE}/{MANIFEST}"] = (revert_manifest, 0o644)
    return files


def write_bundle(artifacts: Sequence[Artifact], out: Path, **header: Any) -> list[Path]:
    """Write every artifact and the manifests under `out`; returns the paths written.

    Everything is rendered in memory before this is called, so a refused plan writes
    nothing. Files are written through a temporary name and renamed into place.
    """
    files = bundle_files(artifacts, **header)
    _clear_previous(out)
    return [_write(out / path, content, mode) for path, (content, mode) in files.items()]


def _clear_previous(out: Path) -> None:
    """Remove the files of an earlier bundle in `out`, so none of them goes stale.

    Only files its MANIFEST.json lists are removed; a directory that holds anything
    else is refused rather than mixed with, or emptied.
    """
    if not out.exists() or not any(out.iterdir()):
        return
    listed = _previous_files(out)
    if listed is None:
        raise RenderError.one(
            "output-not-empty",
            str(out),
            "holds files that are not a pvegpu bundle (no pvegpu MANIFEST.json)",
            "choose a new or empty --out directory",
        )
    for rel in listed:
        (out / rel).unlink(missing_ok=True)


def _previous_files(out: Path) -> list[str] | None:
    try:
        doc = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != MANIFEST_SCHEMA:
        return None
    files = [e.get("file") for e in doc.get("artifacts", []) if isinstance(e, dict)]
    listed = [f for f in files if isinstance(f, str) and ".." not in PurePosixPath(f).parts]
    return [*listed, MANIFEST, f"{REVERT_BUNDLE}/{MANIFEST}"]


def _write(path: Path, content: str, mode: int) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(content, encoding="utf-8")
        tmp.chmod(mode)
        tmp.replace(path)
    except OSError as err:
        failure = RenderError(
            [
                Problem(
                    "output-unwritable",
                    str(path),
                    f"cannot write: {err.strerror}",
                    "files before this one are written; fix it and render again",
                )
            ]
        )
        failure.partial = True
        raise failure from err
    return path
