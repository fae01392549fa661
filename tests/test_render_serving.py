from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

from pvegpu.engines import installed_files
from pvegpu.engines.sglang import build
from pvegpu.engines.sglang.decision import SglangServing
from pvegpu.engines.sglang.option_check import parse_command_line
from pvegpu.engines.sglang.options import load_table
from pvegpu.errors import PlanError
from pvegpu.host.discover import discover
from pvegpu.host.serving_files import with_serving_files
from pvegpu.model.artifact import Artifact
from pvegpu.model.plan import Plan
from pvegpu.planning import decide
from pvegpu.planning.decide import decided_servings
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.rendering.serving import render_serving
from pvegpu.serving.checks import Checks
from pvegpu.serving.systemd import environment_assignment, exec_word
from pvegpu.spec.load import load_spec
from strategies_serving import ROOTFS, kpro6_plan, qwen_serving

REPO = Path(__file__).resolve().parent.parent
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd = pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed")

# Targets the unit and systemd's default dependencies reference; with --root, verify
# loads units only from that tree, so they must exist there.
STUB_TARGETS = (
    "sysinit.target",
    "basic.target",
    "shutdown.target",
    "multi-user.target",
    "network-online.target",
)


def unit(plan: Plan) -> Artifact:
    """The unit rendered for `plan` (undecided, as the test helpers make it)."""
    (artifact,) = render_serving(decided_servings(plan))
    return artifact


def exec_start(content: str) -> str:
    """The ExecStart= value with systemd's line continuations joined."""
    joined = content.replace(" \\\n", " ")
    line = next(x for x in joined.splitlines() if x.startswith("ExecStart="))
    return line.removeprefix("ExecStart=")


