"""The package as pip installs it, not as the editable checkout happens to import it."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_found() -> None:
    """pyproject has setuptools find the packages, so a new one (an engine's package)
    needs no line there: what it finds, by pyproject's own settings, is every package
    under src/pvegpu, the templates through their symlink, and every engine's tables."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(init.parent.relative_to(REPO / "src").parts)
        for init in (REPO / "src" / "pvegpu").rglob("__init__.py")
    }
    find = config["packages"]["find"]
    assert find["namespaces"] is False  # every package has its __init__.py
    where = [str(REPO / w) for w in find["where"]]
    # setuptools (a test dependency: the wheel test builds with it) ships no types.
    find_packages = importlib.import_module("setuptools").find_packages
    found = {p for w in where for p in find_packages(where=w, include=find["include"])}
    assert found == on_disk | {"pvegpu.templates"}
    tables = {p.name for p in (REPO / "src" / "pvegpu").rglob("*.json.gz")}
    assert tables == {"tables.json.gz"}  # each engine's, under its data/
    assert config["package-data"]["*"] == ["*.json.gz"]
    # The templates are a package through a symlink (rglob does not follow it), not a
    # package-dir mapping: a mapping makes an editable install import a finder at start.
    assert config["package-dir"] == {"": "src"}
    templates = REPO / "src/pvegpu/templates"
    assert templates.is_symlink()
    assert templates.resolve() == REPO / "templates"
    assert (templates / "__init__.py").is_file()
