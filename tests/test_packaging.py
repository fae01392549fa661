"""The package as pip installs it, not as the editable checkout happens to import it."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_listed() -> None:
    """pyproject's explicit package list names every package under src/pvegpu."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(init.parent.relative_to(REPO / "src").parts)
        for init in (REPO / "src" / "pvegpu").rglob("__init__.py")
    }
    assert set(config["packages"]) == on_disk | {"pvegpu.templates"}
    assert config["package-dir"]["pvegpu.templates"] == "templates"
