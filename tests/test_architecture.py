"""The shape of src/pvegpu: no import cycles, the layers and the never rules, no
oversized modules, a light `--help`.

The import graph is built statically with `ast`, in three readings: the imports that run
when a module is imported (at module level, inside top-level `if`, `try` and `with` blocks
too); `lazy`, those and the ones inside functions and classes, which run when called;
`every`, all of them and those under `if TYPE_CHECKING:`, which only the type checker
follows. A dependency is a dependency however it is imported: the cycles and the never
rules count `every` import. An edge goes to the module an import names: `from pvegpu.a
import b` is an edge to `pvegpu.a.b` where that is a module, else to `pvegpu.a`. The
parent packages Python initialises on the way are not edges, as in other import-cycle
checkers.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "pvegpu"
MAX_LINES = 600
"""What a reader holds in one sitting. Below it modules are cut by responsibility; the
old 400-line cap made modules split (and tiny ones appear) to fit a count."""
MIN_NAMES_MODULE = 40
"""A module of bare names shorter than this is a constant parked to dodge an import: it
belongs with the module whose job the names describe. Longer tables (paths.py) stand."""


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Module name -> file, for every .py file of the package."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when a module body runs."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _runtime_imports(node.body)
            yield from _runtime_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _runtime_imports(block)
            for handler in node.handlers:
                yield from _runtime_imports(handler.body)
        elif isinstance(node, ast.With):
            yield from _runtime_imports(node.body)


def _imports_anywhere(nodes: list[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at module level and inside functions, classes
    and `except` blocks, not under `if TYPE_CHECKING:` (an expression holds none)."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports_anywhere(list(node.orelse))
        else:
            children = ast.iter_child_nodes(node)
            yield from _imports_anywhere([c for c in children if not isinstance(c, ast.expr)])


def _every_import(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, wherever it is: under `if TYPE_CHECKING:` too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def imports_of(
    name: str, path: Path, known: set[str], *, lazy: bool = False, every: bool = False
) -> set[str]:
    """The package's modules that importing `name` (the file at `path`) imports first;
    with `lazy`, also those its functions import when they run; with `every`, also those
    it imports for the type checker only."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = tree.body
    if every:
        statements: Iterator[ast.Import | ast.ImportFrom] = _every_import(tree)
    else:
        statements = _imports_anywhere(list(body)) if lazy else _runtime_imports(body)
    for node in statements:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        found.add(base)
        found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module in known and module != name}


def import_graph(*, lazy: bool = False, every: bool = False) -> dict[str, set[str]]:
    files = modules()
    known = set(files)
    return {
        name: imports_of(name, path, known, lazy=lazy, every=every) for name, path in files.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component that has one (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, set(component), component[0]) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str], start: str) -> list[str]:
    """A shortest path from start back to start inside one component (breadth first)."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for succ in sorted(graph[node] & component):
                if succ == start:
                    return [*paths[node], start]
                if succ not in paths:
                    paths[succ] = [*paths[node], succ]
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{start}: no cycle in its own component")


def test_no_import_cycles() -> None:
    """Never: a module of src/pvegpu that imports, through any chain, itself, counting
    every import (in functions and under TYPE_CHECKING too). An import moved into a
    function or under TYPE_CHECKING hides a cycle from Python, not from the reader: two
    modules that need each other's names are one responsibility, or share a type that
    belongs below both."""
    found = cycles(import_graph(every=True))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_cycle_finder_finds_cycles() -> None:
    """Control: the same finder reports a three-module cycle and ignores a diamond."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d", "f"}, "f": {"d"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_graph_reads_imports_as_python_runs_them(tmp_path: Path) -> None:
    """Control: relative and absolute imports count; TYPE_CHECKING and function-level
    imports do not."""
    path = tmp_path / "pvegpu" / "x" / "m.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from ..top import thing\n"
        "import pvegpu.other\n"
        "if TYPE_CHECKING:\n"
        "    from pvegpu import typed_only\n"
        "def f():\n"
        "    from pvegpu import lazy\n"
    )
    known = {"pvegpu.x.sibling", "pvegpu.top", "pvegpu.other", "pvegpu.typed_only", "pvegpu.lazy"}
    assert imports_of("pvegpu.x.m", path, known) == {
        "pvegpu.x.sibling",
        "pvegpu.top",
        "pvegpu.other",
    }


