"""The jinja2 bytecode cache: used when it can be, never stale, never in the way."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import jinja2
import pytest

from pvegpu.formats.templating import bytecode_cache, default_cache_dir, make_environment

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def _copy_templates(tmp_path: Path) -> Path:
    copy = tmp_path / "templates"
    shutil.copytree(TEMPLATES, copy)
    return copy


def _fresh(templates: Path, cache_dir: Path) -> jinja2.Environment:
    """What a new `pvegpu render` process gets: a new environment over the same cache."""
    return make_environment(jinja2.FileSystemLoader(templates), bytecode_cache(cache_dir))


def _refuse_compiling(env: jinja2.Environment, monkeypatch: pytest.MonkeyPatch) -> None:
    def compile_from_source(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("compiled from source although the cache holds it")

    monkeypatch.setattr(env, "compile", compile_from_source)


def test_second_process_loads_compiled_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates = _copy_templates(tmp_path)
    names = sorted(p.name for p in templates.glob("*.j2"))
    first = _fresh(templates, tmp_path / "cache")
    for name in names:
        first.get_template(name)
    assert len(list((tmp_path / "cache").iterdir())) == len(names)

    second = _fresh(templates, tmp_path / "cache")
    _refuse_compiling(second, monkeypatch)
    for name in names:
        second.get_template(name)


def test_edited_template_is_compiled_again(tmp_path: Path) -> None:
    templates = _copy_templates(tmp_path)
    (templates / "probe.j2").write_text("before {{ word }}\n")
    assert _fresh(templates, tmp_path / "cache").get_template("probe.j2").render(word="x") == (
        "before x\n"
    )

    (templates / "probe.j2").write_text("after {{ word }}\n")
    assert _fresh(templates, tmp_path / "cache").get_template("probe.j2").render(word="x") == (
        "after x\n"
    )


def test_edited_shipped_template_renders_the_edit(tmp_path: Path) -> None:
    """A cached shipped template, edited in place: the next process renders the edit."""
    templates = _copy_templates(tmp_path)
    name = "split-modprobe.conf.j2"
    context = {
        "node": "kpro6",
        "script": "/s",
        "hook": "/h",
        "softdeps": ["nouveau"],
        "softdep_notes": [],
    }
    before = _fresh(templates, tmp_path / "cache").get_template(name).render(context)
    assert "softdep nouveau pre: vfio-pci\n" in before

    source = (templates / name).read_text()
    (templates / name).write_text(source.replace("pre: vfio-pci", "pre: vfio-pci-edited"))
    after = _fresh(templates, tmp_path / "cache").get_template(name).render(context)
    assert after == before.replace("pre: vfio-pci", "pre: vfio-pci-edited")


def test_unusable_directory_means_no_cache(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert bytecode_cache(blocker / "pvegpu") is None
    assert bytecode_cache(None) is None

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert bytecode_cache(shared) is None, "a directory others can write holds no code we run"


def test_without_cache_templates_still_render(tmp_path: Path) -> None:
    env = make_environment(jinja2.FileSystemLoader(_copy_templates(tmp_path)), None)
    (tmp_path / "templates" / "probe.j2").write_text("plain {{ word }}\n")
    assert env.get_template("probe.j2").render(word="y") == "plain y\n"


def test_write_failures_are_not_render_failures(tmp_path: Path) -> None:
    templates = _copy_templates(tmp_path)
    (templates / "probe.j2").write_text("kept {{ word }}\n")
    env = _fresh(templates, tmp_path / "cache")
    shutil.rmtree(tmp_path / "cache")  # the directory vanishes under a running render
    assert env.get_template("probe.j2").render(word="z") == "kept z\n"


def test_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "pvegpu"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "pvegpu"


def test_render_writes_no_cache_the_cli_does(tmp_path: Path) -> None:
    """render() is a pure stage: a library process that renders keeps nothing on disk.
    The CLI process chooses the per-user cache for its own renders."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    library = (
        "from pathlib import Path\nimport pvegpu\n"
        f"spec = pvegpu.load_spec(Path({str(repo / 'examples/kpro6.toml')!r}))\n"
        f"facts = pvegpu.discover_for(spec, Path({str(repo / 'fixtures/sysfs/kpro6')!r}))\n"
        "assert pvegpu.render(pvegpu.plan(facts, spec))\n"
    )
    subprocess.run([sys.executable, "-c", library], env=env, check=True)
    assert not (tmp_path / "cache").exists()
    cli = [sys.executable, "-m", "pvegpu", "render", "--root", str(repo / "fixtures/sysfs/kpro6")]
    cli += ["--spec", str(repo / "examples/kpro6.toml"), "--out", str(tmp_path / "out")]
    subprocess.run(cli, env=env, check=True, capture_output=True)
    assert list((tmp_path / "cache/pvegpu").glob("template-*.cache"))
