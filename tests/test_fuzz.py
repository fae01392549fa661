"""Fuzz: mutated host trees, specs and existing configs give typed errors, never a crash.

Every input pvegpu reads is mutated with a fixed seed (so a failure reproduces), run
through discovery, planning and rendering in-process, and the outcome must be either
artifacts or a `PvegpuError` with at least one problem. A hang is caught by a per-example
deadline (alarm signal). `make test` runs a quick sample; `make fuzz` runs many more
(PVEGPU_FUZZ_EXAMPLES sets the count per family).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import string
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest

from deadline import HangError, deadline
from depth import THOROUGH
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PvegpuError
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.model_config import LINEAR_LAYER_TYPES
from pvegpu.model.schema import Spec
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.planning.stale_mappings import stale_map_findings
from pvegpu.pvefiles import pcicfg
from pvegpu.rendering.registry import render
from pvegpu.spec.load import load_spec, parse_spec

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = int(os.environ.get("PVEGPU_FUZZ_EXAMPLES", "100" if THOROUGH else "12"))
SEED = int(os.environ.get("PVEGPU_FUZZ_SEED", "20261130"))
DEADLINE_S = 10
CASES = (("kpro6", "kpro6.toml"), ("workstation", "workstation.toml"), ("mixed", "mixed.toml"))

NASTY_TEXT = [
    "",
    "\n",
    "0",
    "-1",
    "²",
    "\uff11\uff12",  # fullwidth digits: str.isdigit() says yes, int() too
    "99999999999999999999999",
    "nan",
    "inf",
    "\x00",
    "é\u202e\ufffd",  # non-ASCII, a bidi override, a replacement character
    "x" * 5000,
    "a\nb",
    "a\r\nb",
    "$HOME%n\\",
    "../../../../etc/passwd",
    "/abs/path",
    "0x10de",
    "Y",
    "(null)",
]


class Outcomes:
    """What a fuzz run produced: refusal codes counted, and every untyped failure."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.failures: list[str] = []

    def run(self, step: Callable[[], object], what: str) -> None:
        try:
            with deadline(DEADLINE_S):
                step()
        except PvegpuError as err:
            bad = [p for p in err.problems if not (p.code and p.subject and p.message)]
            if not err.problems or bad:
                self.failures.append(f"refusal without code/subject/message: {what}")
            code = err.problems[0].code if err.problems else "?"
        except HangError:
            self.failures.append(f"hang: {what}")
            return
        except Exception as err:  # the point: nothing untyped may come out
            self.failures.append(f"untyped {type(err).__name__}: {err!s:.300} <- {what:.600}")
            return
        else:
            code = "ok"
        self.codes[code] = self.codes.get(code, 0) + 1

    def check(self) -> None:
        shown = "\n\n".join(self.failures[:8])
        assert not self.failures, f"{len(self.failures)} failures, first ones:\n{shown}"


def plan_and_render(facts: HostFacts, spec: Spec) -> None:
    render(plan(facts, spec))


# -- host trees


def _tree_mutations(rng: random.Random) -> list[tuple[str, Callable[[Path], None]]]:
    text = rng.choice(NASTY_TEXT)

    def write_text(p: Path) -> None:
        _replace(p)
        p.write_text(text, encoding="utf-8", errors="surrogateescape")

    def garbage(p: Path) -> None:
        _replace(p)
        p.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))))

    def huge(p: Path) -> None:
        _replace(p)
        with p.open("wb") as handle:
            handle.truncate(200 * 1024 * 1024)  # sparse: 200 MiB of zeros, no disk used

    def directory(p: Path) -> None:
        _replace(p)
        p.mkdir()

    def fifo(p: Path) -> None:
        _replace(p)
        os.mkfifo(p)

    def dangling(p: Path) -> None:
        _replace(p)
        p.symlink_to("/does/not/exist")

    def loop(p: Path) -> None:
        _replace(p)
        p.symlink_to(p.name)

    def outside(p: Path) -> None:
        _replace(p)
        p.symlink_to("../" * 30 + "etc/hostname")

    def delete(p: Path) -> None:
        _replace(p)

    return [
        ("text", write_text),
        ("garbage", garbage),
        ("huge", huge),
        ("dir", directory),
        ("fifo", fifo),
        ("dangling", dangling),
        ("loop", loop),
        ("outside", outside),
        ("delete", delete),
    ]


