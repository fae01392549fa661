"""Census of src/pvegpu for issue 32 ("parse once at the edge, decide once on the Plan"):
the figures its closing note gives before and after. Stdlib only: the static sections
read the source with `ast`; the walk runs `plan(facts, spec)` on a fixture host.

    .venv/bin/python tools/arch_census.py                # every section, as text
    .venv/bin/python tools/arch_census.py files imports  # some: files parsers walk imports tree
    .venv/bin/python tools/arch_census.py --json         # the same figures as one JSON document
    .venv/bin/python tools/arch_census.py walk --host kpro6 --spec examples/kpro6-vllm.toml

Only the walk imports pvegpu (so it needs the project's venv); the other sections read
files and run under any Python 3.11+. The rules, kept here so that a rerun after the
refactor counts alike:

files    Modules of planning/, serving/, engines/, rendering/, apply/ (pipeline.py shown
         beside them) that look a config file up by path in the facts: a call
         `X.file(...)` or a read of `X.files`, where X is a name or attribute whose own
         name holds "facts" (`facts`, `checks.facts`, `node_facts`, `plans[0].facts`), or a
         call of a path helper (a function that hands one of its own parameters to such
         an `X.file(...)`). `X.stats_in(...)` (sizes, no texts) and apply's live reads
         (`reader.read(...)`, `host.read(...)`) are listed apart. Then the modules whose
         strings (docstrings left out) hold `etc/pve/lxc/`: those that build the
         root-relative path (a lookup key, a regex, a prefix) and those that only show
         `/etc/pve/lxc/N.conf` in a message; modules of other packages are listed too.
parsers  The modules of those five packages that call a text parser of pvefiles/, host/
         or formats/: a public module-level function there with a parameter named text,
         raw, config, existing, cfg, passwd, group or storage_cfg annotated `str` (or
         `str | None`). Editors (patch*, remove*, renumber*: rendering must edit texts)
         are counted apart, and so are text parsers defined in other packages (found by
         the same rule outside apply/, rendering/, redact.py; writers left out).
walk     discover_for(spec, root) on a fixture host (kpro6 with examples/kpro6.toml), then
         plan(facts, spec) alone, under two counters: every call, through a module global
         of src/pvegpu, of a function of host/, pvefiles/, formats/ (a wrapper: lru_cache
         hits count), with its calling module; and every frame that starts in those
         packages (sys.setprofile: cache hits do not). Then render(plan) the same way.
imports  Every import statement between src/pvegpu modules, with file:line and its kind:
         module level, in a function, under TYPE_CHECKING. `from pvegpu.a import b` is an
         edge to pvegpu.a.b where that is a module, else to pvegpu.a; parent packages that
         Python initialises on the way are not edges (as in tests/test_architecture.py,
         which counts module-level edges for cycles). Cycles: the strongly connected
         components of more than one module, and each one's simple cycles. Then every
         edge that issue 32's rules forbid.
tree     src/pvegpu's packages with their module and line counts.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import itertools
import json
import pkgutil
import sys
import types
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = SRC / "pvegpu"
CONSUMERS = ("planning", "serving", "engines", "rendering", "apply")
"""The packages issue 32 wants reading facts, never file texts."""
SHOWN = (*CONSUMERS, "pipeline")
PARSER_HOMES = ("pvefiles", "host", "formats")
TEXT_PARAMS = frozenset(
    {"text", "raw", "config", "existing", "cfg", "passwd", "group", "storage_cfg"}
)
EDITOR_PREFIXES = ("patch", "remove", "renumber")
NOT_PARSER_HOMES = ("apply", "rendering", "redact", "testing")
"""Their functions that take a text are checks, drawing or secret matching, not parsers."""
WRITERS = frozenset({("pvegpu.formats.toml", "comment"), ("pvegpu.serving.systemd", "unit_text")})
"""They take a text and quote it for a file pvegpu writes: formatters, not parsers."""
LXC = "etc/pve/lxc/"
ENGINES = ("sglang", "vllm")
KINDS = ("module", "function", "type-checking")


# -- modules ------------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def package_of(module: str) -> str:
    """`planning` for pvegpu.planning.x, `pipeline` for pvegpu.pipeline."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def short(module: str) -> str:
    return module.removeprefix("pvegpu.")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


