"""A bundle's layout: where each rendered artifact lives under OUT, and the MANIFEST.json
that lists them.

Host files at their path (OUT/etc/pve/lxc/129.conf), container files under ct/<vmid>/,
review files at the top, and the revert bundle under revert/ in the same layout with its
own MANIFEST.json. Pure: paths and text, nothing written. The runbook's modules (what
each step installs, from which file of the bundle) read this, and `bundle.py`, which
writes a bundle with the runbook's header, imports them: so this imports neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import Any

from pvegpu.errors import RenderError
from pvegpu.model.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.model.manifest import MANIFEST as MANIFEST
from pvegpu.model.manifest import MANIFEST_SCHEMA as MANIFEST_SCHEMA
from pvegpu.model.manifest import Manifest, ManifestEntry


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


def entry_of(artifact: Artifact, *, within: str = "") -> ManifestEntry:
    """The artifact as a MANIFEST.json entry; `file` relative to the bundle directory
    (`within`: "" for OUT, where revert entries live under revert/; "revert" for
    OUT/revert/MANIFEST.json, where they are at the top)."""
    file = None if artifact.delete else str(bundle_path(artifact))
    if artifact.bundle == REVERT_BUNDLE and within != REVERT_BUNDLE and file is not None:
        file = f"{REVERT_BUNDLE}/{file}"
    return ManifestEntry(
        target=artifact.target,
        path=artifact.path,
        file=file,
        mode=artifact.mode,
        sha256=None if artifact.delete else artifact.sha256,
        reason=artifact.reason,
        bundle=artifact.bundle,
        base_sha256=artifact.base.sha256 if artifact.base is not None else None,
    )


def manifest_entry(artifact: Artifact) -> dict[str, Any]:
    """The entry's keys but `bundle`, `file` relative to the artifact's own bundle."""
    return entry_of(artifact, within=artifact.bundle).document()


def manifest(
    artifacts: Iterable[Artifact],
    *,
    within: str = "",
    node: str | None = None,
    spec: str | None = None,
    apply: dict[str, Any] | None = None,
    **extra: Any,
) -> str:
    """The MANIFEST.json of a bundle directory (`Manifest.text`, its one writer); `file`
    is relative to that directory.

    In OUT/MANIFEST.json (within="") revert entries live under revert/; in
    OUT/revert/MANIFEST.json (within="revert") they are at the top.
    """
    ordered = sorted(artifacts, key=lambda a: (a.bundle != "apply", a.target, a.path))
    entries = tuple(entry_of(a, within=within) for a in ordered)
    return Manifest(entries, node, spec, apply, tuple(extra.items())).text()


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
