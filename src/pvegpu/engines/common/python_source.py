"""Static evaluation of an engine's Python sources: the constants its argument parser uses.

An engine's `option_reader` builds a release's option table without importing the engine
(whose imports need torch and a GPU stack): it reads the source files and evaluates, with
`ast`, only the expressions the parser's `add_argument` calls and dataclass fields use:
literals, module constants (`ATTENTION_BACKEND_CHOICES`), names imported from other
modules of the engine's own package (`Sources.package`: `sglang`, `vllm`), class
attributes (`ReasoningParser.DetectorMap`), enum members, `list()`/`sorted()`/`.keys()`,
`+`, comprehensions and no-argument helper functions (their last `return`). Anything else
raises `UnresolvedError`; the reader then records the value as unknown (null) rather than guess.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

SourceFiles = Callable[[str], "str | None"]
"""`sglang/srt/server_args.py` (a path in the engine's tree) -> that file's text, or None
when the tree lacks it."""

_ENUM_BASES = frozenset({"Enum", "StrEnum", "IntEnum", "IntFlag", "Flag"})
_MAX_DEPTH = 64


class UnresolvedError(Exception):
    """An expression this evaluator does not follow (a runtime call, a third-party name)."""


class Opaque:
    """A value inside a container that did not resolve; only its presence is known."""


class ClassRef:
    """A class found in the sources: its body's assignments are its attributes."""

    def __init__(self, module: Module, node: ast.ClassDef) -> None:
        self.module = module
        self.node = node
        self.name = node.name

    @property
    def base_names(self) -> list[str]:
        return [_last_name(b) for b in self.node.bases]

    @property
    def is_enum(self) -> bool:
        return any(name in _ENUM_BASES for name in self.base_names)

    def body_value(self, name: str) -> ast.expr | None:
        for stmt in self.node.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in stmt.targets
            ):
                return stmt.value
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and stmt.target.id == name
            ):
                return stmt.value
        return None

    def members(self) -> list[EnumMember]:
        found = []
        for stmt in self.node.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if not name.startswith("_"):
                    found.append(EnumMember(name, self.module.evaluate(stmt.value)))
        return found


class EnumMember:
    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript):
        return _last_name(node.value)
    return ""


def dotted(node: ast.expr) -> str:
    """`argparse.BooleanOptionalAction` -> its last name; `str` -> `str`."""
    return _last_name(node)


class Sources:
    """The parsed modules of one engine's tree, loaded on first use."""

    def __init__(self, files: SourceFiles, package: str) -> None:
        self.files = files
        self.package = package
        """The engine's top-level package: the only imports followed (third-party and
        standard-library names stay unresolved)."""
        self._modules: dict[str, Module | None] = {}

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            self._modules[name] = None  # a cycle reads as missing
            base = name.replace(".", "/")
            text, package = self.files(f"{base}.py"), name.rpartition(".")[0]
            if text is None:
                text, package = self.files(f"{base}/__init__.py"), name
            if text is not None:
                self._modules[name] = Module(self, name, package, ast.parse(text))
        return self._modules[name]


