"""The man page and the shell completions, for the Debian build (debian/rules).

    PYTHONPATH=src python3 tools/cli_docs.py man > pvegpu.1
    PYTHONPATH=src python3 tools/cli_docs.py bash-completion > pvegpu
    PYTHONPATH=src python3 tools/cli_docs.py zsh-completion > _pvegpu
    PYTHONPATH=src python3 tools/cli_docs.py fish-completion > pvegpu.fish

A thin wrapper: the generators live in the package (pvegpu.cli.docs,
pvegpu.cli.completion), so `pvegpu man` and `pvegpu completion SHELL` after a pip
install print the same bytes the package installs. Everything comes from
`pvegpu.cli.arguments.build_parser()`; importing it loads `pvegpu.errors` (attrs) and
neither cattrs nor jinja2, so a build host needs python3-attr only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from pvegpu.cli.arguments import build_parser
from pvegpu.cli.completion import bash_completion, fish_completion, zsh_completion
from pvegpu.cli.docs import man_page

__all__ = ["GENERATORS", "bash_completion", "fish_completion", "main", "man_page", "zsh_completion"]

GENERATORS: dict[str, Callable[[argparse.ArgumentParser], str]] = {
    "man": man_page,
    "bash-completion": bash_completion,
    "zsh-completion": zsh_completion,
    "fish-completion": fish_completion,
}


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    cli.add_argument("what", choices=sorted(GENERATORS))
    args = cli.parse_args(argv)
    sys.stdout.write(GENERATORS[args.what](build_parser()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
