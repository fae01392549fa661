"""SGLang's own option tables, per release: the model of one table and loading the shipped ones.

A table is every option of the real `launch_server` argument parser of one release:
option strings, dest, action, type, nargs, choices, required and deprecation. A command
line pvegpu renders is checked against the table of the release the container runs,
offline (`option_check`), so a flag the release lacks is an error and not a
crash-looping unit. What pvegpu writes for a release where releases differ is in
`versions` instead.

The shipped tables are one file, `pvegpu/engines/sglang/data/tables.json.gz`, written by
`tools/sglang_tables.py`: every distinct option entry once (`entries`), and per release
the list of its entries by index (`releases`); consecutive releases share most entries,
so 42 releases take about what two loose tables did. A release installed in a container
that has no shipped table gets one from its own sources (`table_from_sources`).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

import pvegpu.engines.sglang.data
from pvegpu.engines.common.releases import version_key
from pvegpu.engines.common.tables import ShippedTables, entry_fields
from pvegpu.errors import RenderError
from pvegpu.values import value_class

if TYPE_CHECKING:
    from pvegpu.engines.common.python_source import SourceFiles

TABLE_PACKAGE = "pvegpu.engines.sglang.data"
ADD_RELEASE = "make sglang-tables VERSIONS={version} (docs/serving.md, adding a release)"


@value_class
@attrs.frozen(eq=False, repr=False)
class OptionSpec:
    """One argparse action of `launch_server`, as the table records it."""

    options: tuple[str, ...]
    dest: str
    action: str
    type: str | None
    """Name of the converter argparse calls (`int`, `float`, `str`, `loads`, ...)."""
    nargs: int | str | None
    choices: tuple[str, ...] | None
    required: bool
    deprecated_alias_of: str | None
    primary: str | None = None
    """A spelling of this action that a newer shipped version made its first name."""

    @property
    def canonical(self) -> str:
        """The name pvegpu writes and the only one it accepts for this action.

        The first long option, unless a newer SGLang made another of this action's
        spellings its first name (0.5.9's `--tensor-parallel-size, --tp-size` became
        `--tp-size, --tensor-parallel-size`): then that one, so a unit file reads the
        same across upgrades.
        """
        if self.primary in self.options:
            return self.primary
        return next((o for o in self.options if o.startswith("--")), self.options[0])

    @property
    def accepted(self) -> tuple[str, ...]:
        """Option strings a rendered line may use for this action."""
        if self.action == "BooleanOptionalAction":
            # `--no-x` is not an alias of `--x`: it is the switch's other position.
            return tuple(o for o in self.options if o.startswith("--"))
        return (self.canonical,)

    @property
    def deprecated(self) -> bool:
        return self.deprecated_alias_of is not None or self.action.startswith("Deprecated")

    @property
    def takes_values(self) -> bool:
        return self.nargs != 0


@value_class
@attrs.frozen(eq=False, repr=False)
class OptionTable:
    version: str
    allow_abbrev: bool
    args: tuple[OptionSpec, ...]
    option_strings: dict[str, OptionSpec] = attrs.field(init=False, eq=False, repr=False)
    """Every option string (aliases too) -> its action."""

    def __attrs_post_init__(self) -> None:
        index = {o: spec for spec in self.args for o in spec.options}
        object.__setattr__(self, "option_strings", index)

    @property
    def positionals(self) -> tuple[str, ...]:
        """`launch_server` takes none: the model is `--model-path`."""
        return ()

    @classmethod
    def from_json(cls, text: str, *, source: str) -> OptionTable:
        """Parse one table; any deviation from the format is a `sglang-table-invalid`."""
        try:
            doc = json.loads(text)
        except ValueError as err:
            raise TABLES.invalid(source, err) from None
        return cls.from_doc(doc, source=source)

    @classmethod
    def from_doc(cls, doc: Any, *, source: str) -> OptionTable:
        """A table from its parsed JSON document (`from_json` without the text)."""
        try:
            version = doc["sglang_version"]
            allow_abbrev = doc["allow_abbrev"]
            if not isinstance(version, str) or not isinstance(allow_abbrev, bool):
                raise TypeError("sglang_version must be a string, allow_abbrev a boolean")
            args = tuple(_option_spec(entry) for entry in doc["args"])
        except (ValueError, KeyError, TypeError) as err:
            raise TABLES.invalid(source, err) from None
        return cls(version=version, allow_abbrev=allow_abbrev, args=args)

    def find(self, *spellings: str) -> OptionSpec | None:
        """The action any of `spellings` names exactly (not deprecated), if the version has it.

        Options are looked up by the spellings SGLang has used, not by dest: dests get
        renamed too (0.5.9's tensor_parallel_size is 0.5.23's tp_size).
        """
        for spelling in spellings:
            spec = self.option_strings.get(spelling)
            if spec is not None and not spec.deprecated:
                return spec
        return None


def _option_spec(entry: Any) -> OptionSpec:
    fields = entry_fields(entry)
    alias = entry["deprecated_alias_of"]
    return OptionSpec(
        **fields,
        deprecated_alias_of=None if alias is None else str(alias),
    )


TABLES = ShippedTables(
    engine="sglang",
    title="SGLang",
    table_noun="an SGLang option table",
    package=TABLE_PACKAGE,
    directory=Path(pvegpu.engines.sglang.data.__file__ or "").parent,
    add_release=ADD_RELEASE,
    version_key=version_key,
    shipped_note="",
)


def bundle_document(version: str) -> dict[str, Any]:
    """The shipped table of `version` in the one-table format (what the tool compares)."""
    release, entries = TABLES.release(version)
    return {
        "sglang_version": version,
        "allow_abbrev": release["allow_abbrev"],
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
    return _with_primary(OptionTable.from_doc(doc, source=source))


def table_from_sources(files: SourceFiles, version: str) -> OptionTable:
    """The table of an installed release pvegpu ships none for, read from its sources.

    `files` maps `sglang/srt/server_args.py` (and the modules it imports) to their text;
    the reader is the one the maintainer tool uses on the published wheels.
    """
    # The ast-based reader is needed only for a release pvegpu ships no table for.
    from pvegpu.engines.sglang.option_reader import (
        SourcesMissingError,
        read_option_table,
    )

    try:
        doc = read_option_table(files, version)
    except (SourcesMissingError, SyntaxError, RecursionError) as err:
        raise unknown_version(version, f"its sources do not give a table: {err}") from None
    return _with_primary(OptionTable.from_doc(doc, source=f"sglang {version} server_args.py"))


def _with_primary(table: OptionTable) -> OptionTable:
    """`table` with each action's canonical spelling taken from the newest shipped release."""
    newest = shipped_versions()[-1]
    if table.version == newest:
        return table
    names = _newest_names()
    args = tuple(
        attrs.evolve(spec, primary=primary)
        if (primary := next((o for o in spec.options if o in names), None)) is not None
        and primary != spec.canonical
        else spec
        for spec in table.args
    )
    return attrs.evolve(table, args=args)


@cache
def _newest_names() -> frozenset[str]:
    return frozenset(spec.canonical for spec in load_table(shipped_versions()[-1]).args)
