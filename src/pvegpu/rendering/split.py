"""Render the vfio split: a POSIX sh script, the unit that runs it at boot, a modprobe
hook, and the initramfs-tools hook that puts the script where the modprobe hook runs early.

Only the script touches sysfs; the unit and the modprobe.d file decide when it runs.
What the script checks before its first write (address, vendor:device, NUMA node, IOMMU
group and its members) is baked into it as data, so it refuses a host that no longer
looks like the one it was generated for (a BIOS update or a moved card renumbers slots).
So is where `revert` takes each VM function: the driver it was on before the split.

plan() refused whatever the script could not carry (planning/split.py, and the IOMMU
group checks of planning/planner.py) and decided the groups, their members' drivers and
the PFs whose VFs are pinned late (`Plan.host_changes`): this module only formats them.

Rendering again over a host that holds these files (discovery reads them) patches them:
each artifact's `base` is the installed file, so the revert bundle restores it.
"""

from __future__ import annotations

import re

import attrs

from pvegpu.formats.templating import render_template
from pvegpu.hardware import host_driver
from pvegpu.model.artifact import HOST, Artifact
from pvegpu.model.facts import PciFunction
from pvegpu.model.host_changes import LateVfPf, MovedFunction
from pvegpu.model.own_files import own_files
from pvegpu.model.paths import (
    SPLIT_INITRAMFS_HOOK,
    SPLIT_MODPROBE,
    SPLIT_SCRIPT,
    SPLIT_UDEV_RULE,
    SPLIT_UNIT,
)
from pvegpu.model.plan import Plan, Pool
from pvegpu.pci import PciAddress
from pvegpu.values import value_class
from pvegpu.vendors import VENDORS
from pvegpu.vendors.nvswitch import is_switch
from pvegpu.wording import plural

SCRIPT_PATH = SPLIT_SCRIPT
UNIT_PATH = SPLIT_UNIT
MODPROBE_PATH = SPLIT_MODPROBE
INITRAMFS_HOOK_PATH = SPLIT_INITRAMFS_HOOK

# Driver name -> module name, for the softdep lines. Only drivers whose module is known:
# a driver's name is not always its module's (xhci_hcd lives in xhci_pci). A vendor's
# drivers are named as their modules.
_MODULES = {d: d for v in VENDORS for d in v.drivers} | {"snd_hda_intel": "snd_hda_intel"}
_COMMENT_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:,()/-]")


@value_class
@attrs.frozen(eq=False, repr=False)
class _HostPool:
    """One LXC pool's functions as the script's host-side pin data lists them."""

    pool: str
    rows: tuple[str, ...]
    notes: tuple[str, ...]


def render_split(plan: Plan) -> tuple[Artifact, ...]:
    """The split script, its boot unit, the modprobe.d hook and the initramfs hook; ()
    without a pool that moves GPUs to vfio-pci (a vGPU pool's VFs stay on their driver)."""
    if not plan.split_pools:
        return ()
    facts = plan.facts
    groups = plan.host_changes.vfio_groups
    host_pools = [_host_pool(pool) for pool in plan.lxc_pools]
    late = plan.host_changes.late_vf_pfs

    node = _comment(facts.node)
    vm_drivers = sorted(
        {m.host_driver for g in groups for m in g.members if m.host_driver is not None}
    )
    # A service that loads a vendor's driver (which binds every GPU of it it finds free)
    # is only worth naming, and ordering the unit against, where the host has its GPUs.
    vendors = [v for v in VENDORS if any(gpu.vendor is v for gpu in facts.gpus)]
    driver_loaders = [(s, v.host_driver) for v in vendors for s in v.driver_loaders]
    script = render_template(
        "split.sh.j2",
        node=node,
        vfio_groups=[
            {
                "pool": _comment(g.pool),
                "gpu": str(g.gpu) if g.gpu else _no_gpu(g.members),
                "group": g.id,
                "rows": [
                    f"{m.function.address} {m.function.vendor_device} {_numa(m.function)} "
                    f"{g.id} {m.revert_driver or '-'}"
                    for m in g.members
                ],
            }
            for g in groups
        ],
        host_pools=host_pools,
        sriov=_sriov_rows(late) if late else None,
    )
    script_abs = "/" + SCRIPT_PATH
    unit = render_template(
        "split.service.j2",
        node=node,
        script=script_abs,
        drivers=vm_drivers,
        loaders=[f"{service} ({driver})" for service, driver in driver_loaders],
        loader_units=[f"{service}.service" for service, _ in driver_loaders],
    )
    hook = render_template("split-initramfs-hook.j2", node=node, script=script_abs)
    modprobe = render_template(
        "split-modprobe.conf.j2",
        node=node,
        script=script_abs,
        hook="/" + INITRAMFS_HOOK_PATH,
        softdeps=sorted({_MODULES[d] for d in vm_drivers if d in _MODULES}),
        softdep_notes=[
            f"{d}: its module name is not known to pvegpu; the boot unit still covers it"
            for d in vm_drivers
            if d not in _MODULES
        ],
    )

    pools = ", ".join(p.name for p in plan.split_pools)
    n_gpus = sum(p.size for p in plan.split_pools)
    n_functions = sum(len(g.members) for g in groups) + sum(len(pf.vfs) for pf in late)
    n_pins = sum(len(p.rows) for p in host_pools)
    loaders = ["modules-load", "udev coldplug", *(service for service, _ in driver_loaders)]
    return (
        Artifact(
            path=SCRIPT_PATH,
            content=script,
            reason=(
                f"moves {plural(n_gpus, 'GPU')} of {pools} ({plural(n_functions, 'function')}, "
                "whole IOMMU groups) to vfio-pci by driver_override"
                + (f" and pins {plural(n_pins, 'host-side function')}" if n_pins else "")
                + "; refuses to write if a device changed"
            ),
            mode=0o755,
            target=HOST,
            base=own_files(facts).split_script,
        ),
        Artifact(
            path=UNIT_PATH,
            content=unit,
            reason=(
                f"runs pvegpu-vfio-split override at sysinit, before {_and(loaders)}, so "
                "the split survives a reboot"
            ),
            target=HOST,
            base=own_files(facts).split_unit,
        ),
        Artifact(
            path=MODPROBE_PATH,
            content=modprobe,
            reason=(
                "second line of defence: loading vfio-pci (softdep of the host drivers) "
                "writes the overrides first; never vfio-pci ids="
            ),
            target=HOST,
            base=own_files(facts).split_modprobe,
        ),
        Artifact(
            path=INITRAMFS_HOOK_PATH,
            content=hook,
            reason=(
                "initramfs-tools hook: copies the split script into the initramfs, so a "
                "vfio-pci or GPU driver loaded there pins the functions too"
            ),
            mode=0o755,
            target=HOST,
            base=own_files(facts).split_initramfs_hook,
        ),
        *_udev_rule(plan, late, script_abs),
    )


