"""Boot a real Debian kernel under QEMU/TCG and run the rendered split script in it.

The machine is kernel-testbed.md's: q35 with an emulated Intel IOMMU, two NUMA nodes,
one pxb-pcie expander per node, and per root port an e1000e (8086:10d3, the identical
"GPU" stand-in) at .0 with an ich9-intel-hda at .1, which shares its IOMMU group like
GPU audio does. The initramfs holds busybox applets, dash as /bin/sh, real kmod and the
module closure of vfio-pci, vfio_iommu_type1, e1000e and snd-hda-intel.

Two boots: `probe` prints every PCI function (ids, class, NUMA node, group, driver) so
the host can make facts, a plan and the script; `split` runs a scenario with that
script and prints PASS/FAIL lines. Nothing nvidia-specific (a blocking unbind) is
covered here; the simulated kernel in tests/sysfs_sim.py does that.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import attrs

from pvegpu.host.facts import (
    GPU,
    HostFacts,
    IommuGroup,
    IommuState,
    NumaNode,
    PciFunction,
)
from pvegpu.pci import CpuList, PciAddress
from pvegpu.planning.plan import Plan, Pool, PoolKind
from pvegpu.spec.schema import LxcSpec, PoolSpec, Spec, VfioSpec

KERNEL_PACKAGE = "linux-image-amd64"
MODULES = ("vfio-pci", "vfio_iommu_type1", "e1000e", "snd-hda-intel")
TOOLS = ("qemu-system-x86_64", "busybox", "dash", "kmod", "depmod", "cpio", "dpkg-deb", "ldd")
BEGIN, END = "=====PVEGPU-BEGIN=====", "=====PVEGPU-END====="

QEMU_MACHINE = [
    "-machine", "q35,kernel-irqchip=split", "-accel", "tcg", "-m", "1G", "-smp", "2",
    "-object", "memory-backend-ram,id=m0,size=512M",
    "-object", "memory-backend-ram,id=m1,size=512M",
    "-numa", "node,nodeid=0,cpus=0,memdev=m0", "-numa", "node,nodeid=1,cpus=1,memdev=m1",
    "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
]  # fmt: skip


def qemu_devices(*, iommu: bool = True) -> list[str]:
    args = ["-device", "intel-iommu,intremap=on"] if iommu else []
    for node, bus_nr in ((0, 32), (1, 96)):
        args += ["-device", f"pxb-pcie,id=pxb{node},bus_nr={bus_nr},numa_node={node},bus=pcie.0"]
        for port in (0, 1):
            rp = f"rp{node}{port}"
            args += [
                "-device", f"pcie-root-port,id={rp},bus=pxb{node},chassis={node * 2 + port + 1},"
                f"addr={port}.0",
                "-device", f"e1000e,bus={rp},addr=0.0,multifunction=on",
                "-device", f"ich9-intel-hda,bus={rp},addr=0.1",
            ]  # fmt: skip
    return args


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def kernel(cache: Path) -> tuple[Path, Path, str]:
    """(vmlinuz, extracted root, version) of Debian's current kernel, downloaded once."""
    cache.mkdir(parents=True, exist_ok=True)
    debs = sorted(cache.glob("linux-image-*-amd64_*.deb"))
    if not debs:
        subprocess.run(
            ["apt-get", "download", _kernel_package()], cwd=cache, check=True, capture_output=True
        )
        debs = sorted(cache.glob("linux-image-*-amd64_*.deb"))
    deb = debs[-1]
    root = cache / deb.stem
    if not root.is_dir():
        tmp = cache / (deb.stem + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", deb, tmp], check=True)
        tmp.rename(root)
    version = next((root / "lib/modules").iterdir()).name
    if not (root / f"lib/modules/{version}/modules.dep").exists():
        # The .deb ships no modules.dep.
        subprocess.run(["depmod", "-b", root, version], check=True)
    return root / f"boot/vmlinuz-{version}", root, version


def _kernel_package() -> str:
    out = subprocess.run(
        ["apt-cache", "depends", KERNEL_PACKAGE], check=True, capture_output=True, text=True
    ).stdout
    match = re.search(r"Depends: (linux-image-\S+-amd64)", out)
    assert match, out
    return match.group(1)


def initramfs(
    dest: Path, kernel_root: Path, version: str, init: str, files: dict[str, tuple[str, int]]
) -> Path:
    """An uncompressed cpio: busybox applets, dash as /bin/sh, kmod, modules, /init."""
    tree = dest / "initramfs"
    shutil.rmtree(tree, ignore_errors=True)
    for d in ("bin", "sbin", "proc", "sys", "dev", "tmp", "etc/modprobe.d", "usr/local/sbin"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    busybox = shutil.which("busybox")
    assert busybox is not None
    shutil.copy(busybox, tree / "bin/busybox")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True)
    for applet in applets.stdout.split():
        # busybox's own name would replace the binary with a link to itself (ELOOP), its
        # sh and modprobe would replace dash and kmod (busybox modprobe ignores softdep).
        if applet in ("busybox", "sh", "modprobe", "insmod", "rmmod", "depmod", "lsmod"):
            continue
        (tree / "bin" / applet).symlink_to("busybox")
    _copy_binary(tree, "dash", "bin/sh")
    _copy_binary(tree, "kmod", "bin/kmod")
    for name in ("modprobe", "insmod", "rmmod", "lsmod", "depmod"):
        (tree / "sbin" / name).symlink_to("/bin/kmod")
    moddir = f"lib/modules/{version}"
    for module in MODULES:
        shown = subprocess.run(
            ["modprobe", "-d", kernel_root, "-S", version, "--show-depends", module],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        for path in re.findall(r"^insmod (\S+)", shown, re.M):
            rel = Path(path).relative_to(kernel_root)
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, tree / rel)
    for name in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
        shutil.copy(kernel_root / moddir / name, tree / moddir / name)
    subprocess.run(["depmod", "-b", tree, version], check=True)
    for path, (content, mode) in {"init": (init, 0o755), **files}.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(content)
        (tree / path).chmod(mode)
    cpio = dest / "initrd.cpio"
    names = subprocess.run(["find", "."], cwd=tree, capture_output=True, check=True).stdout
    with cpio.open("wb") as out:
        subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=tree, input=names,
                       stdout=out, check=True)  # fmt: skip
    return cpio


