"""Reading the split spec: TOML -> dict -> attrs models, every error with its spec path.

One cattrs converter lives here, at the edge. It is strict: TOML already types its
values, so a string where a number belongs is a mistake worth reporting, not coercing.
"""

from __future__ import annotations

import re
import stat
import tomllib
import typing
from collections.abc import Iterator, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import SpecError
from pvegpu.model.schema import (
    CpusetPolicy,
    DeviceStyle,
    P2PSetting,
    PoolSpec,
    Spec,
    UserspacePolicy,
)
from pvegpu.pci import PciAddress
from pvegpu.spec.engine_keys import SpecEngine, engine_problems, take_engine_keys, unknown_key
from pvegpu.spec.lines import locate
from pvegpu.spec.nodes import node_problems, shared_mapping_problems
from pvegpu.spec.rules import secret_problems, value_problems
from pvegpu.spec.salvage import Route, beneath, in_spec_order, salvaged, unoptional

MAX_SPEC_BYTES = 1024 * 1024
"""A spec is a few KiB; anything near this is not a spec."""


def _strict(kind: type[Any], name: str) -> Any:
    def structure(value: Any, _: type[Any]) -> Any:
        # bool is an int subclass in Python; `vmid = true` must not become 1.
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ValueError(f"expected {name}, got {type(value).__name__} {value!r}")
        return value

    return structure


def _structure_float(value: Any, _: type[Any]) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {type(value).__name__} {value!r}")
    return float(value)


def _structure_enum(value: Any, kind: type[Enum]) -> Enum:
    choices = [str(m.value) for m in kind]
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
    return kind(value)


def _structure_env(value: Any, _: type[Any]) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise ValueError(f'expected a table of NAME = "value", got {type(value).__name__}')
    pairs = []
    for key, item in value.items():
        if not isinstance(item, str):
            raise ValueError(f"{key}: expected a string value, got {type(item).__name__}")
        pairs.append((str(key), item))
    return tuple(pairs)


_ENV_TYPE = tuple[tuple[str, str], ...]


def _is_array(kind: Any) -> bool:
    """A schema type TOML writes as an array (every tuple but the environment table)."""
    return bool(typing.get_origin(kind) is tuple and kind != _ENV_TYPE)


def _converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    # A TOML string is iterable: without this, `gpus = "81:00.0"` or `extra_args = "--x"`
    # would become one entry per character. Arrays only; cattrs' own hook does the rest
    # (and names the index of a bad entry).
    tuples = conv.get_structure_hook(tuple[str, ...])

    def structure_array(value: Any, kind: Any) -> Any:
        if not isinstance(value, list):
            raise ValueError(f"expected an array, got {_toml_type(value)} {value!r}")
        return tuples(value, kind)

    conv.register_structure_hook_func(_is_array, structure_array)
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(bool, _strict(bool, "true or false"))
    conv.register_structure_hook(float, _structure_float)
    # Each enum explicitly: StrEnums are str subclasses and would otherwise be taken
    # by the plain-string hook above and stay unvalidated strings.
    for enum_type in (DeviceStyle, P2PSetting, CpusetPolicy, UserspacePolicy):
        conv.register_structure_hook(enum_type, _structure_enum)
    conv.register_structure_hook_func(lambda t: t == _ENV_TYPE, _structure_env)
    return conv


_CONVERTER = _converter()


def _problems(
    exc: BaseException,
    path: str,
    raw: Any,
    route: Route = (),
    engines: Sequence[SpecEngine] | None = None,
) -> Iterator[tuple[Diagnostic, Route]]:
    """Every problem cattrs found, with the route of its key in `raw` (spec/salvage.py)."""
    if isinstance(exc, ClassValidationError | IterableValidationError):
        with_notes, without_notes = exc.group_exceptions()
        for sub, note in with_notes:
            if isinstance(note, AttributeValidationNote):
                where = f"{path}.{note.name}" if path else note.name
                yield from _problems(sub, where, raw, (*route, note.name), engines)
            else:
                where = f"{path}[{note.index}]"
                yield from _problems(sub, where, raw, (*route, note.index), engines)
        for sub in without_notes:
            yield from _problems(sub, path, raw, route, engines)
    elif isinstance(exc, ForbiddenExtraKeysError):
        for key in sorted(exc.extra_fields):
            yield unknown_key(f"{path}.{key}" if path else key, exc.cl, engines), (*route, key)
    elif isinstance(exc, KeyError):
        # cattrs' note already put the missing attribute's name at the end of `path`.
        missing = path.rpartition(".")[2]
        problem = Diagnostic.error(
            "spec-missing-key", path, "required key is missing", f"add {missing} = ..."
        )
        yield problem, route
    else:
        yield _type_problem(exc, path, raw), route