class Module:
    """One module: its top-level bindings, looked up lazily by name."""

    def __init__(self, sources: Sources, name: str, package: str, tree: ast.Module) -> None:
        self.sources = sources
        self.name = name
        self.package = package
        self.tree = tree
        self.bindings: dict[str, ast.AST] = {}
        self.imports: dict[str, tuple[str, str]] = {}
        self.star_imports: list[str] = []
        """`from .common import *` (0.5.3's sglang.srt.utils): searched last."""
        self._depth = 0
        for stmt in tree.body:
            self.bind(stmt, self.bindings, self.imports)
        self.classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
        """Classes by name, also where a later assignment rebinds the name (0.5.20's
        `ServerArgs = msgspec.defstruct(...)` rebuilds the class it first defines)."""

    def bind(
        self, stmt: ast.stmt, bindings: dict[str, ast.AST], imports: dict[str, tuple[str, str]]
    ) -> None:
        """Record what `stmt` binds; later bindings replace earlier ones, like execution."""
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    bindings[target.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
            bindings[stmt.target.id] = stmt.value
        elif isinstance(stmt, ast.ClassDef | ast.FunctionDef):
            bindings[stmt.name] = stmt
        elif isinstance(stmt, ast.ImportFrom):
            module = self.absolute(stmt.module or "", stmt.level)
            for alias in stmt.names:
                if alias.name == "*":
                    self.star_imports.append(module)
                    continue
                imports[alias.asname or alias.name] = (module, alias.name)
                bindings.pop(alias.asname or alias.name, None)
        elif isinstance(stmt, ast.If | ast.Try):
            # `try: from x import y / except ImportError: ...`: the first branch is the
            # installed one on the machines SGLang supports.
            for inner in stmt.body:
                self.bind(inner, bindings, imports)

    def absolute(self, module: str, level: int) -> str:
        """The absolute name of an import: `.common` in package sglang.srt.utils."""
        if level == 0:
            return module
        parts = self.package.split(".")
        base = ".".join(parts[: len(parts) - level + 1])
        return f"{base}.{module}" if module else base

    def lookup(self, name: str, scope: dict[str, Any] | None = None) -> Any:
        if scope is not None and name in scope:
            return scope[name]
        if name in self.bindings:
            node = self.bindings[name]
            if isinstance(node, ast.ClassDef):
                return ClassRef(self, node)
            if isinstance(node, ast.FunctionDef):
                return node
            assert isinstance(node, ast.expr)
            return self.evaluate(node)
        if name in self.imports:
            return self.imported(*self.imports[name])
        if name in {"None", "True", "False"}:
            return {"None": None, "True": True, "False": False}[name]
        for module in self.star_imports:
            found = self.sources.module(module)
            if found is not None and (name in found.bindings or name in found.imports):
                return found.lookup(name)
        raise UnresolvedError(name)

    def imported(self, module: str, name: str) -> Any:
        if not module.startswith(self.sources.package):
            raise UnresolvedError(f"{module}.{name}")
        found = self.sources.module(module)
        if found is None:
            sub = self.sources.module(f"{module}.{name}")
            if sub is None:
                raise UnresolvedError(f"{module}.{name}")
            return sub
        return found.lookup(name)

    def evaluate(self, node: ast.expr, scope: dict[str, Any] | None = None) -> Any:
        self._depth += 1
        try:
            if self._depth > _MAX_DEPTH:
                raise UnresolvedError("too deep")
            return self._evaluate(node, scope)
        finally:
            self._depth -= 1

    def _items(self, nodes: list[ast.expr], scope: dict[str, Any] | None) -> Iterator[Any]:
        for item in nodes:
            if isinstance(item, ast.Starred):
                yield from self.iterate(self.evaluate(item.value, scope))
            else:
                try:
                    yield self.evaluate(item, scope)
                except UnresolvedError:
                    yield Opaque()

    def iterate(self, value: Any) -> list[Any]:
        if isinstance(value, ClassRef) and value.is_enum:
            return list(value.members())
        if isinstance(value, dict):
            return list(value)
        if isinstance(value, list | tuple | set | frozenset | str):
            return list(value)
        raise UnresolvedError(f"iterate {type(value).__name__}")

    def _evaluate(self, node: ast.expr, scope: dict[str, Any] | None) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = list(self._items(node.elts, scope))
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            result: dict[Any, Any] = {}
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:
                    result.update(self.evaluate(value, scope))
                    continue
                try:
                    result[self.evaluate(key, scope)] = self.evaluate(value, scope)
                except UnresolvedError:
                    result[self.evaluate(key, scope)] = Opaque()
            return result
        if isinstance(node, ast.Name):
            return self.lookup(node.id, scope)
        if isinstance(node, ast.Attribute):
            return self._attribute(self.evaluate(node.value, scope), node.attr)
        if isinstance(node, ast.BinOp):
            left, right = self.evaluate(node.left, scope), self.evaluate(node.right, scope)
            if isinstance(node.op, ast.Add):
                if isinstance(left, list) and isinstance(right, tuple | set):
                    right = list(right)
                return left + right
            if isinstance(node.op, ast.BitOr) and isinstance(left, set | frozenset | dict):
                return left | right
            if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
                return left * right
            raise UnresolvedError("operator")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = self.evaluate(node.operand, scope)
            if isinstance(operand, int | float):
                return -operand
            raise UnresolvedError("unary -")
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self._comprehension(node, scope)
        if isinstance(node, ast.Call):
            return self._call(node, scope)
        if isinstance(node, ast.Subscript):
            return self.evaluate(node.value, scope)[self.evaluate(node.slice, scope)]
        if isinstance(node, ast.JoinedStr):
            raise UnresolvedError("f-string")
        raise UnresolvedError(type(node).__name__)

    def _attribute(self, owner: Any, attr: str) -> Any:
        if isinstance(owner, Module):
            return owner.lookup(attr)
        if isinstance(owner, ClassRef):
            if owner.is_enum:
                member = next((m for m in owner.members() if m.name == attr), None)
                if member is not None:
                    return member
            value = owner.body_value(attr)
            if value is None:
                raise UnresolvedError(f"{owner.name}.{attr}")
            return owner.module.evaluate(value)
        if isinstance(owner, EnumMember) and attr in {"name", "value"}:
            return owner.name if attr == "name" else owner.value
        if isinstance(owner, str | dict | list):
            return _BoundMethod(owner, attr)
        raise UnresolvedError(f".{attr}")

    def _comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp, scope: dict[str, Any] | None
    ) -> list[Any]:
        if len(node.generators) != 1 or not isinstance(node.generators[0].target, ast.Name):
            raise UnresolvedError("comprehension")
        generator = node.generators[0]
        assert isinstance(generator.target, ast.Name)
        out = []
        for item in self.iterate(self.evaluate(generator.iter, scope)):
            local = {**(scope or {}), generator.target.id: item}
            if all(self.evaluate(cond, local) for cond in generator.ifs):
                out.append(self.evaluate(node.elt, local))
        return out

    def _call(self, node: ast.Call, scope: dict[str, Any] | None) -> Any:
        func = node.func
        args = [self.evaluate(a, scope) for a in node.args]
        if isinstance(func, ast.Name) and func.id in _BUILTINS and not node.keywords:
            return _BUILTINS[func.id](self, *args)
        target = self.evaluate(func, scope)
        if isinstance(target, _BoundMethod):
            return target.call(*args)
        if isinstance(target, ast.FunctionDef) and not args and not node.keywords:
            return self.function_result(target)
        raise UnresolvedError("call")

    def function_result(self, func: ast.FunctionDef) -> Any:
        """The value of a no-argument helper: its last `return`, after its local imports."""
        local: dict[str, ast.AST] = {}
        imports: dict[str, tuple[str, str]] = {}
        for stmt in func.body:
            self.bind(stmt, local, imports)
        returns = [s for s in func.body if isinstance(s, ast.Return) and s.value is not None]
        if not returns:
            raise UnresolvedError(f"{func.name}()")
        scope: dict[str, Any] = {name: self.imported(*where) for name, where in imports.items()}
        for name, value in local.items():
            if isinstance(value, ast.expr):
                # `sys.modules.get(...)`: only the branches not taken use it
                with contextlib.suppress(UnresolvedError):
                    scope[name] = self.evaluate(value, scope)
        result = returns[-1].value
        assert result is not None
        return self.evaluate(result, scope)