def test_modules_are_small() -> None:
    """No module of src/pvegpu is over MAX_LINES lines: one a reader cannot hold in one
    sitting is doing more than one thing, so it is cut by what it does (not by count)."""
    offenders = {
        str(path.relative_to(SRC)): n
        for path in modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not offenders, f"modules over {MAX_LINES} lines: {offenders}"


def holds_only_names(source: str) -> bool:
    """A module of bare names: no function, class or statement beyond assignments."""
    body = [
        node
        for node in ast.parse(source).body
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        and not isinstance(node, ast.Import | ast.ImportFrom)
    ]
    return all(isinstance(node, ast.Assign | ast.AnnAssign) for node in body)


def test_no_module_only_dodges_an_import() -> None:
    """A module is a responsibility, not a place to park a constant so two others can
    share it without importing each other (rendering/pmxcfs.py held one mode): package
    markers aside, every module defines something beyond a few names. A vendor module
    is the exception by design: one vendor's facts are its whole responsibility, and a
    new vendor is one such module (vendors/__init__.py)."""
    parked = [
        str(path.relative_to(SRC))
        for path in modules().values()
        if path.name not in ("__init__.py", "__main__.py")
        and path.parent.name != "vendors"
        and holds_only_names(path.read_text(encoding="utf-8"))
        and len(path.read_text(encoding="utf-8").splitlines()) < MIN_NAMES_MODULE
    ]
    assert not parked, f"modules that only hold a few names: {parked}"


def test_the_parked_name_check_sees_one() -> None:
    assert holds_only_names('"""doc."""\n\nfrom x import y\n\nMODE = 0o640\n')
    assert not holds_only_names("def f() -> int:\n    return 1\n")


HEAVY = ("jinja2", "pvegpu.planning", "pvegpu.rendering")


def imported_modules(importtime_report: str) -> list[str]:
    """Module names from `python -X importtime` output (`import time: s | c | name`)."""
    return [
        line.rsplit("|", 1)[1].strip()
        for line in importtime_report.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    ]


@pytest.mark.skipif(sys.platform == "win32", reason="runs the installed package by -m")
def test_help_imports_no_planning_rendering_or_jinja2() -> None:
    """`pvegpu --help` loads only the CLI: no jinja2, no planning, no rendering."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pvegpu", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = imported_modules(result.stderr)
    assert "pvegpu.cli" in loaded  # the report is read right
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert not heavy, f"pvegpu --help imports {heavy}"


LAYERS: tuple[frozenset[str], ...] = (
    # The bottom: small top-level modules every stage may use.
    frozenset(
        {"errors", "diagnostic", "pci", "wording", "redact", "jsontext", "gcpause", "values"}
    ),
    # What pvegpu knows of each GPU vendor and GPU model: tables that import only `pci`.
    # Below the values because a GPU's facts ask `vendor_of` which vendor it is.
    frozenset({"vendors", "hardware"}),
    # File formats as pure codecs: Proxmox's files, shell quoting, the templates.
    frozenset({"pvefiles", "formats"}),
    # The immutable values one stage hands the next: facts, spec, plan, artifacts.
    frozenset({"model"}),
    # Reading: a host root into facts, a spec file into a Spec.
    frozenset({"host", "spec"}),
    # What every engine's server needs decided the same way, then the engines.
    frozenset({"serving"}),
    frozenset({"engines"}),
    frozenset({"planning"}),
    frozenset({"rendering"}),
    frozenset({"pipeline", "apply"}),
    # The front ends: the CLI, the package's lazy API, the fake-host builder for tests.
    frozenset({"cli", "__main__", "pvegpu", "testing"}),
)
"""src/pvegpu's packages and top-level modules, lowest first: a module imports only from
its own layer or one below (`pvegpu.host.reader` is in `host`)."""

UPWARD_EXCEPTIONS: dict[tuple[str, str], str] = {}
"""The upward imports still left, each with why and what ends it: none since discovery
asks the engine for its files (`engines.installed_files`). The list only shrinks: an
entry whose import is gone fails `test_upward_exceptions_still_exist`."""


def layer_of(module: str) -> int:
    """The index in LAYERS of a module's package (or top-level module)."""
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else parts[0]
    found = [index for index, layer in enumerate(LAYERS) if key in layer]
    assert len(found) == 1, f"{key}: in {len(found)} layers of LAYERS, not one"
    return found[0]


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) for every import of a module in a higher layer."""
    return {
        (module, imported)
        for module, targets in graph.items()
        for imported in targets
        if layer_of(imported) > layer_of(module)
    }


def test_imports_point_down_the_layers() -> None:
    """No module imports one of a higher layer, at module level or lazily in a function
    (a lazy import is still a dependency). `if TYPE_CHECKING:` imports are exempt: the
    type checker follows them, Python never runs them."""
    upward = upward_imports(import_graph(lazy=True)) - UPWARD_EXCEPTIONS.keys()
    assert not upward, "imports of a higher layer:\n" + "\n".join(
        f"{a} -> {b}" for a, b in sorted(upward)
    )


def test_upward_exceptions_still_exist() -> None:
    """An exception whose import has gone leaves UPWARD_EXCEPTIONS, so the list only shrinks."""
    gone = UPWARD_EXCEPTIONS.keys() - upward_imports(import_graph(lazy=True))
    assert not gone, f"no longer imported upward, remove from UPWARD_EXCEPTIONS: {sorted(gone)}"


def test_every_package_has_a_layer() -> None:
    """A new package or top-level module must be placed in LAYERS."""
    for module in modules():
        layer_of(module)


def test_layer_check_finds_an_upward_import() -> None:
    """Control: a host module importing planning is reported; one importing the values
    below it, and one importing planning only for the type checker, are not."""
    graph = {
        "pvegpu.host.discover": {"pvegpu.model.facts", "pvegpu.planning.planner"},
        "pvegpu.host.snapshot": {"pvegpu.model.facts"},
        "pvegpu.model.facts": set(),
        "pvegpu.planning.planner": {"pvegpu.host.discover"},
    }
    assert upward_imports(graph) == {("pvegpu.host.discover", "pvegpu.planning.planner")}


def test_lazy_imports_count_type_checking_ones_do_not(tmp_path: Path) -> None:
    """Control: with `lazy`, a function's import is an edge; TYPE_CHECKING's is not."""
    path = tmp_path / "pvegpu" / "x" / "m.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pvegpu import typed_only\n"
        "def f():\n"
        "    try:\n"
        "        pass\n"
        "    except ImportError:\n"
        "        from pvegpu import lazy\n"
    )
    known = {"pvegpu.typed_only", "pvegpu.lazy"}
    assert imports_of("pvegpu.x.m", path, known, lazy=True) == {"pvegpu.lazy"}
    assert imports_of("pvegpu.x.m", path, known) == set()


# --- The never rules: edges no layer order forbids, but the design does.


def _in(module: str, *packages: str) -> bool:
    """Whether `module` is one of `pvegpu.<package>` or inside it."""
    return any(module == f"pvegpu.{p}" or module.startswith(f"pvegpu.{p}.") for p in packages)


def engine_of(module: str) -> str | None:
    """The engine package a module is in (`sglang` of `pvegpu.engines.sglang.build`); None
    outside engines/<name>/, and for engines/common, which every engine shares."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] != "engines" or parts[2] == "common":
        return None
    return parts[2]