_TOML_TYPES = {bool: "boolean", int: "integer", float: "float", str: "string"}
_TOML_TYPES |= {list: "array", dict: "table"}


def _toml_type(value: Any) -> str:
    """The TOML name of a parsed value's type (`vmid = "129"` is a string)."""
    return next((n for t, n in _TOML_TYPES.items() if type(value) is t), type(value).__name__)


def _expected(path: str) -> Any:
    """The schema type of spec path `path` (`pools[0].lxc.vmid` -> int); None if unknown."""
    kind: Any = Spec
    for name, index in re.findall(r"\.?([A-Za-z0-9_-]+)|\[(\d+)\]", path):
        kind = unoptional(kind)
        if index:
            args = typing.get_args(kind)
            kind = args[0] if typing.get_origin(kind) is tuple and args else None
        elif kind == _ENV_TYPE:
            kind = str
        elif attrs.has(kind):
            kind = typing.get_type_hints(kind).get(name)
        else:
            kind = None
        if kind is None:
            return None
    return unoptional(kind)


def _kind_text(kind: Any) -> str:
    """What a value of `kind` is, in TOML words."""
    simple = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if kind in simple:
        return simple[kind]
    if kind == _ENV_TYPE:
        return 'a table of NAME = "value" strings'
    if isinstance(kind, type) and issubclass(kind, Enum):
        return "one of " + ", ".join(f'"{m.value}"' for m in kind)
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return "an array of " + ("strings" if item is str else "tables")
    return "a table"


def _raw_at(raw: Any, path: str) -> tuple[bool, Any]:
    """The parsed TOML value at `path`, if it is there."""
    value = raw
    for name, index in re.findall(r"\.?([A-Za-z0-9_-]+)|\[(\d+)\]", path):
        if index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        elif not index and isinstance(value, dict) and name in value:
            value = value[name]
        else:
            return False, None
    return True, value


def _type_problem(exc: BaseException, path: str, raw: Any) -> Diagnostic:
    """A value of the wrong type or shape. The structure hooks here word their own
    ValueErrors; anything else cattrs raised deeper down (`lxc = 5`: "argument of type
    'int' is not iterable") is worded from the schema and the value instead."""
    kind = _expected(path)
    expected = _kind_text(kind) if kind is not None else "another value"
    key = path.rpartition(".")[2] or "the spec"
    found, value = _raw_at(raw, path)
    if isinstance(exc, ValueError):
        message = str(exc)
    elif found:
        message = f"expected {expected}, got {_toml_type(value)} {value!r}"[:300]
    else:
        message = f"expected {expected}"
    return Diagnostic.error(
        "spec-invalid-value",
        path or "spec",
        message,
        f"make {key} {expected} (docs/spec.md lists every key)",
    )


