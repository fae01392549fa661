"""Shell completion for bash, zsh and fish, from the argparse definitions.

    pvegpu completion bash > /etc/bash_completion.d/pvegpu   # or ~/.local/share/...
    pvegpu completion zsh  > "${fpath[1]}/_pvegpu"
    pvegpu completion fish > ~/.config/fish/completions/pvegpu.fish

Each script completes the subcommands (every one `build_parser()` has: a new command
needs nothing here), then the options of the command typed, the values of a positional
argument with choices (`completion`'s shells), the choices of an option that lists them
(`--color`), and a path after every other option that takes a value (each names a file
or a directory). The Debian package
installs the three generated at build time (debian/rules, through tools/cli_docs.py);
a pip install prints them with this command. The output holds no date and no terminal
width: two builds of one version write the same bytes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from pvegpu import __version__
from pvegpu.cli.arguments import build_parser
from pvegpu.cli.docs import choices, command_help, commands, options, takes_value


def _words(values: Sequence[str]) -> str:
    return " ".join(values)


def _option_choices(action: argparse.Action) -> list[str]:
    """The values an option takes when argparse lists them (`--color`), else none: every
    other valued option of pvegpu names a file or a directory."""
    if not action.option_strings or not takes_value(action) or action.choices is None:
        return []
    return [str(c) for c in action.choices]


def _header(shell: str) -> str:
    return (
        f"# {shell} completion for pvegpu {__version__}; generated from the argparse\n"
        f"# definitions (`pvegpu completion {shell}`): do not edit.\n"
    )


# ---------------------------------------------------------------------------- bash


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """A completion function: the command, then its options (and its positional choices);
    a path after an option that takes one."""
    sub = commands(parser)
    top = [flag for action in options(parser) for flag in action.option_strings]
    cases: list[str] = []
    for name, command in sub.items():
        flags = [flag for action in options(command) for flag in action.option_strings]
        valued = [f for a in options(command) if takes_value(a) for f in a.option_strings]
        # An option with choices (`--color`) completes them, not a path.
        chosen = [
            f"                {'|'.join(a.option_strings)}) "
            f'chosen="{_words(_option_choices(a))}" ;;'
            for a in options(command)
            if _option_choices(a)
        ]
        cases += [
            f"        {name})",
            f'            opts="{_words([*choices(command), *flags])}"',
            f'            valued="{_words(valued)}"',
            *(["            case $prev in", *chosen, "            esac"] if chosen else []),
            "            ;;",
        ]
    body = "\n".join(cases)
    return f"""\
{_header("bash")}_pvegpu() {{
    local cur prev command="" opts="" valued="" chosen="" i
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
    if [[ -n $chosen ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$chosen" -- "$cur")
        return
    fi
    if [[ " $valued " == *" $prev "* ]]; then
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return
    fi
    mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
}}
complete -F _pvegpu pvegpu
"""


# ---------------------------------------------------------------------------- zsh


def _zsh_quote(text: str) -> str:
    """`text` as one single-quoted zsh word."""
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh_text(text: str) -> str:
    """Help text inside an `_arguments` spec's [...], where `]` ends it unless escaped."""
    return " ".join(text.split()).replace("\\", "\\\\").replace("]", "\\]")


def _zsh_message(text: str) -> str:
    """A spec's message (`:MESSAGE:action`), where `:` ends it unless escaped."""
    return text.replace("\\", "\\\\").replace(":", "\\:")


def _zsh_specs(parser: argparse.ArgumentParser) -> list[str]:
    """One `_arguments` spec per option string and one for a positional with choices."""
    specs = []
    for action in options(parser):
        flags = action.option_strings
        exclusive = f"({' '.join(flags)})" if len(flags) > 1 else ""
        repeat = "*" if isinstance(action, argparse._AppendAction) else ""
        help_text = _zsh_text(parser._get_formatter()._expand_help(action) if action.help else "")
        value = ""
        if takes_value(action):
            metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
            listed = _option_choices(action)
            value = f":{_zsh_message(metavar)}:" + (f"({' '.join(listed)})" if listed else "_files")
        for flag in flags:
            specs.append(_zsh_quote(f"{repeat or exclusive}{flag}[{help_text}]{value}"))
    positional = [a for a in parser._actions if not a.option_strings and a.choices is not None]
    for number, action in enumerate(positional, 1):
        if isinstance(action, argparse._SubParsersAction):
            continue  # the commands: the top level completes them itself
        name = action.metavar if isinstance(action.metavar, str) else action.dest
        values = " ".join(str(c) for c in action.choices or ())
        specs.append(_zsh_quote(f"{number}:{_zsh_message(name)}:({values})"))
    return specs


def zsh_completion(parser: argparse.ArgumentParser) -> str:
    """A `#compdef` function: `_arguments` for the top level and for each command."""
    short = command_help(parser)
    described = [
        _zsh_quote(name.replace(":", "\\:") + ":" + " ".join(short.get(name, "").split()))
        for name in commands(parser)
    ]
    cases: list[str] = []
    for name, command in commands(parser).items():
        specs = " \\\n                ".join(_zsh_specs(command))
        cases += [
            f"        {name})",
            f"            _arguments \\\n                {specs}",
            "            ;;",
        ]
    top = " \\\n        ".join(_zsh_specs(parser))
    listed = "\n            ".join(described)
    body = "\n".join(cases)
    return f"""\
#compdef pvegpu
{_header("zsh")}
_pvegpu() {{
    local curcontext=$curcontext state line
    typeset -A opt_args
    _arguments -C \\
        {top} \\
        '1:command:->command' \\
        '*::argument:->argument'
    case $state in
    command)
        local -a pvegpu_commands
        pvegpu_commands=(
            {listed}
        )
        _describe -t commands 'pvegpu command' pvegpu_commands
        ;;
    argument)
        curcontext=${{curcontext%:*:*}}:pvegpu-$line[1]:
        case $line[1] in
{body}
        esac
        ;;
    esac
}}

_pvegpu "$@"
"""


# ---------------------------------------------------------------------------- fish


def _fish_quote(text: str) -> str:
    """`text` as one single-quoted fish word (only \\ and ' are escaped there)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_option(condition: str, parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    parts = ["complete -c pvegpu", f"-n {_fish_quote(condition)}"]
    for flag in action.option_strings:
        parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
    if listed := _option_choices(action):
        parts.append(f"-r -f -a {_fish_quote(' '.join(listed))}")
    elif takes_value(action):
        parts.append("-r -F")
    if action.help:
        help_text = " ".join(parser._get_formatter()._expand_help(action).split())
        parts.append(f"-d {_fish_quote(help_text)}")
    return " ".join(parts)


def fish_completion(parser: argparse.ArgumentParser) -> str:
    """`complete` lines: the commands while none is typed, then each command's options
    and choices once it is."""
    sub = commands(parser)
    short = command_help(parser)
    lines = [_header("fish").rstrip("\n"), "complete -c pvegpu -f"]
    top = "not __fish_seen_subcommand_from " + " ".join(sub)
    for name in sub:
        help_text = " ".join(short.get(name, "").split())
        lines.append(
            f"complete -c pvegpu -n {_fish_quote(top)} -a {name} -d {_fish_quote(help_text)}"
        )
    lines += [_fish_option(top, parser, action) for action in options(parser)]
    for name, command in sub.items():
        seen = f"__fish_seen_subcommand_from {name}"
        if values := choices(command):
            lines.append(
                f"complete -c pvegpu -n {_fish_quote(seen)} -a {_fish_quote(' '.join(values))}"
            )
        lines += [_fish_option(seen, command, action) for action in options(command)]
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[argparse.ArgumentParser], str]] = {
    "bash": bash_completion,
    "zsh": zsh_completion,
    "fish": fish_completion,
}
"""Each shell `pvegpu completion` knows, and its script's generator."""


def run_completion(args: argparse.Namespace) -> int:
    """`pvegpu completion SHELL`: the script on stdout."""
    sys.stdout.write(GENERATORS[args.shell](build_parser()))
    return 0
