"""A rendered bundle as apply reads it: MANIFEST.json, its files, the steps as actions.

The same reader serves `apply --bundle OUT` (files read from OUT) and `apply --spec`
(the bundle rendered in memory by the same `bundle_files` that `render` writes), so both
apply exactly what a reviewer would have seen in OUT. Every file's sha256 is checked
against MANIFEST.json on the way in: an edited bundle is refused, not applied.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import BundleError
from pvegpu.model.artifact import REVERT_BUNDLE, REVIEW
from pvegpu.model.manifest import MANIFEST, Manifest, ManifestError
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
    """MANIFEST.json's text as read: its bytes are the bundle's (`id`), kept by apply."""
    document: Manifest
    """MANIFEST.json read (`Manifest.from_text`)."""
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
        return self.document.spec or None

    def entry(self, target: str, path: str) -> Entry | None:
        return next((e for e in self.entries if e.target == target and e.path == path), None)

    def by_file(self, file: str) -> Entry:
        found = next((e for e in self.entries if e.file == file), None)
        if found is None:
            raise _bad(f"a step names {file!r}, which MANIFEST.json does not list")
        return found


def _bad(message: str) -> BundleError:
    return BundleError(
        [
            Diagnostic.error(
                "bundle-invalid", MANIFEST, message, "render the bundle again with pvegpu"
            )
        ]
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
        document = Manifest.from_text(manifest)
        contract = contract_from_json(document.apply)
    except (ManifestError, ContractError) as err:
        raise _bad(str(err)) from err
    entries = []
    for entry in document.entries:
        if entry.bundle == REVERT_BUNDLE or entry.target == REVIEW:
            continue
        if entry.file is None or entry.sha256 is None:
            raise _bad(f"{entry.path} has no file in the bundle: apply writes every file it lists")
        content = file(entry.file)
        if hashlib.sha256(content).hexdigest() != entry.sha256:
            raise BundleError.one(
                "bundle-edited",
                entry.file,
                "differs from the sha256 MANIFEST.json lists: the bundle was changed "
                "after it was rendered and reviewed",
                "render the bundle again and review it",
            )
        entries.append(
            Entry(
                entry.target,
                entry.path,
                entry.file,
                entry.mode,
                entry.sha256,
                entry.base_sha256,
                content,
            )
        )
    return Bundle(
        id=hashlib.sha256(manifest.encode()).hexdigest()[:16],
        node=document.node or "",
        manifest=manifest,
        document=document,
        entries=tuple(entries),
        contract=contract,
    )
