"""The option table of an SGLang release, read from its sources without importing them.

`ServerArgs.add_cli_args` in `sglang/srt/server_args.py` fills the `launch_server`
parser in three styles over the 0.5 series, and this reads all of them with `ast`:

- 0.5.1-0.5.13: one `parser.add_argument(...)` call per option;
- 0.5.14-0.5.19: `add_cli_args_from_dataclass(parser, ServerArgs)` turns each
  `name: A[type, Arg(...)]` field of the ServerArgs dataclass into an option, then a
  few `add_argument` calls add the rest (deprecated spellings, dynamic choices);
- 0.5.20 on: the same, with the fields in the classes `_INPUT_NAMESPACES` lists
  (`sglang/srt/arg_groups/fields/*.py`).

The field rules are those of SGLang's `arg_utils.add_cli_args_from_dataclass`: Literal ->
choices, Optional unwrapped, `list[X]` -> nargs "+", bool -> store_true, no default ->
required. Each option becomes one table entry (`options.OptionTable` format). A value
the evaluator cannot follow (`engines.common.python_source.UnresolvedError`) is recorded
as null: a missing `choices` only makes the check accept more, never refuse a valid line.

Used by the maintainer tool (tools/sglang_tables.py, wheels from PyPI) and at plan time
for a release installed in a container that pvegpu ships no table for.
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
    json_default,
)

SERVER_ARGS = "sglang.srt.server_args"
SUPPRESS = "==SUPPRESS=="

# argparse's own actions by their `action=` string: class name and fixed nargs.
_ACTIONS: dict[str, tuple[str, int | None]] = {
    "store": ("_StoreAction", None),
    "store_const": ("_StoreConstAction", 0),
    "store_true": ("_StoreTrueAction", 0),
    "store_false": ("_StoreFalseAction", 0),
    "append": ("_AppendAction", None),
    "append_const": ("_AppendConstAction", 0),
    "count": ("_CountAction", 0),
    "help": ("_HelpAction", 0),
    "version": ("_VersionAction", 0),
    "extend": ("_ExtendAction", None),
}
_FLAG_DEFAULTS = {"_StoreTrueAction": False, "_StoreFalseAction": True}
_MISSING = object()


class SourcesMissingError(Exception):
    """The tree has no `sglang/srt/server_args.py`, or no `ServerArgs.add_cli_args`."""


def read_option_table(files: SourceFiles, version: str) -> dict[str, Any]:
    """The option table document of the SGLang tree `files` reads (the shipped format)."""
    return read_options(files, version)[0]


def read_options(files: SourceFiles, version: str) -> tuple[dict[str, Any], list[str]]:
    """`read_option_table` and the options whose choices did not resolve (left null)."""
    sources = Sources(files, "sglang")
    module = sources.module(SERVER_ARGS)
    if module is None:
        raise SourcesMissingError("sglang/srt/server_args.py is missing")
    server_args = module.classes.get("ServerArgs")
    if server_args is None:
        raise SourcesMissingError("server_args.py defines no class ServerArgs")
    add_cli_args = next(
        (
            s
            for s in server_args.body
            if isinstance(s, ast.FunctionDef) and s.name == "add_cli_args"
        ),
        None,
    )
    if add_cli_args is None:
        raise SourcesMissingError("ServerArgs has no add_cli_args")
    reader = _Reader(module, ClassRef(module, server_args))
    reader.entries.append(_entry(["-h", "--help"], "help", "_HelpAction", None, 0, None, SUPPRESS))
    reader.read_body(add_cli_args)
    # launch_server builds a plain `argparse.ArgumentParser()`: prefixes are allowed.
    table = {"sglang_version": version, "allow_abbrev": True, "args": reader.entries}
    return table, reader.unresolved


def _entry(
    options: list[str],
    dest: str,
    action: str,
    type_name: str | None,
    nargs: int | str | None,
    choices: list[Any] | None,
    default: Any = None,
    required: bool = False,
    deprecated_alias_of: str | None = None,
) -> dict[str, Any]:
    return {
        "options": options,
        "dest": dest,
        "action": action,
        "type": type_name,
        "nargs": nargs,
        "choices": choices,
        "default": default,
        "required": required,
        "deprecated_alias_of": deprecated_alias_of,
    }


class _Reader:
    def __init__(self, module: Module, server_args: ClassRef) -> None:
        self.module = module
        self.server_args = server_args
        self.entries: list[dict[str, Any]] = []
        self.scope: dict[str, Any] = {}
        self.unresolved: list[str] = []

    def value(self, node: ast.expr | None, default: Any = None) -> Any:
        if node is None:
            return default
        try:
            return self.module.evaluate(node, self.scope)
        except (UnresolvedError, KeyError, TypeError, IndexError):
            return _MISSING if default is _MISSING else None

    def read_body(self, func: ast.FunctionDef) -> None:
        """Every option `func` adds, in source order; its local variables are tracked."""
        for node in _in_order(func.body):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                try:
                    self.scope[node.targets[0].id] = self.module.evaluate(node.value, self.scope)
                except (UnresolvedError, KeyError, TypeError):
                    self.scope.pop(node.targets[0].id, None)
            elif isinstance(node, ast.Call) and dotted(node.func) == "add_argument":
                self.add_argument(node)
            elif isinstance(node, ast.Call) and dotted(node.func) == "add_cli_args_from_dataclass":
                self.add_fields()

    def add_argument(self, call: ast.Call) -> None:
        options = [self.value(a) for a in call.args]
        if not options or not all(isinstance(o, str) for o in options):
            return  # options built at runtime: nothing static to record
        kw = {k.arg: k.value for k in call.keywords if k.arg is not None}
        self.entries.append(self.argparse_entry(options, kw))

    def argparse_entry(self, options: list[str], kw: dict[str, ast.expr]) -> dict[str, Any]:
        """What argparse records for `add_argument(*options, **kw)`."""
        action_node = kw.get("action")
        action: str = "_StoreAction"
        nargs: int | str | None = None
        if action_node is not None:
            if isinstance(action_node, ast.Constant) and isinstance(action_node.value, str):
                action, nargs = _ACTIONS.get(action_node.value, (action_node.value, None))
            else:
                action = dotted(action_node)
                found = self.class_default(action, "nargs")
                nargs = found if isinstance(found, int | str) else None
        if "nargs" in kw:
            given = self.value(kw["nargs"], _MISSING)
            nargs = given if given is None or isinstance(given, int | str) else nargs
        if action == "BooleanOptionalAction":
            options = [n for o in options for n in ([o, "--no-" + o[2:]] if o[:2] == "--" else [o])]
            nargs = 0
        dest = self.value(kw.get("dest"))
        if not isinstance(dest, str):
            long = next((o for o in options if o.startswith("--")), options[0])
            dest = long.lstrip("-").replace("-", "_")
        default = (
            self.value(kw["default"])
            if "default" in kw
            else _FLAG_DEFAULTS.get(action, self.class_default(action, "default"))
        )
        new_flag = self.value(kw.get("new_flag"))
        choices = json_choices(self.value(kw.get("choices")))
        if choices is None and "choices" in kw:
            self.unresolved.append(options[0])
        return _entry(
            options,
            dest,
            action,
            _type_name(kw.get("type")),
            nargs,
            choices,
            json_default(default),
            self.value(kw.get("required")) is True,
            new_flag if isinstance(new_flag, str) else None,
        )

    def class_default(self, name: str, parameter: str) -> Any:
        """A literal default of `parameter` in custom Action `name`'s `__init__`, else None."""
        found: ast.AST | None = self.module.classes.get(name)
        if found is None and name in self.module.imports:
            other = self.module.sources.module(self.module.imports[name][0])
            found = other.classes.get(name) if other is not None else None
        if not isinstance(found, ast.ClassDef):
            return None
        for stmt in found.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                positional = stmt.args.args
                padded = [None] * (len(positional) - len(stmt.args.defaults))
                defaults = [*padded, *stmt.args.defaults, *stmt.args.kw_defaults]
                params = [*positional, *stmt.args.kwonlyargs]
                for arg, default in zip(params, defaults, strict=True):
                    if arg.arg == parameter and isinstance(default, ast.Constant):
                        return default.value
        return None

    # -- dataclass fields (0.5.14 on)

    def field_classes(self) -> list[ClassRef]:
        """ServerArgs itself and, from 0.5.20, the namespace classes it collects."""
        classes = [self.server_args]
        if "_INPUT_NAMESPACES" in self.module.bindings:
            namespaces = self.value(self.module.bindings["_INPUT_NAMESPACES"])  # type: ignore[arg-type]
            classes.extend(c for c in namespaces or () if isinstance(c, ClassRef))
        return classes

    def add_fields(self) -> None:
        for owner in self.field_classes():
            for stmt in owner.node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    entry = _FieldReader(self, owner.module).entry(stmt.target.id, stmt)
                    if entry is not None:
                        self.entries.append(entry)


