"""MANIFEST.json is one value (`Manifest`): written by `Manifest.text`, read back by
`Manifest.from_text`, and what render writes reads back to the same bytes; anything it
did not write is refused as `bundle-invalid` naming what is wrong, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bundled
from pvegpu.apply.bundle import bundle_from_files, read_bundle_dir
from pvegpu.errors import BundleError
from pvegpu.model.artifact import REVERT_BUNDLE
from pvegpu.model.manifest import MANIFEST, Manifest, ManifestError
from pvegpu.rendering.bundle_layout import bundle_files
from pvegpu.rendering.registry import render
from pvegpu.rendering.review.apply_doc import manifest_header

GOLDEN = Path(__file__).parent / "golden" / "test_end_to_end"


@pytest.mark.parametrize("name", ["kpro6", "workstation", "driver-upgrade"])
def test_render_writes_what_the_reader_reads_back_byte_for_byte(name: str) -> None:
    plan = bundled.example_plan(name)
    artifacts = render(plan)
    files = bundle_files(artifacts, **manifest_header(plan, artifacts, f"{name}.toml"))
    for rel in (MANIFEST, f"{REVERT_BUNDLE}/{MANIFEST}"):
        text = files[rel][0]
        manifest = Manifest.from_text(text)
        assert manifest.text() == text
    bundle = bundle_from_files(files)
    assert bundle.document == Manifest.from_text(files[MANIFEST][0])
    assert (bundle.node, bundle.spec) == (plan.facts.node, f"{name}.toml")


def test_every_golden_manifest_reads_back_to_its_bytes() -> None:
    goldens = sorted(GOLDEN.glob("*MANIFEST.json*.json"))
    assert goldens
    for path in goldens:
        text = path.read_text()
        assert Manifest.from_text(text).text() == text, path.name


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d["artifacts"][0].update(mode="rw-r--r--"), "artifacts[0].mode"),
        (lambda d: d["artifacts"][0].pop("path"), "artifacts[0].path is not a string"),
        (lambda d: d["artifacts"].__setitem__(0, "etc/pve/lxc/129.conf"), "not an object"),
        (lambda d: d.update(node=7), "its node is not a string"),
        (lambda d: d.update(schema="pvegpu.manifest/0"), "not a pvegpu.manifest/1 manifest"),
    ],
)
def test_a_manifest_pvegpu_did_not_write_is_refused_by_name(
    tmp_path: Path, change: object, said: str
) -> None:
    plan = bundled.example_plan("kpro6")
    artifacts = render(plan)
    files = bundle_files(artifacts, **manifest_header(plan, artifacts, "kpro6.toml"))
    doc = json.loads(files[MANIFEST][0])
    assert callable(change)
    change(doc)
    text = json.dumps(doc)
    with pytest.raises(ManifestError, match=said.replace("[", r"\[").replace("]", r"\]")):
        Manifest.from_text(text)
    for rel, (content, _) in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text if rel == MANIFEST else content)
    with pytest.raises(BundleError) as refused:
        read_bundle_dir(tmp_path)
    (problem,) = refused.value.problems
    assert problem.code == "bundle-invalid"
    assert said in problem.message
