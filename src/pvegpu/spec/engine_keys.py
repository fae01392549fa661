"""The serving table's engine: its name and the keys only it reads, declared by the engines.

The spec layer sits below the engines (tests/test_architecture.py): it cannot ask the
registry which engines there are, nor which keys each one reads. So each engine declares
its own keys (`Engine.spec_keys`: a name, a TOML type, a rule), the registry hands every
engine's declaration to whoever loads a spec (`pvegpu.engines.spec_engines()`, passed as
the loader's `engines`), and the rules here judge a spec by them: an engine pvegpu has
none of is refused by name, a key of one engine set for another is refused naming the
engine that reads it (`spec-engine-key`), and a key's type and rule are checked as the
schema's own keys are. Adding an engine adds its declaration, and no line here.

Loaded without declarations (`engines=None`: the spec layer alone), the `engine` value
is not judged (the planner refuses an engine the registry lacks) and no engine's key is
known, so one is refused as any unknown key.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.model import schema as s
from pvegpu.spec.rules import Rule, matching, text_problem
from pvegpu.values import value_class

_TOML_KINDS: dict[type[Any], str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
}
"""The TOML types a key of an engine may take, as the loader words them."""

_PASSED_IN = "engine_keys"
"""`ServingSpec.engine_keys`: filled from the table's keys, never a key of its own."""


@value_class
@attrs.frozen(eq=False, repr=False)
class EngineKey:
    """A key of the serving table that one engine reads: always optional (none set)."""

    name: str
    kind: type[Any]
    """Its TOML type: int, float, str or bool."""
    rule: Rule | None = None
    """What the value may be beyond its type (its text feeds docs/spec.md)."""

    def type_problem(self, value: Any) -> str | None:
        """What is wrong with the type of `value`, worded as the schema's keys are."""
        if self.kind is float:
            fits = isinstance(value, int | float) and not isinstance(value, bool)
        elif self.kind is int:
            fits = isinstance(value, int) and not isinstance(value, bool)
        else:
            fits = isinstance(value, self.kind)
        if fits:
            return None
        return f"expected {_TOML_KINDS[self.kind]}, got {type(value).__name__} {value!r}"


@value_class
@attrs.frozen(eq=False, repr=False)
class SpecEngine:
    """What one engine of the registry adds to the spec: its name and its own keys."""

    name: str
    keys: tuple[EngineKey, ...] = ()


def engine_rule(engines: Sequence[SpecEngine]) -> Rule:
    """The `engine` value's rule: one of the engines' names."""
    quoted = [f'"{e.name}"' for e in engines]
    text = " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)
    longest = max((len(e.name) for e in engines), default=1)
    return matching("|".join(re.escape(e.name) for e in engines), text, longest)


def key_names(engines: Sequence[SpecEngine] | None) -> tuple[str, ...]:
    """Every engine's own keys, in the registry's order (the loader's known keys)."""
    names: dict[str, None] = {}
    for engine in engines or ():
        names.update((key.name, None) for key in engine.keys)
    return tuple(names)


def _owners(engines: Sequence[SpecEngine]) -> dict[str, tuple[str, EngineKey]]:
    owners: dict[str, tuple[str, EngineKey]] = {}
    for engine in engines:
        for key in engine.keys:
            owners.setdefault(key.name, (engine.name, key))
    return owners


