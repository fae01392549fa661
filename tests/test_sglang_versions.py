"""Every shipped SGLang release: the kpro6 unit renders and passes that release's table;
the release installed in the container is the one rendered for."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from syrupy.assertion import SnapshotAssertion

import bundled
from pvegpu.engines.sglang import versions
from pvegpu.engines.sglang.option_check import parse_command_line
from pvegpu.engines.sglang.options import load_table, shipped_versions
from pvegpu.engines.sglang.versions import When
from pvegpu.errors import PlanError, PvegpuError, SpecError
from pvegpu.model.artifact import Artifact
from pvegpu.model.plan import Plan
from pvegpu.model.schema import ServingSpec, Spec
from pvegpu.pipeline import discover_for
from pvegpu.planning.decide import decided_servings
from pvegpu.planning.planner import plan
from pvegpu.rendering.serving import render_serving
from strategies_serving import ROOTFS, kpro6_plan, qwen_serving
from test_sglang_tables import source_files

SHIPPED = shipped_versions()
HYBRID_MTP = versions.conditions(mtp=True, hybrid=True, pinned=True)
MAMBA = versions.RULES.spellings("mamba cache strategy")


def unit(version: str) -> Artifact:
    (artifact,) = render_serving(decided_servings(kpro6_plan(qwen_serving(version=version))))
    return artifact


def exec_argv(content: str) -> list[str]:
    """The launch_server options of ExecStart= (continuations joined, quotes are absent)."""
    joined = content.replace(" \\\n", " ")
    line = next(x for x in joined.splitlines() if x.startswith("ExecStart="))
    words = line.split()
    return words[words.index("sglang.launch_server") + 1 :]


@pytest.mark.parametrize("version", SHIPPED)
def test_kpro6_unit_renders_and_passes_the_releases_table(version: str) -> None:
    """MTP on the hybrid Qwen3.5 at TP=4: no unknown, ambiguous, deprecated or alias option."""
    table = load_table(version)
    argv = exec_argv(unit(version).content)
    assert parse_command_line(table, argv, subject="t").problems == ()
    for word in argv:
        if word.startswith("--"):
            spec = table.option_strings[word]
            assert not spec.deprecated and word in spec.accepted, word


@pytest.mark.parametrize("version", SHIPPED)
def test_mamba_rule_follows_the_tables(version: str) -> None:
    """The mamba cache option is written exactly where the release has a live spelling of it,
    under that spelling: 0.5.7-0.5.13 the old name, 0.5.14 on the new one (the old one a
    deprecated alias until 0.5.19), none before 0.5.7."""
    table = load_table(version)
    live = [o for o in MAMBA if (spec := table.find(o)) is not None and o in spec.accepted]
    written = [
        r.option for r in versions.RULES.options_for(version, HYBRID_MTP) if r.option in MAMBA
    ]
    assert written == live[:1]
    spec_v2 = [r for r in versions.RULES.environment_for(version, HYBRID_MTP)]
    assert any(r.name == "SGLANG_ENABLE_SPEC_V2" for r in spec_v2) == (
        written == ["--mamba-scheduler-strategy"]
    )


def test_release_boundaries_of_the_rules() -> None:
    """Spot checks of what the tables say, so a changed RULES row shows here by name."""
    assert load_table("0.5.6.post2").find(*MAMBA) is None
    assert load_table("0.5.7").find("--mamba-scheduler-strategy") is not None
    assert load_table("0.5.13.post1").find("--mamba-radix-cache-strategy") is None
    assert load_table("0.5.14").option_strings["--mamba-scheduler-strategy"].deprecated
    assert load_table("0.5.19").option_strings["--mamba-scheduler-strategy"].deprecated
    assert "--mamba-scheduler-strategy" not in load_table("0.5.20").option_strings
    assert versions.RULES.environment_for("0.5.17", {When.NUMA_PINNED}) == ()
    (numa,) = versions.RULES.environment_for("0.5.18", {When.NUMA_PINNED})
    assert numa.name == "SGLANG_AUTO_NUMA_BIND"


def test_golden_kpro6_0_5_12(golden: Callable[[str], SnapshotAssertion]) -> None:
    """0.5.10-0.5.13: --mamba-scheduler-strategy and SGLANG_ENABLE_SPEC_V2=1."""
    assert unit("0.5.12").content == golden("service")


def test_golden_kpro6_0_5_17(golden: Callable[[str], SnapshotAssertion]) -> None:
    """0.5.14-0.5.19: --mamba-radix-cache-strategy, no SPEC_V2, no NUMA variable yet."""
    assert unit("0.5.17").content == golden("service")


def test_golden_kpro6_newest(golden: Callable[[str], SnapshotAssertion]) -> None:
    """The newest shipped release (0.5.23): the new name and SGLANG_AUTO_NUMA_BIND=0."""
    assert SHIPPED[-1] == "0.5.23"
    assert unit(SHIPPED[-1]).content == golden("service")


# -- the release installed in the container

SITE = "lib/python3.12/site-packages"


@pytest.fixture(scope="module")
def kpro6_installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kpro6 with SGLang 0.5.12 in /root/ml-env and an unshipped 0.5.99 in /opt/next-env
    (the 0.5.23 sources, renamed), as pip would leave them."""
    root = tmp_path_factory.mktemp("kpro6") / "root"
    shutil.copytree(bundled.fixture_root("kpro6"), root, symlinks=True)
    container = root / ROOTFS
    for prefix, version, sources in (
        ("root/ml-env", "0.5.12", None),
        ("opt/next-env", "0.5.99", "0.5.23"),
    ):
        site = container / prefix / SITE
        info = site / f"sglang-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.4\nName: sglang\nVersion: {version}\n\nVersion: 9.9\n"
        )
        if sources is not None:
            files = source_files(sources)
            for name in files.names:
                target = site / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(files(name) or "")
    return root


