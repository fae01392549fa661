"""The Ansible collection imports pvegpu by name inside its modules (Ansible loads them
on the node, where pvegpu is the Debian package): a name pvegpu no longer has fails there
only at run time, as "pvegpu is not installed". This resolves every such import here."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parent.parent / "ansible_collections/pvegpu/proxmox/plugins"
FILES = sorted(PLUGINS.rglob("*.py"))


def pvegpu_imports(source: str) -> list[tuple[str, str]]:
    """Every `from pvegpu... import NAME` of a module, wherever it sits."""
    return [
        (node.module, alias.name)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pvegpu")
        for alias in node.names
    ]


def test_the_collection_imports_pvegpu() -> None:
    assert len(FILES) >= 4
    assert sum(len(pvegpu_imports(f.read_text())) for f in FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PLUGINS)))
def test_every_pvegpu_name_the_collection_imports_exists(path: Path) -> None:
    missing = [
        f"{module}.{name}"
        for module, name in pvegpu_imports(path.read_text())
        if not hasattr(importlib.import_module(module), name)
    ]
    assert missing == []


def test_a_name_pvegpu_lacks_is_caught() -> None:
    source = "def f():\n    from pvegpu.errors import Problem, SpecError\n"
    found = pvegpu_imports(source)
    assert found == [("pvegpu.errors", "Problem"), ("pvegpu.errors", "SpecError")]
    assert not hasattr(importlib.import_module("pvegpu.errors"), "Problem")
