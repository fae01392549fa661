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
    # The templates are a package through a symlink (rglob does not follow it), not a
    # package-dir mapping: a mapping makes an editable install import a finder at start.
    assert config["package-dir"] == {"": "src"}
    templates = REPO / "src/pvegpu/templates"
    assert templates.is_symlink()
    assert templates.resolve() == REPO / "templates"
    assert (templates / "__init__.py").is_file()