def serving_spec(**changes: Any) -> Spec:
    spec = bundled.example_spec("kpro6")
    pool = spec.pools[0]
    assert pool.lxc is not None and pool.lxc.serving is not None
    serving: ServingSpec = attrs.evolve(pool.lxc.serving, **changes)
    lxc = attrs.evolve(pool.lxc, serving=serving)
    return attrs.evolve(spec, pools=(attrs.evolve(pool, lxc=lxc), *spec.pools[1:]))


def planned(root: Path, spec: Spec) -> Plan:
    return plan(discover_for(spec, root), spec)


def refusal(root: Path, spec: Spec) -> PvegpuError:
    with pytest.raises(PvegpuError) as err:
        planned(root, spec)
    return err.value


def test_installed_release_is_used_without_a_spec_version(kpro6_installed: Path) -> None:
    """No version in the spec: the container's 0.5.12 decides flags, variables and table."""
    serving = planned(kpro6_installed, serving_spec(version=None)).pools[0].serving
    assert serving is not None and serving.version == "0.5.12"
    assert ("--mamba-scheduler-strategy", "extra_buffer") in serving.options
    assert ("SGLANG_ENABLE_SPEC_V2", "1") in serving.environment


def test_installed_release_is_found_through_the_storage_without_container_rootfs(
    kpro6_installed: Path,
) -> None:
    """No container_rootfs either: CT 129's rootfs: line and storage.cfg lead to it."""
    spec = serving_spec(version=None, container_rootfs=None)
    serving = planned(kpro6_installed, spec).pools[0].serving
    assert serving is not None and serving.version == "0.5.12"


def test_same_spec_version_as_installed_is_accepted(kpro6_installed: Path) -> None:
    serving = planned(kpro6_installed, serving_spec(version="0.5.12")).pools[0].serving
    assert serving is not None and serving.version == "0.5.12"


def test_spec_version_other_than_installed_is_refused(kpro6_installed: Path) -> None:
    """examples/kpro6.toml says 0.5.23; the container runs 0.5.12: refused, with the fix."""
    err = refusal(kpro6_installed, serving_spec())
    assert isinstance(err, PlanError)
    (problem,) = (p for p in err.problems if p.code == "sglang-version-mismatch")
    assert problem.subject == "pools[0].lxc.serving.version"
    assert "0.5.23" in problem.message and "runs SGLang 0.5.12" in problem.message
    assert 'version = "0.5.12"' in problem.fix
    assert "pip install sglang==0.5.23" in problem.fix


def test_unshipped_installed_release_gets_a_table_from_its_sources(kpro6_installed: Path) -> None:
    """0.5.99 has no shipped table: its installed server_args.py gives one; it renders."""
    spec = serving_spec(version=None, python="/opt/next-env/bin/python3")
    serving = planned(kpro6_installed, spec).pools[0].serving
    assert serving is not None and serving.version == "0.5.99"
    assert ("--mamba-radix-cache-strategy", "extra_buffer") in serving.options


def test_unknown_release_without_sources_is_refused(tmp_path: Path, kpro6_installed: Path) -> None:
    """An installed release with no table and no server_args.py: a refusal naming the tool."""
    site = kpro6_installed / ROOTFS / "srv/bare-env" / SITE
    (site / "sglang-0.6.0.dist-info").mkdir(parents=True)
    (site / "sglang-0.6.0.dist-info" / "METADATA").write_text("Name: sglang\nVersion: 0.6.0\n")
    err = refusal(kpro6_installed, serving_spec(version=None, python="/srv/bare-env/bin/python3"))
    assert isinstance(err, SpecError)
    (problem,) = err.problems
    assert problem.code == "sglang-version-unknown"
    assert "no server_args.py" in problem.message
    assert "make sglang-tables VERSIONS=0.6.0" in problem.fix


def test_no_version_anywhere_is_refused() -> None:
    """No spec version and nothing installed (the bundled kpro6 has no dist-info)."""
    spec = serving_spec(version=None)
    err = refusal(bundled.fixture_root("kpro6"), spec)
    assert "sglang-version-missing" in [p.code for p in err.problems]
