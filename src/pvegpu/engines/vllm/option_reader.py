"""The `vllm serve` option table of a vLLM release, read from its sources without importing them.

vLLM's imports need torch and a GPU stack, so its parser is rebuilt with `ast` from the
files that build it, the way `vllm serve` calls them:

- the serve subcommand (`vllm/scripts.py` `main()` up to 0.6, `vllm/entrypoints/cli/serve.py`
  `subparser_init` from 0.7): the `model_tag` positional, a few options, then
  `make_arg_parser` (`vllm/entrypoints/openai/cli_args.py`, from 0.30
  `vllm/entrypoints/common/cli_args.py`);
- `make_arg_parser`: its own `add_argument` calls (every frontend option up to 0.9), then
  `FrontendArgs.add_cli_args` (0.10 on: one option per field of the `FrontendArgs`
  dataclass) and `AsyncEngineArgs.add_cli_args`, which calls `EngineArgs.add_cli_args`;
- `EngineArgs.add_cli_args` (`vllm/engine/arg_utils.py`): plain `add_argument` calls up to
  0.7; from 0.8 most options are `add_argument("--name", **get_kwargs(SomeConfig)["field"])`,
  their kind derived from the config dataclass field's annotation by vLLM's `get_kwargs`
  rules (bool -> `--x/--no-x`, Literal -> choices, list/tuple -> nargs, int, float, dict or a
  dataclass -> JSON, anything else str), which `field_kinds` repeats statically.

Values the evaluator cannot follow (a plugin registry's keys, a runtime call) are recorded
as unknown (null): a missing `choices` only makes the check accept more, never refuse a
valid line. Used by the maintainer tool (tools/vllm_tables.py, wheels from PyPI) and at
plan time for a release installed in a container that pvegpu ships no table for.
"""

from __future__ import annotations

import ast
from typing import Any

from pvegpu.engines.common.python_source import (
    ClassRef,
    Module,
    SourceFiles,
    Sources,
    UnresolvedError,
    dotted,
    json_choices,
)
from pvegpu.engines.vllm.field_kinds import MAX_DEPTH, definition, field_kinds

SERVE_MODULES = ("vllm.entrypoints.cli.serve", "vllm.scripts")
"""Where the serve subcommand builds its parser: 0.7 on, then 0.5-0.6."""
ARG_UTILS = "vllm/engine/arg_utils.py"
_ACTIONS: dict[str, tuple[str, int | None]] = {
    "store": ("store", None),
    "store_const": ("store_const", 0),
    "store_true": ("store_true", 0),
    "store_false": ("store_false", 0),
    "append": ("append", None),
    "append_const": ("append_const", 0),
    "count": ("count", 0),
    "help": ("help", 0),
    "version": ("version", 0),
    "extend": ("extend", None),
}


class SourcesMissingError(Exception):
    """The tree lacks the serve subcommand, `make_arg_parser` or `EngineArgs`."""


def read_option_table(files: SourceFiles, version: str) -> dict[str, Any]:
    """The option table document of the vLLM tree `files` reads (the shipped format)."""
    sources = Sources(files, "vllm")
    found = next(
        ((m, name) for name in SERVE_MODULES if (m := sources.module(name)) is not None), None
    )
    if found is None:
        raise SourcesMissingError("no vllm/entrypoints/cli/serve.py or vllm/scripts.py")
    module, name = found
    serve = _serve_function(module)
    if serve is None:
        raise SourcesMissingError(f"{name} builds no `serve` subcommand parser")
    reader = _Reader(sources)
    reader.entries.append(_entry(["-h", "--help"], "help", "help", None, 0, None))
    reader.read_serve(module, serve)
    if not any("--tensor-parallel-size" in e["options"] for e in reader.entries):
        raise SourcesMissingError("the serve parser has no --tensor-parallel-size (no EngineArgs)")
    return {
        "vllm_version": version,
        "allow_abbrev": True,
        "positionals": reader.positionals,
        "args": reader.entries,
    }


def _serve_function(module: Module) -> ast.FunctionDef | None:
    """`main()` (0.5-0.6) or `ServeSubcommand.subparser_init` (0.7 on)."""
    for stmt in module.tree.body:
        bodies: list[ast.FunctionDef] = []
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "main":
            bodies.append(stmt)
        elif isinstance(stmt, ast.ClassDef):
            bodies.extend(
                s
                for s in stmt.body
                if isinstance(s, ast.FunctionDef) and s.name == "subparser_init"
            )
        for func in bodies:
            if any(_is_serve_parser(n) for n in ast.walk(func)):
                return func
    return None


