"""The runbook undone by hand, for when `revert/revert.sh` stops part-way."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from pvegpu.engines import health_url
from pvegpu.formats.shell import word as sh
from pvegpu.model.artifact import HOST, Artifact
from pvegpu.model.facts import PciFunction
from pvegpu.model.plan import Plan
from pvegpu.rendering.revert import ABSENT_SUFFIX, KEPT_SUFFIX, kept_in_container, pulled_copy
from pvegpu.rendering.review.actions import lines_of
from pvegpu.rendering.review.apply_steps import Step, container_pools, vfio_functions
from pvegpu.rendering.review.boot_steps import boot_units_revert
from pvegpu.rendering.review.changes import (
    BACKUP_DIR,
    ChangedFile,
    ChangeKind,
    changed_files,
    container_vmid,
    in_bundle,
    in_initramfs,
    is_revert,
    is_unit,
)
from pvegpu.rendering.review.commands import SPLIT_SCRIPT, SPLIT_UNIT, driver_check
from pvegpu.rendering.review.emptied_steps import revert_start_steps
from pvegpu.rendering.review.gpu_layout import driver_now
from pvegpu.vendors import VENDORS
from pvegpu.wording import plural


def revert_steps(plan: Plan, artifacts: Sequence[Artifact]) -> tuple[Step, ...]:
    """The runbook undone by hand, in reverse, from the files saved in revert/.

    The same as `revert/revert.sh`, plus the checks, for when the script stops part-way.
    """
    return tuple(_revert(plan, artifacts, changed_files(plan, artifacts)))


RevertEntries = dict[tuple[str, str], Artifact]
"""The revert bundle's entry of each installed file, by (target, path)."""


def _revert_entries(artifacts: Iterable[Artifact]) -> RevertEntries:
    entries: RevertEntries = {}
    for a in artifacts:
        if is_revert(a):
            entries.setdefault((a.target, a.path), a)
    return entries


def _restore(entries: RevertEntries, changed: ChangedFile) -> str | None:
    """The command that puts one file back, or None when nothing can (no revert entry)."""
    artifact = changed.artifact
    vmid = container_vmid(artifact.target)
    if changed.kind is ChangeKind.REPLACED:
        return f"cp {sh(f'{BACKUP_DIR}/{artifact.path}')} {sh('/' + artifact.path)}"
    if changed.kind is ChangeKind.UNREAD and vmid is not None:
        # The runbook pulled the old copy (or marked it absent); nothing else knows it.
        copy, target = pulled_copy(artifact), sh("/" + artifact.path)
        return (
            f"if [ -f {sh(copy)} ]; then pct push {vmid} {sh(copy)} {target}; "
            f"elif [ -f {sh(copy + ABSENT_SUFFIX)} ]; then pct exec {vmid} -- rm {target}; "
            f"else echo 'no copy was pulled: restore {target} by hand' >&2; fi"
        )
    entry = entries.get((artifact.target, artifact.path))
    if entry is None:
        return None
    if entry.delete:
        where = "" if vmid is None else f"pct exec {vmid} -- "
        return f"{where}rm {sh('/' + artifact.path)}"
    if vmid is None:
        return f"cp {sh(in_bundle(entry))} {sh('/' + artifact.path)}"
    if kept_in_container(artifact):
        kept, target = sh(f"/{artifact.path}{KEPT_SUFFIX}"), sh("/" + artifact.path)
        return f"pct exec {vmid} -- mv {kept} {target}"
    source, target = sh(in_bundle(entry)), sh("/" + artifact.path)
    return f"pct push {vmid} {source} {target} --perms {artifact.mode:04o}"


def _at_boot(plan: Plan, functions: Sequence[PciFunction]) -> str:
    """What driverctl does to the reverted functions at the next boot (its overrides)."""
    boot = {o.address: o.driver for o in plan.host_changes.boot_overrides}
    said = []
    for function in functions:
        driver = boot.get(function.address)
        if driver is not None:
            said.append(
                f" At every boot driverctl binds {function.address} to {driver} again: run "
                f"`driverctl unset-override {function.address}` to keep it on "
                f"{driver_now(function)}."
            )
    return "".join(said)


