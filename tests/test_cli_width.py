"""The command line's formatters (cli/arguments.py) take the terminal's width without
importing shutil, and format every help text exactly as argparse's own would."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from pvegpu.cli.arguments import build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def _help_texts(parser: argparse.ArgumentParser) -> list[str]:
    subs = _subparsers(parser)
    return [parser.format_help(), *(subs[name].format_help() for name in sorted(subs))]


@pytest.mark.parametrize("columns", [None, "40", "100", "250", "0", "wide"])
def test_help_is_what_argparse_prints(columns: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    parser = build_parser()
    ours = _help_texts(parser)
    # The same parser with argparse's own formatters, which ask shutil for the width.
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for sub in _subparsers(parser).values():
        sub.formatter_class = argparse.HelpFormatter
    assert ours == _help_texts(parser)


def test_the_width_is_the_terminal_s(monkeypatch: pytest.MonkeyPatch) -> None:
    # A width that is no default: a formatter that ignored $COLUMNS would wrap at 80.
    monkeypatch.setenv("COLUMNS", "52")
    text = _subparsers(build_parser("render"))["render"].format_help()
    assert max(len(line) for line in text.splitlines()) <= 50
    monkeypatch.setenv("COLUMNS", "200")
    text = _subparsers(build_parser("render"))["render"].format_help()
    assert max(len(line) for line in text.splitlines()) > 80


def test_parsing_a_command_imports_no_shutil() -> None:
    code = (
        "import sys\n"
        "from pvegpu.cli.arguments import build_parser, command_of\n"
        "argv = ['discover', '--root', '/', '--json']\n"
        "build_parser(command_of(argv)).parse_args(argv)\n"
        "print(sorted({'shutil', 'bz2', 'lzma'} & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
