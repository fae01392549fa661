"""The container files vLLM's installed release is read from, through a root reader.

Listing the site-packages and reading the METADATA is every engine's
(`engines.common.installed_files`); what is vLLM's is its distribution and, for a release
pvegpu ships no option table for, the sources its table is read from (the serve
subcommand, `make_arg_parser`, `arg_utils.py` and the config modules they use).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from pvegpu.engines.common.installed_files import Source, read_installed
from pvegpu.engines.vllm.installed import VLLM
from pvegpu.engines.vllm.options import shipped_versions
from pvegpu.errors import DiscoveryError
from pvegpu.model.facts import ConfigFile

if TYPE_CHECKING:
    from pvegpu.engines.common.installed_files import RootFiles


def read_installed_vllm(reader: RootFiles, rootfs: str, python: str) -> tuple[ConfigFile, ...]:
    """The vLLM METADATA (and, for an unshipped release, sources) that `python` in the
    container whose root file system is `rootfs` (under the host root) imports."""
    return read_installed(reader, rootfs, python, VLLM, shipped_versions(), _read_table)


def _read_table(source: Source, version: str) -> None:
    # Only for a release pvegpu ships no table for, as SGLang's reader.
    from pvegpu.engines.vllm.option_reader import SourcesMissingError, read_option_table

    with contextlib.suppress(SourcesMissingError, SyntaxError, RecursionError, DiscoveryError):
        read_option_table(source, version)
