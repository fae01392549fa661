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

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

import pvegpu.engines.vllm.data
from pvegpu.engines.common.releases import version_key
from pvegpu.engines.common.tables import ShippedTables, entry_fields
from pvegpu.errors import RenderError
from pvegpu.values import value_class

if TYPE_CHECKING:
    from pvegpu.engines.common.python_source import SourceFiles

TABLE_PACKAGE = "pvegpu.engines.vllm.data"
ADD_RELEASE = "make vllm-tables VERSIONS={version} (docs/vllm.md, adding a release)"
_INVERSE = {"--enable-": "--disable-", "--disable-": "--enable-"}


@value_class
@attrs.frozen(eq=False, repr=False)
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


@value_class
@attrs.frozen(eq=False, repr=False)
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
            raise TABLES.invalid(source, err) from None
        return cls(version, allow_abbrev, tuple(positionals), args)

    def find(self, *spellings: str) -> OptionSpec | None:
        """The action any of `spellings` names exactly (not deprecated), if the release has it."""
        for spelling in spellings:
            spec = self.option_strings.get(spelling)
            if spec is not None and not spec.deprecated:
                return spec
        return None


def _option_spec(entry: Any) -> OptionSpec:
    fields = entry_fields(entry)
    return OptionSpec(
        **fields,
        deprecated=bool(entry["deprecated"]),
    )


TABLES = ShippedTables(
    engine="vllm",
    title="vLLM",
    table_noun="a vLLM option table",
    package=TABLE_PACKAGE,
    directory=Path(pvegpu.engines.vllm.data.__file__ or "").parent,
    add_release=ADD_RELEASE,
    version_key=version_key,
    shipped_note=" (the latest patch of each minor release)",
)


def bundle_document(version: str) -> dict[str, Any]:
    """The shipped table of `version` in the one-table format (what the tool compares)."""
    release, entries = TABLES.release(version)
    return {
        "vllm_version": version,
        "allow_abbrev": release["allow_abbrev"],
        "positionals": release["positionals"],
        "args": entries,
    }


@cache
def shipped_versions() -> tuple[str, ...]:
    """Releases with a table in the package, oldest first."""
    return TABLES.shipped_versions()


def unknown_version(version: str, why: str) -> RenderError:
    """The refusal for a release pvegpu has no table for and cannot build one of."""
    return TABLES.unknown_version(version, why)


@cache
def load_table(version: str) -> OptionTable:
    """The shipped table of `version`; RenderError naming the shipped ones if there is none."""
    doc, source = TABLES.shipped_document(version, bundle_document)
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