class _FieldReader:
    """One `name: A[type, Arg(...)] = default` field, as `add_cli_args_from_dataclass` reads it."""

    def __init__(self, reader: _Reader, module: Module) -> None:
        self.reader = reader
        self.module = module

    def value(self, node: ast.expr | None) -> Any:
        try:
            return None if node is None else self.module.evaluate(node)
        except (UnresolvedError, KeyError, TypeError, IndexError):
            return None

    def entry(self, name: str, stmt: ast.AnnAssign) -> dict[str, Any] | None:
        annotation = stmt.annotation
        if not (
            isinstance(annotation, ast.Subscript) and dotted(annotation.value) in {"A", "Annotated"}
        ):
            return None
        parts = (
            annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        )
        inner, meta = parts[0], self.metadata(parts[1:])
        if meta is None or self.value(meta.get("no_cli")) is True:
            return None
        cli_name = self.value(meta.get("cli_name")) or "--" + name.replace("_", "-")
        aliases = self.value(meta.get("aliases")) or []
        options = [cli_name, *aliases]
        default = self.default(stmt.value)
        if "action" in meta:
            kw: dict[str, ast.expr] = {"action": meta["action"], "dest": ast.Constant(name)}
            extra = meta.get("action_kwargs")
            if isinstance(extra, ast.Dict):
                kw.update(
                    (k.value, v)
                    for k, v in zip(extra.keys, extra.values, strict=True)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                )
            entry = self.reader.argparse_entry(options, kw)
            entry["default"] = (
                json_default(default) if default is not _MISSING else entry["default"]
            )
            return entry
        kind = _unwrap_optional(inner)
        parser = meta.get("type_parser")
        choices = json_choices(self.value(meta.get("choices")))
        plain_default = None if default is _MISSING else json_default(default)
        literal = self.literal(kind)
        if choices is None and "choices" in meta and literal is None:
            self.reader.unresolved.append(options[0])
        if literal is not None:
            type_name = _type_name(parser) or _python_type(
                type(literal[0]).__name__ if literal else "str"
            )
            return _entry(
                options, name, "_StoreAction", type_name, None, choices or literal, plain_default
            )
        if dotted(kind) in {"list", "List"} and parser is None:
            element = kind.slice if isinstance(kind, ast.Subscript) else None
            nargs = self.value(meta.get("nargs")) or "+"
            type_name = _python_type(dotted(element) if element is not None else "str")
            return _entry(options, name, "_StoreAction", type_name, nargs, choices, plain_default)
        if dotted(kind) == "bool":
            flag_default = False if default is _MISSING else plain_default
            return _entry(options, name, "_StoreTrueAction", None, 0, None, flag_default)
        required = self.value(meta.get("required"))
        return _entry(
            options,
            name,
            "_StoreAction",
            _type_name(parser) or _python_type(dotted(kind)),
            self.value(meta.get("nargs")) or None,
            choices,
            plain_default,
            required is True or (required is None and default is _MISSING),
        )

    def metadata(self, parts: list[ast.expr]) -> dict[str, ast.expr] | None:
        """The keywords of the field's `Arg(...)`; a bare help string is `Arg(help=...)`."""
        for part in parts:
            if isinstance(part, ast.Call) and dotted(part.func) == "Arg":
                return {k.arg: k.value for k in part.keywords if k.arg is not None}
            if isinstance(part, ast.Constant | ast.JoinedStr) or (
                isinstance(part, ast.BinOp) and isinstance(part.op, ast.Add)
            ):
                return {}
        return None

    def default(self, node: ast.expr | None) -> Any:
        if node is None:
            return _MISSING
        if isinstance(node, ast.Call) and dotted(node.func) == "field":
            kw = {k.arg: k.value for k in node.keywords}
            if "default" in kw:
                return self.value(kw["default"])
            factory = kw.get("default_factory")
            return {"list": [], "dict": None}.get(dotted(factory)) if factory else _MISSING
        return self.value(node)

    def literal(self, kind: ast.expr) -> list[Any] | None:
        if not (isinstance(kind, ast.Subscript) and dotted(kind.value) == "Literal"):
            return None
        items = kind.slice.elts if isinstance(kind.slice, ast.Tuple) else [kind.slice]
        return [self.value(i) for i in items]


