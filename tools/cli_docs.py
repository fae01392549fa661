"""Generate the man page and the bash completion from the argparse definitions.

    PYTHONPATH=src python3 tools/cli_docs.py man > pvegpu.1
    PYTHONPATH=src python3 tools/cli_docs.py bash-completion > pvegpu

debian/rules runs both when it builds the package, so the page and the completion
always say what `pvegpu --help` says: every command, option, choice of argument and
exit code comes from `pvegpu.cli.arguments.build_parser()`, nothing is written here by
hand but the page's layout. Importing the argparse tree loads `pvegpu.errors` (attrs)
and neither cattrs nor jinja2, so a build host needs python3-attr only. The output
holds no date and no terminal width: two builds of one version write the same bytes.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Iterator, Sequence

from pvegpu import __version__
from pvegpu.cli.arguments import EPILOG, build_parser

# One line per usage: the page and the completion never depend on $COLUMNS.
_WIDE = functools.partial(argparse.HelpFormatter, width=10_000)


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands in the order `pvegpu --help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise SystemExit("cli_docs: the parser has no subcommands")


def _command_help(parser: argparse.ArgumentParser) -> dict[str, str]:
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
    lines: list[str] = []
    for action in options(parser):
        lines += [".TP", _invocation(action), _roff(_help(parser, action))]
        if action.required:
            lines.append("Required.")
    return lines


def man_page(parser: argparse.ArgumentParser) -> str:
    sub = commands(parser)
    short = _command_help(parser)
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


def _words(values: Sequence[str]) -> str:
    return " ".join(values)


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """A completion function: the command, then its options; a path after an option that
    takes one (every valued option of pvegpu names a file or a directory)."""
    sub = commands(parser)
    top = [flag for action in options(parser) for flag in action.option_strings]
    cases: list[str] = []
    for name, command in sub.items():
        flags = [flag for action in options(command) for flag in action.option_strings]
        valued = [f for a in options(command) if takes_value(a) for f in a.option_strings]
        cases += [
            f"        {name})",
            f'            opts="{_words(flags)}"',
            f'            valued="{_words(valued)}"',
            "            ;;",
        ]
    body = "\n".join(cases)
    return f"""\
# bash completion for pvegpu {__version__}; generated by tools/cli_docs.py from the
# argparse definitions: do not edit.
_pvegpu() {{
    local cur prev command="" opts="" valued="" i
    cur=${{COMP_WORDS[COMP_CWORD]}}
    prev=${{COMP_WORDS[COMP_CWORD-1]}}
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${{COMP_WORDS[i]}} in
            -*) ;;
            *) command=${{COMP_WORDS[i]}}; break ;;
        esac
    done
    if [[ -z $command ]]; then
        mapfile -t COMPREPLY < <(compgen -W "{_words([*sub, *top])}" -- "$cur")
        return
    fi
    case $command in
{body}
        *) return ;;
    esac
    if [[ " $valued " == *" $prev "* ]]; then
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return
    fi
    mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
}}
complete -F _pvegpu pvegpu
"""


GENERATORS = {"man": man_page, "bash-completion": bash_completion}


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    cli.add_argument("what", choices=sorted(GENERATORS))
    args = cli.parse_args(argv)
    sys.stdout.write(GENERATORS[args.what](build_parser()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
