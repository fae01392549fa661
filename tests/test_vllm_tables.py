"""vLLM's option tables: the shipped bundle, the ast reader that builds them, the tool."""

from __future__ import annotations

import gzip
import importlib.util
import json
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pvegpu.engines.common.releases import version_key
from pvegpu.engines.common.tables import BUNDLE
from pvegpu.engines.vllm.option_reader import SourcesMissingError, read_option_table
from pvegpu.engines.vllm.options import (
    TABLE_PACKAGE,
    OptionTable,
    bundle_document,
    load_table,
    shipped_versions,
    table_from_sources,
)
from pvegpu.errors import RenderError


def _tool() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "tools/vllm_tables.py"
    spec = importlib.util.spec_from_file_location("vllm_tables", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vllm_tables = _tool()

SHIPPED = shipped_versions()

# A vLLM tree as the releases lay it out from 0.30 on, cut to what the parser is built
# from: the serve subcommand, make_arg_parser (common/cli_args.py), FrontendArgs (one
# option per field, customised through super()), AsyncEngineArgs -> EngineArgs, and
# config dataclasses whose annotations decide each option's kind.
MODERN: dict[str, str] = {
    "vllm/entrypoints/cli/serve.py": """
from vllm.entrypoints.common.cli_args import make_arg_parser

class ServeSubcommand:
    name = "serve"

    def subparser_init(self, subparsers):
        serve_parser = subparsers.add_parser(self.name, help="serve")
        serve_parser = make_arg_parser(serve_parser)
        return serve_parser
""",
    "vllm/entrypoints/common/cli_args.py": """
import json
from vllm.config import config
from vllm.engine.arg_utils import AsyncEngineArgs

@config
class BaseFrontendArgs:
    host: str | None = None
    allowed_origins: list[str] = None

    @classmethod
    def _customize_cli_kwargs(cls, frontend_kwargs):
        frontend_kwargs["allowed_origins"]["type"] = json.loads
        del frontend_kwargs["allowed_origins"]["nargs"]
        return frontend_kwargs

    @classmethod
    def add_cli_args(cls, parser):
        from vllm.engine.arg_utils import get_kwargs

        frontend_kwargs = get_kwargs(cls)
        frontend_kwargs = cls._customize_cli_kwargs(frontend_kwargs)
        group = parser.add_argument_group(title="Frontend")
        for key, value in frontend_kwargs.items():
            group.add_argument(f"--{key.replace('_', '-')}", **value)
        return parser

@config
class FrontendArgs(BaseFrontendArgs):
    port: int = 8000
    api_key: list[str] | None = None

    @classmethod
    def _customize_cli_kwargs(cls, frontend_kwargs):
        frontend_kwargs = super()._customize_cli_kwargs(frontend_kwargs)
        frontend_kwargs["api_key"]["type"] = str
        return frontend_kwargs

def make_arg_parser(parser):
    parser.add_argument("model_tag", type=str, nargs="?", help="the model")
    parser.add_argument("--headless", action="store_true", default=False)
    parser = FrontendArgs.add_cli_args(parser)
    parser = AsyncEngineArgs.add_cli_args(parser)
    return parser
""",
    "vllm/engine/arg_utils.py": """
import argparse
from vllm.config import ParallelConfig, SpeculativeConfig, CacheConfig, VllmConfig

def human_readable_int(value):
    return int(value)

def get_kwargs(cls):
    return {}

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        parallel_kwargs = get_kwargs(ParallelConfig)
        group = parser.add_argument_group(title="ParallelConfig")
        group.add_argument(
            "--tensor-parallel-size", "-tp", **parallel_kwargs["tensor_parallel_size"]
        )
        group.add_argument(
            "--disable-custom-all-reduce", **parallel_kwargs["disable_custom_all_reduce"]
        )
        group.add_argument("--distributed-backend", **parallel_kwargs["distributed_backend"])
        cache_kwargs = get_kwargs(CacheConfig)
        group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        group.add_argument(
            "--enable-prefix-caching", **{**cache_kwargs["enable_prefix_caching"], "default": None}
        )
        group.add_argument("--max-model-len", **cache_kwargs["max_model_len"])
        group.add_argument(
            "--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"]
        )
        group.add_argument("--served-model-name", **cache_kwargs["served_model_name"])
        vllm_kwargs = get_kwargs(VllmConfig)
        group.add_argument("--speculative-config", "-sc", **vllm_kwargs["speculative_config"])
        parser.add_argument("--old-flag", action="store_true", deprecated=True)
        return parser

class AsyncEngineArgs(EngineArgs):
    @staticmethod
    def add_cli_args(parser, async_args_only=False):
        if not async_args_only:
            parser = EngineArgs.add_cli_args(parser)
        parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction)
        return parser
""",
    "vllm/config/__init__.py": """
from vllm.config.utils import config
from vllm.config.parallel import ParallelConfig, CacheConfig, CacheDType
from vllm.config.speculative import SpeculativeConfig
from vllm.config.vllm import VllmConfig
""",
    "vllm/config/utils.py": "def config(cls):\n    return cls\n",
    "vllm/config/parallel.py": """
from typing import Literal
from pydantic import SkipValidation
from vllm.config.utils import config

Backend = Literal["mp", "ray"]
CacheDType = Literal["auto", "fp8", "fp8_e5m2"]

@config
class ParallelConfig:
    tensor_parallel_size: int = 1
    disable_custom_all_reduce: bool = False
    distributed_backend: Backend | None = None

@config
class CacheConfig:
    cache_dtype: CacheDType = "auto"
    enable_prefix_caching: bool = True
    max_model_len: SkipValidation[int] = None
    gpu_memory_utilization: float = 0.9
    served_model_name: str | list[str] | None = None
""",
    "vllm/config/speculative.py": """
from vllm.config.utils import config

@config
class SpeculativeConfig:
    num_speculative_tokens: int = 1
""",
    "vllm/config/vllm.py": """
from vllm.config.utils import config
from vllm.config.speculative import SpeculativeConfig

@config
class VllmConfig:
    speculative_config: SpeculativeConfig | None = None
""",
    "vllm/utils/argparse_utils.py": """
import argparse

class EnableDisableAction(argparse.BooleanOptionalAction):
    pass
""",
}

# 0.5-0.6: `vllm/scripts.py` builds serve beside chat/complete; plain add_argument calls.
OLD: dict[str, str] = {
    "vllm/scripts.py": """
from vllm.entrypoints.openai.cli_args import make_arg_parser

def main():
    parser = FlexibleArgumentParser()
    subparsers = parser.add_subparsers()
    serve_parser = subparsers.add_parser("serve", help="serve")
    serve_parser.add_argument("model_tag", type=str, help="the model")
    serve_parser = make_arg_parser(serve_parser)
    chat_parser = subparsers.add_parser("chat")
    chat_parser.add_argument("--url", type=str)
""",
    "vllm/entrypoints/openai/cli_args.py": """
from vllm.engine.arg_utils import AsyncEngineArgs

def make_arg_parser(parser):
    parser.add_argument("--host", type=nullable_str, default=None)
    parser.add_argument("--port", type=int, default=8000)
    parser = AsyncEngineArgs.add_cli_args(parser)
    return parser
""",
    "vllm/engine/arg_utils.py": """
LOAD_FORMATS = ["auto", "pt", "safetensors"]

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
        parser.add_argument("--load-format", type=str, choices=LOAD_FORMATS)
        parser.add_argument("--disable-custom-all-reduce", action="store_true")
        parser.add_argument("--served-model-name", nargs="+", type=str, default=None)
        return parser

class AsyncEngineArgs(EngineArgs):
    @staticmethod
    def add_cli_args(parser, async_args_only=False):
        parser = EngineArgs.add_cli_args(parser)
        parser.add_argument("--disable-log-requests", action="store_true")
        return parser
""",
}


def files_of(tree: dict[str, str]) -> Any:
    return tree.get


def table_of(tree: dict[str, str], version: str = "9.9.9") -> OptionTable:
    return OptionTable.from_doc(read_option_table(files_of(tree), version), source="test")


def test_the_modern_layout_is_read_with_vllms_get_kwargs_rules() -> None:
    table = table_of(MODERN)
    assert table.positionals == ("model_tag",)
    tp = table.option_strings["-tp"]
    assert (tp.options, tp.type, tp.nargs) == (("--tensor-parallel-size", "-tp"), "int", None)
    # bool -> BooleanOptionalAction; the release registers EnableDisableAction for it.
    switch = table.option_strings["--disable-custom-all-reduce"]
    assert switch.options == (
        "--disable-custom-all-reduce",
        "--no-disable-custom-all-reduce",
        "--enable-custom-all-reduce",
    )
    assert switch.nargs == 0 and "--enable-custom-all-reduce" in switch.accepted
    # A Literal alias (imported) -> sorted choices; `| None` adds "None".
    assert table.option_strings["--kv-cache-dtype"].choices == ("auto", "fp8", "fp8_e5m2")
    assert table.option_strings["--distributed-backend"].choices == ("mp", "ray", "None")
    # `**{**kwargs["f"], "default": None}` keeps the field's kind.
    assert table.option_strings["--enable-prefix-caching"].action == "BooleanOptionalAction"
    # SkipValidation[int] is an int; max_model_len gets vLLM's human-readable converter.
    assert table.option_strings["--max-model-len"].type == "human_readable_int"
    # A dataclass field is JSON.
    speculative = table.option_strings["-sc"]
    assert speculative.canonical == "--speculative-config"
    assert speculative.type == "parse_dataclass"
    # FrontendArgs: one option per field, its bases' first, customised through super().
    assert table.option_strings["--allowed-origins"].type == "loads"
    assert table.option_strings["--allowed-origins"].nargs is None
    assert table.option_strings["--api-key"].nargs == "+"
    assert table.option_strings["--api-key"].type == "str"
    assert table.option_strings["--port"].type == "int"
    assert table.option_strings["--gpu-memory-utilization"].type == "float"
    # `str | list[str]`: a list (nargs "+") of str, as get_kwargs checks list before str.
    assert table.option_strings["--served-model-name"].nargs == "+"
    assert table.option_strings["--old-flag"].deprecated
    assert "--enable-log-requests" in table.option_strings
    assert "--no-enable-log-requests" in table.option_strings


def test_the_old_layout_reads_only_the_serve_parser() -> None:
    table = table_of(OLD)
    assert table.positionals == ("model_tag",)
    assert "--url" not in table.option_strings  # `vllm chat`'s, not serve's
    assert table.option_strings["--load-format"].choices == ("auto", "pt", "safetensors")
    assert table.option_strings["--disable-custom-all-reduce"].action == "store_true"
    assert table.option_strings["--served-model-name"].nargs == "+"
    assert table.option_strings["--host"].type == "nullable_str"
    assert "--disable-log-requests" in table.option_strings


def test_a_tree_without_the_serve_subcommand_or_engine_args_is_refused() -> None:
    with pytest.raises(SourcesMissingError):
        read_option_table(files_of({"vllm/__init__.py": ""}), "9.9.9")
    no_engine = {**OLD, "vllm/engine/arg_utils.py": "class EngineArgs:\n    pass\n"}
    with pytest.raises(SourcesMissingError):
        read_option_table(files_of(no_engine), "9.9.9")
    with pytest.raises(RenderError) as err:
        table_from_sources(files_of(no_engine), "9.9.9")
    assert err.value.problems[0].code == "vllm-version-unknown"


def test_the_bundle_covers_the_first_serve_release_and_each_minor_releases_latest() -> None:
    assert SHIPPED[0] == vllm_tables.FIRST == "0.5.2"
    assert SHIPPED[-1] == "0.33.0"
    series = [version_key(v)[:2] for v in SHIPPED[1:]]
    assert series == sorted(set(series)), "one release per minor series after the first"
    assert series[0] == (0, 5) and series[-1] == (0, 33)
    assert len(SHIPPED) == 30


def test_the_coverage_rule_picks_the_latest_patch_of_each_minor() -> None:
    served = ["0.5.1", "0.5.2", "0.5.5", "0.6.1", "0.6.6.post1", "0.6.6", "0.10.1.1", "0.10.2"]
    assert vllm_tables.covered([*served, "0.11.0rc1", "0.4.3"]) == [
        "0.5.2",
        "0.5.5",
        "0.6.6.post1",
        "0.10.2",
    ]


def test_every_shipped_table_loads_and_has_what_pvegpu_writes() -> None:
    for version in SHIPPED:
        table = load_table(version)
        assert table.positionals == ("model_tag",), version
        for option in ("--tensor-parallel-size", "--host", "--port", "--max-model-len"):
            assert table.find(option) is not None, (version, option)
        assert table.find("--disable-custom-all-reduce") is not None, version
        assert table.find("--gpu-memory-utilization") is not None, version


def test_the_bundle_is_compact_and_the_tool_reads_back_what_it_wrote(tmp_path: Path) -> None:
    path = Path(__import__(TABLE_PACKAGE, fromlist=["x"]).__file__ or "").parent / BUNDLE
    assert path.stat().st_size < 64 * 1024
    releases = vllm_tables.read_bundle(path)
    assert list(releases) == list(SHIPPED)
    assert releases[SHIPPED[-1]] == bundle_document(SHIPPED[-1])
    copy = tmp_path / "tables.json.gz"
    vllm_tables.write_bundle(copy, releases)
    assert gzip.decompress(copy.read_bytes()) == gzip.decompress(path.read_bytes())


def test_the_tool_reads_a_wheel_as_a_zip(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in MODERN.items():
            archive.writestr(name, text)
    doc = read_option_table(vllm_tables.wheel_files(wheel), "9.9.9")
    assert doc == read_option_table(files_of(MODERN), "9.9.9")


def test_compare_names_what_the_real_parser_parses_differently() -> None:
    ours = read_option_table(files_of(OLD), "9.9.9")
    real = json.loads(json.dumps(ours))
    for entry in real["args"]:
        entry["action"] = {
            "store": "_StoreAction",
            "store_true": "_StoreTrueAction",
            "help": "_HelpAction",
        }[entry["action"]]
    assert vllm_tables.differences(ours, real) == []
    real["args"][1]["nargs"] = "+"
    real["args"].append({"options": ["--new"], "dest": "new", "action": "_StoreAction"})
    found = vllm_tables.differences(ours, real)
    assert found == ["only in the dump: --new", f"{real['args'][1]['options'][0]} nargs: "
                     f"generated None, dump '+'"]  # fmt: skip
