"""A bundle's MANIFEST.json as one value: written by `Manifest.text` and read by
`Manifest.from_text`, the only writer and reader of it.

`pvegpu render` writes it (rendering/bundle.py builds it from the artifacts); `apply`,
`check` and `revert` read it back (apply/bundle.py), the copy an apply keeps in its state
directory too, whose bytes are the applied bundle's (its sha256 names that directory).
The text is part of the goldens: the key order below is the file's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from pvegpu.jsontext import load_json
from pvegpu.values import value_class

MANIFEST = "MANIFEST.json"
MANIFEST_SCHEMA = "pvegpu.manifest/1"


class ManifestError(ValueError):
    """A MANIFEST.json this pvegpu did not write: not JSON, another schema, a bad entry."""


@value_class
@attrs.frozen(eq=False, repr=False)
class ManifestEntry:
    """One artifact of the bundle: where it goes, its file in the bundle, its digest."""

    target: str
    """`host`, `ct:<vmid>` or `review`."""
    path: str
    """Where it goes under its target."""
    file: str | None
    """Its file relative to the manifest's directory; None for a removal."""
    mode: int
    sha256: str | None
    """None for a removal."""
    reason: str
    bundle: str
    """`apply` or `revert`."""
    base_sha256: str | None = None
    """The sha256 of the file it was made from (a patch's base), if any."""

    @property
    def remove(self) -> bool:
        return self.file is None

    def document(self) -> dict[str, Any]:
        """The entry's keys but `bundle` (a cluster's manifest puts `node` before it)."""
        entry: dict[str, Any] = {
            "target": self.target,
            "path": self.path,
            "file": self.file,
            "action": "remove" if self.remove else "write",
            "mode": f"{self.mode:04o}",
            "sha256": self.sha256,
            "reason": self.reason,
        }
        if self.base_sha256 is not None:
            entry["base_sha256"] = self.base_sha256
        return entry


@value_class
@attrs.frozen(eq=False, repr=False)
class Manifest:
    """MANIFEST.json: the node and spec it was rendered for, the apply contract's JSON
    (rendering/review/contract.py reads it), and every artifact."""

    entries: tuple[ManifestEntry, ...]
    node: str | None = None
    spec: str | None = None
    """The spec as `render --spec` was given it."""
    apply: Mapping[str, Any] | None = None
    """The `apply` key: what `pvegpu apply` runs and `check` compares (its JSON)."""
    extra: tuple[tuple[str, Any], ...] = ()
    """Further top-level keys a library caller asked for, after the others."""

    def text(self) -> str:
        """The one writer of MANIFEST.json."""
        header: dict[str, Any] = {"schema": MANIFEST_SCHEMA}
        for key, value in (("node", self.node), ("spec", self.spec), ("apply", self.apply)):
            if value is not None:
                header[key] = value
        header.update(self.extra)
        entries = [{**e.document(), "bundle": e.bundle} for e in self.entries]
        return json.dumps({**header, "artifacts": entries}, indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_text(cls, text: str) -> Manifest:
        """The one reader of MANIFEST.json; `ManifestError` for anything it did not write."""
        try:
            doc = load_json(text)
        except ValueError as err:
            raise ManifestError(f"not JSON: {err}") from err
        if not isinstance(doc, dict) or doc.get("schema") != MANIFEST_SCHEMA:
            raise ManifestError(f"not a {MANIFEST_SCHEMA} manifest")
        raw = doc.get("artifacts", [])
        if not isinstance(raw, list):
            raise ManifestError("its artifacts are not a list")
        apply = doc.get("apply")
        known = {"schema", "node", "spec", "apply", "artifacts"}
        return cls(
            entries=tuple(_entry(index, entry) for index, entry in enumerate(raw)),
            node=_text(doc, "node", "its node"),
            spec=_text(doc, "spec", "its spec"),
            apply=apply if isinstance(apply, dict) else None,
            extra=tuple((k, v) for k, v in doc.items() if k not in known),
        )


def _text(doc: Mapping[str, Any], key: str, what: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise ManifestError(f"{what} is not a string")
    return value


def _entry(index: int, raw: object) -> ManifestEntry:
    where = f"artifacts[{index}]"
    if not isinstance(raw, dict):
        raise ManifestError(f"{where} is not an object")
    for key in ("target", "path"):
        if not isinstance(raw.get(key), str):
            raise ManifestError(f"{where}.{key} is not a string")
    for key in ("file", "sha256", "base_sha256"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ManifestError(f"{where}.{key} is not a string")
    mode = raw.get("mode")
    try:
        number = int(mode, 8) if isinstance(mode, str) else None
    except ValueError:
        number = None
    if number is None:
        raise ManifestError(f"{where}.mode is not an octal mode ({mode!r})")
    return ManifestEntry(
        target=raw["target"],
        path=raw["path"],
        file=raw.get("file"),
        mode=number,
        sha256=raw.get("sha256"),
        reason=str(raw.get("reason", "")),
        bundle=str(raw.get("bundle", "apply")),
        base_sha256=raw.get("base_sha256"),
    )
