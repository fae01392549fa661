"""Secrets in review output: which names and options hold one, and text with them blanked.

Container units carry credentials (`Environment=HF_TOKEN=...`, `--api-key ...`). pvegpu's
review output (snapshots, plan diffs, SUMMARY.md, findings, JSON) is meant to be pasted
into tickets and committed for review, so every value that looks like a secret is shown
as `REDACTED` there. Redaction keeps the line's shape (the name, the option, quoting), so
a reviewer still sees that the setting exists and where.
"""

from __future__ import annotations

import re

MARK = "REDACTED"
"""What a secret value is replaced with."""

_SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)"
    r"($|_)|SECRET|PASSWORD",
    re.IGNORECASE,
)
# Whole dash-separated words: `--hf-token`, `--admin-api-key`, not `--max-total-tokens`.
_SECRET_OPTION = re.compile(r"^--(?:[a-z0-9]+-)*(?:api-key|token|secret|password)(?:-[a-z0-9]+)*$")
# One assignment of an Environment= line: `NAME=value`, or quoted whole `"NAME=v a l"`.
_ASSIGNMENT = re.compile(
    r"(?P<lead>^|\s)(?:(?P<q>[\"'])(?P<qname>[A-Za-z_][A-Za-z0-9_]*)=(?P<qvalue>.*?)(?P=q)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\S*))"
)
_ENVIRONMENT_LINE = re.compile(r"^(?P<key>\s*Environment\s*=\s*)(?P<rest>.*)$")
# A line of an environment file or shell profile: `NAME=value`, `export NAME=value`.
_ENV_FILE_LINE = re.compile(
    r"^(?P<key>\s*(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=)(?P<value>.*)$"
)
_OPTION_VALUE = re.compile(
    r"(?P<option>--[A-Za-z0-9-]+)(?P<sep>=|\s+)(?P<value>\"[^\"]*\"|'[^']*'|[^\s\"'\\]+)"
)


def is_secret_name(name: str) -> bool:
    """`HF_TOKEN`, `OPENAI_API_KEY`, `DB_PASSWORD`, `MY_SECRET`: names whose value is secret."""
    return bool(_SECRET_NAME.search(name))


def is_secret_option(option: str) -> bool:
    """`--api-key`, `--admin-api-key`, `--hf-token`: options whose value is secret."""
    return bool(_SECRET_OPTION.match(option.split("=", 1)[0]))


def _quoted(value: str) -> str:
    """REDACTED in the same quotes as the value it replaces."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{MARK}{value[0]}"
    return MARK


def _assignments(rest: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m["q"]:
            if not is_secret_name(m["qname"]) or not m["qvalue"]:
                return m[0]
            return f"{m['lead']}{m['q']}{m['qname']}={MARK}{m['q']}"
        if not is_secret_name(m["name"]) or not m["value"]:
            return m[0]
        return f"{m['lead']}{m['name']}={MARK}"

    return _ASSIGNMENT.sub(one, rest)


def _option_values(line: str) -> str:
    def one(m: re.Match[str]) -> str:
        if not is_secret_option(m["option"]):
            return m[0]
        return f"{m['option']}{m['sep']}{_quoted(m['value'])}"

    return _OPTION_VALUE.sub(one, line)


def redact_line(line: str) -> str:
    """One line of a unit, environment file or command with its secret values blanked."""
    body = line.rstrip("\r\n")
    ending = line[len(body) :]
    if (m := _ENVIRONMENT_LINE.fullmatch(body)) is not None:
        body = m["key"] + _assignments(m["rest"])
    elif (m := _ENV_FILE_LINE.fullmatch(body)) and is_secret_name(m["name"]) and m["value"].strip():
        body = m["key"] + _quoted(m["value"].strip())
    return _option_values(body) + ending


def redact_text(text: str) -> str:
    """`text` with the value of every secret assignment and secret option blanked."""
    return "".join(redact_line(line) for line in text.splitlines(keepends=True))


def redact_pairs(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Environment pairs with secret values blanked."""
    return tuple((k, MARK if is_secret_name(k) and v else v) for k, v in pairs)


def redact_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """A command line with the value of every secret option blanked (`--api-key V`, `=V`)."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(MARK)
            hide_next = False
        elif word.startswith("--") and is_secret_option(word):
            name, eq, _ = word.partition("=")
            out.append(f"{name}={MARK}" if eq else word)
            hide_next = not eq
        else:
            out.append(word)
    return tuple(out)


def holds_secret(text: str) -> bool:
    """Whether `redact_text` would change `text`."""
    return redact_text(text) != text