def _replace(path: Path) -> None:
    if path.is_symlink() or path.is_file() or path.is_fifo():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _entries(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*filenames, *dirnames):
            found.append(Path(dirpath) / name)
    return sorted(found)


@contextmanager
def mutated(target: Path, mutate: Callable[[Path], None], backup: Path) -> Iterator[None]:
    """`target` mutated for the duration, then put back exactly (one copy, not the tree)."""
    shutil.rmtree(backup, ignore_errors=True)
    if target.is_symlink() or not target.is_dir():
        backup.mkdir()
        shutil.copy2(target, backup / "entry", follow_symlinks=False)
    else:
        shutil.copytree(target, backup / "entry", symlinks=True)
    mutate(target)
    try:
        yield
    finally:
        _replace(target)
        (backup / "entry").rename(target)


@pytest.mark.parametrize(("host", "spec_name"), CASES)
def test_mutated_host_trees_give_typed_errors(tmp_path: Path, host: str, spec_name: str) -> None:
    rng = random.Random(f"{SEED}-tree-{host}")
    spec = load_spec(REPO / "examples" / spec_name)
    root = tmp_path / "root"
    shutil.copytree(REPO / "fixtures" / "sysfs" / host, root, symlinks=True)
    entries = _entries(root)
    outcomes = Outcomes()
    for index in range(max(1, EXAMPLES // 3)):
        target = rng.choice(entries)
        name, mutate = rng.choice(_tree_mutations(rng))
        what = f"{host} #{index}: {name} {target.relative_to(root)}"
        with mutated(target, mutate, tmp_path / "backup"):
            outcomes.run(lambda: plan_and_render(discover_for(spec, root), spec), what)
    outcomes.check()
    assert _entries(root) == entries


# -- specs


def _mutate_text(rng: random.Random, text: str) -> str:
    lines = text.splitlines()
    choice = rng.randrange(6)
    if choice == 0 and lines:  # drop a line
        del lines[rng.randrange(len(lines))]
    elif choice == 1 and lines:  # duplicate a line
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif choice == 2:  # replace a value with a nasty one, quoted or bare
        candidates = [i for i, line in enumerate(lines) if " = " in line]
        if candidates:
            i = rng.choice(candidates)
            key = lines[i].split(" = ", 1)[0]
            value = rng.choice(NASTY_TEXT)
            bare = rng.random() < 0.5 and value and all(c in string.printable for c in value)
            shown = value.strip() if bare else '"' + value.encode("unicode_escape").decode() + '"'
            lines[i] = f"{key} = {shown}"
    elif choice == 3:  # flip characters
        chars = list(text)
        for _ in range(rng.randrange(1, 5)):
            if chars:
                chars[rng.randrange(len(chars))] = rng.choice(string.printable)
        return "".join(chars)
    elif choice == 4:  # CRLF and no final newline
        return "\r\n".join(lines)
    else:  # nest deeply
        lines.append("deep = " + "[" * rng.randrange(10, 3000) + "]" * 3)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("host", "spec_name"), CASES)
def test_mutated_specs_give_typed_errors(host: str, spec_name: str) -> None:
    rng = random.Random(f"{SEED}-spec-{host}")
    text = (REPO / "examples" / spec_name).read_text()
    facts = discover_for(load_spec(REPO / "examples" / spec_name), REPO / "fixtures/sysfs" / host)
    outcomes = Outcomes()
    for index in range(EXAMPLES):
        mutated = _mutate_text(rng, text)
        what = f"{spec_name} #{index}:\n{mutated}"
        outcomes.run(lambda m=mutated: plan_and_render(facts, parse_spec(m)), what)  # type: ignore[misc]
    outcomes.check()


# -- existing configs


def _config_mutation(rng: random.Random, content: str) -> str:
    lines = content.splitlines()
    choice = rng.randrange(7)
    if choice == 0:
        return content.replace("\n", "\r\n")
    if choice == 1:
        return content.rstrip("\n")
    if choice == 2 and lines:  # a duplicate key
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif choice == 3:  # a line without a colon
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(["garbage", "[", "=", ":"]))
    elif choice == 4:  # a numeric key with a non-number
        key = rng.choice(["cores", "memory", "numa", "sockets", "hostpci0", "dev0", "cpus"])
        lines.insert(rng.randrange(len(lines) + 1), f"{key}: {rng.choice(NASTY_TEXT)!s}")
    elif choice == 5:  # 10,000 lines
        lines.extend(f"#comment {i}" if i % 2 else f"unused{i}: x" for i in range(10_000))
    else:
        return _mutate_text(rng, content)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("host", "spec_name"), CASES)
