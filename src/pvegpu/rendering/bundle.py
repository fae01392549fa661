"""Writing rendered artifacts into an output directory for review, with MANIFEST.json.

The layout under OUT and the manifests are `bundle_layout.py`'s; this writes them, with
the runbook's header when the plan is given. The host itself is never touched here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pvegpu.model.artifact import REVERT_BUNDLE, Artifact
from pvegpu.rendering.bundle_layout import MANIFEST, MANIFEST_SCHEMA, bundle_files
from pvegpu.rendering.outdir import Files, check_replaceable, previous_files, replace_directory
from pvegpu.rendering.review.apply_doc import manifest_header

if TYPE_CHECKING:
    from pvegpu.model.plan import Plan


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
