"""Every free-text spec value lands in its files escaped, or the spec is refused.

Arbitrary text goes into one free-text field of examples/kpro6.toml at a time (names,
the unit, paths, the model, environment names and values, extra_args, the mapping's id
and description, p2p_reason). The spec is written as TOML and run through the whole
pipeline. Either it is refused with a typed error, or every file it lands in still reads
back as what the spec said:

- the SGLang unit: ExecStart= argv, Environment= pairs, Description=, User=,
  WorkingDirectory= and EnvironmentFile= as the spec gave them; no line continued but
  the ExecStart= ones; the interpreter a plain word; `systemd-analyze verify` silent;
- revert.sh: `sh -n`, shellcheck, and run under dash with every command stubbed: each
  unit name and file path reaches its command as exactly one argument;
- the runbook: `sh -n`, and the unit and paths one word each (shlex, the quoting used);
- pci.cfg and the LXC config: parsed back, the same mapping id, description and mode.

External tools run once per batch of cases. `make test` runs a few batches;
PVEGPU_ESCAPING_EXAMPLES raises the count for a longer run.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bundled import fixture_root, spec_path
from linters import (
    DASH,
    SYSTEM_UNITS,
    needs_dash,
    needs_shellcheck,
    needs_systemd,
    shellcheck_files,
    verify_files,
)
from pvegpu.engines.sglang.decision import SglangServing
from pvegpu.errors import PlanError, RenderError, SpecError
from pvegpu.model.artifact import APPLY_BUNDLE, HOST, REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.model.facts import HostFacts
from pvegpu.model.paths import SPLIT_SCRIPT
from pvegpu.model.plan import Plan
from pvegpu.model.schema import Spec
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.guestconf import parse_lines
from pvegpu.rendering.review import runbook
from pvegpu.rendering.review.manual_revert import revert_steps
from pvegpu.serving.unitfile import SERVICE, environment_pairs, exec_words, parse_unit
from pvegpu.spec.load import parse_spec
from spec_toml import toml_text
from stubbed_sh import run_stubbed, stub

EXAMPLES = int(os.environ.get("PVEGPU_ESCAPING_EXAMPLES", "2"))
BASE: dict[str, Any] = tomllib.loads(spec_path("kpro6").read_text())
ROOT = fixture_root("kpro6")
SERVING = ("pools", 0, "lxc", "serving")

# ------------------------------------------------------------------- the fields changed


def _at(*keys: str | int) -> Callable[[dict[str, Any], str], None]:
    def put(doc: dict[str, Any], text: str) -> None:
        node: Any = doc
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = text

    return put


def _environment_name(doc: dict[str, Any], text: str) -> None:
    doc["pools"][0]["lxc"]["serving"]["environment"][text] = "1"


def _environment_value(doc: dict[str, Any], text: str) -> None:
    doc["pools"][0]["lxc"]["serving"]["environment"]["NCCL_DEBUG"] = text


def _p2p_reason(doc: dict[str, Any], text: str) -> None:
    serving = doc["pools"][0]["lxc"]["serving"]
    serving["p2p"] = "on"
    serving["p2p_reason"] = text


def _extra_arg(doc: dict[str, Any], text: str) -> None:
    doc["pools"][0]["lxc"]["serving"]["extra_args"] += ["--chat-template", text]


FIELDS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "node": _at("node"),
    "pool name": _at("pools", 0, "name"),
    "vm pool name": _at("pools", 1, "name"),
    "mapping id": _at("pools", 0, "mapping", "id"),
    "mapping description": _at("pools", 0, "mapping", "description"),
    "vm mapping description": _at("pools", 1, "mapping", "description"),
    "mode": _at("pools", 0, "lxc", "mode"),
    **{
        name: _at(*SERVING, name)
        for name in (
            "unit",
            "python",
            "model_path",
            "served_model_name",
            "user",
            "working_directory",
            "environment_file",
            "host",
        )
    },
    "environment name": _environment_name,
    "environment value": _environment_value,
    "extra_args": _extra_arg,
    "p2p_reason": _p2p_reason,
}

# What breaks one of the files: quotes, escapes, specifiers, variables, separators.
_NASTY = "\\%$\"'`; #,=@/\t\n{}~*?&|<>()[]-_.aZ09é"
_TEXT = st.one_of(
    st.text(alphabet=st.sampled_from(_NASTY), max_size=14),
    st.text(max_size=10),
)
# Paths and names: half of them start like the real thing, so they get past the first rule.
_VALUE = st.one_of(_TEXT, _TEXT.map(lambda t: "/" + t), _TEXT.map(lambda t: "sglang-" + t))
CASES = st.tuples(st.sampled_from(sorted(FIELDS)), _VALUE)


@attrs.frozen
class Rendered:
    field: str
    text: str
    plan: Plan
    artifacts: tuple[Artifact, ...]

    def artifact(self, path: str, target: str = HOST, bundle: str = APPLY_BUNDLE) -> Artifact:
        (found,) = (
            a for a in self.artifacts if (a.path, a.target, a.bundle) == (path, target, bundle)
        )
        return found

    @property
    def revert_script(self) -> str:
        return self.artifact("revert.sh", REVIEW, REVERT_BUNDLE).content

    @property
    def serving(self) -> SglangServing:
        serving = self.plan.pools[0].serving
        assert isinstance(serving, SglangServing)
        return serving


_FACTS: dict[tuple[str, str], HostFacts] = {}


def _facts(spec: Spec) -> HostFacts:
    """discover_for(spec), once per unit name and interpreter: of the fields changed here,
    only those two change what it reads (the container's unit, the installed SGLang)."""
    lxc = spec.pools[0].lxc
    assert lxc is not None and lxc.serving is not None
    key = (lxc.serving.unit, lxc.serving.python)
    if key not in _FACTS:
        _FACTS[key] = discover_for(spec, ROOT)
    return _FACTS[key]


def rendered(field: str, text: str) -> Rendered | None:
    """The plan and files for the spec with `field` set to `text`; None when refused."""
    doc = copy.deepcopy(BASE)
    FIELDS[field](doc, text)
    try:
        spec = parse_spec(toml_text(doc))
        plan, artifacts = plan_and_render(_facts(spec), spec)
    except (SpecError, PlanError, RenderError) as refusal:
        assert refusal.problems
        return None
    return Rendered(field, text, plan, artifacts)


# ------------------------------------------------------------------ in-process checks


_SPECIFIERS_ESCAPED = re.compile(r"([^%]|%%)*")
_VARIABLE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def _no_specifier(value: str) -> str:
    """`value` with `%%` read back as `%`; a lone `%` would be a specifier systemd expands."""
    assert _SPECIFIERS_ESCAPED.fullmatch(value), f"unescaped % in {value!r}"
    return value.replace("%%", "%")


def check_unit(case: Rendered) -> str:
    """The unit reads back as the spec said; returns its text."""
    serving = case.serving
    text = case.artifact(serving.unit_path, f"ct:{serving.vmid}").content
    unit = parse_unit(text)

    def one(key: str) -> str | None:
        values = unit.values(SERVICE, key) or unit.values("Unit", key)
        assert len(values) <= 1, (key, values)
        return _no_specifier(values[0]) if values else None

    for value in unit.values(SERVICE, "Environment"):
        _no_specifier(value)
    (exec_start,) = unit.values(SERVICE, "ExecStart")
    _no_specifier(exec_start)
    # ExecStart= expands $NAME and ${NAME}: only the ${NAME} references the spec asked
    # for (secret options, filled from EnvironmentFile=) may remain once $$ is taken out.
    wanted = {w for o in serving.options for w in o}
    for reference in re.finditer(r"\$(\{[^}]*\}|.|$)", exec_start.replace("$$", "")):
        assert _VARIABLE.fullmatch(reference[0]) and any(reference[0] in w for w in wanted), (
            f"unescaped $ in {exec_start!r}"
        )
    argv = (serving.python, "-m", "sglang.launch_server", *(w for o in serving.options for w in o))
    assert exec_words(exec_start) == argv
    assert exec_start.split(" ", 1)[0] == serving.python, "the executable must be a plain word"
    assert environment_pairs(unit.values(SERVICE, "Environment")) == serving.environment
    name = serving.served_model_name or serving.model_path
    assert one("Description") == (
        f"SGLang {serving.version} {name} (TP={serving.tp_size}, pvegpu pool {serving.pool})"
    )
    assert one("User") == serving.user
    assert one("WorkingDirectory") == serving.working_directory
    assert one("EnvironmentFile") == serving.environment_file
    # Only ExecStart= is continued: one line per launch option.
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    continued = [i for i, line in enumerate(lines) if line.endswith("\\")]
    assert continued == list(range(start, start + len(serving.options)))
    return text


def check_proxmox(case: Rendered) -> None:
    """pci.cfg and the container config parse back to the spec's id, description, mode."""
    spec = case.plan.spec
    mappings = {m.id: m for m in pcicfg.parse_mappings(case.artifact(pcicfg.PATH).content)}
    for pool in spec.pools:
        if pool.mapping is not None:
            assert mappings[pool.mapping.id].description == pool.mapping.description
    lxc = spec.pools[0].lxc
    assert lxc is not None
    devices = [
        line
        for line in parse_lines(case.artifact(f"etc/pve/lxc/{lxc.vmid}.conf").content)
        if line.key.startswith("dev") and line.key[3:].isdigit()
    ]
    assert devices
    for line in devices:
        options = dict(part.partition("=")[::2] for part in line.value.split(",")[1:])
        assert options["mode"] == lxc.mode, line.raw


def check_runbook(case: Rendered) -> list[str]:
    """The runbook's unit and file arguments are one word each; returns its commands."""
    serving = case.serving
    commands = [
        c
        for step in (*runbook(case.plan, case.artifacts), *revert_steps(case.plan, case.artifacts))
        for c in step.commands
    ]
    unit_path = "/" + serving.unit_path
    for command in commands:
        words = shlex.split(command)
        if "systemctl" in words and words[-1] not in ("daemon-reload",):
            verb = words.index("systemctl") + 1
            if words[verb] in ("stop", "start", "restart") and words[0] == "pct":
                assert words[verb + 1 :] == [serving.unit], command
        if words[:2] == ["pct", "push"] and words[4].startswith("/etc/systemd/"):
            assert words[4] == unit_path and len(words) == 7, command
            assert words[3].endswith(f"/{serving.unit_path}"), command
    return commands


# ------------------------------------------------- revert.sh, run with stubbed commands


def run_revert(case: Rendered, work: Path) -> list[list[str]]:
    """revert.sh run under dash with only stub commands on PATH: the calls it made."""
    root, bundle = work / "root", work / "bundle"
    # Only the installed split script exists under ROOT (a stub too), so sha256sum only
    # ever hashes that one: its stub answers with the hash the script expects of it.
    stub(root / "usr/local/sbin/pvegpu-vfio-split")
    split_sha = hashlib.sha256(case.artifact(SPLIT_SCRIPT).content.encode()).hexdigest()
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/hostname").write_text(case.plan.facts.node + "\n")
    environment = {"ROOT": str(root), "STUB_SHA": split_sha}
    # Under ROOT the commands are printed, not run: run_stubbed reads them back as words.
    calls = run_stubbed(case.revert_script, bundle / "revert.sh", work, environment)
    serving = case.serving
    unit = f"{serving.unit}.service"
    assert ["pct", "exec", str(serving.vmid), "--", "systemctl", "start", unit] in calls
    for call in calls:
        if call[:4] == ["pct", "exec", str(serving.vmid), "--"] and call[-2] in ("stop", "start"):
            assert call[-3:] == ["systemctl", call[-2], unit], call
        if call[0] == "pct" and call[1] == "push":
            assert call[4] == "/" + serving.unit_path, call
            assert call[3] == f"{bundle}/ct/{serving.vmid}/{serving.unit_path}", call
        if call[0] == "pct" and "rm" in call:
            assert call[-2:] == ["-f", "/" + serving.unit_path], call
        if call[0] == "cp":
            source, target = call[1:]
            assert source.removeprefix(f"{bundle}/") == target.removeprefix(f"{root}/"), call
    return calls


# ---------------------------------------------------------------------- the batch check


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def check_batch(cases: list[tuple[str, str]], work: Path) -> None:
    """Render every case, check each in-process, then the linters once over them all."""
    units: list[Path] = []
    # Each script once, and none that test_end_to_end already checks (the example's own):
    # shellcheck takes about a second per split script.
    unchanged = rendered("node", BASE["node"])
    assert unchanged is not None
    seen = {unchanged.revert_script, unchanged.artifact(SPLIT_SCRIPT).content}
    scripts: dict[str, Path] = {}
    units_root = work / "ct"
    if SYSTEM_UNITS is not None and not (units_root / "usr/lib/systemd/system").exists():
        shutil.copytree(SYSTEM_UNITS, units_root / "usr/lib/systemd/system", symlinks=True)
    for index, (field, text) in enumerate(cases):
        case = rendered(field, text)
        if case is None:
            continue
        unit_text = check_unit(case)
        check_proxmox(case)
        commands = check_runbook(case)
        serving = case.serving
        # Verify each unit under its own name where the name is what changed; else a
        # numbered one, so that the batch holds no two units of the same name.
        name = f"{serving.unit}.service" if field == "unit" else f"escaping-{index}.service"
        if all(u.name != name for u in units):
            units.append(_write(units_root / f"etc/systemd/system/{name}", unit_text))
        _write(units_root / serving.python.lstrip("/"), "#!/bin/sh\n", 0o755)
        case_dir = work / f"case-{index}"
        for name, script in (
            ("revert.sh", case.revert_script),
            ("split.sh", case.artifact(SPLIT_SCRIPT).content),
        ):
            if script not in seen and script not in scripts:
                scripts[script] = _write(case_dir / name, script)
        runbook_script = _write(case_dir / "runbook.sh", "\n".join(commands) + "\n")
        syntax = subprocess.run(
            [str(DASH), "-n", str(runbook_script)], capture_output=True, text=True, check=False
        )
        assert syntax.returncode == 0, syntax.stderr
        run_revert(case, case_dir / "run")
    if scripts:
        for path in scripts.values():
            syntax = subprocess.run(
                [str(DASH), "-n", str(path)], capture_output=True, text=True, check=False
            )
            assert syntax.returncode == 0, (path, syntax.stderr)
        lint = shellcheck_files(list(scripts.values()))
        assert lint.returncode == 0, lint.stdout
    if units:
        check = verify_files(units_root, units)
        assert (check.returncode, check.stdout + check.stderr) == (0, ""), [u.name for u in units]


@needs_dash
@needs_shellcheck
@needs_systemd
@pytest.mark.skipif(
    SYSTEM_UNITS is None and os.environ.get("CI", "").lower() != "true",
    reason="no systemd units here to verify against",
)
@settings(max_examples=EXAMPLES, database=None)
@given(st.lists(CASES, min_size=1, max_size=5))
@example(
    [
        ("unit", "sglang\\x2dqwen"),
        ("unit", "sglang@qwen"),
        ("model_path", "/models/My Model $HOME %n \\ \"q\" 'a' ;"),
        ("served_model_name", 'qwen "3" $x %h \\'),
        ("environment value", "a b\\ %n $HOME \"x\" 'y' \\"),
        ("working_directory", "/srv/my models/50%"),
        ("environment_file", "/etc/default/sglang %i"),
        ("extra_args", "{{ messages }} $1 %% \\n"),
        ("p2p_reason", "measured on this board; see ticket 42 \\"),
        ("mapping description", "GPUs for the lab (50%) # not a comment"),
        ("python", "/opt/py@3.12/bin/python3"),
    ]
)
def test_every_value_is_escaped_for_its_file_or_refused(
    tmp_path_factory: pytest.TempPathFactory, cases: list[tuple[str, str]]
) -> None:
    check_batch(cases, tmp_path_factory.mktemp("escaping"))


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("unit", "sglang qwen"),  # two units to systemctl
        ("unit", "sglang;reboot"),
        ("unit", "@qwen"),
        ("python", "/usr/bin/python 3"),  # ExecStart='s executable: one plain word
        ("python", "/usr/bin/$PY"),
        ("python", "/usr/../bin/python3"),  # systemd ignores a path that is not normalized
        ("working_directory", "/srv/models\\"),  # a final backslash continues the line
        ("working_directory", "/srv/models "),  # systemd strips it
        ("environment_file", "/etc/default/./sglang"),
        ("mapping description", "two\nlines"),
        ("mapping description", " padded"),  # pci.cfg would read it back stripped
        ("mapping id", "pro 6000"),
        ("environment name", "NOT-A-NAME"),
    ],
)
def test_values_a_file_would_read_differently_are_refused(field: str, text: str) -> None:
    assert rendered(field, text) is None
