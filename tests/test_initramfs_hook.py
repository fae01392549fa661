"""The initramfs-tools hook that puts the split script where modprobe.d's hook runs early.

initramfs-tools copies /etc/modprobe.d into the initramfs but not the script its
`install vfio-pci` line runs; the hook copies the script and the one tool beyond the
shell that its override mode uses (tr). Both claims are checked: the hook puts exactly
those files where the install line and the script look for them, and override mode runs
on the simulated kernel with nothing but tr on PATH, writing what it writes with every
tool at hand. The kernel test (tests/test_split_qemu.py, `make test-kernel`) runs the
hook through Debian's own mkinitramfs and boots the result.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bundled import example_plan
from pvegpu.model.paths import SPLIT_INITRAMFS_HOOK, SPLIT_MODPROBE, SPLIT_SCRIPT
from pvegpu.rendering.split import render_split
from sysfs_sim import KernelSim, copy_host, natural_drivers, unload_driver

DASH = shutil.which("dash")
HOOK_FUNCTIONS = "/usr/share/initramfs-tools/hook-functions"


def _files() -> dict[str, str]:
    return {a.path: a.content for a in render_split(example_plan("kpro6"))}


# copy_exec places a file as initramfs-tools' copy_file does: a second argument that is a
# directory of the initramfs tree built so far (or, in newer initramfs-tools, ends in /)
# gets the file's name appended; any other is the file's own path, and no argument means
# the source path. When the hooks run, the tree has /usr/bin (kmod's hook put kmod there)
# but no /usr/local/sbin.
COPY_EXEC = r"""
copy_exec() {
    copy_target=${2:-$1}
    if [ -d "$DESTDIR/$copy_target" ] || [ "${copy_target%/}" != "$copy_target" ]; then
        copy_target="${copy_target%/}/${1##*/}"
    fi
    printf '%s %s\n' "$1" "$copy_target" >>"$LOG"
}
"""


def _run_hook(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The hook under dash, its hook-functions a stand-in whose copy_exec logs the source
    and where it lands in the initramfs."""
    log = tmp_path / "copied"
    log.write_text("")
    destdir = tmp_path / "initramfs"
    (destdir / "usr/bin").mkdir(parents=True)
    functions = tmp_path / "hook-functions"
    functions.write_text(f"DESTDIR='{destdir}'\nLOG='{log}'\n{COPY_EXEC}")
    hook = _files()[SPLIT_INITRAMFS_HOOK]
    assert hook.count(HOOK_FUNCTIONS) == 1
    script = tmp_path / "hook"
    script.write_text(hook.replace(HOOK_FUNCTIONS, str(functions)))
    result = subprocess.run(
        [DASH or "sh", str(script), *args], capture_output=True, text=True, check=False
    )
    return result, log.read_text().splitlines()


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
def test_hook_copies_the_script_and_tr(tmp_path: Path) -> None:
    """Each to its own path: the script where modprobe.d's install line runs it."""
    result, copied = _run_hook(tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    assert copied == [f"/{SPLIT_SCRIPT} /{SPLIT_SCRIPT}", "/usr/bin/tr /usr/bin/tr"]
    install = re.search(r"^install vfio-pci (\S+) ", _files()[SPLIT_MODPROBE], re.M)
    assert install is not None and install.group(1) == f"/{SPLIT_SCRIPT}"
    assert Path("/usr/bin/tr").exists(), "Debian's tr is /usr/bin/tr"


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
def test_hook_answers_prereqs_without_copying(tmp_path: Path) -> None:
    """mkinitramfs first asks each hook for its prerequisites: none, and nothing copied."""
    result, copied = _run_hook(tmp_path, "prereqs")
    assert (result.returncode, result.stdout, copied) == (0, "\n", [])


@pytest.mark.skipif(DASH is None, reason="dash is not installed")
def test_override_mode_needs_only_the_shell_and_tr(tmp_path: Path) -> None:
    """What the initramfs has, at the point where drivers load: the shell's builtins and
    the tools the hook copies."""
    plan = example_plan("kpro6")
    script = tmp_path / "pvegpu-vfio-split"
    script.write_text(_files()[SPLIT_SCRIPT])
    tools = tmp_path / "initramfs-bin"
    tools.mkdir()
    (tools / "tr").symlink_to("/usr/bin/tr")
    writes = []
    for name, path in (("full", None), ("initramfs", str(tools))):
        root = copy_host("kpro6", tmp_path / name)
        for driver in ("nvidia", "snd_hda_intel"):  # early boot: nothing bound yet
            unload_driver(root, driver)
        with KernelSim(root, natural_drivers(plan)) as sim:
            result = sim.run(script, "override", path=path)
            assert result.rc == 0, result.stderr
            writes.append(result.writes)
    assert writes[0] and writes[1] == writes[0]