def _other_engine(importer: str, imported: str) -> bool:
    mine, theirs = engine_of(importer), engine_of(imported)
    return mine is not None and theirs is not None and mine != theirs


NEVER_RULES: dict[str, Callable[[str, str], bool]] = {
    # Planning, serving and engines take facts, never a reader or a host parser: discovery
    # turns every file into typed facts once (issue 32, item 1).
    "no-host": lambda a, b: _in(a, "planning", "serving", "engines") and _in(b, "host"),
    # Renderers format the Plan; every decision is on it (model/host_changes.py).
    "no-planning-in-rendering": lambda a, b: _in(a, "rendering") and _in(b, "planning"),
    # apply runs the runbook; `check` plans again only through pipeline.py.
    "apply-through-pipeline": lambda a, b: _in(a, "apply") and _in(b, "planning", "engines"),
    # Engines are equal plug-ins: one knows no other (engines/common is shared).
    "no-engine-imports-another": _other_engine,
}
"""Each never rule, by name: whether the edge importer -> imported breaks it."""


def never_violations(graph: dict[str, set[str]], rule: str) -> set[tuple[str, str]]:
    """(importer, imported) for every edge of `graph` that breaks `rule`."""
    breaks = NEVER_RULES[rule]
    return {(a, b) for a, targets in graph.items() for b in targets if breaks(a, b)}


