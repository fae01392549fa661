"""The man page, from the argparse definitions: `pvegpu man`, and the Debian package's.

    pvegpu man | man -l -
    pvegpu man > pvegpu.1

Every command, option, choice of argument and exit code comes from
`pvegpu.cli.arguments.build_parser()`; nothing is written here by hand but the page's
layout, so the page always says what `pvegpu --help` says. The shell completions
(cli/completion.py) read the parser through the same helpers. Importing the argparse
tree loads `pvegpu.errors` (attrs) and neither cattrs nor jinja2, so the Debian build
(debian/rules, through tools/cli_docs.py) needs python3-attr only. The output holds no
date and no terminal width: two builds of one version write the same bytes.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Iterator

from pvegpu import __version__
from pvegpu.cli.arguments import EPILOG, build_parser

# One line per usage: the page and the completion never depend on $COLUMNS.
_WIDE = functools.partial(argparse.HelpFormatter, width=10_000)


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands in the order `pvegpu --help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise SystemExit("pvegpu: the parser has no subcommands")


def command_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each subcommand's one-line help, as `pvegpu --help` shows it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The options of `parser`, --help first, in the order they were added."""
    for action in parser._actions:
        if action.option_strings:
            yield action


def takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def choices(parser: argparse.ArgumentParser) -> list[str]:
    """The values its positional arguments take (`completion`'s shells), in order."""
    return [
        str(choice)
        for action in parser._actions
        if not action.option_strings
        and action.choices is not None
        and not isinstance(action, argparse._SubParsersAction)
        for choice in action.choices
    ]


def _usage(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = _WIDE
    return parser.format_usage().removeprefix("usage: ").strip()


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The option's help with argparse's own %(...)s expansion, as --help prints it."""
    return parser._get_formatter()._expand_help(action) if action.help else ""


def _roff(text: str) -> str:
    """`text` safe in a roff line: backslashes escaped, a leading control char defused,
    hyphens as the minus sign (so options can be searched and copied)."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def _invocation(action: argparse.Action) -> str:
    flags = ", ".join(f"\\fB{_roff(flag)}\\fR" for flag in action.option_strings)
    if not takes_value(action):
        return flags
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    return f"{flags} \\fI{_roff(metavar)}\\fR"


def _options_section(parser: argparse.ArgumentParser) -> list[str]:
    """Its positional arguments (`completion`'s SHELL), then its options."""
    lines: list[str] = []
    for action in parser._actions:
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
        lines += [".TP", f"\\fI{_roff(metavar)}\\fR", _roff(_help(parser, action))]
    for action in options(parser):
        lines += [".TP", _invocation(action), _roff(_help(parser, action))]
        if action.required:
            lines.append("Required.")
    return lines


def man_page(parser: argparse.ArgumentParser) -> str:
    sub = commands(parser)
    short = command_help(parser)
    lines = [
        f'.TH PVEGPU 1 "" "pvegpu {_roff(__version__)}" "User Commands"',
        ".SH NAME",
        f"pvegpu \\- {_roff((parser.description or '').rstrip('.'))}",
        ".SH SYNOPSIS",
    ]
    for command in sub.values():
        lines += [".nf", _roff(_usage(command)), ".fi"]
    lines += [".SH DESCRIPTION", _roff(parser.description or ""), ".SH OPTIONS"]
    lines += _options_section(parser)
    lines.append(".SH COMMANDS")
    for name, command in sub.items():
        lines += [
            f".SS {_roff(name)}",
            _roff(short.get(name, "")),
            ".PP",
            _roff(command.description or ""),
            ".PP",
            ".nf",
            _roff(_usage(command)),
            ".fi",
        ]
        lines += _options_section(command)
    lines.append(".SH EXIT STATUS")
    for line in EPILOG.splitlines()[1:]:
        code, _, meaning = line.strip().partition(" ")
        lines += [".TP", f"\\fB{_roff(code)}\\fR", _roff(meaning.strip())]
    lines += [
        ".SH SEE ALSO",
        "The guides under \\fI/usr/share/doc/pvegpu/\\fR: README.md, docs/cli.md (commands",
        "and exit codes), docs/spec.md (the split spec), docs/apply.md (apply and check).",
    ]
    return "\n".join(lines) + "\n"


def run_man(args: argparse.Namespace) -> int:
    """`pvegpu man`: the page on stdout, for `man -l -` or a file."""
    sys.stdout.write(man_page(build_parser()))
    return 0
