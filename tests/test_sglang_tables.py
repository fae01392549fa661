"""The option reader and tools/sglang_tables.py: tables read from SGLang sources match
the real parser's, and the shipped bundle holds every release compactly."""

from __future__ import annotations

import gzip
import importlib.util
import json
import textwrap
import zipfile
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pvegpu.engines.common.tables import BUNDLE
from pvegpu.engines.sglang.option_reader import SourcesMissingError, read_option_table, read_options
from pvegpu.engines.sglang.options import TABLE_PACKAGE, bundle_document, shipped_versions

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_tables", REPO / "tools/sglang_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOOL = _tool()


class SourceZip:
    """The files of tests/data/sglang-<v>-sources.zip: what the reader opens of that wheel."""

    def __init__(self, version: str) -> None:
        self.archive = zipfile.ZipFile(DATA / f"sglang-{version}-sources.zip")
        self.names = sorted(self.archive.namelist())

    def __call__(self, path: str) -> str | None:
        return self.archive.read(path).decode() if path in self.names else None


def source_files(version: str) -> SourceZip:
    return SourceZip(version)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_reader_matches_the_real_parser(version: str) -> None:
    """Same option strings and kinds (action, nargs, type, choices, ...) as the dump of the
    real parser: 0.5.9 from add_argument calls, 0.5.23 from dataclass fields in modules."""
    ours, unresolved = read_options(source_files(version), version)
    assert unresolved == []
    assert TOOL.differences(ours, bundle_document(version)) == []


def test_comparison_reports_a_changed_kind() -> None:
    real = bundle_document("0.5.9")
    ours = json.loads(json.dumps(real))
    ours["args"][5]["nargs"] = "+"
    del ours["args"][7]
    found = TOOL.differences(ours, real)
    assert len(found) == 2
    assert any("nargs" in line for line in found)
    assert any(line.startswith("only in the dump") for line in found)


def test_bundle_round_trips_and_shares_entries(tmp_path: Path) -> None:
    releases: dict[str, dict[str, Any]] = {
        v: {"source": "wheel", "table": bundle_document(v)} for v in ("0.5.8", "0.5.9")
    }
    path = tmp_path / "tables.json.gz"
    TOOL.write_bundle(path, releases)
    assert TOOL.read_bundle(path) == releases
    raw = json.loads(gzip.decompress(path.read_bytes()))
    both = len(releases["0.5.8"]["table"]["args"]) + len(releases["0.5.9"]["table"]["args"])
    assert len(raw["entries"]) < both * 0.6  # consecutive releases share most options


def test_shipped_bundle_is_small_and_marks_the_parser_dumps() -> None:
    data = resources.files(TABLE_PACKAGE).joinpath(BUNDLE).read_bytes()
    assert len(data) < 64 * 1024
    releases = json.loads(gzip.decompress(data))["releases"]
    assert list(releases) == list(shipped_versions())
    parser = [v for v, r in releases.items() if r["source"] == "parser"]
    assert parser == ["0.5.9", "0.5.23"]


def tree(**modules: str) -> Any:
    files = {
        name.replace("__", "/") + ".py": textwrap.dedent(text) for name, text in modules.items()
    }
    return lambda path: files.get(path)


def options_of(**modules: str) -> dict[str, dict[str, Any]]:
    table = read_option_table(tree(**modules), "9.9")
    return {a["options"][0]: a for a in table["args"]}


SERVER_ARGS_FIELDS = """
    import dataclasses
    from typing import List, Literal, Optional
    from sglang.srt.arg_utils import A, Arg
    from .choices import BACKENDS

    @dataclasses.dataclass
    class ServerArgs:
        model_path: A[str, Arg(help="m", aliases=["--model"])]
        mode: A[Literal["a", "b"], "help"] = "a"
        backend: A[Optional[str], Arg(help="b", choices=BACKENDS + ["x"])] = None
        sizes: A[Optional[List[int]], "s"] = None
        fast: A[bool, "f"] = False
        hidden: A[int, Arg(help="h", no_cli=True)] = 1
        plain: int = 3
        tp_size: A[int, Arg(help="t", cli_name="--tp-size", aliases=["--tensor-parallel-size"])] = 1

        @staticmethod
        def add_cli_args(parser):
            add_cli_args_from_dataclass(parser, ServerArgs)
            parser.add_argument("--old", dest="mode", action=DeprecatedAliasStoreAction,
                                new_flag="--mode", type=str)
            parser.add_argument("--switch", action=argparse.BooleanOptionalAction)
"""


def test_dataclass_fields_follow_sglangs_rules() -> None:
    found = options_of(
        sglang__srt__server_args=SERVER_ARGS_FIELDS,
        sglang__srt__choices="BACKENDS = ['fa3', 'triton']\n",
    )
    assert found["--model-path"]["options"] == ["--model-path", "--model"]
    assert found["--model-path"]["required"] is True
    assert found["--mode"]["choices"] == ["a", "b"] and found["--mode"]["type"] == "str"
    assert found["--backend"]["choices"] == ["fa3", "triton", "x"]
    assert (found["--sizes"]["nargs"], found["--sizes"]["type"]) == ("+", "int")
    assert (found["--fast"]["action"], found["--fast"]["nargs"]) == ("_StoreTrueAction", 0)
    assert "--hidden" not in found and "--plain" not in found
    assert found["--tp-size"]["options"] == ["--tp-size", "--tensor-parallel-size"]
    assert found["--tp-size"]["dest"] == "tp_size"
    assert found["--old"]["deprecated_alias_of"] == "--mode"
    assert found["--switch"]["options"] == ["--switch", "--no-switch"]


def test_unresolved_choices_stay_open() -> None:
    """choices from a runtime call are not guessed: null, and reported to the maintainer."""
    text = """
        class ServerArgs:
            @staticmethod
            def add_cli_args(parser):
                parser.add_argument("--parser", choices=registry.names(), type=str)
                parser.add_argument("--n", type=int, default=-1, choices=[1, 2])
    """
    table, unresolved = read_options(tree(sglang__srt__server_args=text), "9.9")
    by_name = {a["options"][0]: a for a in table["args"]}
    assert by_name["--parser"]["choices"] is None
    assert unresolved == ["--parser"]
    assert (by_name["--n"]["default"], by_name["--n"]["choices"]) == (-1, [1, 2])


def test_enum_comprehension_and_helper_functions_resolve() -> None:
    text = """
        import sys
        from enum import Enum

        class Mode(Enum):
            NONE = 0
            ALL = 1

        def _names():
            module = sys.modules.get("x")
            if module is not None:
                return list(module.Names)
            from sglang.srt.names import NAMES
            return list(NAMES)

        class ServerArgs:
            @staticmethod
            def add_cli_args(parser):
                names = _names()
                parser.add_argument("--mode", choices=[m.name.lower() for m in Mode])
                parser.add_argument("--name", choices=["auto"] + names)
    """
    found = options_of(
        sglang__srt__server_args=text, sglang__srt__names="NAMES = {'a': 1, 'b': 2}.keys()\n"
    )
    assert found["--mode"]["choices"] == ["none", "all"]
    assert found["--name"]["choices"] == ["auto", "a", "b"]


def test_missing_server_args_is_reported() -> None:
    with pytest.raises(SourcesMissingError):
        read_option_table(tree(), "9.9")
