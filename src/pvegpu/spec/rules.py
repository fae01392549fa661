"""What each spec value may be, beyond its TOML type: one table, read by the loader and docs.

A spec value ends up in files that other programs parse (Proxmox configs, systemd units,
a shell script), so a value those programs would read differently from what the spec
says is refused here, before planning: control characters (a newline would start a new
line in any of them), over-long text, numbers outside what Proxmox, the kernel or
systemd accept, and names that do not match the rule of the program that reads them.
Every pattern is applied with `fullmatch`: `$` would let a trailing newline through.

`RULES` is keyed by (spec class, field) and also feeds docs/spec.md, so the reference
cannot drift from what is enforced (tests/test_spec_reference.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.model import schema as s
from pvegpu.redact import is_secret_name, is_secret_option
from pvegpu.values import value_class
from pvegpu.vendors import VENDORS

MAX_TEXT = 4096
"""Longest free-text value (descriptions, paths, arguments): far above any real one."""
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""A control character: a newline or tab would start a new line or field in any file."""


@value_class
@attrs.frozen(eq=False, repr=False)
class Rule:
    """One constraint: its wording for people, and the check that returns a problem text."""

    text: str
    check: Callable[[Any], str | None]


def int_range(low: int, high: int) -> Rule:
    def check(value: Any) -> str | None:
        return None if low <= value <= high else f"{value} is not between {low} and {high}"

    return Rule(f"{low}..{high}", check)


def matching(pattern: str, text: str, max_len: int = MAX_TEXT) -> Rule:
    regex = re.compile(pattern)

    def check(value: Any) -> str | None:
        if len(value) > max_len:
            return f"is {len(value)} characters long (at most {max_len})"
        return None if regex.fullmatch(value) else f"{value!r} is not {text}"

    return Rule(f"{text}, at most {max_len} characters", check)


def _absolute_path(value: Any) -> str | None:
    return None if value.startswith("/") else f"{value!r} is not an absolute path"


_NAME_MAX = 255
"""Longest file name the kernel (and systemd's path check) takes, in bytes."""


def _unit_path(value: Any) -> str | None:
    """A path a unit setting takes whole (WorkingDirectory=, EnvironmentFile=).

    systemd strips blanks at both ends of a value, reads a final `\\` as a line
    continuation, and ignores a path that is not normalized (`.`, `..`, `//`, a final
    `/`), so any of those would make the unit say something other than the spec.
    """
    if not value.startswith("/"):
        return f"{value!r} is not an absolute path"
    if value[-1] in " \\":
        return f"{value!r} ends in {value[-1]!r}, which systemd strips or reads as a continuation"
    parts = value.split("/")[1:]
    if value != "/" and any(p in ("", ".", "..") for p in parts):
        return f"{value!r} is not normalized (no `.`, `..`, `//` or final `/`)"
    if any(len(p.encode()) > _NAME_MAX for p in parts):
        return f"{value!r} has a component longer than {_NAME_MAX} bytes"
    return None


def _fraction(value: Any) -> str | None:
    if not math.isfinite(value) or not 0 < value < 1:
        return f"{value} is not between 0 and 1 (exclusive)"
    return None


def _no_comma(value: Any) -> str | None:
    # pci.cfg splits a map's values on ','.
    return "contains ',', which pci.cfg reads as a separator" if "," in value else None


def _without_suffix(rule: Rule, suffix: str) -> Rule:
    def check(value: Any) -> str | None:
        if value.endswith(suffix):
            return f"{value!r} ends in {suffix}, which the renderer adds"
        return rule.check(value)

    return Rule(rule.text, check)


VMID = int_range(100, 999_999_999)
"""Proxmox's guest id range."""
BYTES = int_range(1, 2**62)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]+)?")
"""systemd's unit name characters (a `\\` starts its `\\x2d` escapes) and one `@` before
an instance (systemd.unit(5)); a shell command line naming the unit quotes it."""
UNIT_PATH = "a normalized absolute path, not ending in a blank or `\\`"

