"""A served model's checkpoint as the facts' files say, worked out once per facts value.

Discovery reads a serving pool's model directory (host view, `model_config` of the spec):
its `config.json`, its `model.safetensors.index.json`, and the stats (names and sizes) of
its files. The fit check asks for the parsed config and the weights' total size: answered
here (`checkpoints(facts)`), each on first use and then kept with the facts' lookups, so
serving looks no file up by path and parses no text. No I/O here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import TypeVar

from pvegpu.errors import PlanError
from pvegpu.model.facts import HostFacts
from pvegpu.model.model_config import (
    ModelConfig,
    checkpoint_bytes_from_index,
    checkpoint_bytes_from_shards,
    parse_model_config,
)

INDEX = "model.safetensors.index.json"
"""The index a sharded safetensors checkpoint lists its tensors' total size in."""


def checkpoints(facts: HostFacts) -> Checkpoints:
    """The facts' model checkpoints, worked out once per facts value."""
    return facts.derived(Checkpoints)


class Checkpoints:
    """A HostFacts' model directories, each answer on first use. A plain class, never
    compared or shown. An answer that is a refusal (a malformed file) is kept and raised
    again."""

    __slots__ = ("_configs", "_facts", "_weights")

    def __init__(self, facts: HostFacts) -> None:
        self._facts = facts
        self._configs: dict[str, ModelConfig | PlanError | None] = {}
        self._weights: dict[str, tuple[int, str] | PlanError | None] = {}

    def config(self, path: str) -> ModelConfig | None:
        """The model config at `path` (root-relative) parsed; None when it was not read.
        Raises PlanError naming the file when it is not a model config."""
        return _kept(self._configs, path, self._parse)

    def _parse(self, path: str) -> ModelConfig | None:
        file = self._facts.file(path)
        return None if file is None else parse_model_config(file.content, path=path)

    def weights(self, directory: str) -> tuple[int, str] | None:
        """The total size of the weights in `directory` and where it comes from: its
        safetensors index, else the sum of its `*.safetensors` files; None when it has
        neither. Raises PlanError naming the index when that is malformed."""
        return _kept(self._weights, directory, self._measure)

    def _measure(self, directory: str) -> tuple[int, str] | None:
        index_path = f"{directory}/{INDEX}"
        index = self._facts.file(index_path)
        if index is not None:
            return checkpoint_bytes_from_index(index.content, path=index_path), index_path
        shards = [(posixpath.basename(s.path), s.size) for s in self._facts.stats_in(directory)]
        total = checkpoint_bytes_from_shards(shards)
        return None if total is None else (total, f"{directory}/*.safetensors")


_T = TypeVar("_T")


def _kept(answers: dict[str, _T | PlanError], key: str, work: Callable[[str], _T]) -> _T:
    """`work(key)`, worked out once: its answer, or its refusal raised again each time."""
    if key not in answers:
        try:
            answers[key] = work(key)
        except PlanError as err:
            answers[key] = err
    found = answers[key]
    if isinstance(found, PlanError):
        raise found
    return found
