"""`pvegpu plan` and `pvegpu render` on the command line: output, files written, refusals.

Everything goes through `pvegpu.cli.main([...])` except one run of the installed console
script. The refusals check the exit code of each kind of error, that every problem is
listed, and that `render` writes nothing (not even the --out directory) when refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bundled import FIXTURES, copy_tree, spec_path
from linters import needs_shellcheck, shellcheck
from pvegpu.cli import main

KPRO6 = FIXTURES / "kpro6"
KPRO6_SPEC = spec_path("kpro6")
PATCH = shutil.which("patch")

Run = Callable[..., tuple[int, str, str]]
LXC_CONF = "etc/pve/lxc/129.conf"
INSTALLED = {
    ("host", LXC_CONF),
    ("host", "etc/pve/mapping/pci.cfg"),
    ("host", "usr/local/sbin/pvegpu-vfio-split"),
    ("host", "etc/systemd/system/pvegpu-vfio-split.service"),
    ("host", "etc/modprobe.d/pvegpu-vfio.conf"),
    ("host", "etc/initramfs-tools/hooks/pvegpu-vfio-split"),
    ("host", "usr/local/sbin/pvegpu-device-nodes"),
    ("host", "etc/systemd/system/pvegpu-device-nodes.service"),
    ("ct:129", "etc/systemd/system/sglang-qwen.service"),
}


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """run("plan", "--root", ...) -> (exit code, stdout, stderr) of pvegpu.cli.main."""

    def call(*argv: str | Path) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


def _file_diff(out: str, path: str) -> str:
    """The unified diff of one file in `pvegpu plan`'s output."""
    start = out.index(f"--- a/{path}\n")
    end = out.find("\n--- ", start + 1)
    plan_footer = out.find("\nplan for node ", start)
    stops = [i for i in (end, plan_footer) if i != -1]
    return out[start : min(stops) + 1]


def _write_spec(tmp_path: Path, text: str) -> Path:
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    return spec


# --- plan


def test_plan_prints_diffs_and_findings(run: Run) -> None:
    """plan prints a diff per file (129.conf loses /dev/nvidia4..7), pools, findings; exit 0."""
    code, out, err = run("plan", "--root", KPRO6, "--spec", KPRO6_SPEC)
    assert (code, err) == (0, "")
    diff = _file_diff(out, LXC_CONF)
    assert diff.startswith(f"--- a/{LXC_CONF}\n+++ b/{LXC_CONF}\n@@ ")
    removed = [line for line in diff.splitlines() if line.startswith("-") and line[1:4] != "-- "]
    for minor in (4, 5, 6, 7):
        assert any(f"/dev/nvidia{minor}," in line for line in removed), minor
    for minor in (0, 1, 2, 3):  # kept: context lines, neither removed nor added
        assert f"\n dev{minor}: /dev/nvidia{minor},mode=0666\n" in diff, minor
    # Only devN lines go; the [pre-split] snapshot section is at most context.
    assert all(re.match(r"^[-+]dev\d+: /dev/nvidia", line) for line in removed)
    after_snapshot = diff.split("\n [pre-split]\n", 1)[1:]
    assert not any(
        line.startswith(("-", "+")) for part in after_snapshot for line in part.splitlines()
    )
    assert "--- /dev/null\n+++ b/usr/local/sbin/pvegpu-vfio-split\n" in out
    assert "--- a/ct:129/etc/systemd/system/sglang-qwen.service\n" in out
    # The summary comes first (its lines: tests/test_cli_brief.py); infos by code only.
    assert out.startswith("plan for node kpro6: 9 files (3 patched, 6 new)\n")
    assert "  pool sglang: lxc on nvidia, CT 129: 01:00.0, 11:00.0, 61:00.0, 71:00.0\n" in out
    assert "  pool vm: vfio on vfio-pci, no VM yet: 81:00.0, 91:00.0, e1:00.0, f1:00.0\n" in out
    infos = re.search(r"^  5 info: (.*) \(", out, re.MULTILINE)
    assert infos is not None
    for code_ in ("identical-device-ids", "group-members-move", "sev-snp", "serving-p2p"):
        assert code_ in infos[1].split(", "), code_


