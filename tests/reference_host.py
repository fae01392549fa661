"""A fixture host copied into a test's directory with more files written into it: the
guest configs, hooks, hookscripts and host files of the GPU reference tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from bundled import copy_tree, fixture_root
from pvegpu.host.discover import discover
from pvegpu.model.facts import HostFacts


def host_with(tmp_path: Path, base: str, files: Mapping[str, str], node: str = "") -> Path:
    """fixtures/sysfs/<base> copied to tmp_path/<base>, with `files` (root-relative path ->
    content) written; guest configs go where pmxcfs keeps them (its links point there)."""
    root = copy_tree(fixture_root(base), tmp_path / base)
    node = node or (root / "etc" / "hostname").read_text().strip().split(".")[0]
    for rel, content in files.items():
        for kind in ("lxc", "qemu-server"):
            prefix = f"etc/pve/{kind}/"
            if rel.startswith(prefix):
                rel = f"etc/pve/nodes/{node}/{kind}/{rel.removeprefix(prefix)}"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def facts_with(tmp_path: Path, base: str, files: Mapping[str, str]) -> HostFacts:
    return discover(host_with(tmp_path, base, files))
