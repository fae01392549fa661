"""A rendered bundle as apply reads it: MANIFEST.json, its files, the steps as actions.

The same reader serves `apply --bundle OUT` (files read from OUT) and `apply --spec`
(the bundle rendered in memory by the same `bundle_files` that `render` writes), so both
apply exactly what a reviewer would have seen in OUT. Every file's sha256 is checked
against MANIFEST.json on the way in: an edited bundle is refused, not applied.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from pvegpu.errors import BundleError, Problem
from pvegpu.model.artifact import REVERT_BUNDLE, REVIEW
from pvegpu.rendering.bundle_layout import MANIFEST, MANIFEST_SCHEMA
from pvegpu.rendering.outdir import relative_path
from pvegpu.rendering.review.contract import (
    ApplyContract,
    ContractError,
    ContractStep,
    contract_from_json,
)
from pvegpu.values import value_class


@value_class
@attrs.frozen(eq=False, repr=False)
class Entry:
    """One installed file of the bundle (apply bundle, not review, not revert)."""

    target: str
    path: str
    file: str
    mode: int
    sha256: str
    base_sha256: str | None
    content: bytes


@value_class
@attrs.frozen(eq=False, repr=False)
class Bundle:
    id: str
    """sha256 of MANIFEST.json (first 16 hex digits): names the apply's state directory."""
    node: str
    manifest: str
    entries: tuple[Entry, ...]
    contract: ApplyContract
    """MANIFEST.json's `apply` key, read back (rendering/review/contract.py)."""

    @property
    def steps(self) -> tuple[ContractStep, ...]:
        return self.contract.steps

    @property
    def functions(self) -> tuple[dict[str, Any], ...]:
        return self.contract.functions

    @property
    def digest(self) -> str:
        return self.contract.digest

    @property
    def serving(self) -> tuple[dict[str, Any], ...]:
        return self.contract.serving

    @property
    def findings(self) -> tuple[dict[str, Any], ...]:
        """The plan's findings (severity, code, subject, message): `pvegpu check` repeats them."""
        return self.contract.findings

    @property
    def split_unit(self) -> str | None:
        return self.contract.split_unit

    @property
    def boot_units(self) -> tuple[str, ...]:
        return self.contract.boot_units

    @property
    def spec(self) -> str | None:
        """The spec MANIFEST.json names (as `render --spec` was given it), if any."""
        value = json.loads(self.manifest).get("spec")
        return value if isinstance(value, str) and value else None

    def entry(self, target: str, path: str) -> Entry | None:
        return next((e for e in self.entries if e.target == target and e.path == path), None)

    def by_file(self, file: str) -> Entry:
        found = next((e for e in self.entries if e.file == file), None)
        if found is None:
            raise _bad(f"a step names {file!r}, which MANIFEST.json does not list")
        return found


def _bad(message: str) -> BundleError:
    return BundleError(
        [Problem("bundle-invalid", MANIFEST, message, "render the bundle again with pvegpu")]
    )


def read_bundle_dir(out: Path) -> Bundle:
    """The bundle pvegpu render wrote into `out`."""
    try:
        manifest = (out / MANIFEST).read_text(encoding="utf-8")
    except OSError as err:
        raise BundleError.one(
            "bundle-missing", str(out / MANIFEST), f"cannot be read: {err.strerror}",
            "pass the directory `pvegpu render --out` wrote",
        ) from err  # fmt: skip

    def file(rel: str) -> bytes:
        path = out / relative_path(rel, subject=f"{out / MANIFEST}: {rel}")
        if path.is_symlink() or not path.is_file():
            raise _bad(f"{rel} is missing or not a regular file in {out}")
        return path.read_bytes()

    return parse_bundle(manifest, file)


def bundle_from_files(files: Mapping[str, tuple[str, int]]) -> Bundle:
    """The bundle `bundle_files` made in memory (`apply --spec`)."""

    def file(rel: str) -> bytes:
        if rel not in files:
            raise _bad(f"{rel} is not in the rendered bundle")
        return files[rel][0].encode()

    return parse_bundle(files[MANIFEST][0], file)


def parse_bundle(manifest: str, file: Any) -> Bundle:
    try:
        doc = json.loads(manifest)
    except ValueError as err:
        raise _bad(f"not JSON: {err}") from err
    if not isinstance(doc, dict) or doc.get("schema") != MANIFEST_SCHEMA:
        raise _bad(f"not a {MANIFEST_SCHEMA} manifest")
    try:
        contract = contract_from_json(doc.get("apply"))
    except ContractError as err:
        raise _bad(str(err)) from err
    entries = []
    for raw in doc.get("artifacts", []):
        if raw.get("bundle") == REVERT_BUNDLE or raw.get("target") == REVIEW:
            continue
        content = file(raw["file"])
        if hashlib.sha256(content).hexdigest() != raw["sha256"]:
            raise BundleError.one(
                "bundle-edited",
                raw["file"],
                "differs from the sha256 MANIFEST.json lists: the bundle was changed "
                "after it was rendered and reviewed",
                "render the bundle again and review it",
            )
        entries.append(
            Entry(
                raw["target"],
                raw["path"],
                raw["file"],
                int(raw["mode"], 8),
                raw["sha256"],
                raw.get("base_sha256"),
                content,
            )
        )
    return Bundle(
        id=hashlib.sha256(manifest.encode()).hexdigest()[:16],
        node=str(doc.get("node", "")),
        manifest=manifest,
        entries=tuple(entries),
        contract=contract,
    )