def test_mutated_existing_configs_give_typed_errors(host: str, spec_name: str) -> None:
    rng = random.Random(f"{SEED}-config-{host}")
    spec = load_spec(REPO / "examples" / spec_name)
    facts = discover_for(spec, REPO / "fixtures/sysfs" / host)
    editable = [f for f in facts.files if f.path.startswith(("etc/", "rpool/"))]
    assert editable
    outcomes = Outcomes()
    for index in range(EXAMPLES):
        file = rng.choice(editable)
        content = _config_mutation(rng, file.content)
        changed = tuple(
            ConfigFile(f.path, content) if f.path == file.path else f for f in facts.files
        )
        mutated = attrs.evolve(facts, files=changed)
        what = f"{host} #{index}: {file.path}:\n{content[:2000]}"
        outcomes.run(lambda m=mutated: plan_and_render(m, spec), what)  # type: ignore[misc]
    outcomes.check()


_MAP_VALUE = re.compile(r"(?<=[\t,])(id|iommugroup|node|path|subsystem-id)=[^,\n]*")


@pytest.mark.parametrize(
    ("host", "spec_name"), [("kpro6", "kpro6.toml"), ("workstation-bios", "workstation.toml")]
)
def test_mutated_pci_cfg_map_values_give_typed_errors(host: str, spec_name: str) -> None:
    """One value of a map line replaced by nasty text, a stale-looking variant of itself
    or a random word: the plan refuses with a typed problem or plans (a stale line is a
    finding), and `pvegpu check`'s rule on the same facts never raises."""
    rng = random.Random(f"{SEED}-pcicfg-{host}")
    spec = load_spec(REPO / "examples" / spec_name)
    facts = discover_for(spec, REPO / "fixtures/sysfs" / host)
    cfg = facts.file(pcicfg.PATH)
    assert cfg is not None
    values = list(_MAP_VALUE.finditer(cfg.content))
    outcomes = Outcomes()
    for index in range(EXAMPLES):
        found = rng.choice(values)
        old = found[0].split("=", 1)[1]
        new = rng.choice(
            [
                rng.choice(NASTY_TEXT),
                "9" * 5000,  # past int()'s 4,300 digits
                old.upper(),
                "0" + old,
                old[::-1],
                "".join(rng.choice(string.printable) for _ in range(rng.randrange(1, 12))),
            ]
        )
        content = cfg.content[: found.start()] + f"{found[1]}={new}" + cfg.content[found.end() :]
        changed = tuple(
            ConfigFile(f.path, content) if f.path == cfg.path else f for f in facts.files
        )
        mutated = attrs.evolve(facts, files=changed)
        what = f"{host} #{index}: {found[1]}={new!r}"
        outcomes.run(lambda m=mutated: plan_and_render(m, spec), what)  # type: ignore[misc]
        outcomes.run(lambda m=mutated: list(_live_stale(m)), f"check {what}")  # type: ignore[misc]
    outcomes.check()


def _live_stale(facts: HostFacts) -> Iterator[Diagnostic]:
    """What `pvegpu check` runs on pci.cfg: parse (refusals are typed), then the rule."""
    existing = facts.file(pcicfg.PATH)
    assert existing is not None
    yield from stale_map_findings(facts, pcicfg.parse(existing.content), live=True)


# -- the model's config.json


def _json_mutation(rng: random.Random, content: str) -> str:
    doc = json.loads(content)
    text_config = doc.get("text_config", doc)
    key = rng.choice(sorted(text_config))
    choice = rng.randrange(5)
    if choice == 0:  # numbers no model has: a loop over them must not spin
        text_config[key] = rng.choice([10**9, -1, 0, 2**63, 1e308, 0.5])
    elif choice == 1:
        text_config[key] = rng.choice(NASTY_TEXT)
    elif choice == 2:
        del text_config[key]
    elif choice == 3:
        if rng.random() < 0.5:  # broken early: the decoder stops before the brackets
            return content.replace("}", "]", 1) + "[" * rng.randrange(1, 100_000)
        return _deeply_nested(rng, doc, text_config, rng.choice([key, "deep"]))
    else:
        text = json.dumps(doc).replace(
            '"' + key + '": ',
            '"' + key + '": ' + rng.choice(["NaN", "Infinity", "-Infinity"]) + ', "x": ',
            1,
        )
        return text
    return json.dumps(doc)