def parse_spec(
    text: str, source: str = "<spec>", *, engines: Sequence[SpecEngine] | None = None
) -> Spec:
    """Parse and validate a spec document; raises SpecError listing every problem.

    `engines`: what each engine of the registry adds to the spec (its name and its own
    keys; `pvegpu.engines.spec_engines()`), which the spec layer cannot ask for itself;
    without them the `engine` value is not judged and no engine's key is known
    (spec/engine_keys.py). `pvegpu.pipeline.parse_spec` passes the registry's."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError.one(
            "spec-syntax", source, f"not valid TOML: {err}", "fix the TOML syntax"
        ) from err
    except RecursionError as err:
        raise SpecError.one(
            "spec-syntax", source, "arrays or tables nested too deeply", "flatten the spec"
        ) from err
    return _structured(raw, source, text, engines)


def spec_from_data(
    raw: Mapping[str, Any],
    source: str = "<spec>",
    *,
    engines: Sequence[SpecEngine] | None = None,
) -> Spec:
    """A spec given as data rather than TOML text (an Ansible task's inline `spec:`),
    checked exactly as a file is; its problems name the key path, without a line."""
    return _structured(dict(raw), source, "", engines)


def _structured(raw: Any, source: str, text: str, engines: Sequence[SpecEngine] | None) -> Spec:
    """The spec, or a SpecError with every problem of it in spec order: the schema's
    (types, unknown and missing keys) and the rules' (values, cross-key checks) together,
    the rules judging every key that is not broken (spec/salvage.py)."""
    # The keys of one engine are no schema field: taken out of their serving tables here,
    # judged by the engines' declarations after (spec/engine_keys.py).
    schema_raw, engine_keys, passed_in = take_engine_keys(raw, engines)
    problems = list(passed_in)
    broken: list[str] = []
    try:
        spec = _CONVERTER.structure(schema_raw, Spec)
    except (ClassValidationError, IterableValidationError) as err:
        found = list(_problems(err, "", schema_raw, engines=engines))
        problems += [problem for problem, _ in found]
        broken = [p.subject for p in problems]
        whole = salvaged(schema_raw, ((route, p.code == "spec-unknown-key") for p, route in found))
        try:
            spec = _CONVERTER.structure(whole, Spec)
        except (ClassValidationError, IterableValidationError):
            # Not whole even so: the schema's problems are all there is to say.
            raise SpecError(locate(in_spec_order(problems, raw), text)) from err
    spec = attrs.evolve(spec, source=source, pools=_with_engine_keys(spec.pools, engine_keys))
    semantic = _semantic_problems(spec, broken, engines)
    problems.extend(p for p in semantic if not beneath(p.subject, broken))
    if problems:
        raise SpecError(locate(in_spec_order(problems, raw), text))
    return spec


def load_spec(path: Path, *, engines: Sequence[SpecEngine] | None = None) -> Spec:
    """Read a spec file. The file's path is used as the subject of read errors.
    `engines`: as `parse_spec` takes them."""
    try:
        # A FIFO or device named as the spec would block a read or never end: regular
        # files only, and no larger than a spec can sensibly be.
        if not stat.S_ISREG(path.stat().st_mode):
            raise SpecError.one(
                "spec-unreadable", str(path), "is not a regular file", "pass the spec's path"
            )
        with path.open("rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise SpecError.one(
            "spec-unreadable", str(path), f"cannot read: {err.strerror}", "check the path"
        ) from err
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError.one(
            "spec-unreadable",
            str(path),
            f"is larger than {MAX_SPEC_BYTES} bytes: a spec is a few KiB",
            "pass the split spec's TOML file",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError.one(
            "spec-unreadable",
            str(path),
            f"is not UTF-8 (byte {err.start}): TOML files are UTF-8",
            "save the spec as UTF-8",
        ) from err
    return parse_spec(text, str(path), engines=engines)


def _with_engine_keys(
    pools: tuple[PoolSpec, ...], keys: Mapping[int, tuple[tuple[str, Any], ...]]
) -> tuple[PoolSpec, ...]:
    """`pools` with each server's engine keys (taken out before the schema) put back."""
    if not keys:
        return pools
    with_keys = list(pools)
    for index, taken in keys.items():
        pool = pools[index] if index < len(pools) else None
        if pool is None or pool.lxc is None or pool.lxc.serving is None:
            continue
        serving = attrs.evolve(pool.lxc.serving, engine_keys=taken)
        with_keys[index] = attrs.evolve(pool, lxc=attrs.evolve(pool.lxc, serving=serving))
    return tuple(with_keys)


def _semantic_problems(
    spec: Spec, broken: Sequence[str], engines: Sequence[SpecEngine] | None
) -> Iterator[Diagnostic]:
    """What the types alone cannot say: one selector, one consumer, unique names.
    `broken`: the spec paths of the schema's problems, stood in for (spec/salvage.py)."""
    if not spec.pools:
        yield Diagnostic.error(
            "spec-no-pools", "pools", "the spec defines no pool", "add [[pools]]"
        )
    yield from value_problems(spec)
    yield from secret_problems(spec)
    yield from engine_problems(spec, engines)
    # Which node a pool is on cannot be judged while `node` or `nodes` itself is broken.
    if "node" not in broken and "nodes" not in broken:
        yield from node_problems(spec)
    yield from shared_mapping_problems(spec)
    seen_names: dict[str, int] = {}
    seen_vmids: dict[int, int] = {}
    # A mapping id is cluster-wide: pools on several nodes may share one (that is how a
    # VM can start on any of them), but one node holds it in one pool only.
    seen_mappings: dict[tuple[str | None, str], int] = {}
    for i, pool in enumerate(spec.pools):
        where = f"pools[{i}]"
        yield from _pool_problems(pool, where)
        if pool.name in seen_names:
            yield Diagnostic.error(
                "spec-duplicate-pool",
                f"{where}.name",
                f"pool name {pool.name!r} is also used by pools[{seen_names[pool.name]}]",
                "give every pool its own name",
            )
        seen_names.setdefault(pool.name, i)
        vmid = _guest_vmid(pool)
        if vmid is not None:
            if vmid in seen_vmids:
                first = seen_vmids[vmid]
                # Guest ids are cluster-wide: a container's and a VM's pool on one id
                # cannot be merged, one of the two ids is wrong.
                mixed = (pool.lxc is None) != (spec.pools[first].lxc is None)
                yield Diagnostic.error(
                    "spec-duplicate-guest",
                    where,
                    f"guest {vmid} also consumes pools[{first}]"
                    + (", one as a container, the other as a VM" if mixed else ""),
                    "correct the id of the pool that names the wrong guest (an id is one "
                    "container or one VM of the cluster)"
                    if mixed
                    else "merge the two pools into one",
                )
            seen_vmids.setdefault(vmid, i)
        if pool.mapping is not None:
            key = (spec.pool_node(pool), pool.mapping.id)
            if key in seen_mappings:
                yield Diagnostic.error(
                    "spec-duplicate-mapping",
                    f"{where}.mapping.id",
                    f"mapping {pool.mapping.id!r} is also defined by pools[{seen_mappings[key]}]",
                    "use one mapping id per pool",
                )
            seen_mappings.setdefault(key, i)


def _guest_vmid(pool: PoolSpec) -> int | None:
    if pool.lxc is not None:
        return pool.lxc.vmid
    if pool.vfio is not None and pool.vfio.vm is not None:
        return pool.vfio.vm.vmid
    return None


def _pool_problems(pool: PoolSpec, where: str) -> Iterator[Diagnostic]:
    selectors = [k for k in ("numa_node", "gpus", "count") if getattr(pool, k) is not None]
    if len(selectors) != 1:
        yield Diagnostic.error(
            "spec-pool-selector",
            where,
            "a pool selects its GPUs by exactly one of numa_node, gpus, count"
            + (f" (found {', '.join(selectors)})" if selectors else " (found none)"),
            "keep one of numa_node = N, gpus = [...], count = N",
        )
    if pool.gpus is not None and not pool.gpus:
        yield Diagnostic.error(
            "spec-invalid-value",
            f"{where}.gpus",
            "lists no GPU; the pool would silently get none",
            'list its GPUs (gpus = ["81:00.0"]) or remove the pool',
        )
    for j, text in enumerate(pool.gpus or ()):
        try:
            PciAddress.parse_lenient(text)
        except ValueError:
            yield Diagnostic.error(
                "spec-invalid-address",
                f"{where}.gpus[{j}]",
                f"{text!r} is not a PCI address",
                'write it as "0000:81:00.0" (or "81:00.0"), as `lspci -D` prints it',
            )
    consumers = [k for k in ("lxc", "vfio") if getattr(pool, k) is not None]
    if len(consumers) != 1:
        yield Diagnostic.error(
            "spec-pool-consumer",
            where,
            "a pool is consumed by exactly one of [lxc] or [vfio]"
            + (f" (found {', '.join(consumers)})" if consumers else " (found none)"),
            "under this [[pools]] entry keep one [pools.lxc] table (vmid = N) "
            "or one [pools.vfio] table",
        )
    if pool.vfio is not None and pool.mapping is None:
        yield Diagnostic.error(
            "spec-vfio-needs-mapping",
            where,
            "a vfio pool needs a cluster PCI mapping for its VMs",
            'add mapping = { id = "pro6000-vm" }',
        )