def _unwrap_optional(node: ast.expr) -> ast.expr:
    """`Optional[X]` / `X | None` -> X; anything else as it is."""
    if isinstance(node, ast.Subscript) and dotted(node.value) == "Optional":
        return node.slice
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [node.left, node.right]
        rest = [s for s in sides if not (isinstance(s, ast.Constant) and s.value is None)]
        if len(rest) == 1:
            return rest[0]
    if isinstance(node, ast.Subscript) and dotted(node.value) == "Union":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        rest = [e for e in elts if not (isinstance(e, ast.Constant) and e.value is None)]
        if len(rest) == 1:
            return rest[0]
    return node


def _python_type(name: str) -> str:
    """SGLang's `_infer_type_func`: str, int and float as themselves, anything else str."""
    return name if name in {"str", "int", "float"} else "str"


def _type_name(node: ast.expr | None) -> str | None:
    """The `__name__` of a `type=` converter: `json.loads` -> `loads`."""
    return None if node is None else dotted(node) or None


def _in_order(body: list[ast.stmt]) -> list[ast.AST]:
    """Assignments and calls of `body` in source order, into if/for/with blocks."""
    found: list[ast.AST] = []
    for stmt in body:
        if isinstance(stmt, ast.Assign):
            found.append(stmt)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            found.append(stmt.value)
        elif isinstance(stmt, ast.If | ast.For | ast.With | ast.Try):
            found.extend(_in_order([*stmt.body, *getattr(stmt, "orelse", [])]))
    return found
