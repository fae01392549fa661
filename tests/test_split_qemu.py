"""The rendered split script on a real Linux kernel under QEMU (kernel-testbed.md).

Slow (three boots, about 10 s each under TCG) and needs apt packages plus a Debian kernel
package, downloaded once into PVEGPU_KERNEL_CACHE (default ~/.cache/pvegpu-kernel).
Opt-in: pytest -m slow tests/test_split_qemu.py (skipped without -m slow).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pvegpu.rendering.split import MODPROBE_PATH, SCRIPT_PATH, render_split
from qemu.testbed import (
    PROBE_INIT,
    SPLIT_INIT,
    between_markers,
    boot,
    initramfs,
    kernel,
    missing_tools,
    noiommu_scenario,
    parse_probe,
    split_plan,
    split_scenario,
)

pytestmark = pytest.mark.slow

CACHE = Path(os.environ.get("PVEGPU_KERNEL_CACHE", Path.home() / ".cache/pvegpu-kernel"))
APT = "apt-get install qemu-system-x86 busybox-static kmod cpio dash"


@pytest.fixture(scope="module")
def testbed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """(vmlinuz, initrd) of the scenario boot, made from a probe boot's facts."""
    # The marker is documented as opt-in, but nothing deselects it by default: a plain
    # `pytest` on a machine that has QEMU must not boot kernels.
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("QEMU boots are opt-in: pytest -m slow")
    missing = missing_tools()
    if missing:
        pytest.skip(f"QEMU testbed needs {', '.join(missing)}: {APT}")
    try:
        vmlinuz, kernel_root, version = kernel(CACHE)
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"no Debian kernel package in {CACHE} and apt-get download failed: {exc}")
    work = tmp_path_factory.mktemp("qemu")
    probe = initramfs(work / "probe", kernel_root, version, PROBE_INIT, {})
    functions = parse_probe(between_markers(boot(vmlinuz, probe, "")))
    plan = split_plan(functions)
    artifacts = {a.path: a for a in render_split(plan)}
    vm = [str(f.address) for f in plan.vfio_pools[0].functions]
    host = [str(f.address) for f in plan.lxc_pools[0].functions]
    host_drivers = [f.driver or "" for f in plan.lxc_pools[0].functions]
    # The stand-in for nvidia is e1000e: give it the softdep pvegpu renders for nvidia.
    modprobe_conf = artifacts[MODPROBE_PATH].content + "softdep e1000e pre: vfio-pci\n"
    files = {
        SCRIPT_PATH: (artifacts[SCRIPT_PATH].content, 0o755),
        MODPROBE_PATH: (modprobe_conf, 0o644),
        "scenario-split.sh": (split_scenario(vm, host, host_drivers), 0o644),
        "scenario-noiommu.sh": (noiommu_scenario(vm), 0o644),
    }
    return vmlinuz, initramfs(work / "split", kernel_root, version, SPLIT_INIT, files)


def results(log: str) -> tuple[list[str], str]:
    lines = between_markers(log)
    checks = [line for line in lines if line.startswith(("PASS ", "FAIL "))]
    return checks, "\n".join(lines)


def test_split_on_real_kernel(testbed: tuple[Path, Path]) -> None:
    """Early override + modprobe hook, status, revert, runtime bind, rerun, new_id: all pass."""
    vmlinuz, initrd = testbed
    checks, text = results(boot(vmlinuz, initrd, "pvegpu=split"))
    assert [c for c in checks if c.startswith("FAIL")] == [], text
    assert len(checks) >= 20, text
    assert "RESULT 0" in text


def test_no_iommu_is_refused_on_real_kernel(testbed: tuple[Path, Path]) -> None:
    """Without an IOMMU the script exits 4 in bind and override mode and writes nothing."""
    vmlinuz, initrd = testbed
    checks, text = results(boot(vmlinuz, initrd, "pvegpu=noiommu", iommu=False))
    assert [c for c in checks if c.startswith("FAIL")] == [], text
    assert len(checks) == 4, text
