"""The shape of src/pvegpu: no import cycles, no oversized modules, a light `--help`.

The import graph is built statically with `ast`, from the imports that run when a module
is imported: those at module level (inside top-level `if`, `try` and `with` blocks too),
not those inside functions or classes, nor under `if TYPE_CHECKING:`, which only the type
checker follows. An edge goes to the module an import names: `from pvegpu.a import b` is
an edge to `pvegpu.a.b` where that is a module, else to `pvegpu.a`. The parent packages
Python initialises on the way are not edges, as in other import-cycle checkers.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "pvegpu"
MAX_LINES = 400


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


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that importing `name` (the file at `path`) imports first."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")).body):
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


def import_graph() -> dict[str, set[str]]:
    files = modules()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


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
    """No module of src/pvegpu imports, through any chain, itself."""
    found = cycles(import_graph())
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
    """No module of src/pvegpu is over MAX_LINES lines: split it by what it does."""
    offenders = {
        str(path.relative_to(SRC)): n
        for path in modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not offenders, f"modules over {MAX_LINES} lines: {offenders}"


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
