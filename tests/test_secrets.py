"""Secrets in the container's unit or the spec never reach the rendered files or review."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import attrs
import pytest

from bundled import example_facts, example_spec, fixture_root, spec_path
from pvegpu.cli import main
from pvegpu.errors import SpecError
from pvegpu.model.artifact import REVERT_BUNDLE, Artifact
from pvegpu.model.facts import ConfigFile, HostFacts
from pvegpu.model.plan import Plan
from pvegpu.planning.planner import plan
from pvegpu.rendering.registry import render
from pvegpu.spec.load import parse_spec

UNIT = "rpool/data/subvol-129-disk-0/etc/systemd/system/sglang-qwen.service"
TOKEN = "hf_Zz9SECRETtoken"
SERVICE = "sglang-qwen.service"
KPRO6_TOML = spec_path("kpro6")
API_KEY = "sk-AAAsecretKEY"


def facts_with_secrets() -> HostFacts:
    facts = example_facts("kpro6")
    old = facts.file(UNIT)
    assert old is not None
    content = old.content.replace(
        "Environment=NCCL_DEBUG=WARN\n",
        f"Environment=NCCL_DEBUG=WARN HF_TOKEN={TOKEN}\n",
    ).replace("--port 30000", f"--port 30000 --api-key {API_KEY}")
    assert content != old.content
    files = tuple(ConfigFile(f.path, content) if f.path == UNIT else f for f in facts.files)
    return attrs.evolve(facts, files=files)


@pytest.fixture(scope="module")
def secret_plan() -> tuple[Plan, tuple[Artifact, ...]]:
    planned = plan(facts_with_secrets(), example_spec("kpro6"))
    return planned, render(planned)


def test_no_rendered_or_review_file_holds_a_secret(
    secret_plan: tuple[Plan, tuple[Artifact, ...]],
) -> None:
    planned, artifacts = secret_plan
    for artifact in artifacts:  # revert/ included: the bundle is safe to commit
        assert TOKEN not in artifact.content, artifact.path
        assert API_KEY not in artifact.content, artifact.path
    for finding in planned.findings:
        assert TOKEN not in finding.message and API_KEY not in finding.message, finding.code


def test_the_new_unit_reads_secrets_by_reference_and_the_finding_names_them(
    secret_plan: tuple[Plan, tuple[Artifact, ...]],
) -> None:
    planned, artifacts = secret_plan
    (unit,) = [
        a for a in artifacts if a.path.endswith("sglang-qwen.service") and a.bundle != REVERT_BUNDLE
    ]
    assert "EnvironmentFile=/etc/default/sglang-qwen\n" in unit.content
    (moved,) = [f for f in planned.findings if f.code == "serving-secrets-moved"]
    assert "HF_TOKEN" in moved.message and "--api-key" in moved.message
    assert "install -m 0600 /dev/null /etc/default/sglang-qwen" in moved.message
    (drops,) = [f for f in planned.findings if f.code == "serving-drops-settings"]
    assert "--api-key REDACTED" in drops.message


def test_without_secrets_the_unit_has_no_environment_file() -> None:
    planned = plan(example_facts("kpro6"), example_spec("kpro6"))
    assert "serving-secrets-moved" not in {f.code for f in planned.findings}
    assert all("EnvironmentFile=" not in a.content for a in render(planned))


def test_spec_environment_file_and_reference_are_rendered_as_is() -> None:
    text = KPRO6_TOML.read_text()
    text = text.replace(
        "limit_nofile = 1048576\n",
        'limit_nofile = 1048576\nenvironment_file = "/etc/sglang/qwen.env"\n',
    ).replace('"--trust-remote-code"]', '"--trust-remote-code", "--api-key", "${SGLANG_API_KEY}"]')
    planned = plan(example_facts("kpro6"), parse_spec(text))
    (unit,) = [
        a
        for a in render(planned)
        if a.path.endswith("sglang-qwen.service") and a.bundle != REVERT_BUNDLE
    ]
    assert "EnvironmentFile=/etc/sglang/qwen.env\n" in unit.content
    assert "--api-key ${SGLANG_API_KEY}" in unit.content  # systemd substitutes it at start


def test_a_secret_written_into_the_spec_is_refused() -> None:
    text = KPRO6_TOML.read_text()
    for change in (
        ('NCCL_DEBUG = "WARN"', f'NCCL_DEBUG = "WARN"\nHF_TOKEN = "{TOKEN}"'),
        ('"--trust-remote-code"]', f'"--trust-remote-code", "--api-key={API_KEY}"]'),
    ):
        with pytest.raises(SpecError) as err:
            parse_spec(text.replace(*change))
        assert [p.code for p in err.value.problems] == ["spec-secret"]
        assert TOKEN not in str(err.value) and API_KEY not in str(err.value)


def test_plan_output_shows_changed_secret_lines_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "kpro6"
    shutil.copytree(fixture_root("kpro6"), root, symlinks=True)
    unit = root / UNIT
    unit.write_text(facts_with_secrets().file(UNIT).content)  # type: ignore[union-attr]
    for extra in ([], ["--json"]):
        assert main(["plan", "--root", str(root), "--spec", str(KPRO6_TOML), *extra]) == 0
        out = capsys.readouterr().out
        assert TOKEN not in out and API_KEY not in out
        assert "HF_TOKEN=REDACTED" in out and "--api-key REDACTED" in out


def test_snapshot_archives_secret_values_redacted_and_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "kpro6"
    shutil.copytree(fixture_root("kpro6"), root, symlinks=True)
    (root / UNIT).write_text(facts_with_secrets().file(UNIT).content)  # type: ignore[union-attr]
    archive = tmp_path / "kpro6.tar.gz"
    args = ["snapshot", "--root", str(root), "--spec", str(KPRO6_TOML), "--out", str(archive)]
    assert main(args) == 0
    assert f"REDACTED in: {UNIT}" in capsys.readouterr().out
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            data = handle.read() if handle is not None else b""
            assert TOKEN.encode() not in data and API_KEY.encode() not in data, member.name
        unit = tar.extractfile(UNIT)
        assert unit is not None and b"HF_TOKEN=REDACTED" in unit.read()


def test_the_old_unit_with_secrets_stays_in_the_container_for_the_revert(
    secret_plan: tuple[Plan, tuple[Artifact, ...]],
) -> None:
    _, artifacts = secret_plan
    path = "etc/systemd/system/sglang-qwen.service"
    (copy,) = [a for a in artifacts if a.path == path and a.bundle == REVERT_BUNDLE]
    assert "HF_TOKEN=REDACTED" in copy.content and "kept in the container" in copy.reason
    (script,) = [a for a in artifacts if a.path == "revert.sh"]
    assert f'pct exec 129 -- mv "/{path}.pvegpu-orig" "/{path}"' in script.content
    assert f'pct push 129 "$bundle/ct/129/{path}"' not in script.content
    (summary,) = [a for a in artifacts if a.path == "SUMMARY.md"]
    keep = f"pct exec 129 -- cp -a /{path} /{path}.pvegpu-orig"
    assert keep in summary.content
    assert summary.content.index(keep) < summary.content.index(f"pct push 129 ct/129/{path}")
    assert f"pct exec 129 -- mv /{path}.pvegpu-orig /{path}" in summary.content


def test_without_secrets_the_revert_pushes_the_bundle_copy() -> None:
    artifacts = render(plan(example_facts("kpro6"), example_spec("kpro6")))
    (script,) = [a for a in artifacts if a.path == "revert.sh"]
    assert ".pvegpu-orig" not in script.content