def _sriov_rows(late: tuple[LateVfPf, ...]) -> dict[str, list[str]]:
    """The script's PFS and VFS data: the PFs whose autoprobe goes off, and their VFs
    that go to vfio-pci (with the PF and the driver revert returns each to)."""
    pfs = []
    vfs = []
    for pf in late:
        f = pf.function
        pfs.append(
            f"{f.address} {f.vendor_device} {_numa(f)} {int(pf.autoprobe)} "
            f"{pf.sibling_driver or '-'}"
        )
        for moved in pf.vfs:
            vf, drv = moved.function, moved.revert_driver
            vfs.append(f"{vf.address} {vf.vendor_device} {_numa(vf)} {f.address} {drv or '-'}")
    return {"pfs": pfs, "vfs": vfs}


def _udev_rule(plan: Plan, late: tuple[LateVfPf, ...], script: str) -> tuple[Artifact, ...]:
    """The rule that pins VFs created after boot; none without VFs to pin."""
    if not late:
        return ()
    rule = render_template(
        "split-udev.rules.j2",
        node=_comment(plan.facts.node),
        script=script,
        pfs=[str(pf.function.address) for pf in late],
        vfs=[str(vf.function.address) for pf in late for vf in pf.vfs],
    )
    return (
        Artifact(
            path=SPLIT_UDEV_RULE,
            content=rule,
            reason=(
                "SR-IOV VFs appear when their PF's driver creates them, after the boot "
                "unit: udev runs the split script for each new VF, which pins it"
            ),
            target=HOST,
            base=own_files(plan.facts).split_udev_rule,
        ),
    )


def _and(words: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join(filter(None, (", ".join(words[:-1]), words[-1])))


def _numa(function: PciFunction) -> str:
    # sysfs says -1 where firmware gave no node; the script compares against that text.
    return "-1" if function.numa_node is None else str(function.numa_node)


def _comment(text: str) -> str:
    """Text safe inside a shell comment within single quotes and a systemd comment."""
    return _COMMENT_UNSAFE.sub("_", text)


def _no_gpu(members: tuple[MovedFunction, ...]) -> str:
    """The comment of a group without a GPU: a whole board's NVSwitch says what it is."""
    switch = any(is_switch(m.function) for m in members)
    return "none (an NVSwitch of the board)" if switch else "none"


def _address(function: PciFunction) -> PciAddress:
    return function.address


def _host_pool(pool: Pool) -> _HostPool:
    rows: list[str] = []
    notes: list[str] = []
    for function in _pool_functions(pool):
        if function.is_bridge:
            continue
        driver = host_driver(function)
        if driver is None:
            notes.append(f"{function.address} {function.vendor_device}: no host driver known")
            continue
        rows.append(f"{function.address} {function.vendor_device} {_numa(function)} {driver}")
    return _HostPool(_comment(pool.name), tuple(rows), tuple(notes))


def _pool_functions(pool: Pool) -> list[PciFunction]:
    """The functions the plan moves (vfio pools) or keeps (LXC pools), in PCI order.

    Only the plan's own list: SUMMARY.md, the runbook and `check` show exactly this set,
    so the script may not add to it (it once added every function of a GPU's slot, which
    on an APU is the host's USB controllers and security processor)."""
    return sorted(pool.functions, key=_address)