@pytest.mark.skipif(PATCH is None, reason="patch(1) missing")
def test_plan_diff_applies_to_the_host_file(run: Run, tmp_path: Path) -> None:
    """The printed 129.conf diff, applied by patch -p1 to the host's file, gives render's file."""
    assert PATCH is not None
    _, out, _ = run("plan", "--root", KPRO6, "--spec", KPRO6_SPEC)
    work = tmp_path / "work"
    (work / "etc/pve/lxc").mkdir(parents=True)
    shutil.copyfile(KPRO6 / LXC_CONF, work / LXC_CONF)
    applied = subprocess.run(
        [PATCH, "-p1", "--quiet", "--forward"],
        input=_file_diff(out, LXC_CONF),
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert run("render", "--root", KPRO6, "--spec", KPRO6_SPEC, "--out", tmp_path / "out")[0] == 0
    assert (work / LXC_CONF).read_text() == (tmp_path / "out" / LXC_CONF).read_text()


def test_plan_json(run: Run) -> None:
    """plan --json: one document with pools, findings and a change (with its diff) per file."""
    code, out, err = run("plan", "--root", KPRO6, "--spec", KPRO6_SPEC, "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["schema"] == "pvegpu.plan/1"
    assert doc["node"] == "kpro6"
    assert [(p["name"], p["kind"], p["driver"], p["numa_nodes"]) for p in doc["pools"]] == [
        ("sglang", "lxc", "nvidia", [0]),
        ("vm", "vfio", "vfio-pci", [1]),
    ]
    assert doc["pools"][1]["gpus"] == [
        "0000:81:00.0",
        "0000:91:00.0",
        "0000:e1:00.0",
        "0000:f1:00.0",
    ]
    assert len(doc["pools"][1]["functions"]) == 8
    codes = {f["code"] for f in doc["findings"]}
    assert {"identical-device-ids", "group-members-move", "sev-snp"} <= codes
    assert all(f["severity"] in ("info", "warning") for f in doc["findings"])
    changes = {(c["target"], c["path"]): c for c in doc["changes"]}
    assert set(changes) == INSTALLED
    conf = changes[("host", LXC_CONF)]
    assert conf["base_sha256"] == hashlib.sha256((KPRO6 / LXC_CONF).read_bytes()).hexdigest()
    assert "-dev7: /dev/nvidia7,mode=0666\n" in conf["diff"]
    assert changes[("host", "usr/local/sbin/pvegpu-vfio-split")]["mode"] == "0755"
    assert all(c["diff"] and c["action"] == "write" for c in doc["changes"])


# --- render


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_manifest(directory: Path, manifest: dict[str, Any]) -> set[Path]:
    """Every `write` entry is a file under `directory` with its sha256 and mode."""
    files = set()
    for entry in manifest["artifacts"]:
        if entry["action"] == "remove":
            assert entry["sha256"] is None
            continue
        path = directory / entry["file"]
        assert path.is_file(), entry
        assert _sha256(path) == entry["sha256"], entry["file"]
        assert f"{path.stat().st_mode & 0o7777:04o}" == entry["mode"], entry["file"]
        files.add(path)
    return files


def test_render_writes_every_manifest_file(run: Run, tmp_path: Path) -> None:
    """render --out writes each MANIFEST.json entry (sha256, mode) and revert/MANIFEST.json only."""
    out = tmp_path / "out"
    code, stdout, err = run("render", "--root", KPRO6, "--spec", KPRO6_SPEC, "--out", out)
    assert (code, err) == (0, "")
    assert stdout.startswith("plan for node kpro6: 9 files")
    assert f"\nrendered 17 files into {out}:\n" in stdout
    top = json.loads((out / "MANIFEST.json").read_text())
    assert top["schema"] == "pvegpu.manifest/1" and top["node"] == "kpro6"
    assert top["spec"] == str(KPRO6_SPEC)
    files = _check_manifest(out, top)
    revert = json.loads((out / "revert/MANIFEST.json").read_text())
    assert all(e["bundle"] == "revert" for e in revert["artifacts"])
    assert _check_manifest(out / "revert", revert) == {
        f for f in files if f.is_relative_to(out / "revert")
    }
    assert (out / "usr/local/sbin/pvegpu-vfio-split").stat().st_mode & 0o777 == 0o755
    assert (out / "revert/revert.sh").stat().st_mode & 0o777 == 0o755
    on_disk = {p for p in out.rglob("*") if p.is_file()}
    assert on_disk == files | {out / "MANIFEST.json", out / "revert/MANIFEST.json"}
    assert {(e["target"], e["path"]) for e in top["artifacts"] if e["bundle"] == "apply"} == {
        *INSTALLED,
        ("review", "SUMMARY.md"),
        ("review", "topology.svg"),
    }


def test_top_manifest_files_are_relative_to_out(run: Run, tmp_path: Path) -> None:
    """Each `file` of OUT/MANIFEST.json, read relative to OUT, is the entry's own file."""
    out = tmp_path / "out"
    assert run("render", "--root", KPRO6, "--spec", KPRO6_SPEC, "--out", out)[0] == 0
    for entry in json.loads((out / "MANIFEST.json").read_text())["artifacts"]:
        if entry["action"] == "write":
            assert _sha256(out / entry["file"]) == entry["sha256"], entry


@needs_shellcheck
def test_rendered_revert_script_passes_shellcheck(run: Run, tmp_path: Path) -> None:
    """revert/revert.sh as written by render passes `shellcheck -s sh -S style`."""
    out = tmp_path / "out"
    assert run("render", "--root", KPRO6, "--spec", KPRO6_SPEC, "--out", out)[0] == 0
    result = shellcheck(out / "revert/revert.sh")
    assert result.returncode == 0, result.stdout


# --- refusals

TWO_POOLS_ONE_NODE = """\
node = "kpro6"

[[pools]]
name = "ct"
numa_node = 0
lxc = { vmid = 129 }

[[pools]]
name = "vm"
numa_node = 0
mapping = { id = "pro6000-vm" }
vfio = {}
"""


@pytest.mark.parametrize("command", ["plan", "render"])
def test_gpu_in_two_pools_is_refused(run: Run, tmp_path: Path, command: str) -> None:
    """Two pools selecting NUMA 0 exit 5, list each shared GPU, and write nothing."""
    spec = _write_spec(tmp_path, TWO_POOLS_ONE_NODE)
    out = tmp_path / "out"
    extra = ["--out", out] if command == "render" else []
    code, stdout, err = run(command, "--root", KPRO6, "--spec", spec, *extra)
    assert (code, stdout) == (5, "")
    assert err.startswith(f"pvegpu {command}: refused\n")
    shared = re.findall(r"^  (0000:\S+): is selected by pools 'ct', 'vm' \[gpu-in-two-pools\]$",
                        err, re.MULTILINE)  # fmt: skip
    assert shared == ["0000:01:00.0", "0000:11:00.0", "0000:61:00.0", "0000:71:00.0"]
    assert "  fix: a GPU can serve one pool" in err
    assert err.endswith("nothing was written.\n")
    assert not out.exists()


@pytest.mark.parametrize(
    ("host", "spec", "expected"),
    [
        pytest.param(
            "shared-group",
            'node = "pve-lab"\n[[pools]]\nname = "vm"\ngpus = ["03:00.0"]\n'
            'mapping = { id = "a5000" }\nvfio = {}\n',
            ("foreign-device-in-group", "0000:03:00.0", "0000:04:00.0"),
            id="gpu-shares-its-group-with-the-boot-nvme",
        ),
        pytest.param(
            "no-iommu",
            'node = "pve-mini"\n[[pools]]\nname = "vm"\ncount = 1\n'
            'mapping = { id = "rtx4090" }\nvfio = {}\n',
            ("no-iommu", "pools[0] (line 2)", "intel_iommu=on"),
            id="vfio-without-iommu",
        ),
        pytest.param(
            "workstation",
            'node = "pve-ws"\n[[pools]]\nname = "ml"\ngpus = ["17:00.0"]\nlxc = { vmid = 120 }\n',
            ("lxc-config-missing", "etc/pve/lxc/120.conf", "pct create 120"),
            id="container-does-not-exist",
        ),
        pytest.param(
            "kpro6",
            'node = "kpro7"\n[[pools]]\nname = "ct"\nnuma_node = 0\nlxc = { vmid = 129 }\n',
            ("node-mismatch", "node (line 1)", 'set node = "kpro6"'),
            id="spec-for-another-node",
        ),
    ],
)
def test_host_refusals(
    run: Run, tmp_path: Path, host: str, spec: str, expected: tuple[str, ...]
) -> None:
    """A plan the host cannot take exits 5 naming the code, subject (with the spec's line
    when the subject is a spec path) and fix; no output."""
    out = tmp_path / "out"
    code, stdout, err = run(
        "render", "--root", FIXTURES / host, "--spec", _write_spec(tmp_path, spec), "--out", out
    )
    assert (code, stdout) == (5, "")
    code_, subject, fix = expected
    assert re.search(rf"^  {re.escape(subject)}: .*\[{code_}\]$", err, re.MULTILINE), err
    assert fix in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('node = "kpro6"\n[[pools]\n', "[spec-syntax]", id="toml-syntax"),
        pytest.param(
            'node = "kpro6"\n[[pools]]\nname = "ct"\nnuma = 0\nlxc = { vmid = 129 }\n',
            "pools[0].numa (line 4): unknown key [spec-unknown-key]",
            id="unknown-key",
        ),
        pytest.param(
            'node = "kpro6"\n[[pools]]\nname = "ct"\nnuma_node = 0\nlxc = { vmid = "129" }\n',
            "pools[0].lxc.vmid (line 5): expected an integer",
            id="wrong-type",
        ),
        pytest.param(
            'node = "kpro6"\n[[pools]]\nname = "vm"\ngpus = ["81:00"]\n'
            'mapping = { id = "pro6000-vm" }\nvfio = {}\n',
            "pools[0].gpus[0] (line 4): '81:00' is not a PCI address [spec-invalid-address]",
            id="bad-address",
        ),
    ],
)
def test_malformed_spec_exits_4(run: Run, tmp_path: Path, text: str, expected: str) -> None:
    """A malformed spec exits 4 with the spec path of the problem and its line; nothing is
    written."""
    out = tmp_path / "out"
    code, stdout, err = run(
        "render", "--root", KPRO6, "--spec", _write_spec(tmp_path, text), "--out", out
    )
    assert (code, stdout) == (4, "")
    assert expected in err
    assert not out.exists()


