"""The guest side of each scenario: shell steps that act and print what they found.

They decide nothing: every check is made on the host from the STATE tables and RC/OUT
lines (guest.read_run), so a failure shows the whole picture.
"""

from __future__ import annotations

from pvegpu.rendering.split import UNIT_PATH
from qemu.guest import HOSTNAME, INIT, exec_start, lib
from qemu.upgrade import ROOT_INIT, ROOT_INIT_PATH

ALL_SLOTS = ("0000:21:00.", "0000:22:00.", "0000:63:00.", "0000:65:01.")
"""The GPU slots: NUMA 0 below the first expander, NUMA 1 below the second."""

PROBE = """
# A running host: its drivers loaded as at every boot, then read as discovery reads it.
coldplug
state probe
capture
"""

# At boot, PID 1 runs the unit before udev's coldplug and systemd-modules-load: no GPU
# driver is loaded yet. Then coldplug loads the drivers, the hook's softdep among them.
UNIT = """
state boot
run_unit; rc unit $?
state unit
coldplug
state coldplug
$SPLIT status; rc status $?
say vfio-nodes ls /dev/vfio
say bind-again $SPLIT bind; rc bind-again $?
$SPLIT revert; rc revert $?
state revert
$SPLIT status >/dev/null; rc status-reverted $?
# The runtime move: host drivers own every function, bind moves whole groups.
$SPLIT bind; rc bind $?
state bind
say bind-rerun $SPLIT bind; rc bind-rerun $?
state bind-rerun
"""

# The modprobe.d file on its own: the unit never runs. Coldplug meets the board's audio
# (00:1b.0) first: snd_hda_intel's softdep loads vfio-pci first, whose install line runs
# the script, and only then does any GPU driver load.
HOOK = """
state boot
coldplug
state coldplug
$SPLIT status; rc status $?
"""

# A host that is not the one the plan was made on: the unit, the hook and bind refuse
# and write nothing; the hook's `;` still loads vfio-pci, which then takes nothing.
REFUSED = """
state boot
run_unit; rc unit $?
state unit
coldplug
state coldplug
rc vfio-pci-loaded "$([ -d /sys/bus/pci/drivers/vfio-pci ] && echo 0 || echo 1)"
$SPLIT bind; rc bind $?
state bind
capture
"""

# A boot of the upgraded Debian system (kernel A or B, tests/qemu/upgrade.py). Its
# initramfs ran udev, which loaded snd_hda_intel there (the stand-in package hook put it
# in): its softdep loaded vfio-pci, whose install line ran the script pvegpu's hook
# copied in. PID 1 on the root looks first, then runs the unit as at sysinit, then
# coldplug loads what the initramfs did not have (bochs), as udev does on the root.
UPGRADE = """
say kernel uname -r
state initramfs
say unit run_unit; rc unit $?
state unit
coldplug
state coldplug
$SPLIT status; rc status $?
say vfio-nodes ls /dev/vfio
"""

SAY = r"""
# say NAME COMMAND...: its output on one line (OUT NAME text | text), status kept.
say() {
    say_name=$1
    shift
    say_out=$("$@" 2>&1)
    say_rc=$?
    echo "OUT $say_name $(printf '%s' "$say_out" | tr '\n' '|')"
    return $say_rc
}
"""


def _base(argv: list[str]) -> dict[str, tuple[str, int]]:
    return {
        "init": (INIT, 0o755),
        "lib/pvegpu-testbed.sh": (lib(argv) + SAY, 0o644),
        "etc/hostname": (HOSTNAME + "\n", 0o644),
    }


def probe_files() -> dict[str, tuple[str, int]]:
    return {**_base(["/bin/false"]), "lib/pvegpu-scenario-probe.sh": (PROBE, 0o644)}


def split_files(rendered: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """The rendered files (path -> (content, mode)) at their host paths, every scenario."""
    files = {**_base(exec_start(rendered[UNIT_PATH][0])), **rendered}
    for name, steps in (("unit", UNIT), ("hook", HOOK), ("refused", REFUSED)):
        files[f"lib/pvegpu-scenario-{name}.sh"] = (steps, 0o644)
    return files


def system_files(rendered: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """The testbed's PID 1 and the upgrade scenario, added to the Debian system's root
    after its initramfs images are built (so no hook sees them)."""
    return {
        ROOT_INIT_PATH: (ROOT_INIT, 0o755),
        "usr/lib/pvegpu-testbed.sh": (lib(exec_start(rendered[UNIT_PATH][0])) + SAY, 0o644),
        "usr/lib/pvegpu-scenario-upgrade.sh": (UPGRADE, 0o644),
    }
