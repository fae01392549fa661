"""vLLM's option tables, per release: the model of one table and loading the shipped ones.

A table is every option of the real `vllm serve` parser of one release (option strings,
dest, action, type, nargs, choices, required, deprecated) and its positionals (the model).
A command line pvegpu renders is checked against the table of the release the container
runs, offline (`option_check`). What pvegpu writes for a release where releases differ
is in `versions` instead.

The shipped tables are one file, `pvegpu/engines/vllm/data/tables.json.gz`, written by
`tools/vllm_tables.py` from the published wheels: every distinct option entry once
(`entries`), per release the list of its entries by index (`releases`). A release
installed in a container that has no shipped table gets one from its own sources
(`table_from_sources`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

import pvegpu.engines.vllm.data
from pvegpu.engines.sglang.versions import version_key
from pvegpu.errors import Problem, RenderError

if TYPE_CHECKING:
    from pvegpu.engines.sglang.option_source import SourceFiles

TABLE_PACKAGE = "pvegpu.engines.vllm.data"
BUNDLE = "tables.json.gz"
BUNDLE_FORMAT = 1
_NARGS_WORDS = ("?", "*", "+")
ADD_RELEASE = "make vllm-tables VERSIONS={version} (docs/vllm.md, adding a release)"
_INVERSE = {"--enable-": "--disable-", "--disable-": "--enable-"}


@attrs.frozen
class OptionSpec:
    """One argparse action of `vllm serve`, as the table records it."""

    options: tuple[str, ...]
    dest: str
    action: str
    type: str | None
    """Name of the converter argparse calls (`int`, `float`, `str`, `loads`, ...)."""
    nargs: int | str | None
    choices: tuple[str, ...] | None
    required: bool
    deprecated: bool

    @property
    def canonical(self) -> str:
        """The name pvegpu writes and accepts for this action: its first long option."""
        return next((o for o in self.options if o.startswith("--")), self.options[0])

    @property
    def accepted(self) -> tuple[str, ...]:
        """Option strings a rendered line may use for this action."""
        if self.action == "BooleanOptionalAction":
            # `--no-x` (and `--enable-x` for `--disable-x`) is the switch's other position.
            base = self.canonical
            inverse = next(
                (
                    new + base.removeprefix(old)
                    for old, new in _INVERSE.items()
                    if base.startswith(old)
                ),
                None,
            )
            twins = {f"--no-{base[2:]}", *((inverse,) if inverse else ())}
            return tuple(o for o in self.options if o == base or o in twins)
        return (self.canonical,)

    @property
    def takes_values(self) -> bool:
        return self.nargs != 0


@attrs.frozen
class OptionTable:
    version: str
    allow_abbrev: bool
    positionals: tuple[str, ...]
    """`vllm serve`'s positionals: `model_tag`, the model."""
    args: tuple[OptionSpec, ...]
    option_strings: dict[str, OptionSpec] = attrs.field(init=False, eq=False, repr=False)
    """Every option string (aliases too) -> its action."""

    def __attrs_post_init__(self) -> None:
        index = {o: spec for spec in self.args for o in spec.options}
        object.__setattr__(self, "option_strings", index)

    @classmethod
    def from_doc(cls, doc: Any, *, source: str) -> OptionTable:
        """A table from its JSON document; any deviation from the format is a
        `vllm-table-invalid`."""
        try:
            version = doc["vllm_version"]
            allow_abbrev = doc["allow_abbrev"]
            positionals = doc["positionals"]
            if not isinstance(version, str) or not isinstance(allow_abbrev, bool):
                raise TypeError("vllm_version must be a string, allow_abbrev a boolean")
            if not isinstance(positionals, list) or not all(
                isinstance(p, str) for p in positionals
            ):
                raise TypeError("positionals must be a list of strings")
            args = tuple(_option_spec(entry) for entry in doc["args"])
        except (ValueError, KeyError, TypeError) as err:
            raise _invalid(source, err) from None
        return cls(version, allow_abbrev, tuple(positionals), args)

    def find(self, *spellings: str) -> OptionSpec | None:
        """The action any of `spellings` names exactly (not deprecated), if the release has it."""
        for spelling in spellings:
            spec = self.option_strings.get(spelling)
            if spec is not None and not spec.deprecated:
                return spec
        return None


