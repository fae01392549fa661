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
import shutil
import signal
import string
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import attrs
import pytest

from depth import THOROUGH
from pvegpu.errors import PvegpuError
from pvegpu.host.facts import ConfigFile, HostFacts
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.spec.load import load_spec, parse_spec
from pvegpu.spec.schema import Spec

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


class HangError(Exception):
    pass


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise HangError(f"no result within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


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
        return content.replace("}", "]", 1) + "[" * rng.randrange(1, 100_000)
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
