"""vLLM's `get_kwargs(cls)`, statically: each config dataclass field's argparse kind.

From 0.8 `EngineArgs.add_cli_args` (and from 0.10 `FrontendArgs`) turn the fields of
config dataclasses into options by their annotations (`vllm/engine/arg_utils.py`
`get_kwargs`): a dataclass -> a JSON converter; bool -> `BooleanOptionalAction`
(`--x/--no-x`; from 0.33 `EnableDisableAction`, which also takes `--enable-x` for
`--disable-x`); Literal -> its sorted choices (none when `str` is allowed too); tuple,
list, set -> nargs "+"; int (vLLM's `human_readable_int` for a few sizes), float; dict ->
JSON; anything else str; `| None` adds "None" to the choices. This module reads the
annotation with `ast`, following unions, `Optional`, `Annotated`/`SkipValidation` and
type aliases into the modules that define them.
"""

from __future__ import annotations

import ast
from typing import Any

from pvegpu.engines.common.python_source import ClassRef, Module, UnresolvedError, dotted

MAX_DEPTH = 12
"""How far imports, bases, aliases and calls are followed (a cycle stops there)."""
_HUMAN_READABLE = frozenset({"max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes"})
"""Fields `get_kwargs` gives vLLM's `human_readable_int` converter instead of int."""


def definition(module: Module, name: str) -> tuple[Module, ast.AST] | None:
    """The module and node defining `name` as seen from `module`, imports followed."""
    for _ in range(MAX_DEPTH):
        node = module.bindings.get(name)
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            return module, node
        if name not in module.imports:
            return None
        source, name = module.imports[name]
        if not source.startswith("vllm"):
            return None
        found = module.sources.module(source)
        if found is None:
            return None
        module = found
    return None


def field_kinds(cls: ClassRef) -> dict[str, dict[str, Any]]:
    """`get_kwargs(cls)`: field name -> the kind of its option (type, action, nargs, choices)."""
    return _FieldKinds(cls).all()


class _FieldKinds:
    """vLLM's `get_kwargs(cls)`: each dataclass field's argparse kind from its annotation."""

    def __init__(self, cls: ClassRef | None) -> None:
        self.cls = cls

    def all(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        if self.cls is not None:
            for module, stmt in self._fields(self.cls.module, self.cls.node, 0):
                name = stmt.target.id  # type: ignore[union-attr]
                found.pop(name, None)
                found[name] = self.kind(module, stmt.annotation)
                if found[name].get("type") == "int" and name in _HUMAN_READABLE:
                    # `32k`, `1M` too where the release has the converter (0.10 on).
                    arg_utils = module.sources.module("vllm.engine.arg_utils")
                    if arg_utils is not None and (
                        "human_readable_int" in arg_utils.bindings
                        or "human_readable_int" in arg_utils.imports
                    ):
                        found[name]["type"] = "human_readable_int"
        return found

    def _fields(
        self, module: Module, cls: ast.ClassDef, depth: int
    ) -> list[tuple[Module, ast.AnnAssign]]:
        """Fields of the bases first, then the class's own, as `dataclasses.fields` orders them."""
        out: list[tuple[Module, ast.AnnAssign]] = []
        if depth > MAX_DEPTH:
            return out
        for base in cls.bases:
            found = definition(module, dotted(base))
            if found is not None and isinstance(found[1], ast.ClassDef):
                out.extend(self._fields(found[0], found[1], depth + 1))
        for stmt in cls.body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and dotted(stmt.annotation) not in ("ClassVar", "InitVar")
            ):
                out.append((module, stmt))
        return out

    def kind(self, module: Module, annotation: ast.expr) -> dict[str, Any]:
        hints = _Hints(module)
        hints.add(annotation, 0)
        names = hints.names
        kind: dict[str, Any]
        if hints.dataclass:
            kind = {"type": "parse_dataclass"}
        elif "bool" in names:
            kind = {"action": "BooleanOptionalAction", "enable_disable": _enable_disable(module)}
        elif hints.literal is not None:
            values = hints.literal
            first = type(values[0]).__name__ if values else "str"
            kind = {"type": first if first in ("int", "float") else "str"}
            if "str" not in names and values and None not in values:
                kind["choices"] = sorted(str(v) for v in values)
        elif names & {"tuple", "Tuple"} or names & {"list", "List", "set", "Set"}:
            kind = {"type": hints.element, "nargs": "+"}
        elif "int" in names:
            kind = {"type": "int"}
        elif "float" in names:
            kind = {"type": "float"}
        elif names & {"dict", "Dict"}:
            kind = {"type": "loads"}
        else:
            kind = {"type": "str"}
        if hints.optional and "bool" not in names:
            kind["nullable"] = True
            if "choices" in kind:
                kind["choices"] = [*kind["choices"], "None"]
        return kind


