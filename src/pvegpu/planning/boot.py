"""The next boot judged against a plan: what the boot configuration would undo or break.

The running system is only half of it: a kernel command line or a module list for the
next boot can take the host-side GPUs from nvidia, load a GPU driver before the split
unit pins the VM functions, or turn off the IOMMU the VM pools need. Each case is a
refusal with the fix, or a finding; docs/split.md ("The next boot") says which and why.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.hardware import binding_modules
from pvegpu.model.bootconfig import BootConfig, KernelCmdline, ModuleStage
from pvegpu.model.facts import HostFacts, VfioIdsSetting
from pvegpu.model.paths import SPLIT_UNIT_NAME
from pvegpu.model.plan import Pool, PoolKind

BY_ADDRESS = "pvegpu binds vfio GPUs by address (driver_override) instead"


def vfio_ids_settings(facts: HostFacts) -> Iterator[tuple[VfioIdsSetting, str, str]]:
    """Every vfio-pci ids setting, now and for the next boot: (setting, what, fix)."""
    for setting in facts.vfio_ids:
        fix = f"remove that ids= setting; {BY_ADDRESS}"
        gone = facts.boot.cmdlines and not _next_boot_ids(facts.boot)
        if setting.source == "proc/cmdline" and gone:
            fix = (
                "this boot's command line has it, the next boot's does not: reboot, then plan again"
            )
        yield setting, f"sets vfio-pci ids={','.join(setting.ids)}", fix
    for cmdline, setting in _next_boot_ids(facts.boot):
        variable = f" in {cmdline.variable}" if cmdline.variable else ""
        yield (
            setting,
            f"sets vfio-pci.ids={','.join(setting.ids)}{variable} for the next boot",
            f"remove vfio-pci.ids= from {cmdline.where}, run `{facts.boot.cmdline_apply}`, "
            f"and plan again; {BY_ADDRESS}",
        )


def _next_boot_ids(boot: BootConfig) -> list[tuple[KernelCmdline, VfioIdsSetting]]:
    return [
        (cmdline, VfioIdsSetting(cmdline.source, ids))
        for cmdline in boot.cmdlines
        for ids in cmdline.vfio_ids
    ]


def boot_problems(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """Refusals: what would undo the split, or make passthrough impossible, at the next boot."""
    functions = [f for p in pools if p.kind is PoolKind.VFIO for f in p.functions]
    if not functions:
        return
    boot = facts.boot
    for module in boot.modules:
        taken = [f for f in functions if module.module in binding_modules(f)]
        if module.stage is ModuleStage.INITRAMFS and taken:
            yield Diagnostic.error(
                "boot-driver-in-initramfs",
                module.source,
                f"loads {module.name} from the initramfs, before {SPLIT_UNIT_NAME} can pin "
                f"the VM functions: at every boot it binds "
                f"{', '.join(str(f.address) for f in taken)} first, and they stay off vfio-pci",
                f"remove the `{module.name}` line, run `{' && '.join(boot.initramfs_apply)}`, "
                "and plan again; the host-side GPUs get their driver later in the boot",
            )
    for cmdline in boot.cmdlines:
        params = cmdline.params
        off = _iommu_off(params, facts.iommu.vendor)
        if off is not None:
            yield Diagnostic.error(
                "boot-iommu-off",
                cmdline.source,
                f"{cmdline.where} has {off}: after the next boot the IOMMU is off, the VM "
                "GPUs cannot be passed through and the split script refuses (exit 4)",
                f"remove {off}, run `{boot.cmdline_apply}`, and plan again",
            )
        passthrough = _passthrough(params)
        if facts.sev_snp and passthrough is not None:
            yield Diagnostic.error(
                "boot-iommu-passthrough", cmdline.source, *_snp_text(cmdline, boot)
            )


def boot_findings(facts: HostFacts, pools: Sequence[Pool]) -> Iterator[Diagnostic]:
    """What the reviewer should know about the next boot that does not stop the plan."""
    functions = [f for p in pools if p.kind is PoolKind.VFIO for f in p.functions]
    for module in facts.boot.modules:
        if module.stage is ModuleStage.MODULES_LOAD and any(
            module.module in binding_modules(f) for f in functions
        ):
            yield Diagnostic(
                Severity.INFO,
                "boot-driver-after-split",
                module.source,
                f"loads {module.name} at boot through systemd-modules-load, which "
                f"{SPLIT_UNIT_NAME} is ordered before: the VM functions are pinned to "
                f"vfio-pci by then and {module.name} leaves them alone; nothing to change",
            )
    if functions or not facts.sev_snp:
        return  # with a VM pool, boot_problems refuses it
    for cmdline in facts.boot.cmdlines:
        if _passthrough(cmdline.params) is not None:
            message, fix = _snp_text(cmdline, facts.boot)
            yield Diagnostic(
                Severity.WARNING, "boot-iommu-passthrough", cmdline.source, f"{message}: {fix}"
            )


def _snp_text(cmdline: KernelCmdline, boot: BootConfig) -> tuple[str, str]:
    passthrough = _passthrough(cmdline.params)
    return (
        f"{cmdline.where} has {passthrough} and SEV-SNP is on: SNP refuses to run with the "
        "IOMMU in passthrough mode, so after the next boot no VM gets SEV-SNP",
        f"remove {passthrough} (SNP needs translated DMA), run `{boot.cmdline_apply}`, "
        "and plan again",
    )


def _iommu_off(params: Sequence[tuple[str, str]], vendor: str | None) -> str | None:
    """The parameter that leaves the IOMMU off at boot, or None.

    `iommu=off` always does; `intel_iommu=` and `amd_iommu=` only on their own vendor's
    IOMMU (either when discovery saw none), where for intel_iommu the last value wins.
    """
    intel: str | None = None
    for key, value in params:
        options = value.split(",")
        if key == "iommu" and "off" in options:
            return "iommu=off"
        if key == "amd_iommu" and "off" in options and vendor in ("amd", None):
            return "amd_iommu=off"
        if key == "intel_iommu" and vendor in ("intel", None):
            if "off" in options:
                intel = f"intel_iommu={value}"
            elif "on" in options:
                intel = None
    return intel


def _passthrough(params: Sequence[tuple[str, str]]) -> str | None:
    """The parameter that makes DMA bypass the IOMMU by default, or None; the last wins."""
    found: str | None = None
    for key, value in params:
        if key == "iommu":
            for option in value.split(","):
                if option == "pt":
                    found = f"{key}={value}"
                elif option == "nopt":
                    found = None
        elif key == "iommu.passthrough":
            found = f"{key}={value}" if value in ("1", "y", "Y", "on") else None
    return found
