"""The Debian package's sources, checked without building it (the default run).

debian/ must agree with pyproject.toml and pvegpu.__version__, and the man page and
bash completion that debian/rules generates (tools/cli_docs.py) must say what the
argparse tree says. Building and installing the package is `make test-deb`
(tests/deb/test_deb_chroot.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pvegpu
from bundled import REPO
from linters import SHELLCHECK, needs_shellcheck
from pvegpu.cli import EPILOG, build_parser


def _load_tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# tools/ is no package: mypy knows cli_docs by the file `mypy src tests tools` names.
if TYPE_CHECKING:
    import cli_docs
else:
    cli_docs = _load_tool("cli_docs")

DEBIAN_NAMES = {"attrs": "python3-attr", "cattrs": "python3-cattr", "jinja2": "python3-jinja2"}


def _control_depends() -> dict[str, str | None]:
    text = (REPO / "debian/control").read_text()
    binary = text.split("\n\n", 1)[1]
    field = re.search(r"^Depends:((?:.*\n)(?:[ \t].*\n)*)", binary, re.M)
    assert field is not None, "debian/control: the binary package has no Depends"
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"([a-z0-9.+-]+|\$\{[^}]+\})(?: \(([^)]*)\))?", field.group(1))
    }


def test_the_depends_floors_are_pyprojects() -> None:
    """python3 and the three libraries at pyproject's floors, the ones docs/install.md
    states; nothing that only pip could provide."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted: dict[str, str | None] = {
        "${misc:Depends}": None,
        "${python3:Depends}": None,
        "python3": f">= {project['requires-python'].removeprefix('>=')}",
    }
    for requirement in project["dependencies"]:
        found = re.fullmatch(r"([a-z0-9]+)>=([0-9.]+)", requirement)
        assert found is not None, requirement
        wanted[DEBIAN_NAMES[found.group(1)]] = f">= {found.group(2)}"
    assert _control_depends() == wanted
    table = (REPO / "docs/install.md").read_text()
    for name, debian in DEBIAN_NAMES.items():
        floor = wanted[debian]
        assert floor is not None
        assert re.search(rf"\| {name} \| {re.escape(floor[3:])} \| {debian}", table), name


def test_the_changelog_is_at_this_version() -> None:
    first = (REPO / "debian/changelog").read_text().splitlines()[0]
    assert first.startswith(f"pvegpu ({pvegpu.__version__}) "), (
        "a new __version__ needs its debian/changelog entry (make deb refuses without)"
    )


def _commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _roff_text(page: str) -> str:
    """The page's words as a reader sees them: font changes and escapes undone."""
    return re.sub(r"\\f[BIR]", "", page).replace("\\-", "-").replace("\\e", "\\")


def test_the_man_page_has_every_command_option_and_exit_code() -> None:
    page = cli_docs.man_page(build_parser())
    text = _roff_text(page)
    assert page.startswith(f'.TH PVEGPU 1 "" "pvegpu {pvegpu.__version__}"')
    sections = re.split(r"^\.SS ", page, flags=re.M)[1:]
    assert [s.split("\n", 1)[0] for s in sections] == list(_commands())
    for section, (name, command) in zip(sections, _commands().items(), strict=True):
        body = _roff_text(section)
        assert (command.description or "") in body, name
        for action in command._actions:
            for flag in action.option_strings:
                assert f"\n{flag}" in body or f", {flag}" in body, (name, flag)
            if action.help and action.option_strings:
                assert action.help.replace("%%", "%") in body, (name, action.help)
    for code, meaning in re.findall(r"^  (\d+)  (.*)$", EPILOG, re.M):
        assert f".TP\n{code}\n{meaning}\n" in text, code
    assert not re.search(r"^[.'](?!TH|SH|SS|TP|PP|nf|fi)", page, re.M), "stray roff request"


def test_the_generated_files_depend_on_nothing_but_the_parser() -> None:
    """Two runs, other terminal widths: the same bytes (a build is reproducible)."""
    generators = {
        "man": cli_docs.man_page,
        "bash-completion": cli_docs.bash_completion,
        "zsh-completion": cli_docs.zsh_completion,
        "fish-completion": cli_docs.fish_completion,
    }
    assert sorted(generators) == sorted(cli_docs.GENERATORS)
    for what, generate in generators.items():
        outputs = {
            subprocess.run(
                [sys.executable, str(REPO / "tools/cli_docs.py"), what],
                capture_output=True,
                text=True,
                check=True,
                env={"COLUMNS": columns, "PYTHONPATH": str(REPO / "src")},
            ).stdout
            for columns in ("40", "200")
        }
        assert outputs == {generate(build_parser())}, what


def _complete(words: list[str], tmp_path: Path) -> list[str]:
    """What the completion offers for `words` (the last one being typed), run by bash."""
    script = tmp_path / "pvegpu.bash"
    script.write_text(cli_docs.bash_completion(build_parser()))
    quoted = " ".join(f"'{w}'" for w in words)
    run = (
        f'. "{script}"; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _pvegpu; '
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    result = subprocess.run(
        ["bash", "--norc", "-c", run], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    return sorted(filter(None, result.stdout.splitlines()))


def test_completion_offers_commands_then_their_options(tmp_path: Path) -> None:
    assert _complete(["pvegpu", ""], tmp_path) == sorted(
        [*_commands(), "-h", "--help", "--version"]
    )
    assert _complete(["pvegpu", "re"], tmp_path) == ["render", "revert"]
    render = sorted(f for a in _commands()["render"]._actions for f in a.option_strings)
    assert _complete(["pvegpu", "render", "--"], tmp_path) == [
        f for f in render if f.startswith("--")
    ]
    assert _complete(["pvegpu", "check", "--json", "--b"], tmp_path) == ["--bundle"]


def test_completion_offers_paths_after_an_option_that_takes_one(tmp_path: Path) -> None:
    (tmp_path / "kpro6.toml").write_text("")
    (tmp_path / "kpro7.toml").write_text("")
    assert _complete(["pvegpu", "render", "--spec", "kp"], tmp_path) == [
        "kpro6.toml",
        "kpro7.toml",
    ]
    # --json takes nothing: options again after it, not paths.
    assert _complete(["pvegpu", "plan", "--json", "kp"], tmp_path) == []


@needs_shellcheck
def test_completion_passes_shellcheck(tmp_path: Path) -> None:
    script = tmp_path / "pvegpu"
    script.write_text(cli_docs.bash_completion(build_parser()))
    result = subprocess.run(
        [str(SHELLCHECK), "-s", "bash", "-S", "style", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout
