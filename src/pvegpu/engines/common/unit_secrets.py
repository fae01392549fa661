"""Secrets a container's current unit carries in its own text, and where the new unit reads them.

A token in `Environment=` or an `--api-key` value in `ExecStart=` is in a file that any
copy, diff or review bundle would spread. The rendered unit never carries such a value:
it reads `EnvironmentFile=` (the spec's `environment_file`, or a default next to the
unit's other settings), and the `serving-secrets-moved` finding says, by name only, what
to move there.
"""

from __future__ import annotations

from pvegpu.redact import is_secret_name, is_secret_option
from pvegpu.serving.unitfile import (
    ENVIRONMENT,
    EXEC_START,
    SERVICE,
    UnitFile,
    environment_pairs,
    exec_words,
)

DEFAULT_DIR = "/etc/default"
"""Debian's place for a service's environment file (`EnvironmentFile=/etc/default/x`)."""


def default_environment_file(unit: str) -> str:
    return f"{DEFAULT_DIR}/{unit}"


def unit_secrets(unit: UnitFile) -> tuple[str, ...]:
    """Names of the secrets `unit` (a unit file as parsed) holds: variables and options,
    in order."""
    names = [
        name
        for name, value in environment_pairs(unit.values(SERVICE, ENVIRONMENT))
        if value and is_secret_name(name)
    ]
    for value in unit.values(SERVICE, EXEC_START):
        for word in exec_words(value):
            option = word.partition("=")[0]
            if option.startswith("--") and is_secret_option(option):
                names.append(option)
    return tuple(dict.fromkeys(names))


def secrets_moved_message(names: tuple[str, ...], unit_path: str, vmid: int, path: str) -> str:
    """The `serving-secrets-moved` warning: names only, never a value."""
    variables = [n for n in names if not n.startswith("--")]
    options = [n for n in names if n.startswith("--")]
    text = (
        f"the container's current /{unit_path} holds secrets in its text: "
        f"{', '.join(names)} (values not shown here or in any bundle file). The new unit "
        f"reads them from EnvironmentFile={path} instead: before installing it, create "
        f"that file readable by root only (`pct exec {vmid} -- install -m 0600 /dev/null "
        f"{path}`)"
    )
    if variables:
        text += f" and move each of {', '.join(variables)} into it as a NAME=value line"
    if options:
        text += (
            f"; for {', '.join(options)} put the value in that file under a name of your "
            f"choice and add `{options[0]} ${{NAME}}` to serving.extra_args"
        )
    return text