def verify(
    tmp_path: Path, artifact: Artifact, *, python: str | None
) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify --root` of the unit, installed in a container-like tree.

    `python`: the interpreter path to create (executable) in the tree, or None for none;
    verify checks that ExecStart's program exists and is executable under the root.
    """
    root = tmp_path / "ct"
    target = root / artifact.path
    target.parent.mkdir(parents=True)
    target.write_text(artifact.content, encoding="utf-8")
    units = root / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    for name in STUB_TARGETS:
        (units / name).write_text(f"[Unit]\nDescription={name}\n", encoding="utf-8")
    if python is not None:
        exe = root / python.lstrip("/")
        exe.parent.mkdir(parents=True)
        exe.write_text("#!/bin/sh\n", encoding="utf-8")
        exe.chmod(0o755)
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run(
        [
            SYSTEMD_ANALYZE,
            "verify",
            f"--root={root}",
            "--man=no",
            "--generators=no",
            Path(artifact.path).name,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_golden_kpro6_0_5_23(golden: Callable[[str], SnapshotAssertion]) -> None:
    """kpro6 pool, Qwen3.5-122B BF16, TP=4, MTP, SGLang 0.5.23: the reviewed unit."""
    assert unit(kpro6_plan()).content == golden("service")


def test_golden_kpro6_0_5_9(golden: Callable[[str], SnapshotAssertion]) -> None:
    """The same pool on SGLang 0.5.9: old flag names and SGLANG_ENABLE_SPEC_V2=1."""
    assert unit(kpro6_plan(qwen_serving(version="0.5.9"))).content == golden("service")


def test_artifact_goes_into_the_container_over_the_old_unit() -> None:
    """ct:129, etc/systemd/system/sglang-qwen.service, 0644, based on the `--tp 8` unit."""
    artifact = unit(kpro6_plan())
    assert artifact.target == "ct:129"
    assert artifact.path == "etc/systemd/system/sglang-qwen.service"
    assert artifact.mode == 0o644
    assert artifact.base is not None
    assert artifact.base.path == f"{ROOTFS}/etc/systemd/system/sglang-qwen.service"
    assert "--tp 8" in artifact.base.content
    assert "--tp " not in artifact.content


def test_new_unit_has_no_base() -> None:
    """No unit in the container yet: the artifact creates the file (no base to restore)."""
    assert unit(kpro6_plan(qwen_serving(unit="sglang-new"))).base is None


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_rendered_command_line_passes_the_version_table(version: str) -> None:
    """The ExecStart words after the module name are a clean line for that version."""
    (pool,) = decided_servings(kpro6_plan(qwen_serving(version=version))).pools
    serving = pool.serving
    assert isinstance(serving, SglangServing)
    table = load_table(version)
    assert parse_command_line(table, serving.argv[3:], subject="t").problems == ()
    assert serving.argv[:3] == ("/root/ml-env/bin/python3", "-m", "sglang.launch_server")


def test_one_option_per_line() -> None:
    """Each launch_server option starts its own continuation line, for review."""
    lines = unit(kpro6_plan()).content.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("ExecStart="))
    body = []
    for line in lines[start + 1 :]:
        body.append(line)
        if not line.endswith(" \\"):
            break
    assert all(x.startswith("    --") for x in body)
    assert lines[start].endswith("sglang.launch_server \\")


@needs_systemd
@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path, version: str) -> None:
    """systemd itself parses the unit cleanly, ExecStart's interpreter included."""
    artifact = unit(kpro6_plan(qwen_serving(version=version)))
    result = verify(tmp_path, artifact, python="/root/ml-env/bin/python3")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


@needs_systemd
def test_systemd_analyze_verify_really_checks(tmp_path: Path) -> None:
    """Control: the same unit without its interpreter fails verify, so the check bites."""
    result = verify(tmp_path, unit(kpro6_plan()), python=None)
    assert result.returncode != 0
    assert "/root/ml-env/bin/python3" in result.stderr


@needs_systemd
def test_hostile_values_still_verify(tmp_path: Path) -> None:
    """Spaces, quotes, backslashes, % and $ in paths and environment: still a valid unit."""
    spec = qwen_serving(
        model_path='/models/My "Model" 100% $HOME\\x',
        served_model_name="qwen 3.5",
        environment=(("HF_HOME", '/data/hf cache/100% "$USER"\\x'),),
        extra_args=("--chat-template", "/t/a b%.jinja"),
    )
    artifact = unit(kpro6_plan(spec))
    result = verify(tmp_path, artifact, python="/root/ml-env/bin/python3")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert r'"/models/My \"Model\" 100%% $$HOME\\x"' in exec_start(artifact.content)


def test_unit_settings_are_rendered_when_given() -> None:
    """user, working_directory and limit_nofile become User=, WorkingDirectory=, LimitNOFILE=."""
    spec = qwen_serving(user="root", working_directory="/root", limit_nofile=1048576)
    lines = unit(kpro6_plan(spec)).content.splitlines()
    service = lines[lines.index("[Service]") : lines.index("[Install]")]
    assert service[:4] == ["[Service]", "Type=exec", "User=root", "WorkingDirectory=/root"]
    assert "LimitNOFILE=1048576" in service
    bare = unit(kpro6_plan()).content
    assert "User=" not in bare and "WorkingDirectory=" not in bare and "LimitNOFILE=" not in bare


@needs_systemd
def test_unit_settings_verify(tmp_path: Path) -> None:
    """systemd accepts the three settings, a % in the directory escaped as a specifier."""
    spec = qwen_serving(user="root", working_directory="/srv/100% dir", limit_nofile=65536)
    artifact = unit(kpro6_plan(spec))
    assert "WorkingDirectory=/srv/100%% dir" in artifact.content
    result = verify(tmp_path, artifact, python="/root/ml-env/bin/python3")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_exec_word_escaping() -> None:
    """ExecStart words: %->%%, $->$$ (variables expand there), quotes and \\ escaped."""
    assert exec_word("/plain/path-1.0") == "/plain/path-1.0"
    assert exec_word("50%") == "50%%"
    assert exec_word("$HOME") == "$$HOME"
    assert exec_word("a b") == '"a b"'
    assert exec_word('say "hi"') == r'"say \"hi\""'
    assert exec_word("back\\slash") == r'"back\\slash"'
    assert exec_word("") == '""'
    assert exec_word('{"a": 1}') == r'"{\"a\": 1}"'


def test_environment_assignment_escaping() -> None:
    """Environment=: quoted, %->%%, \\ and \" escaped, $ left alone (no expansion there)."""
    assert environment_assignment("A", "1") == '"A=1"'
    assert environment_assignment("A", "100%") == '"A=100%%"'
    assert environment_assignment("A", "$HOME/x") == '"A=$HOME/x"'
    assert environment_assignment("A", 'a "b" c') == r'"A=a \"b\" c"'
    assert environment_assignment("A", "C:\\dir") == r'"A=C:\\dir"'


def test_environment_escaping_in_the_unit() -> None:
    """A user variable with % and $ lands in the unit escaped for Environment=."""
    spec = qwen_serving(environment=(("HF_HOME", "/shared/$hf 100%"),))
    assert 'Environment="HF_HOME=/shared/$hf 100%%"' in unit(kpro6_plan(spec)).content


def test_control_characters_are_refused() -> None:
    """A newline in a value could inject unit lines: refused by plan(), before rendering."""
    with pytest.raises(PlanError) as err:
        decided_servings(kpro6_plan(qwen_serving(model_path="/m\nExecStartPre=/bin/rm")))
    assert [p.code for p in err.value.problems] == ["serving-unprintable"]


def test_plan_without_servers_renders_nothing() -> None:
    """Pools without a serving spec produce no unit."""
    plan = decided_servings(kpro6_plan())
    bare = attrs.evolve(plan, pools=tuple(attrs.evolve(p, serving=None) for p in plan.pools))
    assert render_serving(bare) == ()


def test_kpro6_fixture_host_end_to_end(fixture_root: Callable[[str], Path]) -> None:
    """Discover the kpro6 fixture, read its serving files, plan the example: TP=4 over --tp 8."""
    root = fixture_root("kpro6")
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    facts = with_serving_files(discover(root), root, spec, installed_files)
    (artifact,) = render_serving(plan(facts, spec))
    assert artifact.target == "ct:129"
    assert artifact.base is not None and "--tp 8" in artifact.base.content
    words = exec_start(artifact.content).split()
    assert words[words.index("--tp-size") + 1] == "4"
    assert 'Environment="CUDA_VISIBLE_DEVICES=0,1,2,3"' in artifact.content
    assert 'Environment="NCCL_P2P_DISABLE=1"' in artifact.content


def test_kpro6_example_carries_the_old_unit_over(fixture_root: Callable[[str], Path]) -> None:
    """examples/kpro6.toml keeps every setting of LXC 129's current unit: no drops warning."""
    root = fixture_root("kpro6")
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    planned = plan(with_serving_files(discover(root), root, spec, installed_files), spec)
    assert "serving-drops-settings" not in [f.code for f in planned.findings]
    (artifact,) = render_serving(planned)
    assert artifact.base is not None
    for line in ("User=root", "WorkingDirectory=/root", "LimitNOFILE=1048576"):
        assert line in artifact.base.content.splitlines()
        assert line in artifact.content.splitlines()
    words = exec_start(artifact.content).split()
    assert "--trust-remote-code" in words
    assert words[words.index("--reasoning-parser") + 1] == "qwen3"


def test_rendering_only_reads_the_decided_servers(
    fixture_root: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """render() of a plan formats Pool.serving: with every way to decide a server broken,
    it still gives the same artifacts, so it can neither redo the work nor raise PlanError."""
    root = fixture_root("kpro6")
    spec = load_spec(REPO / "examples" / "kpro6.toml")
    planned = plan(with_serving_files(discover(root), root, spec, installed_files), spec)
    before = render(planned)

    def no_deciding(*args: object, **kwargs: object) -> None:
        raise AssertionError("a renderer decided a server")

    # Checks is what every decision is collected in, however its builder was imported.
    monkeypatch.setattr(Checks, "__init__", no_deciding)
    monkeypatch.setattr(build, "decide_serving", no_deciding)
    monkeypatch.setattr(decide, "decide_serving", no_deciding)
    monkeypatch.setattr(decide, "decided_servings", no_deciding)
    assert any(a.path.endswith("sglang-qwen.service") for a in before)
    assert render(planned) == before
    with pytest.raises(AssertionError, match="decided a server"):
        plan(with_serving_files(discover(root), root, spec, installed_files), spec)