NODE = matching(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?", "a host name", 63)
"""A Proxmox node name: a DNS label, as pve-node and /etc/hostname's first label are."""


def _node_list(value: Any) -> str | None:
    for name in value:
        message = NODE.check(name)
        if message is not None:
            return message
    if len(set(value)) != len(value):
        return "names a node twice"
    return None


def _vgpu_type() -> Rule:
    """A vGPU type of a vendor with vGPUs on virtual functions, as `mdev=` names it: the
    only kind a vGPU pool takes (planning/vgpu.py), and never one that would break the
    hostpci property string (qemu-server's pattern is [^/.:]+, and `,` `=` split it)."""
    sources = [v.vgpu for v in VENDORS if v.vgpu is not None]
    forms = " or ".join(f"`{v.type_name.format(id='<id>')}`" for v in sources)
    regex = "|".join(f"(?:{v.type_pattern.pattern})" for v in sources)
    return matching(regex, f"a vGPU type as Proxmox's mdev= names it ({forms})", 64)


RULES: dict[tuple[type[Any], str], Rule] = {
    (s.Spec, "node"): NODE,
    (s.Spec, "nodes"): Rule("distinct host names, at most 63 characters each", _node_list),
    (s.PoolSpec, "node"): NODE,
    (s.PoolSpec, "name"): matching(r"[A-Za-z0-9][A-Za-z0-9_.-]*", "letters, digits, . _ -", 64),
    (s.PoolSpec, "numa_node"): int_range(0, 1023),
    (s.PoolSpec, "count"): int_range(1, 65535),
    (s.MappingSpec, "id"): matching(r"[A-Za-z][A-Za-z0-9_-]+", "a Proxmox mapping id", 128),
    (s.MappingSpec, "description"): Rule("no ','", _no_comma),
    (s.LxcSpec, "vmid"): VMID,
    (s.LxcSpec, "mode"): matching(r"0?[0-7]{3}", "an octal file mode such as 0666", 4),
    (s.LxcSpec, "gid"): int_range(0, 2**32 - 2),
    (s.VmSpec, "vmid"): VMID,
    (s.VfioSpec, "vgpu_type"): _vgpu_type(),
    (s.ServingSpec, "version"): matching(r"[0-9]+(\.[0-9]+)*[0-9A-Za-z.+-]*", "a version", 64),
    # `engine` and the keys of one engine: the engines declare them (spec/engine_keys.py).
    # SGLang reads a relative --model-path against the unit's working directory, or as
    # a Hugging Face repo id to download: neither is the directory the spec means.
    (s.ServingSpec, "model_path"): Rule(
        "an absolute path (the model directory inside the container)", _absolute_path
    ),
    (s.ServingSpec, "unit"): _without_suffix(
        matching(
            UNIT_NAME.pattern,
            "a systemd unit name without .service (`[A-Za-z0-9:_.\\-]`, one `@`)",
            200,
        ),
        ".service",
    ),
    # ExecStart='s executable is one plain word: never quoted, no `$` or `%` (systemd).
    (s.ServingSpec, "python"): matching(
        r"(/(?!\.\.?(/|$))[A-Za-z0-9_.+@-]+)+",
        "a normalized absolute path of letters, digits and `/ _ . + @ -`",
    ),
    (s.ServingSpec, "host"): matching(r"[A-Za-z0-9.:_-]+", "an address or host name", 253),
    (s.ServingSpec, "port"): int_range(1, 65535),
    (s.ServingSpec, "context_length"): int_range(1, 2**31 - 1),
    (s.ServingSpec, "mem_fraction_static"): Rule("between 0 and 1, exclusive", _fraction),
    (s.ServingSpec, "checkpoint_bytes"): BYTES,
    (s.ServingSpec, "gpu_memory_bytes"): BYTES,
    (s.ServingSpec, "user"): matching(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "a user name or UID", 64),
    (s.ServingSpec, "working_directory"): Rule(UNIT_PATH, _unit_path),
    (s.ServingSpec, "limit_nofile"): int_range(1, 1_073_741_816),
    (s.ServingSpec, "environment_file"): Rule(UNIT_PATH, _unit_path),
}
"""Constraints beyond the type. Every string (in lists and tables too) is also checked
for control characters and a length of at most MAX_TEXT."""

TEXT_RULE = f"no control characters, at most {MAX_TEXT} characters"

_NOT_KEYS = ("source", "engine_keys")
"""Fields no rule here judges: the spec's file, and the keys of one engine, which the
engine declares and spec/engine_keys.py judges."""


def text_problem(value: str) -> str | None:
    if CONTROL.search(value):
        return f"{value[:60]!r} holds a control character (a newline, tab, ...)"
    if len(value) > MAX_TEXT:
        return f"is {len(value)} characters long (at most {MAX_TEXT})"
    return None


def value_problems(node: Any, path: str = "") -> Iterator[Diagnostic]:
    """Every value of the spec tree `node` that breaks its rule, with its spec path."""
    for field in attrs.fields(type(node)):
        value = getattr(node, field.name)
        where = f"{path}.{field.name}" if path else field.name
        if field.name in _NOT_KEYS or value is None:
            continue
        if attrs.has(type(value)):
            yield from value_problems(value, where)
        elif isinstance(value, tuple):
            yield from _sequence_problems(value, where)
        elif isinstance(value, str):
            message = text_problem(value)
            if message is not None:
                yield Diagnostic.error("spec-invalid-value", where, message, "fix the value")
                continue
        yield from _rule_problem(node, field.name, value, where)


def _rule_problem(node: Any, name: str, value: Any, where: str) -> Iterator[Diagnostic]:
    rule = RULES.get((type(node), name))
    # A rule on a list judges the whole list (`nodes`: names, none twice).
    if rule is not None:
        message = rule.check(value)
        if message is not None:
            yield Diagnostic.error("spec-invalid-value", where, message, f"use {rule.text}")


def rule_problems(node: Any, path: str) -> Iterator[Diagnostic]:
    """The RULES of `node`'s own fields only (no nested tables, no generic text check):
    for a spec class built in code rather than loaded, which the loader never saw."""
    for field in attrs.fields(type(node)):
        value = getattr(node, field.name)
        if value is None or attrs.has(type(value)) or field.name in _NOT_KEYS:
            continue
        if isinstance(value, str) and text_problem(value) is not None:
            continue  # control characters and length: the caller's own check says so
        yield from _rule_problem(node, field.name, value, f"{path}.{field.name}")


def _sequence_problems(values: tuple[Any, ...], path: str) -> Iterator[Diagnostic]:
    for index, item in enumerate(values):
        where = f"{path}[{index}]"
        if attrs.has(type(item)):
            yield from value_problems(item, where)
        elif isinstance(item, tuple):  # environment: (name, value)
            name, value = item
            if not ENV_NAME.fullmatch(name) or len(name) > 256:
                yield Diagnostic.error(
                    "spec-invalid-value",
                    f"{path}.{name[:60]}",
                    f"{name[:60]!r} is not an environment variable name",
                    "use letters, digits and '_', not starting with a digit",
                )
            message = text_problem(value)
            if message is not None:
                yield Diagnostic.error(
                    "spec-invalid-value", f"{path}.{name[:60]}", message, f"use {TEXT_RULE}"
                )
        elif isinstance(item, str):
            message = text_problem(item)
            if message is not None:
                yield Diagnostic.error("spec-invalid-value", where, message, "fix the value")


REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
"""`${NAME}`: a value systemd substitutes from the unit's environment at start."""
_SECRET_FIX = (
    "put it in a root-only file in the container (NAME=value lines) and set "
    "serving.environment_file to that file; pass options as `--api-key ${NAME}`"
)


def secret_problems(spec: s.Spec) -> Iterator[Diagnostic]:
    """Secrets written into the spec: they would land in the unit and the review bundle."""
    for i, pool in enumerate(spec.pools):
        serving = pool.lxc.serving if pool.lxc is not None else None
        if serving is None:
            continue
        where = f"pools[{i}].lxc.serving"
        for name, value in serving.environment:
            if is_secret_name(name) and value and not REFERENCE.fullmatch(value):
                yield Diagnostic.error(
                    "spec-secret",
                    f"{where}.environment.{name}",
                    f"{name} looks like a secret; in the spec it would be written into the "
                    "unit file and every review bundle",
                    _SECRET_FIX,
                )
        args = serving.extra_args
        for j, word in enumerate(args):
            option, eq, value = word.partition("=")
            if not option.startswith("--") or not is_secret_option(option):
                continue
            if not eq:
                value = args[j + 1] if j + 1 < len(args) else ""
            if value and not REFERENCE.fullmatch(value):
                yield Diagnostic.error(
                    "spec-secret",
                    f"{where}.extra_args[{j}]",
                    f"{option} takes a secret; its value would be written into the unit "
                    "file and every review bundle",
                    _SECRET_FIX,
                )