def test_missing_spec_file_exits_4(run: Run, tmp_path: Path) -> None:
    """A spec path that does not exist exits 4 naming the path."""
    missing = tmp_path / "nope.toml"
    code, _, err = run("plan", "--root", KPRO6, "--spec", missing)
    assert code == 4
    assert f"{missing}: cannot read" in err and "[spec-unreadable]" in err


def test_broken_root_exits_3(run: Run, tmp_path: Path) -> None:
    """A copy of kpro6 with a garbage numa_node exits 3 naming that file; nothing written."""
    root = tmp_path / "kpro6"
    copy_tree(KPRO6, root)
    numa = "sys/bus/pci/devices/0000:91:00.0/numa_node"
    (root / numa).resolve().write_text("abc\n")
    out = tmp_path / "out"
    code, stdout, err = run("render", "--root", root, "--spec", KPRO6_SPEC, "--out", out)
    assert (code, stdout) == (3, "")
    assert re.search(rf"^  {re.escape(numa)}: .*\[bad-value\]$", err, re.MULTILINE), err
    assert not out.exists()


def test_nonexistent_root_fails_cleanly(run: Run, tmp_path: Path) -> None:
    """A --root that does not exist fails with a one-line problem, not a traceback."""
    code, stdout, err = run("plan", "--root", tmp_path / "nowhere", "--spec", KPRO6_SPEC)
    assert code == 3
    assert stdout == ""
    assert err.startswith("pvegpu plan: refused\n") and "Traceback" not in err