def test_mutated_model_configs_give_typed_errors() -> None:
    rng = random.Random(f"{SEED}-model")
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    facts = discover_for(spec, REPO / "fixtures/sysfs/kpro6")
    (config,) = [f for f in facts.files if f.path.endswith("/config.json")]
    outcomes = Outcomes()
    for index in range(EXAMPLES):
        content = _json_mutation(rng, config.content)
        if rng.random() < 0.1:
            content = content.encode().decode("latin-1")  # mojibake, still a str
        changed = tuple(
            ConfigFile(f.path, content) if f.path == config.path else f for f in facts.files
        )
        mutated = attrs.evolve(facts, files=changed)
        outcomes.run(lambda m=mutated: plan_and_render(m, spec), f"#{index}: {content[:600]}")  # type: ignore[misc]
    outcomes.check()


# From what 3.11's JSON reader refuses (about 1000 levels) past what 3.13's takes (about
# 10,000, where repr() of a nested object already raises RecursionError).
DEEP = (500, 100_000)


def _deeply_nested(
    rng: random.Random, doc: dict[str, Any], holder: dict[str, Any], key: str
) -> str:
    """`doc` as JSON with `holder[key]` (a key pvegpu reads, or one it does not) nested
    `[[...]]` or `{"a": ...}` deeply: valid JSON, past 3.11's reader or within 3.13's."""
    depth = rng.randrange(*DEEP)
    opening, closing = rng.choice([("[", "]"), ('{"a": ', "}")])
    nested = opening * depth + ("[]" if opening == "[" else "1") + closing * depth
    holder[key] = "\x00deep\x00"
    return json.dumps(doc).replace(json.dumps(holder[key]), nested, 1)


def _swap_file(facts: HostFacts, path: str, content: str) -> HostFacts:
    """`facts` with the file at `path` holding `content` (added when facts lack it)."""
    others = tuple(f for f in facts.files if f.path != path)
    return attrs.evolve(facts, files=(*others, ConfigFile(path, content)))


# -- the sizes of existing guests (VM 200 of kpro6-raw is NUMA-pinned, so they are read)

VM_PATH = "etc/pve/qemu-server/200.conf"
VM_CONFIG = """\
boot: order=scsi0
cores: 32
cpu: host
machine: q35
memory: 262144
name: snp-vm
numa: 0
scsi0: local-lvm:vm-200-disk-0,size=128G
sockets: 1
"""
ODD_NUMBERS = [
    "4.0",
    "4_0",
    "\u0664",  # ARABIC-INDIC DIGIT FOUR: int() reads it, Proxmox does not
    "\uff14",  # FULLWIDTH DIGIT FOUR
    "4\u00b2",  # a superscript two: isdigit() says yes, int() refuses
    "+4",
    "-4",
    "0",
    "0x20",
    "1e3",
    "9" * 19,
    "9" * 5000,
    "current=abc",
    "current=4096,foo=1",
    "current=",
    ",",
]


def _size_mutation(rng: random.Random, content: str, key: str) -> str:
    """`content` with its `key:` line's value replaced (or the line removed)."""
    value = rng.choice([*ODD_NUMBERS, *NASTY_TEXT, None])
    lines = [line for line in content.splitlines() if not line.startswith(f"{key}:")]
    if value is not None:
        lines.insert(rng.randrange(len(lines) + 1), f"{key}: {value}")
    return "\n".join(lines) + "\n"


