"""`pvegpu completion bash|zsh|fish` and `pvegpu man`: generated from the parser, run by
the shells they are for, the same bytes the Debian package installs.

Each script is checked by its own shell (`bash -n`, `zsh -n`, `fish -n`) and driven: bash
through COMP_WORDS and the completion function, fish through `complete -C`, zsh through
its completion function with `_arguments` and `_describe` standing in (they need a
terminal), so what zsh parses out of the quoting is what is asserted.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from linters import FISH, GROFF, ZSH, needs_fish, needs_groff, needs_zsh
from pvegpu.cli import arguments, main
from pvegpu.cli.arguments import SHELLS, build_parser
from pvegpu.cli.completion import (
    GENERATORS,
    bash_completion,
    fish_completion,
    zsh_completion,
)
from pvegpu.cli.docs import man_page


def _commands(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    parser = parser or build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flags(command: argparse.ArgumentParser) -> list[str]:
    return sorted(flag for action in command._actions for flag in action.option_strings)


COMMANDS = list(_commands())


@pytest.fixture
def with_init(monkeypatch: pytest.MonkeyPatch) -> Iterator[argparse.ArgumentParser]:
    """The parser with one more subcommand, as a new command would add it."""

    def init(p: argparse.ArgumentParser) -> None:
        p.add_argument("--into", type=Path, help="where [the] files: go")
        p.add_argument("--force", action="store_true", help="it's fine")

    commands = dict(arguments.COMMANDS)
    commands["init"] = ("write a starting spec", init)
    monkeypatch.setattr(arguments, "COMMANDS", commands)
    yield build_parser()


# ---------------------------------------------------------------------------- the commands


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_prints_the_generated_script(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sorted(GENERATORS) == sorted(SHELLS)
    assert main(["completion", shell]) == 0
    assert capsys.readouterr().out == GENERATORS[shell](build_parser())


def test_completion_refuses_an_unknown_shell(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["completion", "tcsh"])
    assert exit_.value.code == 2
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


def test_man_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["man"]) == 0
    assert capsys.readouterr().out == man_page(build_parser())


# ---------------------------------------------------------------------------- bash


def _bash(script: str, words: list[str], cwd: Path) -> list[str]:
    (cwd / "pvegpu.bash").write_text(script)
    quoted = " ".join(f"'{w}'" for w in words)
    run = (
        f". ./pvegpu.bash; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _pvegpu; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "--norc", "-c", run], capture_output=True, text=True, cwd=cwd, check=True
    )
    return sorted(filter(None, done.stdout.splitlines()))


def test_bash_script_parses() -> None:
    done = subprocess.run(
        ["bash", "-n"], input=bash_completion(build_parser()), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_bash_completes_each_command_and_its_options(command: str, tmp_path: Path) -> None:
    script = bash_completion(build_parser())
    assert command in _bash(script, ["pvegpu", ""], tmp_path)
    assert _bash(script, ["pvegpu", command, "-"], tmp_path) == _flags(_commands()[command])


def test_bash_completes_the_shells(tmp_path: Path) -> None:
    script = bash_completion(build_parser())
    offered = _bash(script, ["pvegpu", "completion", ""], tmp_path)
    assert offered == sorted(["-h", "--help", *SHELLS])
    assert _bash(script, ["pvegpu", "completion", "z"], tmp_path) == ["zsh"]


def test_a_new_command_is_completed_without_a_change_here(
    with_init: argparse.ArgumentParser, tmp_path: Path
) -> None:
    script = bash_completion(with_init)
    assert "init" in _bash(script, ["pvegpu", "i"], tmp_path)
    assert _bash(script, ["pvegpu", "init", "--"], tmp_path) == ["--force", "--help", "--into"]
    assert "init" in zsh_completion(with_init)
    assert "-a init -d 'write a starting spec'" in fish_completion(with_init)
    assert ".SS init" in man_page(with_init)


# ---------------------------------------------------------------------------- zsh

# `_arguments` and `_describe` need zsh's completion system and a terminal: these print
# what they are given (one word a line) and set what `_arguments -C` would, so the test
# sees the words zsh made of the script's quoting.
_ZSH_STUBS = r"""
_arguments() {
    if [[ $1 == -C ]]; then
        state=$PVEGPU_STATE; line=(${=PVEGPU_LINE}); shift
        [[ $state == argument ]] && return 0  # only the command's own specs then
    fi
    print -rl -- "$@"
}
_describe() { print -rl -- "${(@P)${@[-1]}}"; }
"""


def _zsh(script: str, state: str, line: str, tmp_path: Path) -> list[str]:
    assert ZSH is not None, "zsh missing: apt install zsh"
    path = tmp_path / "_pvegpu"
    path.write_text(script)
    done = subprocess.run(
        [ZSH, "-f", "-c", f"{_ZSH_STUBS}\nsource {path}"],
        capture_output=True,
        text=True,
        env={"PVEGPU_STATE": state, "PVEGPU_LINE": line, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.splitlines()


def _zsh_spec(spec: str) -> tuple[str, str]:
    """(option, help) of an `_arguments` spec: `(-h --help)-h[help]`, `*--root[...]:M:_files`."""
    found = re.fullmatch(r"(?:\([^)]*\)|\*)?(-[^\[]+)\[((?:\\.|[^\]\\])*)\](.*)", spec)
    assert found is not None, spec
    return found.group(1), re.sub(r"\\(.)", r"\1", found.group(2))


@needs_zsh
def test_zsh_script_parses(tmp_path: Path) -> None:
    assert ZSH is not None, "zsh missing: apt install zsh"
    path = tmp_path / "_pvegpu"
    path.write_text(zsh_completion(build_parser()))
    done = subprocess.run([ZSH, "-n", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert path.read_text().startswith("#compdef pvegpu\n")


@needs_zsh
def test_zsh_completes_the_commands(tmp_path: Path) -> None:
    out = _zsh(zsh_completion(build_parser()), "command", "", tmp_path)
    helps = {
        a.dest: a.help
        for a in next(
            a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
        )._choices_actions
    }
    described = [w for w in out if re.match(r"^[a-z]+:", w) and w.split(":")[0] in helps]
    assert described == [f"{name}:{' '.join((helps[name] or '').split())}" for name in COMMANDS]
    top = dict(_zsh_spec(w) for w in out if w.startswith(("(-", "--")))
    assert top == {
        "-h": "show this help message and exit",
        "--help": "show this help message and exit",
        "--version": "print the version and exit",
    }
    assert "1:command:->command" in out


@needs_zsh
@pytest.mark.parametrize("command", COMMANDS)
def test_zsh_completes_each_commands_options(command: str, tmp_path: Path) -> None:
    out = _zsh(zsh_completion(build_parser()), "argument", command, tmp_path)
    specs = [w for w in out if w.startswith(("(", "-", "*"))]
    parsed = dict(_zsh_spec(s) for s in specs)
    parser = _commands()[command]
    assert sorted(parsed) == _flags(parser)
    for action in parser._actions:
        for flag in action.option_strings:
            assert parsed[flag] == " ".join(parser._get_formatter()._expand_help(action).split())
    # A path after every valued option but those that list their values (`--color`).
    valued = [s for s in specs if s.endswith(":_files")]
    assert len(valued) == sum(
        len(a.option_strings)
        for a in parser._actions
        if a.option_strings and a.nargs != 0 and a.choices is None
    )
    for action in parser._actions:
        if action.option_strings and action.choices is not None:
            listed = f":({' '.join(str(c) for c in action.choices)})"
            assert all(
                any(s.endswith(listed) for s in specs if f in s) for f in action.option_strings
            )
    if command == "completion":
        assert "1:SHELL:(bash zsh fish)" in out


@needs_zsh
def test_zsh_quoting_holds_brackets_colons_and_quotes(
    with_init: argparse.ArgumentParser, tmp_path: Path
) -> None:
    out = _zsh(zsh_completion(with_init), "argument", "init", tmp_path)
    parsed = dict(_zsh_spec(s) for s in out if s.startswith(("(", "-", "*")))
    assert parsed["--into"] == "where [the] files: go"
    assert parsed["--force"] == "it's fine"


# ---------------------------------------------------------------------------- fish


def _fish(script: str, line: str, cwd: Path) -> list[str]:
    assert FISH is not None, "fish missing: apt install fish"
    (cwd / "pvegpu.fish").write_text(script)
    done = subprocess.run(
        [FISH, "--no-config", "-c", f"source pvegpu.fish; complete -C {line!r}"],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return sorted(done.stdout.splitlines())


@needs_fish
def test_fish_script_parses(tmp_path: Path) -> None:
    assert FISH is not None, "fish missing: apt install fish"
    path = tmp_path / "pvegpu.fish"
    path.write_text(fish_completion(build_parser()))
    done = subprocess.run([FISH, "-n", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@needs_fish
def test_fish_completes_commands_options_shells_and_paths(tmp_path: Path) -> None:
    script = fish_completion(build_parser())
    found = _fish(script, "pvegpu ", tmp_path)
    assert [line.split("\t")[0] for line in found] == sorted(COMMANDS)
    assert "discover\tshow the host's GPUs, NUMA nodes, IOMMU groups and drivers" in found
    assert [w.split("\t")[0] for w in _fish(script, "pvegpu completion ", tmp_path)] == sorted(
        SHELLS
    )
    (tmp_path / "kpro6.toml").write_text("")
    assert _fish(script, "pvegpu render --spec kp", tmp_path) == ["kpro6.toml"]
    assert _fish(script, "pvegpu plan --json kp", tmp_path) == []


@needs_fish
@pytest.mark.parametrize("command", COMMANDS)
def test_fish_completes_each_commands_options(command: str, tmp_path: Path) -> None:
    found = _fish(fish_completion(build_parser()), f"pvegpu {command} --", tmp_path)
    long_flags = [f for f in _flags(_commands()[command]) if f.startswith("--")]
    assert [line.split("\t")[0] for line in found] == long_flags


# ---------------------------------------------------------------------------- the man page


@needs_groff
def test_the_man_page_renders_without_warnings_and_lists_every_command(tmp_path: Path) -> None:
    assert GROFF is not None, "groff missing: apt install groff-base"
    path = tmp_path / "pvegpu.1"
    path.write_text(man_page(build_parser()))
    done = subprocess.run(
        [GROFF, "-man", "-Tutf8", "-ww", "-rLL=100n", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    # Bold and underline as overstrike (groff before 1.23's grotty) or as SGR escapes
    # (Debian 13's groff 1.23): the words only.
    text = re.sub(r".\x08|\x1b\[[0-9;]*m", "", done.stdout)
    commands = text.split("COMMANDS", 1)[1].split("EXIT STATUS", 1)[0]
    headings = re.findall(r"^   (\S+)$", commands, re.M)
    assert headings == COMMANDS
    assert "pvegpu completion [-h] SHELL" in text


@pytest.mark.parametrize("argv", [("completion", "zsh"), ("man",)], ids=["completion", "man"])
def test_printing_them_imports_nothing_heavy(argv: tuple[str, ...]) -> None:
    """A completion script or the page is the parser written out: no host reading, no
    planner, no renderer, no jinja2 (the Debian build needs python3-attr only)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pvegpu", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "pvegpu.cli.arguments" in modules
    heavy = ("jinja2", "cattrs", "pvegpu.host", "pvegpu.planning", "pvegpu.rendering")
    assert sorted(m for m in modules if m.startswith(heavy)) == []