def _is_serve_parser(node: ast.AST) -> bool:
    """`x = subparsers.add_parser("serve", ...)` (or `self.name`, which is "serve")."""
    if not (isinstance(node, ast.Call) and dotted(node.func) == "add_parser" and node.args):
        return False
    first = node.args[0]
    return (isinstance(first, ast.Constant) and first.value == "serve") or (
        isinstance(first, ast.Attribute) and first.attr == "name"
    )


def _entry(
    options: list[str],
    dest: str,
    action: str,
    type_name: str | None,
    nargs: int | str | None,
    choices: list[Any] | None,
    required: bool = False,
    deprecated: bool = False,
) -> dict[str, Any]:
    return {
        "options": options,
        "dest": dest,
        "action": action,
        "type": type_name,
        "nargs": nargs,
        "choices": choices,
        "required": required,
        "deprecated": deprecated,
    }


def _method(
    module: Module, cls: ast.ClassDef, name: str, *, inherited_only: bool = False
) -> tuple[Module, ast.FunctionDef, ast.ClassDef] | None:
    """Method `name` of `cls` or of the first base (in the sources) that defines it, with
    the class that does; `inherited_only`: a base's (what `super().name` calls)."""
    for stmt in () if inherited_only else cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return module, stmt, cls
    for base in cls.bases:
        found = definition(module, dotted(base))
        if found is not None and isinstance(found[1], ast.ClassDef):
            inherited = _method(found[0], found[1], name)
            if inherited is not None:
                return inherited
    return None


class _Reader:
    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self.entries: list[dict[str, Any]] = []
        self.positionals: list[str] = []
        self.depth = 0
        self.seen: set[str] = set()

    # -- walking the functions that fill the parser

    def read_serve(self, module: Module, func: ast.FunctionDef) -> None:
        """The serve parser's own calls only (`main()` also builds `chat` and `complete`)."""
        serve_vars = {
            t.id
            for node in ast.walk(func)
            if isinstance(node, ast.Assign) and _is_serve_parser(node.value)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        for node in _in_order(func.body):
            call = node.value if isinstance(node, ast.Assign | ast.Return) else node
            if not isinstance(call, ast.Call):
                continue
            receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
            on_serve = isinstance(receiver, ast.Name) and receiver.id in serve_vars
            takes_serve = any(isinstance(a, ast.Name) and a.id in serve_vars for a in call.args)
            if dotted(call.func) == "add_argument" and on_serve:
                self.add_argument(_Body(module, None), call)
            elif takes_serve and not on_serve:
                self.follow(module, None, call)

    def follow(self, module: Module, cls: ClassRef | None, call: ast.Call) -> None:
        """Read the function `call` runs when it is one of the parser builders."""
        if self.depth >= MAX_DEPTH:
            return
        target: tuple[Module, ast.FunctionDef] | None = None
        defining: ast.ClassDef | None = None
        func = call.func
        if isinstance(func, ast.Name):
            found = definition(module, func.id)
            if found is not None and isinstance(found[1], ast.FunctionDef):
                target = (found[0], found[1])
        elif isinstance(func, ast.Attribute) and func.attr == "add_cli_args":
            owner = func.value
            found = None
            if isinstance(owner, ast.Name) and owner.id == "cls" and cls is not None:
                found = (cls.module, cls.node)
            elif isinstance(owner, ast.Name):
                found = definition(module, owner.id)
            if found is not None and isinstance(found[1], ast.ClassDef):
                method = _method(found[0], found[1], "add_cli_args")
                if method is not None:
                    cls = ClassRef(found[0], found[1])
                    target, defining = (method[0], method[1]), method[2]
        if target is None:
            return
        key = f"{target[0].name}.{getattr(cls, 'name', '')}.{target[1].name}"
        if key in self.seen:
            return
        self.seen.add(key)
        self.depth += 1
        try:
            self.read_body(_Body(target[0], cls, defining), target[1].body)
        finally:
            self.depth -= 1

    def read_body(self, body: _Body, stmts: list[ast.stmt]) -> None:
        for node in _in_order(stmts):
            if isinstance(node, ast.For):
                self.read_loop(body, node)
                continue
            if isinstance(node, ast.Delete):
                for target in node.targets:
                    body.delete(target)
                continue
            value: ast.AST | None = node
            if isinstance(node, ast.Assign):
                if body.assign(node, self):
                    continue
                value = node.value
            elif isinstance(node, ast.Return):
                value = node.value
            if not isinstance(value, ast.Call):
                continue
            if dotted(value.func) == "add_argument":
                self.add_argument(body, value)
            elif any(isinstance(a, ast.Name) for a in value.args):
                self.follow(body.module, body.cls, value)

    def read_loop(self, body: _Body, loop: ast.For) -> None:
        """`for key, value in kwargs.items(): group.add_argument(f"--{key...}", **value)`."""
        iterated = loop.iter
        if not (
            isinstance(iterated, ast.Call)
            and isinstance(iterated.func, ast.Attribute)
            and iterated.func.attr == "items"
            and isinstance(iterated.func.value, ast.Name)
            and iterated.func.value.id in body.kwargs
        ):
            return
        adds = [
            n
            for n in ast.walk(loop)
            if isinstance(n, ast.Call) and dotted(n.func) == "add_argument"
        ]
        if not adds:
            return
        for name, kind in body.kwargs[iterated.func.value.id].items():
            flags = [f for f in kind.get("flags", ()) if isinstance(f, str)]
            options = [*flags, "--" + name.replace("_", "-")]
            self.entries.append(self.entry(options, {}, kind, name))

    def add_argument(self, body: _Body, call: ast.Call) -> None:
        options: list[str] = []
        for arg in call.args:
            value = body.value(arg)
            if not isinstance(value, str):
                return  # options built at runtime: nothing static to record
            options.append(value)
        if not options:
            return
        kind: dict[str, Any] = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                kind.update(body.spread(keyword.value))
        explicit = {k.arg: k.value for k in call.keywords if k.arg is not None}
        if not options[0].startswith("-"):
            if options[0] not in self.positionals:
                self.positionals.append(options[0])
            return
        self.entries.append(self.entry(options, explicit, kind, None, body))

    def entry(
        self,
        options: list[str],
        explicit: dict[str, ast.expr],
        kind: dict[str, Any],
        field: str | None,
        body: _Body | None = None,
    ) -> dict[str, Any]:
        """What argparse records for `add_argument(*options, **kind, **explicit)`."""
        values = dict(kind)
        for key, node in explicit.items():
            values[key] = _explicit(body, key, node)
        action = values.get("action") or "store"
        nargs = values.get("nargs")
        if action in _ACTIONS:
            action, fixed = _ACTIONS[action]
            nargs = fixed if fixed == 0 else nargs
        elif action == "BooleanOptionalAction":
            negated = [f"--no-{o[2:]}" for o in options if o.startswith("--")]
            if kind.get("enable_disable"):
                inverse = {"--enable-": "--disable-", "--disable-": "--enable-"}
                negated += [
                    new + o.removeprefix(old)
                    for o in options
                    for old, new in inverse.items()
                    if o.startswith(old)
                ]
            options = [*options, *negated]
            nargs = 0
        long = next((o for o in options if o.startswith("--")), options[0])
        dest = values.get("dest") if isinstance(values.get("dest"), str) else None
        choices = values.get("choices")
        return _entry(
            options,
            dest or field or long.lstrip("-").replace("-", "_"),
            action,
            values.get("type") if isinstance(values.get("type"), str) else None,
            nargs if nargs is None or isinstance(nargs, int | str) else None,
            choices if isinstance(choices, list) else None,
            values.get("required") is True,
            values.get("deprecated") is True,
        )


def _explicit(body: _Body | None, key: str, node: ast.expr) -> Any:
    """An explicit keyword of `add_argument` as the table records it."""
    if key == "type":
        return _type_name(node)
    if key == "action":
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return dotted(node)
    if body is None:
        return None
    value = body.value(node)
    if key == "choices":
        return json_choices(value)
    return value


def _type_name(node: ast.expr) -> str | None:
    """The converter of `type=`: `json.loads` -> `loads`, `optional_type(int)` -> `int`."""
    if isinstance(node, ast.Call) and dotted(node.func) == "optional_type" and node.args:
        return _type_name(node.args[0])
    if isinstance(node, ast.Call) and dotted(node.func) == "partial" and node.args:
        return _type_name(node.args[0])
    if isinstance(node, ast.Lambda):
        return None
    return dotted(node) or None


class _Body:
    """One function being read: its module, class (for `cls`) and `get_kwargs` results."""

    def __init__(
        self, module: Module, cls: ClassRef | None, defining: ast.ClassDef | None = None
    ) -> None:
        self.module = module
        self.cls = cls
        self.defining = defining
        """The class whose method this is (`super()` starts at its bases)."""
        self.kwargs: dict[str, dict[str, dict[str, Any]]] = {}

    def value(self, node: ast.expr) -> Any:
        try:
            return self.module.evaluate(node)
        except (UnresolvedError, KeyError, TypeError, IndexError, AttributeError):
            return None

    def config_class(self, node: ast.expr) -> ClassRef | None:
        if isinstance(node, ast.Name) and node.id == "cls":
            return self.cls
        if isinstance(node, ast.Name):
            found = definition(self.module, node.id)
            if found is not None and isinstance(found[1], ast.ClassDef):
                return ClassRef(found[0], found[1])
        return None

    def assign(self, node: ast.Assign, reader: _Reader) -> bool:
        """Track `x = get_kwargs(C)`, `x = cls._customize_cli_kwargs(x)`, `x["f"]["k"] = v`."""
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Call):
            name = dotted(value.func)
            if name == "get_kwargs" and value.args:
                cls = self.config_class(value.args[0])
                self.kwargs[target.id] = field_kinds(cls) if cls is not None else {}
                return True
            if name == "_customize_cli_kwargs" and self.cls is not None:
                owner = value.func.value if isinstance(value.func, ast.Attribute) else None
                is_super = isinstance(owner, ast.Call) and dotted(owner.func) == "super"
                if is_super and self.defining is not None:
                    method = _method(self.module, self.defining, name, inherited_only=True)
                else:
                    method = _method(self.cls.module, self.cls.node, name)
                if method is not None:
                    inner = _Body(method[0], self.cls, method[2])
                    param = method[1].args.args[-1].arg
                    inner.kwargs[param] = self.kwargs.get(target.id, {})
                    reader.read_body(inner, method[1].body)
                    self.kwargs[target.id] = inner.kwargs[param]
                return True
        if isinstance(target, ast.Subscript):
            path = self._path(target)
            if path is not None:
                kinds, field, key = path
                if key == "type":
                    kinds.setdefault(field, {})["type"] = _type_name(value)
                elif key == "action":
                    kinds.setdefault(field, {})["action"] = _explicit(self, key, value)
                elif key in ("nargs", "choices", "default"):
                    kinds.setdefault(field, {})[key] = _explicit(self, key, value)
                return True
        return False

    def delete(self, target: ast.expr) -> None:
        path = self._path(target) if isinstance(target, ast.Subscript) else None
        if path is not None:
            kinds, field, key = path
            kinds.get(field, {}).pop(key, None)

    def _path(self, target: ast.Subscript) -> tuple[dict[str, dict[str, Any]], str, str] | None:
        """`x["field"]["key"]` of a tracked `get_kwargs` result."""
        inner = target.value
        if not (isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name)):
            return None
        kinds = self.kwargs.get(inner.value.id)
        field, key = self.value(inner.slice), self.value(target.slice)
        if kinds is None or not isinstance(field, str) or not isinstance(key, str):
            return None
        return kinds, field, key

    def spread(self, node: ast.expr) -> dict[str, Any]:
        """`**x["field"]` of a tracked `get_kwargs` result, also inside a dict display
        (`**{**x["field"], "default": None}`)."""
        if isinstance(node, ast.Dict):
            merged: dict[str, Any] = {}
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:
                    merged.update(self.spread(value))
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    merged[key.value] = _explicit(self, key.value, value)
            return merged
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            kinds = self.kwargs.get(node.value.id)
            field = self.value(node.slice)
            if kinds is not None and isinstance(field, str):
                return dict(kinds.get(field, {}))
        return {}


def _in_order(body: list[ast.stmt]) -> list[ast.AST]:
    """Assignments, deletes, loops, returns and calls of `body` in source order, into
    if/with/try blocks (both branches: a plugin check or `sys.argv` test picks one)."""
    found: list[ast.AST] = []
    for stmt in body:
        if isinstance(stmt, ast.Assign | ast.Delete | ast.For | ast.Return):
            found.append(stmt)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            found.append(stmt.value)
        elif isinstance(stmt, ast.If | ast.With | ast.Try):
            found.extend(_in_order([*stmt.body, *getattr(stmt, "orelse", [])]))
    return found