@pytest.fixture(scope="module")
def every_import() -> dict[str, set[str]]:
    return import_graph(every=True)


@pytest.mark.parametrize("rule", sorted(NEVER_RULES))
def test_never_rules_hold(rule: str, every_import: dict[str, set[str]]) -> None:
    """No import, wherever it is (module level, a function, TYPE_CHECKING), breaks a
    never rule."""
    broken = never_violations(every_import, rule)
    assert not broken, f"{rule}:\n" + "\n".join(f"{a} -> {b}" for a, b in sorted(broken))


def test_never_rules_find_their_edges() -> None:
    """Control: each rule reports the edge it forbids and passes the ones it allows."""
    graph = {
        "pvegpu.planning.boot": {"pvegpu.host.sysfs", "pvegpu.model.facts"},
        "pvegpu.serving.container": {"pvegpu.host.rootfs"},
        "pvegpu.engines": {"pvegpu.host.reader", "pvegpu.engines.sglang"},
        "pvegpu.rendering.split": {"pvegpu.planning.split", "pvegpu.model.plan"},
        "pvegpu.apply.check": {"pvegpu.pipeline", "pvegpu.planning.acs", "pvegpu.engines"},
        "pvegpu.pipeline": {"pvegpu.planning.planner", "pvegpu.host.discover"},
        "pvegpu.engines.vllm.build": {
            "pvegpu.engines.sglang.old_unit",
            "pvegpu.engines.common.unit",
            "pvegpu.engines.vllm.options",
            "pvegpu.engines",
        },
    }
    assert never_violations(graph, "no-host") == {
        ("pvegpu.planning.boot", "pvegpu.host.sysfs"),
        ("pvegpu.serving.container", "pvegpu.host.rootfs"),
        ("pvegpu.engines", "pvegpu.host.reader"),
    }
    assert never_violations(graph, "no-planning-in-rendering") == {
        ("pvegpu.rendering.split", "pvegpu.planning.split")
    }
    assert never_violations(graph, "apply-through-pipeline") == {
        ("pvegpu.apply.check", "pvegpu.planning.acs"),
        ("pvegpu.apply.check", "pvegpu.engines"),
    }
    assert never_violations(graph, "no-engine-imports-another") == {
        ("pvegpu.engines.vllm.build", "pvegpu.engines.sglang.old_unit")
    }


def test_every_import_counts_type_checking_and_functions(tmp_path: Path) -> None:
    """Control: with `every`, an import under TYPE_CHECKING and one in a function are
    edges, as the never rules and the cycle check count them."""
    path = tmp_path / "pvegpu" / "x" / "m.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pvegpu import typed_only\n"
        "def f():\n"
        "    from pvegpu import lazy\n"
    )
    known = {"pvegpu.typed_only", "pvegpu.lazy"}
    assert imports_of("pvegpu.x.m", path, known, every=True) == known