def test_nonexistent_root_is_named(run: Run, tmp_path: Path) -> None:
    """A --root that does not exist is named as such in the error, exit 3."""
    root = tmp_path / "nowhere"
    code, _, err = run("plan", "--root", root, "--spec", KPRO6_SPEC)
    assert code == 3
    assert f"{root}: the root directory does not exist" in err
    assert "[missing-root]" in err


def test_help_lists_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """pvegpu --help ends with the exit codes, one line each, 0 to 9."""
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out
    for code, words in [
        (0, "success"),
        (3, "--root is broken"),
        (4, "the spec, or the bundle given with --bundle, is malformed"),
        (5, "plan is refused"),
        (6, "cannot be rendered"),
        (7, "applying to the host failed"),
        (8, "pvegpu check: warnings"),
        (9, "pvegpu check: at least one error"),
    ]:
        assert re.search(rf"^  {code}  .*{re.escape(words)}", out, re.MULTILINE), code


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A command line without --spec is a usage error (exit 2), reported by argparse."""
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--root", str(KPRO6)])
    assert exited.value.code == 2
    assert "--spec" in capsys.readouterr().err


# --- the installed console script


def test_console_script_plan(tmp_path: Path) -> None:
    """The installed `pvegpu` script runs plan end to end in a fresh process."""
    script = Path(sys.executable).parent / "pvegpu"
    result = subprocess.run(
        [str(script), "plan", "--root", str(KPRO6), "--spec", str(KPRO6_SPEC)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert f"--- a/{LXC_CONF}\n+++ b/{LXC_CONF}\n" in result.stdout
    assert result.stdout.startswith("plan for node kpro6: 9 files")
    assert list(tmp_path.iterdir()) == []