_TREES: dict[Path, ast.Module] = {}


def tree_of(path: Path) -> ast.Module:
    if path not in _TREES:
        _TREES[path] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return _TREES[path]


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the bare string statements: docstrings, and the attribute docs under an
    assignment that the project writes."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.add(id(node.value))
    return found


def by_package(names: Iterable[str]) -> str:
    counts = Counter(package_of(m) for m in names)
    return ", ".join(f"{p} {counts[p]}" for p in SHOWN if counts[p])


# -- imports ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Edge:
    source: str
    target: str
    names: tuple[str, ...]
    """The names taken from `target` (empty: the module itself)."""
    kind: str
    at: str
    """file:line of the statement."""

    @property
    def line(self) -> str:
        return self.at.rsplit(":", 1)[1]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


Statement = ast.Import | ast.ImportFrom


def import_statements(tree: ast.AST) -> Iterator[tuple[Statement, str]]:
    """Every import statement, with its kind."""

    def visit(node: ast.AST, in_function: bool, typing: bool) -> Iterator[tuple[Statement, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, "type-checking" if typing else "function" if in_function else "module"
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from visit(ast.Module([stmt], []), in_function, True)
                for stmt in child.orelse:
                    yield from visit(ast.Module([stmt], []), in_function, typing)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from visit(child, True, typing)
            else:
                yield from visit(child, in_function, typing)

    yield from visit(tree, False, False)


def resolve(
    module: str, path: Path, node: Statement, known: set[str]
) -> Iterator[tuple[ast.alias, str, str | None]]:
    """(alias, module imported, name taken from it or None) per name of the package."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in known:
                yield alias, alias.name, None
        return
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            yield alias, f"{base}.{alias.name}", None
        elif base in known:
            yield alias, base, alias.name


def import_edges() -> list[Edge]:
    files = modules()
    known = set(files)
    edges: list[Edge] = []
    for name, path in files.items():
        for node, kind in import_statements(tree_of(path)):
            taken: dict[str, list[str]] = {}
            for _alias, target, imported in resolve(name, path, node, known):
                if target != name:
                    taken.setdefault(target, []).extend([imported] if imported else [])
            for target, names in taken.items():
                at = f"{rel(path)}:{node.lineno}"
                edges.append(Edge(name, target, tuple(names), kind, at))
    return edges


def graph_of(edges: Iterable[Edge], kinds: Iterable[str]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for e in edges:
        if e.kind in kinds:
            graph[e.source].add(e.target)
    return graph


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def enter(node: str) -> tuple[str, Iterator[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        return node, iter(sorted(graph[node]))

    for root in sorted(graph):
        if root in index:
            continue
        work = [enter(root)]
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    work.append(enter(succ))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def simple_cycles(graph: dict[str, set[str]], component: list[str]) -> list[list[str]]:
    """Each simple cycle of one component once, from its least module: a depth-first
    search from each start through larger modules only."""
    members = set(component)
    cycles: list[list[str]] = []
    for start in sorted(component):
        path = [start]
        stack = [iter(sorted(graph[start] & members))]
        while stack:
            for succ in stack[-1]:
                if succ == start:
                    cycles.append([*path, start])
                elif succ > start and succ not in path:
                    path.append(succ)
                    stack.append(iter(sorted(graph[succ] & members)))
                    break
            else:
                stack.pop()
                path.pop()
    return sorted(cycles, key=lambda c: (len(c), c))


def _under(module: str, *packages: str) -> bool:
    return any(module == f"pvegpu.{p}" or module.startswith(f"pvegpu.{p}.") for p in packages)


def _engine(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) >= 3 and parts[1] == "engines" else None


RULES = {
    "planning, serving, engines import host/": "they take facts, never a reader or a host parser",
    "rendering imports planning": "rendering reads the Plan only",
    "apply imports planning or engines": "apply reaches them only through pipeline.py",
    "an engine imports another engine": "engines are equal plug-ins: one knows no other",
}


def breaks(edge: Edge) -> list[str]:
    """The rules of RULES that an edge breaks."""
    a, b = edge.source, edge.target
    found = []
    if _under(a, "planning", "serving", "engines") and _under(b, "host"):
        found.append("planning, serving, engines import host/")
    if _under(a, "rendering") and _under(b, "planning"):
        found.append("rendering imports planning")
    if _under(a, "apply") and _under(b, "planning", "engines"):
        found.append("apply imports planning or engines")
    ea, eb = _engine(a), _engine(b)
    if ea is not None and eb in ENGINES and ea != eb:
        found.append("an engine imports another engine")
    return found


# -- what a name in a module stands for ---------------------------------------------------

Function = tuple[str, str]
"""(module, function name)."""


def bindings(
    module: str, path: Path, known: set[str]
) -> tuple[dict[str, str], dict[str, Function]]:
    """(local name -> module, local name -> function of a module) from the imports."""
    mods: dict[str, str] = {}
    names: dict[str, Function] = {}
    for node, _kind in import_statements(tree_of(path)):
        for alias, target, imported in resolve(module, path, node, known):
            local = alias.asname or alias.name
            if imported is None:
                if isinstance(node, ast.ImportFrom) or alias.asname:
                    mods[local] = target
            else:
                names[local] = (target, imported)
    return mods, names


def called(
    call: ast.Call, module: str, mods: dict[str, str], names: dict[str, Function]
) -> Function | None:
    """The function a call names, through the module's imports or its own definitions."""
    f = call.func
    if isinstance(f, ast.Name):
        return names.get(f.id, (module, f.id))
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in mods:
        return mods[f.value.id], f.attr
    return None


# -- files --------------------------------------------------------------------------------


def _is_facts(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        return "facts" in expr.id
    return isinstance(expr, ast.Attribute) and "facts" in expr.attr


def _facts_call(node: ast.AST, method: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
        and _is_facts(node.func.value)
    )


def path_helpers() -> dict[Function, str]:
    """Functions that hand one of their parameters to facts.file(), with where."""
    found: dict[Function, str] = {}
    for name, path in modules().items():
        for node in tree_of(path).body:
            if isinstance(node, ast.FunctionDef):
                params = {a.arg for a in [*node.args.args, *node.args.kwonlyargs]}
                for call in ast.walk(node):
                    if (
                        _facts_call(call, "file")
                        and isinstance(call, ast.Call)
                        and call.args
                        and isinstance(call.args[0], ast.Name)
                        and call.args[0].id in params
                    ):
                        found[(name, node.name)] = f"{rel(path)}:{node.lineno}"
    return found


Places = dict[str, list[str]]
"""module -> the places found in it (`file:line what`)."""


@dataclasses.dataclass
class Files:
    lookups: Places
    path_helpers: dict[str, str]
    stats: Places
    live_reads: Places
    lxc_built: Places
    lxc_shown: Places


def _put(found: Places, module: str, path: Path, node: ast.AST, what: str = "") -> None:
    found.setdefault(module, []).append(f"{rel(path)}:{getattr(node, 'lineno', 0)} {what}".strip())


def files_census() -> Files:
    files = modules()
    known = set(files)
    helpers = path_helpers()
    census = Files({}, {f"{short(m)}.{f}": at for (m, f), at in helpers.items()}, {}, {}, {}, {})
    for name, path in files.items():
        shown = package_of(name) in SHOWN
        tree = tree_of(path)
        mods, names = bindings(name, path, known)
        docs = docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and LXC in node.value
                and id(node) not in docs
            ):
                at = [i for i in range(len(node.value)) if node.value.startswith(LXC, i)]
                message = all(i > 0 and node.value[i - 1] == "/" for i in at)
                _put(census.lxc_shown if message else census.lxc_built, name, path, node)
            if not shown:
                continue
            if _facts_call(node, "file") or (
                isinstance(node, ast.Attribute) and node.attr == "files" and _is_facts(node.value)
            ):
                _put(census.lookups, name, path, node, ast.unparse(node)[:70])
            elif _facts_call(node, "stats_in"):
                _put(census.stats, name, path, node)
            elif isinstance(node, ast.Call):
                f = node.func
                if (
                    isinstance(f, ast.Attribute)
                    and f.attr == "read"
                    and isinstance(f.value, ast.Name)
                    and f.value.id in ("reader", "host")
                ):
                    _put(census.live_reads, name, path, node, ast.unparse(node)[:70])
                target = called(node, name, mods, names)
                if target in helpers and target[0] != name:
                    _put(
                        census.lookups, name, path, node, f"{ast.unparse(node)[:60]} (path helper)"
                    )
    # A module that builds the path is counted there alone.
    census.lxc_shown = {m: v for m, v in census.lxc_shown.items() if m not in census.lxc_built}
    return census


# -- parsers ------------------------------------------------------------------------------


def text_functions(inside: bool) -> dict[Function, str]:
    """(module, function) -> "parser" or "editor": public module-level functions with a
    text parameter, in PARSER_HOMES (`inside`) or in the other packages."""
    found: dict[Function, str] = {}
    for name, path in modules().items():
        package = package_of(name)
        if (package in PARSER_HOMES) != inside or package in NOT_PARSER_HOMES:
            continue
        for node in tree_of(path).body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            if (name, node.name) in WRITERS:
                continue
            if any(
                a.arg in TEXT_PARAMS
                and a.annotation is not None
                and ast.unparse(a.annotation) in ("str", "str | None")
                for a in [*node.args.args, *node.args.kwonlyargs]
            ):
                editor = node.name.startswith(EDITOR_PREFIXES)
                found[(name, node.name)] = "editor" if editor else "parser"
    return found


@dataclasses.dataclass
class Parsers:
    parser_functions: list[str]
    editor_functions: list[str]
    parsing: Places
    editing: Places
    other_parsers: Places
    parsing_and_looking_up: list[str]


def parsers_census(lookup_modules: Iterable[str]) -> Parsers:
    files = modules()
    known = set(files)
    home, elsewhere = text_functions(True), text_functions(False)
    census = Parsers(
        sorted(f"{short(m)}.{f}" for (m, f), k in home.items() if k == "parser"),
        sorted(f"{short(m)}.{f}" for (m, f), k in home.items() if k == "editor"),
        {},
        {},
        {},
        [],
    )
    for name, path in files.items():
        if package_of(name) not in CONSUMERS:
            continue
        mods, names = bindings(name, path, known)
        for node in ast.walk(tree_of(path)):
            target = called(node, name, mods, names) if isinstance(node, ast.Call) else None
            if target is None:
                continue
            label = f"{short(target[0])}.{target[1]}"
            if target in home:
                group = census.parsing if home[target] == "parser" else census.editing
                _put(group, name, path, node, label)
            elif elsewhere.get(target) == "parser" and target[0] != name:
                _put(census.other_parsers, name, path, node, label)
    census.parsing_and_looking_up = sorted(set(census.parsing) & set(lookup_modules))
    return census


# -- walk ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Stage:
    entries: dict[str, int]
    """Calls from outside PARSER_HOMES into them, by function."""
    calls: dict[str, int]
    """Every call through a module global, inner ones too, by function."""
    callers: dict[str, dict[str, int]]
    executed: dict[str, int]
    """Frames started, by function (qualified: methods and inner functions too)."""


def _wrapped(
    fn: Callable[..., Any], label: str, seen: Callable[[str, str], None]
) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        seen(label, sys._getframe(1).f_globals.get("__name__", "?"))
        return fn(*args, **kwargs)

    counted.__wrapped__ = fn  # type: ignore[attr-defined]
    return counted


class Counters:
    """The wrappers' and the profiler's counts of calls into PARSER_HOMES."""

    def __init__(self) -> None:
        self.on = False
        self.calls: Counter[str] = Counter()
        self.callers: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.executed: Counter[str] = Counter()
        self.generators: set[types.FrameType] = set()
        self.dirs = tuple(f"{PACKAGE / p}/" for p in PARSER_HOMES)

    def seen(self, label: str, caller: str) -> None:
        if self.on:
            self.calls[label] += 1
            self.callers[label][short(caller)] += 1

    def profile(self, frame: types.FrameType, event: str, _arg: object) -> None:
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(self.dirs):
            return
        if code.co_name.startswith("<"):
            return  # comprehensions and lambdas: part of their function
        if code.co_flags & 0x2A0:  # a generator or coroutine: its first entry only
            if frame in self.generators:
                return
            self.generators.add(frame)
        self.executed[f"{short(frame.f_globals['__name__'])}.{code.co_qualname}"] += 1

    def measure(self, step: Callable[[], Any]) -> tuple[Any, Stage]:
        self.calls.clear()
        self.callers.clear()
        self.executed.clear()
        self.generators.clear()
        self.on = True
        sys.setprofile(self.profile)
        try:
            result = step()
        finally:
            sys.setprofile(None)
            self.on = False
        entries = Counter(
            {
                label: sum(
                    n for c, n in by.items() if package_of(f"pvegpu.{c}") not in PARSER_HOMES
                )
                for label, by in self.callers.items()
            }
        )
        return result, Stage(
            dict((+entries).most_common()),
            dict(self.calls.most_common()),
            {k: dict(v.most_common()) for k, v in sorted(self.callers.items())},
            dict(self.executed.most_common()),
        )


def walk(host: str, spec_path: str) -> dict[str, Stage]:
    """plan() and render() of a fixture host, measured (see the module's docstring)."""
    sys.path.insert(0, str(SRC))
    import pvegpu

    for info in pkgutil.walk_packages(pvegpu.__path__, "pvegpu."):
        if not info.name.startswith(("pvegpu.testing", "pvegpu.__main__")):
            importlib.import_module(info.name)
    from pvegpu.pipeline import discover_for, load_spec
    from pvegpu.planning.planner import plan
    from pvegpu.rendering.registry import render

    counters = Counters()
    loaded = {n: m for n, m in sys.modules.items() if n == "pvegpu" or n.startswith("pvegpu.")}
    targets = {
        id(value): f"{short(name)}.{attr}"
        for name, mod in loaded.items()
        if package_of(name) in PARSER_HOMES
        for attr, value in vars(mod).items()
        if callable(value)  # functions and lru_cache wrappers; classes left out
        and not isinstance(value, type)
        and getattr(value, "__module__", None) == name
    }
    wrappers: dict[int, Callable[..., Any]] = {}
    for mod in loaded.values():
        space = vars(mod)
        for attr, value in list(space.items()):
            if id(value) in targets:
                if id(value) not in wrappers:
                    wrappers[id(value)] = _wrapped(value, targets[id(value)], counters.seen)
                space[attr] = wrappers[id(value)]

    spec = load_spec(ROOT / spec_path)
    facts = discover_for(spec, ROOT / "fixtures" / "sysfs" / host)
    planned, planning = counters.measure(lambda: plan(facts, spec))
    _, rendering = counters.measure(lambda: render(planned))
    return {"plan": planning, "render": rendering}


def _totals(counts: dict[str, int]) -> str:
    by: Counter[str] = Counter()
    for label, n in counts.items():
        by[label.split(".")[0]] += n
    return f"{sum(counts.values())} (" + ", ".join(f"{p} {n}" for p, n in by.most_common()) + ")"


# -- tree ---------------------------------------------------------------------------------


def tree_census() -> list[tuple[str, int, int]]:
    """(package, modules, lines); a package's subpackages have rows of their own."""
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, path in modules().items():
        parts = name.split(".")
        if len(parts) == 1:
            key = "pvegpu/__init__.py"
        elif not (PACKAGE / parts[1]).is_dir():
            key = "(top-level modules)"
        elif len(parts) > 3 or (len(parts) == 3 and (PACKAGE / parts[1] / parts[2]).is_dir()):
            key = f"{parts[1]}/{parts[2]}"
        else:
            key = parts[1]
        rows[key][0] += 1
        rows[key][1] += len(path.read_text(encoding="utf-8").splitlines())
    return [(k, v[0], v[1]) for k, v in sorted(rows.items())]


# -- report -------------------------------------------------------------------------------


def _lines(places: list[str]) -> str:
    return ", ".join(
        str(n) for n in sorted({int(p.split(" ")[0].rsplit(":", 1)[1]) for p in places})
    )


def _functions(places: list[str]) -> str:
    counts = Counter(p.split(" ", 1)[1] for p in places)
    return ", ".join(f"{f} x{n}" if n > 1 else f for f, n in sorted(counts.items()))


def report_files(census: Files, out: list[str]) -> None:
    mine = [m for m in census.lookups if package_of(m) in CONSUMERS]
    out.append(
        f"== files: modules that look files up by path in facts: {len(mine)} ({by_package(mine)})"
    )
    for m in sorted(census.lookups):
        out.append(f"  {short(m)}: {len(census.lookups[m])} (lines {_lines(census.lookups[m])})")
    out.append("  path helpers: " + (", ".join(sorted(census.path_helpers)) or "none"))
    groups = (
        (census.stats, "call facts.stats_in(...) (sizes, no texts)"),
        (census.live_reads, "read the live host (reader.read, host.read)"),
        (census.lxc_built, f"build the path {LXC}..."),
        (census.lxc_shown, f"only show /{LXC}N.conf in a message"),
    )
    for group, title in groups:
        mine = [m for m in group if package_of(m) in CONSUMERS]
        out.append(f"== files: modules that {title}: {len(mine)} ({by_package(mine)})")
        for m in sorted(group):
            other = "" if package_of(m) in SHOWN else "   [another package]"
            out.append(f"  {short(m)}: lines {_lines(group[m])}{other}")


def report_parsers(census: Parsers, out: list[str]) -> None:
    out.append("== parsers: the text parsers: " + ", ".join(census.parser_functions))
    out.append("   the editors: " + ", ".join(census.editor_functions))
    groups = (
        (census.parsing, "call a text parser of " + ", ".join(f"{h}/" for h in PARSER_HOMES)),
        (census.editing, "call an editor"),
        (census.other_parsers, "call a text parser of another package"),
    )
    for group, title in groups:
        out.append(f"== parsers: modules that {title}: {len(group)} ({by_package(group)})")
        for m in sorted(group):
            out.append(f"  {short(m)}: {_functions(group[m])}")
    both = census.parsing_and_looking_up
    out.append(
        f"== parsers: modules that look files up in facts and call a text parser: {len(both)}"
    )
    out.append("  " + ", ".join(short(m) for m in both))


def report_walk(stages: dict[str, Stage], where: str, out: list[str]) -> None:
    for name, s in stages.items():
        homes = ", ".join(f"{h}/" for h in PARSER_HOMES)
        out.append(
            f"== walk {name}() on {where}: calls from outside {homes} into them: "
            + _totals(s.entries)
        )
        for label, n in s.entries.items():
            outside = {
                c: k
                for c, k in s.callers[label].items()
                if package_of(f"pvegpu.{c}") not in PARSER_HOMES
            }
            by = ", ".join(f"{c} {k}" for c, k in outside.items())
            runs = s.executed.get(label, 0)
            out.append(f"  {n:4d} {label}  (all calls {s.calls[label]}, run {runs}; from {by})")
        out.append(
            f"== walk {name}(): every call through a global, inner ones too: {_totals(s.calls)}"
        )
        out.append(f"   frames run (lru_cache hits are none): {_totals(s.executed)}")
        for label, n in s.calls.items():
            if label not in s.entries:
                by = ", ".join(f"{c} {k}" for c, k in s.callers[label].items())
                out.append(f"  {n:4d} {label}  (run {s.executed.get(label, 0)}; from {by})")
        for label, n in s.executed.items():
            if label not in s.calls:
                out.append(f"       {label}  (run {n}: a method or inner function)")


def report_imports(edges: list[Edge], out: list[str]) -> dict[str, Any]:
    kinds = Counter(e.kind for e in edges)
    pairs = {(e.source, e.target) for e in edges}
    out.append(
        f"== imports: {len(edges)} edges (one per statement and module), "
        + f"{len(pairs)} module pairs; "
        + ", ".join(f"{k} {kinds[k]}" for k in KINDS)
    )
    found: dict[str, Any] = {}
    for label, kindset in (("every import", KINDS), ("module-level imports only", ("module",))):
        graph = graph_of(edges, kindset)
        comps = components(graph)
        found[label] = []
        out.append(f"== imports: cycles of {label}: {len(comps)} components")
        for comp in comps:
            cycles = simple_cycles(graph, comp)
            found[label].append({"component": comp, "cycles": cycles})
            steps = [set(itertools.pairwise(c)) for c in cycles]
            common = sorted(set.intersection(*steps)) if steps else []
            out.append(f"  component of {len(comp)}: " + ", ".join(short(m) for m in comp))
            out.append(
                f"   {len(cycles)} simple cycles; every one takes: "
                + (", ".join(f"{short(a)} -> {short(b)}" for a, b in common) or "no one edge")
            )
            for cycle in cycles:
                links = []
                for a, b in itertools.pairwise(cycle):
                    at = [e for e in edges if (e.source, e.target) == (a, b) and e.kind in kindset]
                    marks = "/".join(sorted({e.kind[0] for e in at}))
                    links.append(f"{short(a)} -[{marks} {at[0].line}]-> ")
                out.append("    " + "".join(links) + short(cycle[-1]))
    out.append("   (m: module level, f: in a function, t: under TYPE_CHECKING; then the line)")
    found["violations"] = {rule: [] for rule in RULES}
    for rule, why in RULES.items():
        broken = sorted((e for e in edges if rule in breaks(e)), key=lambda e: e.at)
        found["violations"][rule] = [dataclasses.asdict(e) for e in broken]
        files = {e.source for e in broken}
        out.append(f"== imports: {rule} ({why}): {len(broken)} edges from {len(files)} modules")
        for e in broken:
            names = ", ".join(e.names) or "(the module)"
            out.append(f"  {e.at} {short(e.source)} -> {short(e.target)}: {names} [{e.kind}]")
    return found


def _option(argv: list[str], name: str, default: str) -> tuple[str, list[str]]:
    """The value of `--name VALUE` (or the default), and argv without it."""
    if name not in argv:
        return default, argv
    at = argv.index(name)
    return argv[at + 1], argv[:at] + argv[at + 2 :]


def main(argv: list[str]) -> int:
    host, argv = _option(argv, "--host", "kpro6")
    spec, argv = _option(argv, "--spec", "examples/kpro6.toml")
    wanted = [a for a in argv if not a.startswith("-")] or [
        "files",
        "parsers",
        "walk",
        "imports",
        "tree",
    ]
    doc: dict[str, Any] = {}
    out: list[str] = []
    files = files_census()
    if "files" in wanted:
        doc["files"] = dataclasses.asdict(files)
        report_files(files, out)
    if "parsers" in wanted:
        parsers = parsers_census(m for m in files.lookups if package_of(m) in CONSUMERS)
        doc["parsers"] = dataclasses.asdict(parsers)
        report_parsers(parsers, out)
    if "walk" in wanted:
        stages = walk(host, spec)
        doc["walk"] = {k: dataclasses.asdict(v) for k, v in stages.items()}
        report_walk(stages, f"{host} ({spec})", out)
    if "imports" in wanted:
        edges = import_edges()
        doc["imports"] = {
            "edges": [dataclasses.asdict(e) for e in edges],
            **report_imports(edges, out),
        }
    if "tree" in wanted:
        rows = tree_census()
        doc["tree"] = rows
        out.append(f"== tree: {sum(r[1] for r in rows)} modules, {sum(r[2] for r in rows)} lines")
        out.extend(f"  {p:<22} {m:>3} modules {n:>6} lines" for p, m, n in rows)
    print(json.dumps(doc, indent=1, sort_keys=True) if "--json" in argv else "\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