def take_engine_keys(
    raw: Any, engines: Sequence[SpecEngine] | None
) -> tuple[Any, dict[int, tuple[tuple[str, Any], ...]], list[Diagnostic]]:
    """`raw` (the parsed TOML) without the engines' own keys of each serving table, those
    keys by pool, and a problem for a table that sets `engine_keys` itself (the schema
    fills it from the others); `raw` is left as it was."""
    names = set(key_names(engines))
    taken: dict[int, tuple[tuple[str, Any], ...]] = {}
    problems: list[Diagnostic] = []
    pools = raw.get("pools") if isinstance(raw, dict) else None
    if not isinstance(pools, list):
        return raw, taken, problems
    copied = []
    for index, pool in enumerate(pools):
        lxc: Any = pool.get("lxc") if isinstance(pool, dict) else None
        serving = lxc.get("serving") if isinstance(lxc, dict) else None
        if not isinstance(serving, dict) or not (names | {_PASSED_IN}) & serving.keys():
            copied.append(pool)
            continue
        # None is an unset key, as a mapping built in code (Ansible's inline spec) writes
        # one it leaves out; TOML has no null.
        taken[index] = tuple((k, v) for k, v in serving.items() if k in names and v is not None)
        if _PASSED_IN in serving:
            where = f"pools[{index}].lxc.serving.{_PASSED_IN}"
            problems.append(unknown_key(where, s.ServingSpec, engines))
        rest = {k: v for k, v in serving.items() if k not in names and k != _PASSED_IN}
        copied.append({**pool, "lxc": {**lxc, "serving": rest}})
    return {**raw, "pools": copied}, taken, problems


def known_keys(kind: type[Any], engines: Sequence[SpecEngine] | None) -> str:
    """The keys a table of spec class `kind` takes, as an unknown key's fix lists them."""
    names = [f.name for f in attrs.fields(kind) if f.name not in ("source", _PASSED_IN)]
    if kind is s.ServingSpec:
        names.extend(key_names(engines))
    return ", ".join(names)


def unknown_key(where: str, kind: type[Any], engines: Sequence[SpecEngine] | None) -> Diagnostic:
    """The refusal of a key the table of spec class `kind` at `where` does not take."""
    return Diagnostic.error(
        "spec-unknown-key",
        where,
        "unknown key",
        f"remove it or fix the spelling; known keys here: {known_keys(kind, engines)}",
    )


def engine_key_problems(
    serving: s.ServingSpec, path: str, engines: Sequence[SpecEngine]
) -> Iterator[Diagnostic]:
    """Each key of `serving`'s engine_keys that is not of its type, breaks its rule, or is
    another engine's, as the schema's keys are refused."""
    owners = _owners(engines)
    for name, value in serving.engine_keys:
        where = f"{path}.{name}"
        if name not in owners:  # a spec built in code may hold any
            yield unknown_key(where, s.ServingSpec, engines)
            continue
        engine, key = owners[name]
        wrong = key.type_problem(value)
        if wrong is not None:
            fix = f"make {name} {_TOML_KINDS[key.kind]} (docs/spec.md lists every key)"
            yield Diagnostic.error("spec-invalid-value", where, wrong, fix)
            continue
        message = text_problem(value) if isinstance(value, str) else None
        if message is not None:
            yield Diagnostic.error("spec-invalid-value", where, message, "fix the value")
        elif key.rule is not None and (message := key.rule.check(value)) is not None:
            yield Diagnostic.error("spec-invalid-value", where, message, f"use {key.rule.text}")
        if engine != serving.engine:
            yield Diagnostic.error(
                "spec-engine-key",
                where,
                f'{name} is a key of engine = "{engine}"; engine = "{serving.engine}" '
                "does not read it",
                f'remove {name}, or set engine = "{engine}"',
            )


def engine_problems(spec: s.Spec, engines: Sequence[SpecEngine] | None) -> Iterator[Diagnostic]:
    """Every pool's server naming an engine the registry lacks, and its engine keys'
    problems (`engine_key_problems`); nothing without the engines' declarations."""
    if engines is None:
        return
    rule = engine_rule(engines)
    for i, pool in enumerate(spec.pools):
        serving = pool.lxc.serving if pool.lxc is not None else None
        if serving is None:
            continue
        where = f"pools[{i}].lxc.serving"
        # A control character or an over-long name is the generic text check's to say.
        if text_problem(serving.engine) is None:
            message = rule.check(serving.engine)
            if message is not None:
                yield Diagnostic.error(
                    "spec-invalid-value", f"{where}.engine", message, f"use {rule.text}"
                )
        yield from engine_key_problems(serving, where, engines)
