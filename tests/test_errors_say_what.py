"""Issue 17, items 7 and 8: exit codes as documented, refusals that name the spec key (and
its line) with a fix, and a library that does what docs/api.md says."""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from pathlib import Path

import attrs
import pytest

import pvegpu
from bundled import EXAMPLES, REPO, copy_tree, example_plan, fixture_root
from pvegpu.apply.check import EXIT_ERRORS, EXIT_WARNINGS
from pvegpu.cli import main
from pvegpu.cli.arguments import EPILOG
from pvegpu.diagnostic import Diagnostic
from pvegpu.engines.sglang.option_check import (
    parse_command_line,
    releases_taking,
    releases_text,
)
from pvegpu.engines.sglang.options import load_table, shipped_versions
from pvegpu.errors import (
    ApplyError,
    BundleError,
    DiscoveryError,
    PlanError,
    PvegpuError,
    RenderError,
    SpecError,
)
from pvegpu.model.artifact import ArtifactRole
from pvegpu.pipeline import discover_for, plan_and_render
from pvegpu.spec.lines import key_lines, line_of
from pvegpu.spec.load import parse_spec

SRC = REPO / "src" / "pvegpu"
KPRO6_SPEC = (EXAMPLES / "kpro6.toml").read_text()


def _exit_codes_of_docs() -> dict[int, str]:
    text = (REPO / "docs" / "cli.md").read_text()
    table = text[text.index("## Exit codes") : text.index("## Refusals as JSON")]
    return {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \| (.+) \|$", table, re.M)}


def _exit_codes_of_help() -> dict[int, str]:
    return {int(m[1]): m[2] for m in re.finditer(r"^  (\d+)  (.+)$", EPILOG, re.M)}


# --- 7: exit codes as docs/cli.md lists them


def test_help_and_docs_list_the_same_exit_codes() -> None:
    """`pvegpu --help` and docs/cli.md's table list the same codes, 0 to 9, and every
    code pvegpu exits with is one of them."""
    documented, helped = _exit_codes_of_docs(), _exit_codes_of_help()
    assert sorted(documented) == sorted(helped) == list(range(10))
    raised = {c.exit_code for c in (DiscoveryError, SpecError, BundleError, PlanError)}
    raised |= {RenderError.exit_code, ApplyError.exit_code, EXIT_WARNINGS, EXIT_ERRORS}
    assert raised <= set(documented)
    assert "bundle" in documented[BundleError.exit_code] and "bundle" in helped[4]
    assert "check" in helped[EXIT_WARNINGS] and "check" in helped[EXIT_ERRORS]


@pytest.fixture
def kpro6_root(tmp_path: Path) -> Path:
    return copy_tree(fixture_root("kpro6"), tmp_path / "root")


def _rendered(tmp_path: Path, root: Path) -> Path:
    spec = tmp_path / "kpro6.toml"
    spec.write_text(KPRO6_SPEC)
    out = tmp_path / "out"
    assert main(["render", "--root", str(root), "--spec", str(spec), "--out", str(out)]) == 0
    return out


def _edit_a_file(out: Path) -> None:
    path = out / "etc/pve/lxc/129.conf"
    path.write_text(path.read_text() + "onboot: 1\n")


def _not_a_manifest(out: Path) -> None:
    (out / "MANIFEST.json").write_text('{"schema": "something/else"}\n')


def _no_apply_steps(out: Path) -> None:
    doc = json.loads((out / "MANIFEST.json").read_text())
    del doc["apply"]
    (out / "MANIFEST.json").write_text(json.dumps(doc))


def _no_manifest(out: Path) -> None:
    (out / "MANIFEST.json").unlink()


@pytest.mark.parametrize(
    ("spoil", "code"),
    [
        (_edit_a_file, "bundle-edited"),
        (_not_a_manifest, "bundle-invalid"),
        (_no_apply_steps, "bundle-invalid"),
        (_no_manifest, "bundle-missing"),
    ],
)
@pytest.mark.parametrize("command", ["check", "apply"])
def test_a_bad_bundle_exits_4(
    tmp_path: Path,
    kpro6_root: Path,
    capsys: pytest.CaptureFixture[str],
    spoil: object,
    code: str,
    command: str,
) -> None:
    """A bundle that cannot be used is input to fix, like a bad spec: exit 4 (not 7,
    "applying failed", and not 9, a host that fails its check), with its problem named."""
    out = _rendered(tmp_path, kpro6_root)
    assert callable(spoil)
    spoil(out)
    capsys.readouterr()
    extra = ["--dry-run"] if command == "apply" else []
    argv = [command, "--root", str(kpro6_root), "--bundle", str(out), *extra]
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert f"[{code}]" in err and "  fix: " in err and "Traceback" not in err


def _kpro6_with(tmp_path: Path, old: str, new: str) -> Path:
    assert old in KPRO6_SPEC
    spec = tmp_path / "kpro6.toml"
    spec.write_text(KPRO6_SPEC.replace(old, new))
    return spec


def test_an_unknown_sglang_option_exits_4_like_other_spec_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Like `vmid = 12`, an extra_args option the release does not take is the spec's
    mistake: the same exit code, 4."""
    root = fixture_root("kpro6")
    unknown = _kpro6_with(tmp_path, '"--trust-remote-code"]', '"--trust-remote-code", "--no-x"]')
    assert main(["plan", "--root", str(root), "--spec", str(unknown), "--json"]) == 4
    doc = json.loads(capsys.readouterr().out)
    assert [p["code"] for p in doc["problems"]] == ["sglang-option-unknown"]
    assert doc["problems"][0]["subject"] == "pools[0].lxc.serving.extra_args"
    assert (
        doc["problems"][0]["line"] == KPRO6_SPEC[: KPRO6_SPEC.index("extra_args")].count("\n") + 1
    )
    malformed = _kpro6_with(tmp_path, "vmid = 129", "vmid = 12")
    assert main(["plan", "--root", str(root), "--spec", str(malformed)]) == 4


def test_check_reports_an_option_the_installed_release_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`check --spec` is for a host that moved on (an SGLang upgrade in the container): an
    option the release no longer takes is a finding, exit 9; a spec that does not load is
    still refused, exit 4."""
    root = str(fixture_root("kpro6"))
    unknown = _kpro6_with(tmp_path, '"--trust-remote-code"]', '"--trust-remote-code", "--no-x"]')
    assert main(["check", "--root", root, "--spec", str(unknown), "--json"]) == 9
    doc = json.loads(capsys.readouterr().out)
    assert "sglang-option-unknown" in {f["code"] for f in doc["findings"]}
    malformed = _kpro6_with(tmp_path, "vmid = 129", 'vmid = "129"')
    assert main(["check", "--root", root, "--spec", str(malformed)]) == 4


# --- 7: the unknown option's fix


def test_an_option_of_other_releases_names_only_those() -> None:
    """`--mamba-scheduler-strategy` left 0.5.23; the fix names the releases that have it,
    not all 42 shipped ones, and still offers the new spelling."""
    args = ["--mamba-scheduler-strategy", "extra_buffer"]
    (problem,) = parse_command_line(
        load_table("0.5.23"), args, subject="s.extra_args", complete=False
    ).problems
    having = releases_taking("--mamba-scheduler-strategy")
    assert having and len(having) < len(shipped_versions())
    assert f"sglang {releases_text(having)} only" in problem.fix
    assert "--mamba-radix-cache-strategy" in problem.fix
    listed = set(re.findall(r"\d+\.\d+\.\d+(?:\.post\d+)?", problem.fix))
    assert listed <= set(having), "a release without the option is listed"


def test_an_option_no_release_has_says_so() -> None:
    """An option of no shipped release says none has it; a close name is suggested."""
    table = load_table("0.5.23")
    typo = parse_command_line(table, ["--reasoning-parsr", "x"], subject="s.extra_args")
    (problem,) = [p for p in typo.problems if p.code == "sglang-option-unknown"]
    assert problem.fix.startswith("no shipped release of SGLang (0.5.1 to 0.5.23) has")
    assert "`--reasoning-parser`" in problem.fix
    named = set(re.findall(r"\d+\.\d+\.\d+(?:\.post\d+)?", problem.fix))
    assert named == {shipped_versions()[0], shipped_versions()[-1]}
    nothing = parse_command_line(table, ["--zzqqxx"], subject="s.extra_args", complete=False)
    assert nothing.problems[0].fix == (
        "no shipped release of SGLang (0.5.1 to 0.5.23) has `--zzqqxx`: remove it from extra_args"
    )


def test_releases_text_joins_consecutive_releases() -> None:
    shipped = shipped_versions()
    picked = (shipped[0], shipped[1], shipped[2], shipped[5])
    assert releases_text(picked) == f"{shipped[0]} to {shipped[2]}, {shipped[5]}"


# --- 7: a GPU listed twice in one pool


def test_a_gpu_listed_twice_in_one_pool_is_its_own_problem() -> None:
    """Written twice (two spellings of one address), it is that pool's problem in that
    pool's key; it is not a pool clashing with itself."""
    spec = parse_spec(
        'node = "kpro6"\n[[pools]]\nname = "vm"\ngpus = ["81:00.0", "0000:81:00.0"]\n'
        'mapping = { id = "pro6000-vm" }\n[pools.vfio]\n'
    )
    with pytest.raises(PlanError) as err:
        pvegpu.plan(discover_for(spec, fixture_root("kpro6")), spec)
    assert [(p.code, p.subject, p.message) for p in err.value.problems] == [
        ("gpu-listed-twice", "pools[0].gpus", "lists 0000:81:00.0 twice")
    ]
    assert err.value.problems[0].fix


def test_a_gpu_in_two_pools_names_each_pool_once() -> None:
    spec = parse_spec(
        'node = "kpro6"\n[[pools]]\nname = "vm"\ngpus = ["81:00.0", "81:00.0"]\n'
        'mapping = { id = "pro6000-vm" }\n[pools.vfio]\n'
        '[[pools]]\nname = "b"\ngpus = ["81:00.0"]\nmapping = { id = "b-vm" }\n[pools.vfio]\n'
    )
    with pytest.raises(PlanError) as err:
        pvegpu.plan(discover_for(spec, fixture_root("kpro6")), spec)
    problems = {p.code: p for p in err.value.problems}
    assert problems["gpu-in-two-pools"].message == "is selected by pools 'vm', 'b'"
    assert problems["gpu-listed-twice"].subject == "pools[0].gpus"


# --- 7: every refusal names the spec key, its line, and a fix


def test_key_lines_of_the_example_spec() -> None:
    """The scan places tables, keys, inline-table keys and array entries."""
    text = KPRO6_SPEC
    lines = key_lines(text)
    numbered = text.splitlines()

    def at(path: str) -> str:
        line = line_of(lines, path)
        assert line is not None, path
        return numbered[line - 1]

    assert at("node") == 'node = "kpro6"'
    assert at("pools[1]") == "[[pools]]" and at("pools[1].name") == 'name = "vm"'
    assert at("pools[0].lxc.vmid") == "vmid = 129"
    assert at("pools[0].mapping.description").startswith('mapping = { id = "pro6000"')
    assert at("pools[0].lxc.serving.environment.NCCL_DEBUG") == 'NCCL_DEBUG = "WARN"'
    assert at("pools[0].lxc.serving.extra_args[2]").startswith("extra_args = [")
    # Left at its default: its table's header.
    assert at("pools[0].lxc.serving.port") == "[pools.lxc.serving]"
    assert line_of(lines, "0000:81:00.0") is None
    assert line_of(lines, "etc/pve/lxc/129.conf") is None


def test_key_lines_skip_multiline_values() -> None:
    text = 'a = """\nb = 1\n"""\nc = [\n  "d = 2",\n]\n[t]\ne = 3\n'
    assert key_lines(text) == {"a": 1, "c": 4, "t": 7, "t.e": 8}


BAD_SPECS = {
    "wrong-type": KPRO6_SPEC.replace("vmid = 129", 'vmid = "129"'),
    "table-expected": KPRO6_SPEC.replace("[pools.vfio]", "vfio = 5\n[pools.x]"),
    "string-for-array": KPRO6_SPEC.replace(
        'extra_args = ["--reasoning-parser", "qwen3", "--trust-remote-code"]',
        'extra_args = "--trust-remote-code"',
    ),
    "array-of-what": KPRO6_SPEC.replace('node = "kpro6"', "node = 5\nnodes = 7"),
    "enum": KPRO6_SPEC.replace('devices = "dev"', 'devices = "cgroup"'),
    "env-value": KPRO6_SPEC.replace('NCCL_DEBUG = "WARN"', 'NCCL_DEBUG = "a\\tb"'),
    "env-type": KPRO6_SPEC.replace('NCCL_DEBUG = "WARN"', "NCCL_DEBUG = 1"),
    "relative-model-path": KPRO6_SPEC.replace(
        'model_path = "/shared/models', 'model_path = "shared/models'
    ),
    "unknown-key": KPRO6_SPEC.replace("\nmtp = true\n", "\nmtp = true\nmpt = true\n"),
    "missing-key": KPRO6_SPEC.replace('model_path = "/shared/models/Qwen3.5-122B-A10B"\n', ""),
    "no-pools": 'node = "kpro6"\n',
    "selector": KPRO6_SPEC.replace("numa_node = 0", "numa_node = 0\ncount = 2"),
    "address": KPRO6_SPEC.replace("numa_node = 1", 'gpus = ["81:00"]'),
}


@pytest.mark.parametrize("name", sorted(BAD_SPECS))
def test_every_spec_refusal_names_its_key_line_and_fix(name: str) -> None:
    """Each problem of a malformed spec: a spec path as subject, the line that sets it
    (or its table's; none only where the text has nothing of it), a fix, and no Python
    internals in the message."""
    text = BAD_SPECS[name]
    with pytest.raises(SpecError) as err:
        parse_spec(text, "kpro6.toml")
    lines, known = text.splitlines(), key_lines(text)
    for problem in err.value.problems:
        assert re.fullmatch(r"[a-z_]+(\[\d+\]|\.[A-Za-z0-9_-]+)*", problem.subject), problem
        assert problem.fix, problem
        assert "object" not in problem.message and "iterable" not in problem.message
        assert problem.line == line_of(known, problem.subject), problem
        if problem.line is None:
            assert name == "no-pools"
            continue
        key = re.sub(r"\[\d+\]", "", problem.subject).rpartition(".")[2]
        said = lines[problem.line - 1]
        assert key in said or said.startswith("["), (problem, said)


def test_a_relative_model_path_is_refused() -> None:
    """SGLang reads a relative --model-path against its working directory, or as a repo id
    to download: not what the spec means."""
    with pytest.raises(SpecError) as err:
        parse_spec(BAD_SPECS["relative-model-path"])
    (problem,) = err.value.problems
    assert (problem.code, problem.subject) == (
        "spec-invalid-value",
        "pools[0].lxc.serving.model_path",
    )
    assert "absolute" in problem.fix


def test_a_string_is_not_an_array_of_characters() -> None:
    """`extra_args = "--x"` was read as ("-", "-", "x"); `gpus = "81:00.0"` likewise."""
    with pytest.raises(SpecError) as err:
        parse_spec(BAD_SPECS["string-for-array"])
    (problem,) = err.value.problems
    assert problem.subject == "pools[0].lxc.serving.extra_args"
    assert problem.message == "expected an array, got string '--trust-remote-code'"


def test_the_cli_gives_the_spec_line_of_a_plan_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The planner's problems carry spec paths too; the CLI places them in the file."""
    spec = _kpro6_with(tmp_path, "numa_node = 1", 'gpus = ["81:00.0", "99:00.0"]')
    assert main(["plan", "--root", str(fixture_root("kpro6")), "--spec", str(spec)]) == 5
    line = 1 + KPRO6_SPEC[: KPRO6_SPEC.index("numa_node = 1")].count("\n")
    assert f"  pools[1].gpus[1] (line {line}): 0000:99:00.0 is not on this host" in (
        capsys.readouterr().err
    )


_PROBLEM_MAKERS = {"Diagnostic.error": 3, "one": 3, "problem": 2}
"""Calls that make a refusal's Diagnostic, and the position of their fix argument."""


def _fixless(path: Path, base: Path = SRC) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            name = f"{func.value.id}.{name}" if name == "error" else name
        position = _PROBLEM_MAKERS.get(name)
        if position is None or (name == "problem" and not node.args):
            continue  # not a maker, or a method that words a problem already made
        if any(isinstance(a, ast.Starred) for a in node.args):
            continue  # `*_snp_text(...)`: message and fix from one function
        keywords = {k.arg: k.value for k in node.keywords}
        fix = node.args[position] if len(node.args) > position else keywords.get("fix")
        if fix is None or (isinstance(fix, ast.Constant) and not fix.value):
            found.append(f"{path.relative_to(base)}:{node.lineno}")
    return found


def test_every_problem_has_a_fix() -> None:
    """Walks every place pvegpu makes a refusal (discovery, the spec, planning, serving,
    rendering, apply, the CLI): each one says what to do."""
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 100
    assert [where for path in files for where in _fixless(path)] == []


def test_the_fix_walk_finds_a_problem_without_one(tmp_path: Path) -> None:
    """The walk itself: a refusal with no fix, or an empty one, is found."""
    bad = tmp_path / "probe.py"
    bad.write_text('P = Diagnostic.error("c", "s", "m")\nQ = X.one("c", "s", "m", "")\n')
    assert _fixless(bad, tmp_path) == ["probe.py:1", "probe.py:2"]


# --- 7: container_rootfs and python that are not there


def _plan_findings(spec_text: str) -> dict[str, str]:
    spec = parse_spec(spec_text)
    planned, _ = plan_and_render(discover_for(spec, fixture_root("kpro6")), spec)
    return {f.code: f.message for f in planned.findings}


def test_a_container_rootfs_that_is_not_there_is_a_warning() -> None:
    """The storage's directory still has the container's files, so the plan stands; the
    spec's path, which holds nothing, is not silently dropped."""
    found = _plan_findings(
        KPRO6_SPEC.replace('"rpool/data/subvol-129-disk-0"', '"var/lib/lxc/129/rootfs"')
    )
    assert "pools[0].lxc.serving.container_rootfs" in found["container-rootfs-ignored"]
    assert "container-rootfs-ignored" not in _plan_findings(KPRO6_SPEC)


def test_a_python_the_container_lacks_is_a_warning() -> None:
    """A python not in the container's root file system: the unit cannot start unless a
    mount point brings it in (which the host cannot see), so a warning."""
    found = _plan_findings(KPRO6_SPEC.replace("/root/ml-env/bin/python3", "/opt/nope/python3"))
    assert "/opt/nope/python3" in found["serving-python-missing"]
    # kpro6's own venv python is a link to the container's /usr: found, not followed.
    assert "serving-python-missing" not in _plan_findings(KPRO6_SPEC)


def test_the_python_is_in_a_snapshot(tmp_path: Path) -> None:
    """A snapshot carries the python's name (an absolute link as an empty file), so the
    plan of the unpacked snapshot has the same findings."""
    from pvegpu.engines import installed_files
    from pvegpu.host.snapshot import snapshot, unpack

    spec = parse_spec(KPRO6_SPEC)
    taken = snapshot(fixture_root("kpro6"), tmp_path / "kpro6.tar.gz", spec, installed_files)
    assert taken.error is None
    root = unpack(taken.path, tmp_path / "snap")
    python = root / "rpool/data/subvol-129-disk-0/root/ml-env/bin/python3"
    assert python.is_file() and not python.is_symlink()
    planned = pvegpu.plan(discover_for(spec, root), spec)
    assert "serving-python-missing" not in {f.code for f in planned.findings}


# --- 8: the library does what docs/api.md says


def _api_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "docs/api.md").read_text(), re.S)


