"""Writing rendered artifacts into an output directory for review, with MANIFEST.json.

Layout under OUT: host files at their path (OUT/etc/pve/lxc/129.conf), container files
under ct/<vmid>/, review files at the top, and the revert bundle under revert/ in the
same layout with its own MANIFEST.json. The host itself is never touched here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pvegpu.errors import RenderError
from pvegpu.model.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.model.manifest import MANIFEST as MANIFEST
from pvegpu.model.manifest import MANIFEST_SCHEMA as MANIFEST_SCHEMA
from pvegpu.model.manifest import Manifest, ManifestEntry
from pvegpu.rendering.outdir import Files, check_replaceable, previous_files, replace_directory

if TYPE_CHECKING:
    from pvegpu.model.plan import Plan


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


def write_bundle(
    artifacts: Sequence[Artifact],
    out: Path,
    *,
    plan: Plan | None = None,
    spec: str | None = None,
    **header: Any,
) -> list[Path]:
    """Make `out` hold exactly this bundle and its manifests; returns the paths written.

    `plan`: the plan `artifacts` were rendered from. Given, MANIFEST.json carries what
    `pvegpu render` writes at its top (node, `spec`, by default the plan's spec source,
    and the apply steps), so `pvegpu apply` and `pvegpu check` take the bundle. Without
    it the bundle is for review only, and both refuse it (`bundle-invalid`: no apply
    steps). `header`: further top-level MANIFEST.json keys.

    Everything is rendered in memory before this is called, so a refused plan writes
    nothing. The bundle is written beside `out` and swapped in (rendering/outdir.py): a
    failure leaves the previous bundle whole, and `out` is refused when it holds anything
    a previous bundle's MANIFEST.json does not list.
    """
    if plan is not None:
        # Imported here: the runbook's modules import this one (bundle paths).
        from pvegpu.rendering.review.apply_doc import manifest_header

        source = spec if spec is not None else plan.spec.source
        header = {**manifest_header(plan, artifacts, source), **header}
    elif spec is not None:
        header = {**header, "spec": spec}
    files = bundle_files(artifacts, **header)
    return replace_directory(out, files, check=_check_out)


def write_bundle_files(files: Files, out: Path) -> list[Path]:
    """Write a bundle already rendered into files (`bundle_files`, or one node's share of
    a cluster's) to `out`, as `write_bundle` does: swapped in, all or nothing."""
    return replace_directory(out, files, check=_check_out)


def _check_out(out: Path) -> frozenset[PurePosixPath]:
    revert_manifest = f"{REVERT_BUNDLE}/{MANIFEST}"
    return check_replaceable(
        out, lambda d: previous_files(d, MANIFEST, MANIFEST_SCHEMA, also=(revert_manifest,))
    )