def _copy_binary(tree: Path, name: str, dest: str) -> None:
    binary = shutil.which(name)
    assert binary is not None
    real = Path(os.path.realpath(binary))
    shutil.copy(real, tree / dest)
    libs = subprocess.run(["ldd", real], capture_output=True, text=True).stdout
    for lib in re.findall(r"(/\S+\.so[\S]*)", libs):
        target = tree / lib.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copy(os.path.realpath(lib), target)


def boot(vmlinuz: Path, initrd: Path, append: str, *, iommu: bool = True,
         timeout: float = 240) -> str:  # fmt: skip
    """Boot, run /init, power off; the serial console log."""
    cmdline = f"console=ttyS0 panic=-1 loglevel=4 {append}"
    if iommu:
        cmdline += " intel_iommu=on"
    result = subprocess.run(
        ["qemu-system-x86_64", *QEMU_MACHINE, *qemu_devices(iommu=iommu),
         "-kernel", vmlinuz, "-initrd", initrd, "-append", cmdline],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return result.stdout.replace("\r", "")


def between_markers(log: str) -> list[str]:
    start, end = log.find(BEGIN), log.find(END)
    assert 0 <= start < end, f"no markers in the guest log:\n{log[-3000:]}"
    return log[start + len(BEGIN) : end].strip().splitlines()


PROBE_INIT = f"""#!/bin/sh
# Print every PCI function for the host to build facts from, then power off.
mount -t proc proc /proc
mount -t sysfs sysfs /sys
echo {BEGIN}
for d in /sys/bus/pci/devices/*; do
    g=-
    [ -e "$d/iommu_group" ] && g=$(basename "$(readlink "$d/iommu_group")")
    drv=-
    [ -e "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
    echo "DEV ${{d##*/}} $(cat "$d/vendor") $(cat "$d/device") $(cat "$d/class") \\
$(cat "$d/numa_node") $g $drv $(cat "$d/subsystem_vendor") $(cat "$d/subsystem_device") \\
$(basename "$(dirname "$(readlink -f "$d")")")"
done
echo {END}
poweroff -f
"""


@attrs.frozen
class GuestFunction:
    address: PciAddress
    vendor: int
    device: int
    pci_class: int
    numa: int | None
    group: int | None
    subsystem: tuple[int, int]


def parse_probe(lines: Iterable[str]) -> list[GuestFunction]:
    out = []
    for line in lines:
        if not line.startswith("DEV "):
            continue
        _, addr, vendor, device, cls, numa, group, _drv, sv, sd, _parent = line.split()
        out.append(
            GuestFunction(
                PciAddress.parse(addr), int(vendor, 16), int(device, 16), int(cls, 16),
                None if numa == "-1" else int(numa), None if group == "-" else int(group),
                (int(sv, 16), int(sd, 16)),
            )
        )  # fmt: skip
    return out


def split_plan(functions: list[GuestFunction]) -> Plan:
    """The kpro6 split on the guest: NUMA 0 e1000e+audio stay, NUMA 1 go to vfio-pci.

    The plan is built by hand: discovery picks GPUs by display class, and the stand-ins
    are NICs. render_split only reads the pools' functions and the facts' groups."""
    host_driver = {0x020000: "e1000e", 0x040300: "snd_hda_intel"}
    pfs = tuple(
        PciFunction(
            address=f.address, vendor=f.vendor, device=f.device,
            subsystem_vendor=f.subsystem[0], subsystem_device=f.subsystem[1],
            pci_class=f.pci_class, sysfs_path=f"sys/bus/pci/devices/{f.address}",
            numa_node=f.numa, iommu_group=f.group, driver=host_driver.get(f.pci_class),
        )
        for f in functions
    )  # fmt: skip
    by_slot: dict[str, list[PciFunction]] = {}
    for pf in pfs:
        by_slot.setdefault(pf.address.slot, []).append(pf)
    gpus = tuple(
        GPU(function=pf, companions=tuple(c for c in by_slot[pf.address.slot] if c is not pf))
        for pf in pfs
        if pf.pci_class == 0x020000
    )
    groups: dict[int, list[PciAddress]] = {}
    for pf in pfs:
        if pf.iommu_group is not None:
            groups.setdefault(pf.iommu_group, []).append(pf.address)
    facts = HostFacts(
        node="qemu", functions=pfs, gpus=gpus,
        numa_nodes=(NumaNode(0, CpuList.parse("0")), NumaNode(1, CpuList.parse("1"))),
        iommu_groups=tuple(IommuGroup(g, tuple(sorted(m))) for g, m in sorted(groups.items())),
        iommu=IommuState(enabled=True, units=("dmar0",)), sev_snp=False, nvidia=None,
        char_majors=(), cmdline="", vfio_ids=(),
    )  # fmt: skip

    def pool(name: str, kind: PoolKind, numa: int) -> Pool:
        chosen = tuple(g for g in gpus if g.numa_node == numa)
        return Pool(name, kind, chosen, tuple(f for g in chosen for f in g.functions),
                    "vfio-pci" if kind is PoolKind.VFIO else "e1000e", (numa,))  # fmt: skip

    spec = Spec("qemu", (PoolSpec("host", numa_node=0, lxc=LxcSpec(129)),
                         PoolSpec("vm", numa_node=1, vfio=VfioSpec())))  # fmt: skip
    return Plan(facts, spec, (pool("host", PoolKind.LXC, 0), pool("vm", PoolKind.VFIO, 1)))


SPLIT_INIT = f"""#!/bin/sh
# Scenario boot: the rendered script, real kmod with the rendered modprobe.d file.
export PATH=/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
scenario=$(sed -n 's/.*pvegpu=\\([a-z]*\\).*/\\1/p' /proc/cmdline)
echo {BEGIN}
. /scenario-$scenario.sh
echo "RESULT $fail"
echo {END}
poweroff -f
"""

SCENARIO_LIB = r"""
S=/usr/local/sbin/pvegpu-vfio-split
fail=0
check() {  # name expected actual
    if [ "$2" = "$3" ]; then
        echo "PASS $1"
    else
        echo "FAIL $1: expected '$2', got '$3'"
        fail=1
    fi
}
drv() {
    if [ -e "/sys/bus/pci/devices/$1/driver" ]; then
        basename "$(readlink "/sys/bus/pci/devices/$1/driver")"
    else
        echo none
    fi
}
drivers() { for a in "$@"; do printf '%s ' "$(drv "$a")"; done; }
overrides() {
    for a in "$@"; do printf '%s ' "$(cat "/sys/bus/pci/devices/$a/driver_override")"; done
}
ids() {
    d=/sys/bus/pci/devices/$1
    echo "$(sed s/0x// "$d/vendor") $(sed s/0x// "$d/device")"
}
reprobe() {
    echo "$1" > "/sys/bus/pci/devices/$1/driver/unbind"
    echo "$1" > /sys/bus/pci/drivers_probe
}
"""


def split_scenario(vm: list[str], host: list[str], host_drivers: list[str]) -> str:
    """Early boot, modprobe hook, status, revert, runtime bind, rerun, stray new_id."""
    vm_s, host_s = " ".join(vm), " ".join(host)
    vfio = "vfio-pci " * len(vm)
    hosts = "".join(f"{d} " for d in host_drivers)
    back = "".join(f"{d} " for d in host_drivers)  # the VM side has the same mix
    return (
        SCENARIO_LIB
        + f"""
VM="{vm_s}"
HOSTS="{host_s}"
# Early boot: no driver module loaded yet, as when the unit runs before modules-load.
check early-unbound "{"none " * len(vm)}" "$(drivers $VM)"
$S override; check early-override-rc 0 $?
# Loading the host drivers: softdep pulls vfio-pci in first, its install hook runs the
# script (override again: nothing to do) and then the real load (--ignore-install).
modprobe e1000e; check modprobe-e1000e-rc 0 $?
modprobe snd-hda-intel; check modprobe-snd-hda-intel-rc 0 $?
check vfio-pci-loaded yes "$([ -d /sys/bus/pci/drivers/vfio-pci ] && echo yes || echo no)"
check type1-loaded yes "$([ -d /sys/module/vfio_iommu_type1 ] && echo yes || echo no)"
check boot-vm "{vfio}" "$(drivers $VM)"
check boot-host "{hosts}" "$(drivers $HOSTS)"
$S status; check status-after-boot-rc 0 $?
$S revert; check revert-rc 0 $?
check revert-vm "{back}" "$(drivers $VM)"
check revert-overrides "{"(null) " * len(vm)}" "$(overrides $VM)"
check revert-unpinned "{"(null) " * len(host)}" "$(overrides $HOSTS)"
$S status >/dev/null; check status-after-revert-rc 1 $?
# Runtime: the host drivers own every function; bind moves the VM groups whole.
$S bind; check bind-rc 0 $?
check bind-vm "{vfio}" "$(drivers $VM)"
check bind-host "{hosts}" "$(drivers $HOSTS)"
out=$($S bind); check bind-rerun-rc 0 $?
case $out in *"nothing to do"*) noop=yes ;; *) noop="$out" ;; esac
check bind-rerun-noop yes "$noop"
for a in $VM; do
    basename "$(readlink "/sys/bus/pci/devices/$a/iommu_group")"
done | sort -u >/tmp/g
for g in $(cat /tmp/g); do
    check "vfio-group-$g" yes "$([ -e /dev/vfio/$g ] && echo yes || echo no)"
done
# A stray new_id (what Proxmox writes at VM start): a pinned host function that gets
# unbound and probed again still goes back to its host driver.
first=${{HOSTS%% *}}
ids "$first" > /sys/bus/pci/drivers/vfio-pci/new_id
reprobe "$first"
check pinned-after-new-id "{host_drivers[0]}" "$(drv "$first")"
$S status; check status-end-rc 0 $?
# Control: without its pin the same function is taken by the new_id (the seeds' bug).
echo > "/sys/bus/pci/devices/$first/driver_override"
reprobe "$first"
check unpinned-taken-by-new-id vfio-pci "$(drv "$first")"
"""
    )


def noiommu_scenario(vm: list[str]) -> str:
    return (
        SCENARIO_LIB
        + f"""
VM="{" ".join(vm)}"
$S bind; check bind-without-iommu-rc 4 $?
$S override; check override-without-iommu-rc 4 $?
check nothing-written "{"(null) " * len(vm)}" "$(overrides $VM)"
check vfio-pci-not-loaded no "$([ -d /sys/bus/pci/drivers/vfio-pci ] && echo yes || echo no)"
"""
    )