def _enable_disable(module: Module) -> bool:
    """Whether the release's parser registers `EnableDisableAction` for bool options
    (`--disable-x` also taking `--enable-x`), as `vllm/utils/argparse_utils.py` does later on."""
    found = module.sources.module("vllm.utils.argparse_utils")
    return found is not None and "EnableDisableAction" in found.bindings


class _Hints:
    """The flattened type hints of an annotation: unions opened, aliases followed."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.names: set[str] = set()
        self.literal: list[Any] | None = None
        self.dataclass = False
        self.optional = False
        self.element = "str"

    def add(self, node: ast.expr, depth: int, module: Module | None = None) -> None:
        module = module or self.module
        if depth > MAX_DEPTH:
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body  # a string annotation
            except SyntaxError:
                return
        if isinstance(node, ast.Constant) and node.value is None:
            self.optional = True
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            self.add(node.left, depth + 1, module)
            self.add(node.right, depth + 1, module)
            return
        if isinstance(node, ast.Subscript):
            head = dotted(node.value)
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head in ("Optional", "Union", "Annotated", "SkipValidation"):
                # SkipValidation[X] is pydantic's Annotated[X, SkipValidation()].
                for item in items if head in ("Optional", "Union") else items[:1]:
                    self.add(item, depth + 1, module)
                if head == "Optional":
                    self.optional = True
                return
            if head == "Literal":
                values = []
                for item in items:
                    try:
                        values.append(module.evaluate(item))
                    except (UnresolvedError, KeyError, TypeError):
                        values.append(None)
                self.literal = [*(self.literal or []), *values]
                return
            self.names.add(head)
            if head in ("list", "List", "set", "Set", "tuple", "Tuple") and items:
                element = dotted(items[0])
                self.element = element if element in ("int", "float") else "str"
            return
        name = dotted(node)
        if isinstance(node, ast.Name) and name not in _BUILTIN_TYPES:
            found = definition(module, name)
            if found is not None and isinstance(found[1], ast.ClassDef):
                self._class(found[1])
                return
            alias = module.bindings.get(name)
            if alias is None and name in module.imports:
                source, original = module.imports[name]
                other = module.sources.module(source) if source.startswith("vllm") else None
                if other is not None:
                    module, alias = other, other.bindings.get(original)
            if isinstance(alias, ast.expr) and not isinstance(alias, ast.Call):
                self.add(alias, depth + 1, module)
                return
        if name == "None":
            self.optional = True
            return
        self.names.add(name)

    def _class(self, cls: ast.ClassDef) -> None:
        bases = {dotted(b) for b in cls.bases}
        decorators = {dotted(d.func if isinstance(d, ast.Call) else d) for d in cls.decorator_list}
        if decorators & {"dataclass", "config"}:
            self.dataclass = True
        elif bases & {"Enum", "StrEnum", "IntEnum"}:
            self.names.add("str")
        else:
            self.names.add(cls.name)


_BUILTIN_TYPES = frozenset(
    {"bool", "int", "float", "str", "dict", "list", "tuple", "set", "Any", "None", "bytes"}
)