class _BoundMethod:
    def __init__(self, owner: Any, name: str) -> None:
        self.owner = owner
        self.name = name

    def call(self, *args: Any) -> Any:
        if isinstance(self.owner, dict) and self.name in {"keys", "values", "items"} and not args:
            return list(getattr(self.owner, self.name)())
        if isinstance(self.owner, str) and self.name in {"lower", "upper", "strip"} and not args:
            return getattr(self.owner, self.name)()
        raise UnresolvedError(f".{self.name}()")


def _plain(evaluator: Module, value: Any) -> list[Any]:
    return evaluator.iterate(value)


_BUILTINS: dict[str, Callable[..., Any]] = {
    "list": lambda ev, value=(): _plain(ev, value),
    "tuple": lambda ev, value=(): tuple(_plain(ev, value)),
    "set": lambda ev, value=(): _plain(ev, value),
    "frozenset": lambda ev, value=(): _plain(ev, value),
    "sorted": lambda ev, value: sorted(_plain(ev, value)),
}


def json_value(value: Any) -> Any:
    """`value` as JSON can hold it, or None (the table then says "unknown")."""
    if isinstance(value, EnumMember):
        return json_value(value.value)
    if isinstance(value, list | tuple):
        items = [json_value(v) for v in value]
        return (
            None
            if any(v is None and o is not None for v, o in zip(items, value, strict=True))
            else items
        )
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return None


def json_default(value: Any) -> Any:
    """A default as the dumped tables hold it: scalars as they are, containers as `str()`."""
    if isinstance(value, list | tuple | dict):
        plain = json_value(list(value.items()) if isinstance(value, dict) else value)
        return None if plain is None else str(value)
    return json_value(value)


def json_choices(value: Any) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        value = list(value)
    if not isinstance(value, list | tuple | set) or any(isinstance(v, Opaque) for v in value):
        return None
    plain = json_value(list(value))
    return plain if isinstance(plain, list) else None