def test_the_api_examples_run_as_written_and_write_a_bundle_apply_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/api.md's code, run literally where its paths exist; the bundle it writes is
    one `pvegpu check` and `pvegpu apply --dry-run` take."""
    examples = _api_examples()
    assert len(examples) == 2
    (tmp_path / "kpro6.toml").write_text(KPRO6_SPEC)
    root = copy_tree(fixture_root("kpro6"), tmp_path / "snapshots" / "kpro6")
    monkeypatch.chdir(tmp_path)
    for code in examples:
        exec(compile(code, "docs/api.md", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out.splitlines()
    assert {line.split()[0] for line in printed} == {"install", "revert", "review"}
    out = tmp_path / "out"
    assert (out / "MANIFEST.json").is_file()
    assert main(["check", "--root", str(root), "--bundle", str(out)]) in (0, 8, 9)
    assert "bundle-" not in capsys.readouterr().err
    assert main(["apply", "--root", str(root), "--bundle", str(out), "--dry-run"]) == 0
    assert "dry run: nothing was changed" in capsys.readouterr().out


def test_write_bundle_with_the_plan_is_what_render_writes(tmp_path: Path) -> None:
    """`write_bundle(..., plan=plan)` and `pvegpu render` write the same files."""
    root = fixture_root("kpro6")
    spec_file = tmp_path / "kpro6.toml"
    spec_file.write_text(KPRO6_SPEC)
    spec = pvegpu.load_spec(spec_file)
    planned, artifacts = plan_and_render(discover_for(spec, root), spec)
    written = pvegpu.write_bundle(artifacts, tmp_path / "lib", plan=planned)
    argv = ["render", "--root", str(root), "--spec", str(spec_file), "--out", str(tmp_path / "cli")]
    assert main(argv) == 0
    lib = {p.relative_to(tmp_path / "lib"): p.read_bytes() for p in written}
    cli = {
        p.relative_to(tmp_path / "cli"): p.read_bytes()
        for p in (tmp_path / "cli").rglob("*")
        if p.is_file()
    }
    assert lib == cli


def test_a_bundle_written_without_the_plan_is_refused_by_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """For review only, as docs/api.md says: check names the missing apply steps."""
    planned = example_plan("kpro6")
    pvegpu.write_bundle(pvegpu.render(planned), tmp_path / "out", node="kpro6")
    argv = ["check", "--root", str(fixture_root("kpro6")), "--bundle", str(tmp_path / "out")]
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert "has no apply steps" in err and "[bundle-invalid]" in err


@pytest.mark.parametrize("name", ["kpro6", "kpro6-raw", "workstation"])
def test_render_says_which_artifact_is_which(name: str) -> None:
    """An installed file and its revert copy share target and path; the role tells them
    apart, and (role, target, path) is unique."""
    artifacts = pvegpu.render(example_plan(name))
    keys = Counter((a.role, a.target, a.path) for a in artifacts)
    assert max(keys.values()) == 1
    roles = {a.role for a in artifacts}
    assert roles == set(ArtifactRole)
    for a in artifacts:
        assert (a.role is ArtifactRole.REVERT) == (a.bundle == "revert")
        assert (a.role is ArtifactRole.REVIEW) == (a.target == "review" and a.bundle == "apply")
    pairs = {(a.target, a.path) for a in artifacts if a.role is ArtifactRole.INSTALL}
    reverted = {(a.target, a.path) for a in artifacts if a.role is ArtifactRole.REVERT}
    assert pairs & reverted, "no file has both its new copy and its revert copy"


def test_the_public_api_lists_what_docs_api_md_uses() -> None:
    for name in ("ArtifactRole", "BundleError", "write_bundle", "render", "Diagnostic"):
        assert name in pvegpu.__all__ and getattr(pvegpu, name) is not None
    assert attrs.fields(Diagnostic).line.default is None
    assert (
        str(Diagnostic.error("c", "pools[0]", "m", "f", line=3))
        == "pools[0] (line 3): m [c]\n  fix: f"
    )
    assert issubclass(BundleError, PvegpuError) and BundleError.exit_code == 4