def _invalid(source: str, err: Exception) -> RenderError:
    fix = f"regenerate it: {ADD_RELEASE.format(version='<version>')}"
    return RenderError(
        [Problem("vllm-table-invalid", source, f"not a vLLM option table: {err}", fix)]
    )


def _option_spec(entry: Any) -> OptionSpec:
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
    return OptionSpec(
        options=tuple(options),
        dest=str(entry["dest"]),
        action=str(entry["action"]),
        type=None if entry["type"] is None else str(entry["type"]),
        nargs=nargs,
        choices=None if choices is None else tuple(str(c) for c in choices),
        required=bool(entry["required"]),
        deprecated=bool(entry["deprecated"]),
    )


@cache
def _bundle() -> Mapping[str, Any]:
    """The shipped tables, decompressed once per process."""
    source = f"{TABLE_PACKAGE}/{BUNDLE}"
    try:
        data = _read_shipped(BUNDLE)
        # zlib with gzip framing (wbits 31), as SGLang's tables: no gzip module import.
        bundle = json.loads(zlib.decompress(data, wbits=31))
        if bundle["format"] != BUNDLE_FORMAT:
            raise ValueError(f"format {bundle['format']}, this pvegpu reads {BUNDLE_FORMAT}")
        if not isinstance(bundle["entries"], list) or not isinstance(bundle["releases"], dict):
            raise TypeError("entries must be a list, releases an object")
    except (OSError, ValueError, KeyError, TypeError, zlib.error) as err:
        raise _invalid(source, err) from None
    return dict(bundle)


def _read_shipped(name: str) -> bytes:
    found = Path(pvegpu.engines.vllm.data.__file__ or "").parent / name
    if found.is_file():
        return found.read_bytes()
    from importlib import resources  # zip installs only

    return resources.files(TABLE_PACKAGE).joinpath(name).read_bytes()


def bundle_document(version: str) -> dict[str, Any]:
    """The shipped table of `version` in the one-table format (what the tool compares)."""
    bundle = _bundle()
    release = bundle["releases"][version]
    entries = bundle["entries"]
    return {
        "vllm_version": version,
        "allow_abbrev": release["allow_abbrev"],
        "positionals": release["positionals"],
        "args": [entries[i] for i in release["args"]],
    }


@cache
def shipped_versions() -> tuple[str, ...]:
    """Releases with a table in the package, oldest first."""
    return tuple(sorted(_bundle()["releases"], key=lambda v: (version_key(v), v)))


def unknown_version(version: str, why: str) -> RenderError:
    """The refusal for a release pvegpu has no table for and cannot build one of."""
    shipped = shipped_versions()
    problem = Problem(
        "vllm-version-unknown",
        f"vllm {version}",
        f"pvegpu has no option table for vLLM {version} ({why}), so it cannot check the "
        f"command line; it ships {shipped[0]} to {shipped[-1]} (the latest patch of each "
        "minor release)",
        "install a release pvegpu knows in the container, or add it to pvegpu: "
        + ADD_RELEASE.format(version=version),
    )
    return RenderError([problem])


@cache
def load_table(version: str) -> OptionTable:
    """The shipped table of `version`; RenderError naming the shipped ones if there is none."""
    if version not in shipped_versions():
        raise unknown_version(version, "not shipped, and no readable installation")
    source = f"{TABLE_PACKAGE}/{BUNDLE}: {version}"
    try:
        doc = bundle_document(version)
    except (KeyError, IndexError, TypeError) as err:
        raise _invalid(source, err) from None
    return OptionTable.from_doc(doc, source=source)


def table_from_sources(files: SourceFiles, version: str) -> OptionTable:
    """The table of an installed release pvegpu ships none for, read from its sources
    (`vllm/entrypoints/cli/serve.py` and what it calls) by the maintainer tool's reader."""
    # The ast-based reader is needed only for a release pvegpu ships no table for.
    from pvegpu.engines.vllm.option_reader import SourcesMissingError, read_option_table

    try:
        doc = read_option_table(files, version)
    except (SourcesMissingError, SyntaxError, RecursionError) as err:
        raise unknown_version(version, f"its sources do not give a table: {err}") from None
    return OptionTable.from_doc(doc, source=f"vllm {version} sources")