def _revert(
    plan: Plan, artifacts: Sequence[Artifact], files: tuple[ChangedFile, ...]
) -> Iterator[Step]:
    written = [f for f in files if f.kind is not ChangeKind.UNCHANGED]
    host = [f for f in written if f.artifact.target == HOST]
    by_container: dict[int, list[ChangedFile]] = {}
    for f in written:
        vmid = container_vmid(f.artifact.target)
        if vmid is not None:
            by_container.setdefault(vmid, []).append(f)
    entries = _revert_entries(artifacts)
    containers = container_pools(plan)

    # A container's own files go back first, while it still runs (`pct push` needs it
    # running) and before it starts again (an enabled unit starts with its container).
    for pool in containers:
        assert pool.lxc is not None
        vmid = pool.lxc.vmid
        mine = by_container.get(vmid, [])
        commands = (
            [f"pct exec {vmid} -- systemctl stop {sh(pool.serving.unit)}"] if pool.serving else []
        )
        commands += [c for f in mine if (c := _restore(entries, f)) is not None]
        if any(is_unit(f.artifact.path) for f in mine):
            commands.append(f"pct exec {vmid} -- systemctl daemon-reload")
        yield Step(
            f"Put CT {vmid}'s previous files back and stop it" if mine else f"Stop CT {vmid}",
            (*commands, f"pct stop {vmid}"),
            "The container must be running for `pct push`: if it is stopped, start it, stop "
            "its server, and go on from there."
            if mine
            else "",
        )

    functions = vfio_functions(plan)
    if plan.split_pools:
        vms = [p.vm.vmid for p in plan.split_pools if p.vm is not None and p.vm.config is not None]
        yield Step(
            "Return the VM GPUs to their host drivers",
            (
                *(f"qm stop {vmid}" for vmid in vms),
                # Disable first, so that a reboot half-way cannot apply the split again.
                f"systemctl disable {SPLIT_UNIT}",
                f"{SPLIT_SCRIPT} revert",
                driver_check([f.address for f in functions]),
            ),
            "Any VM using these GPUs must be stopped first."
            + _at_boot(plan, functions)
            + " The last command prints exactly what discovery saw before the change:",
            tuple(f"{f.address} {driver_now(f)}" for f in functions),
        )

    boot = boot_units_revert([f.artifact for f in files])
    if boot is not None:
        yield Step(boot.title, lines_of(boot.actions), boot.expect)

    restores = [(f, _restore(entries, f)) for f in host]
    commands = [c for _, c in restores if c is not None]
    if commands:
        if any(is_unit(f.artifact.path) for f in host):
            commands.append("systemctl daemon-reload")
        if any(in_initramfs(f.artifact.path) for f in host):
            commands.extend(plan.facts.boot.initramfs_apply)
        if any(f.artifact.path in plan.host_changes.udev_rules for f in host):
            commands.append("udevadm control --reload")  # udevd forgets the removed rule
    missing = [f.where for f, c in restores if c is None]
    if commands or missing:
        yield Step(
            "Put the host files back",
            tuple(commands),
            "Patched files come back as discovery read them; files pvegpu created go."
            + (
                f" No copy was rendered for {', '.join(missing)}: restore it by hand."
                if missing
                else ""
            ),
        )

    for pool in containers:
        assert pool.lxc is not None
        vmid = pool.lxc.vmid
        commands = [f"pct start {vmid}"]
        if pool.serving is not None:
            commands.append(f"pct exec {vmid} -- systemctl start {sh(pool.serving.unit)}")
        yield Step(
            f"Start CT {vmid} with its previous " + ("GPUs and server" if pool.serving else "GPUs"),
            tuple(commands),
            f"It gets its previous GPUs back with the restored /etc/pve/lxc/{vmid}.conf"
            + (
                f"; wait for {health_url(pool.serving)} as in the runbook." if pool.serving else "."
            ),
        )

    for parts in revert_start_steps(plan):
        yield Step(*parts)

    # A vendor's tool sees only GPUs on its driver, so it checks the revert only when a VM
    # GPU goes back to that driver; one going back to a driver without a tool (or staying
    # on vfio-pci, as discovery saw it) is checked by the sysfs readout of the step above.
    for vendor in VENDORS:
        driver = vendor.host_driver
        returning = [g for p in plan.split_pools for g in p.gpus if g.driver == driver]
        on_driver = [g for g in plan.facts.gpus if g.driver == driver]
        if returning and vendor.tool is not None:
            yield Step(
                f"Check the host sees its {vendor.name} GPUs again",
                (" ".join(vendor.tool.list_gpus),),
                f"Lists {plural(len(on_driver), 'GPU')}, as before the change.",
            )