def test_mutated_guest_sizes_give_typed_errors() -> None:
    """VM 200's cores/sockets/memory and LXC 129's cores, odd in every way Proxmox refuses."""
    rng = random.Random(f"{SEED}-sizes")
    spec = load_spec(REPO / "examples" / "kpro6-raw.toml")
    facts = _swap_file(discover_for(spec, REPO / "fixtures/sysfs/kpro6"), VM_PATH, VM_CONFIG)
    plan_and_render(facts, spec)  # the unmutated VM config plans
    lxc = next(f for f in facts.files if f.path == "etc/pve/lxc/129.conf")
    outcomes = Outcomes()
    for index in range(EXAMPLES):
        path, content, keys = rng.choice(
            [
                (VM_PATH, VM_CONFIG, ("cores", "sockets", "memory")),
                (lxc.path, lxc.content, ("cores",)),
            ]
        )
        for key in rng.sample(keys, rng.randrange(1, len(keys) + 1)):
            content = _size_mutation(rng, content, key)
        mutated = _swap_file(facts, path, content)
        outcomes.run(partial(plan_and_render, mutated, spec), f"#{index}: {path}:\n{content[:600]}")
    outcomes.check()
    assert outcomes.codes.get("vm-config-value-invalid") and outcomes.codes.get("ok")


# -- the checkpoint index


def _index_mutation(rng: random.Random, content: str) -> str:
    doc = json.loads(content)
    choice = rng.randrange(4)
    if choice == 0:  # what json.loads reads besides numbers: NaN, infinities, 1e400
        raw = rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 5000])
        return json.dumps(doc).replace(str(doc["metadata"]["total_size"]), raw, 1)
    if choice == 1:
        doc["metadata"]["total_size"] = rng.choice(
            [0, -1, 2**53 + 1, 2**64, 1.5, 1e308, True, None, [], {}, *NASTY_TEXT]
        )
    elif choice == 2:
        doc[rng.choice(["metadata", "weight_map"])] = rng.choice([None, [], "x", 7])
    else:
        holder, key = rng.choice([(doc["metadata"], "total_size"), (doc, "deep")])
        return _deeply_nested(rng, doc, holder, key)
    return json.dumps(doc)


def test_mutated_checkpoint_indexes_give_typed_errors() -> None:
    rng = random.Random(f"{SEED}-index")
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    facts = discover_for(spec, REPO / "fixtures/sysfs/kpro6")
    (index,) = [f for f in facts.files if f.path.endswith("/model.safetensors.index.json")]
    outcomes = Outcomes()
    for number in range(EXAMPLES):
        content = _index_mutation(rng, index.content)
        mutated = _swap_file(facts, index.path, content)
        outcomes.run(partial(plan_and_render, mutated, spec), f"#{number}: {content[:600]}")
    outcomes.check()
    assert outcomes.codes.get("checkpoint-index-invalid")


# -- model configs in which few or no layers hold a KV cache


def _kv_layer_mutation(rng: random.Random, content: str) -> str:
    doc = json.loads(content)
    text_config = doc["text_config"]
    layers = text_config["num_hidden_layers"]
    choice = rng.randrange(4)
    if choice == 0:  # every layer linear, in any of the linear kinds
        kinds = sorted(LINEAR_LAYER_TYPES)
        text_config["layer_types"] = [rng.choice(kinds) for _ in range(layers)]
    elif choice == 1:  # no layer_types: the interval decides, beyond the layer count too
        del text_config["layer_types"]
        text_config["full_attention_interval"] = rng.choice([layers + 1, 10**9, 2**60, 1, 0])
    elif choice == 2:  # a few full layers at random places, or one
        full = set(rng.sample(range(layers), rng.choice([1, 2, layers // 2])))
        text_config["layer_types"] = [
            "full_attention" if i in full else "linear_attention" for i in range(layers)
        ]
    else:  # head counts no model has: listing the valid TP sizes must not spin
        key = rng.choice(["num_attention_heads", "num_key_value_heads", "linear_num_key_heads"])
        text_config[key] = rng.choice([1_000_000_001, 2**53, 2**53 + 1, 7919])
    return json.dumps(doc)


def test_model_configs_with_few_or_no_kv_layers_give_typed_errors() -> None:
    rng = random.Random(f"{SEED}-kv-layers")
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    facts = discover_for(spec, REPO / "fixtures/sysfs/kpro6")
    (config,) = [f for f in facts.files if f.path.endswith("/config.json")]
    outcomes = Outcomes()
    for index in range(EXAMPLES):
        content = _kv_layer_mutation(rng, config.content)
        mutated = _swap_file(facts, config.path, content)
        outcomes.run(partial(plan_and_render, mutated, spec), f"#{index}: {content[:600]}")
    outcomes.check()
