"""An engine's shipped option tables: the one compressed file they are packed in.

Each engine ships every release's table in `pvegpu/engines/<engine>/data/tables.json.gz`,
written by its maintainer tool: every distinct option entry once (`entries`), and per
release the list of its entries by index (`releases`); consecutive releases share most
entries, so dozens of releases take about what two loose tables did. Reading that file,
checking its format, and the fields every argparse entry has are the same for both
engines; what a table holds beyond them (SGLang's deprecation advice, vLLM's positionals)
is the engine's `options`.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import RenderError

BUNDLE = "tables.json.gz"
BUNDLE_FORMAT = 1
_NARGS_WORDS = ("?", "*", "+")


@attrs.define(eq=False)
class ShippedTables:
    """The packed tables of one engine, decompressed once per process on first use."""

    engine: str
    """The engine in codes and subjects: `sglang` (`sglang-table-invalid`, `sglang 0.5.9`)."""
    title: str
    """Its own spelling in prose: `SGLang`."""
    table_noun: str
    """What a table is called in a refusal: `an SGLang option table`."""
    package: str
    """The data package the file is in: `pvegpu.engines.sglang.data`."""
    directory: Path
    """That package's directory (`data.__file__`'s parent), read directly when it exists."""
    add_release: str
    """How a maintainer adds a release, with `{version}`."""
    version_key: Callable[[str], tuple[int, ...]]
    """The order of releases."""
    shipped_note: str = ""
    """Said after the shipped range in `unknown_version`: what the range holds."""
    _bundle: Mapping[str, Any] | None = attrs.field(default=None, init=False)
    _versions: tuple[str, ...] | None = attrs.field(default=None, init=False)

    def invalid(self, source: str, err: Exception) -> RenderError:
        fix = f"regenerate it: {self.add_release.format(version='<version>')}"
        return RenderError(
            [
                Diagnostic.error(
                    f"{self.engine}-table-invalid",
                    source,
                    f"not {self.table_noun}: {err}",
                    fix,
                )
            ]
        )

    def bundle(self) -> Mapping[str, Any]:
        """The shipped tables, decompressed once per process."""
        if self._bundle is None:
            self._bundle = self._read_bundle()
        return self._bundle

    def _read_bundle(self) -> Mapping[str, Any]:
        source = f"{self.package}/{BUNDLE}"
        try:
            data = self._read_shipped(BUNDLE)
            # zlib with gzip framing (wbits 31): the gzip module and what it imports cost
            # a tenth of a kpro6 render's own imports, for this one single-member file.
            bundle = json.loads(zlib.decompress(data, wbits=31))
            if bundle["format"] != BUNDLE_FORMAT:
                raise ValueError(f"format {bundle['format']}, this pvegpu reads {BUNDLE_FORMAT}")
            if not isinstance(bundle["entries"], list) or not isinstance(bundle["releases"], dict):
                raise TypeError("entries must be a list, releases an object")
        except (OSError, ValueError, KeyError, TypeError, zlib.error) as err:
            raise self.invalid(source, err) from None
        return dict(bundle)

    def _read_shipped(self, name: str) -> bytes:
        """A data file of the package: from its directory when it is one (every install but
        a zip), else through importlib.resources, whose import (zipfile, tempfile) costs
        more than reading the file."""
        found = self.directory / name
        if found.is_file():
            return found.read_bytes()
        from importlib import resources  # zip installs only

        return resources.files(self.package).joinpath(name).read_bytes()

    def release(self, version: str) -> tuple[Mapping[str, Any], list[Any]]:
        """The shipped release's record and its entries, in order (KeyError, IndexError or
        TypeError when the file does not hold it as it should)."""
        bundle = self.bundle()
        release = bundle["releases"][version]
        entries = bundle["entries"]
        return release, [entries[i] for i in release["args"]]

    def shipped_document(
        self, version: str, document: Callable[[str], dict[str, Any]]
    ) -> tuple[dict[str, Any], str]:
        """The shipped table of `version` as the engine's `document` lays it out from the
        file, and where it is from; a refusal naming the shipped ones if there is none."""
        if version not in self.shipped_versions():
            raise self.unknown_version(version, "not shipped, and no readable installation")
        source = f"{self.package}/{BUNDLE}: {version}"
        try:
            return document(version), source
        except (KeyError, IndexError, TypeError) as err:
            raise self.invalid(source, err) from None

    def shipped_versions(self) -> tuple[str, ...]:
        """Releases with a table in the package, oldest first."""
        if self._versions is None:
            key = self.version_key
            self._versions = tuple(sorted(self.bundle()["releases"], key=lambda v: (key(v), v)))
        return self._versions

    def unknown_version(self, version: str, why: str) -> RenderError:
        """The refusal for a release pvegpu has no table for and cannot build one of."""
        shipped = self.shipped_versions()
        problem = Diagnostic.error(
            f"{self.engine}-version-unknown",
            f"{self.engine} {version}",
            f"pvegpu has no option table for {self.title} {version} ({why}), so it cannot "
            f"check the command line; it ships {shipped[0]} to {shipped[-1]}{self.shipped_note}",
            "install a release pvegpu knows in the container, or add it to pvegpu: "
            + self.add_release.format(version=version),
        )
        return RenderError([problem])


def pack_bundle(
    releases: Mapping[str, Mapping[str, Any]], version_key: Callable[[str], tuple[int, ...]]
) -> bytes:
    """The file's bytes for `releases` (release -> its record, `args` the list of its
    entries, the other fields kept in their order), as the maintainer tools write it:
    every distinct entry once, oldest release first."""
    # Only the maintainer tools write the file: gzip is not imported by a render.
    import gzip

    entries: list[Any] = []
    index: dict[str, int] = {}
    out: dict[str, Any] = {}
    for version in sorted(releases, key=lambda v: (version_key(v), v)):
        release = releases[version]
        ids = []
        for entry in release["args"]:
            key = json.dumps(entry, sort_keys=True)
            if key not in index:
                index[key] = len(entries)
                entries.append(entry)
            ids.append(index[key])
        out[version] = {**{k: v for k, v in release.items() if k != "args"}, "args": ids}
    doc = {"format": BUNDLE_FORMAT, "entries": entries, "releases": out}
    text = json.dumps(doc, separators=(",", ":")).encode()
    # mtime=0: the same tables give the same bytes, so git sees no change.
    return gzip.compress(text, compresslevel=9, mtime=0)


def unpack_bundle(data: bytes) -> dict[str, dict[str, Any]]:
    """Release -> its record with `args` its entries, of the file's bytes (what
    `pack_bundle` was given)."""
    bundle = json.loads(zlib.decompress(data, wbits=31))
    entries = bundle["entries"]
    return {
        version: {**release, "args": [entries[i] for i in release["args"]]}
        for version, release in bundle["releases"].items()
    }


def entry_fields(entry: Any) -> dict[str, Any]:
    """The fields every argparse entry of a table has, checked: options, dest, action,
    type, nargs, choices, required (TypeError or KeyError when one is off)."""
    if not isinstance(entry, dict):
        raise TypeError(f"each args entry must be an object, got {entry!r}")
    options = entry["options"]
    if not (isinstance(options, list) and options and all(isinstance(o, str) for o in options)):
        raise TypeError(f"options must be a non-empty list of strings, got {options!r}")
    nargs = entry["nargs"]
    if not (nargs is None or isinstance(nargs, int) or nargs in _NARGS_WORDS):
        raise TypeError(f"{options[0]}: nargs {nargs!r} is not an argparse nargs")
    choices = entry["choices"]
    if choices is not None and not isinstance(choices, list):
        raise TypeError(f"{options[0]}: choices must be a list or null")
    return {
        "options": tuple(options),
        "dest": str(entry["dest"]),
        "action": str(entry["action"]),
        "type": None if entry["type"] is None else str(entry["type"]),
        "nargs": nargs,
        "choices": None if choices is None else tuple(str(c) for c in choices),
        "required": bool(entry["required"]),
    }
