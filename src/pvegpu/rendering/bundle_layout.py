"""A bundle's layout: where each rendered artifact lives under OUT, and the MANIFEST.json
that lists them.

Host files at their path (OUT/etc/pve/lxc/129.conf), container files under ct/<vmid>/,
review files at the top, and the revert bundle under revert/ in the same layout with its
own MANIFEST.json. Pure: paths and text, nothing written. The runbook's modules (what
each step installs, from which file of the bundle) read this, and `bundle.py`, which
writes a bundle with the runbook's header, imports them: so this imports neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import Any

from pvegpu.errors import RenderError
from pvegpu.model.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact

MANIFEST = "MANIFEST.json"
MANIFEST_SCHEMA = "pvegpu.manifest/1"


def bundle_path(artifact: Artifact) -> PurePosixPath:
    """Where an artifact lives inside its bundle directory."""
    path = PurePosixPath(artifact.path)
    if path.is_absolute() or ".." in path.parts:
        raise RenderError.one(
            "artifact-path",
            artifact.path,
            "artifact paths must be relative and stay inside",
            "this is a pvegpu bug; please report it with the spec",
        )
    if artifact.target in (HOST, REVIEW):
        return path
    if artifact.target.startswith("ct:"):
        return PurePosixPath("ct", artifact.target[3:]) / path
    raise RenderError.one(
        "artifact-target",
        artifact.path,
        f"unknown target {artifact.target!r}",
        "this is a pvegpu bug; please report it with the spec",
    )


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
