"""What apply checks before its first change, refusing with every problem and writing nothing.

- the commands: every host command the runbook runs is installed (else this is not a
  Proxmox VE node, and nothing else is checked: it would ask `pct` about containers that
  are not there);
- the node: apply runs on the host the bundle was rendered for;
- each patched file still has the sha256 the patch was made from (or, when an earlier
  run wrote it, the bundle's new one): anything else means re-render;
- the facts the plan rests on: each planned function's ids, class, IOMMU group and
  driver as the plan saw them (a resumed apply may find the driver it moved them to);
- no process outside the containers apply stops holds a GPU that moves;
- no guest apply touches carries `lock:` (a backup, snapshot or migration runs).

Against a tree that is not the running machine (`apply --root SNAPSHOT --dry-run`) every
check reads the tree, container files included (from the root file system's directory in
it), and no command is checked or run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pvegpu.apply import container
from pvegpu.apply.bundle import Bundle
from pvegpu.apply.commands import missing_commands
from pvegpu.apply.host import Host, sha256_of
from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import ApplyError, DiscoveryError
from pvegpu.host.discover import discover
from pvegpu.model.facts import ConfigFile
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.paths import lxc_config
from pvegpu.rendering.review.actions import CheckHolders, StopContainer, WritePveFile
from pvegpu.rendering.review.apply_doc import facts_digest, function_facts
from pvegpu.rendering.review.changes import container_vmid

_GUEST_CONF = re.compile(r"etc/pve/(lxc|qemu-server)/(\d+)\.conf")
_IDS = ("vendor", "device", "subsystem_vendor", "subsystem_device", "class", "iommu_group")
_RERENDER = "discover and render again (pvegpu render), review, then apply the new bundle"


def preflight(
    host: Host, bundle: Bundle, *, resuming: bool, compared: list[str] | None = None
) -> tuple[Diagnostic, ...]:
    """Every problem found; `compared` gets a line for each file compared with its base."""
    not_node = not_this_node(host, bundle)
    if not_node:
        return not_node
    return (
        *_node(host, bundle),
        *_files(host, bundle, [] if compared is None else compared),
        *_facts(host, bundle, resuming=resuming),
        *_holders(host, bundle),
        *_locks(host, bundle),
    )


def not_this_node(host: Host, bundle: Bundle) -> tuple[Diagnostic, ...]:
    """A command of the runbook is missing: not a Proxmox VE node, and so nothing else is
    checked (it would ask `pct` about containers that are not there). Checked before the
    apply lock is taken, so that such a machine is left without a state directory."""
    missing = missing_commands(host, bundle) if host.live else ()
    return (*_node(host, bundle), *missing) if missing else ()


def _node(host: Host, bundle: Bundle) -> Iterator[Diagnostic]:
    raw = host.read("etc/hostname")
    name = raw.decode(errors="replace").strip() if raw else ""
    if name != bundle.node:
        yield Diagnostic.error(
            "wrong-node",
            "/etc/hostname",
            f"this host is {name or 'unnamed'!r}; the bundle was rendered for {bundle.node!r}",
            f"apply it on {bundle.node}, or render for this host",
        )


def _files(host: Host, bundle: Bundle, compared: list[str]) -> Iterator[Diagnostic]:
    for entry in bundle.entries:
        if entry.base_sha256 is None:
            continue
        vmid = container_vmid(entry.target)
        if vmid is None:
            now = sha256_of(host.read(entry.path))
            where = "/" + entry.path
        elif not host.live or container.running(host, vmid):
            # A tree (a snapshot) holds the container's files whether it runs or not.
            try:
                now = sha256_of(container.read(host, vmid, entry.path))
            except ApplyError as err:
                yield from err.problems
                continue
            where = f"CT {vmid}:/{entry.path}"
        else:
            # Stopped: compared when the step pushes it (pct needs it running).
            compared.append(f"CT {vmid}:/{entry.path}: compared when pushed (CT {vmid} stopped)")
            continue
        if now == entry.base_sha256:
            compared.append(f"{where}: as rendered (sha256 {now[:12]})")
        elif now == entry.sha256:
            compared.append(f"{where}: already the bundle's new copy (sha256 {now[:12]})")
        else:
            yield Diagnostic.error(
                "file-changed",
                where,
                f"changed since the bundle was rendered (sha256 {now[:12]}, the bundle's "
                f"patch was made from {entry.base_sha256[:12]})",
                _RERENDER,
            )


def _facts(host: Host, bundle: Bundle, *, resuming: bool) -> Iterator[Diagnostic]:
    try:
        facts = discover(host.root)
    except DiscoveryError as err:
        yield from err.problems
        return
    now = {str(f.address): function_facts(f) for f in facts.functions}
    planned = {str(f["address"]) for f in bundle.functions}
    if facts_digest([now[a] for a in sorted(planned) if a in now]) == bundle.digest:
        return
    for fact in bundle.functions:
        address = str(fact["address"])
        current = now.get(address)
        if current is None:
            yield Diagnostic.error("device-gone", address, "is no longer on the PCI bus", _RERENDER)
            continue
        changed = [k for k in _IDS if current[k] != fact[k]]
        if changed:
            what = ", ".join(f"{k} {fact[k]} -> {current[k]}" for k in changed)
            yield Diagnostic.error(
                "device-changed", address, f"is not the device planned: {what}", _RERENDER
            )
        allowed = {fact["driver"], fact["driver_after"]} if resuming else {fact["driver"]}
        if current["driver"] not in allowed:
            yield Diagnostic.error(
                "driver-changed",
                address,
                f"is bound to {current['driver'] or 'no driver'}; the plan saw "
                f"{fact['driver'] or 'no driver'}",
                _RERENDER,
            )


def _holders(host: Host, bundle: Bundle) -> Iterator[Diagnostic]:
    actions = [a for s in bundle.steps for a in s.actions]
    devices = [d for a in actions if isinstance(a, CheckHolders) for d in a.devices]
    stopped = [a.vmid for a in actions if isinstance(a, StopContainer)]
    for holder in host.holders(devices):
        # A process of a container apply stops lets go of the GPU before the move.
        if any(holder.in_container(vmid) for vmid in stopped):
            continue
        yield Diagnostic.error(
            "gpu-held",
            holder.device,
            f"is held by process {holder.pid} ({holder.command}); unbinding it would block",
            f"stop {holder.command} (pid {holder.pid}) first, then apply",
        )


def guests_touched(bundle: Bundle) -> list[str]:
    paths = {a.path for s in bundle.steps for a in s.actions if isinstance(a, WritePveFile)}
    vmids = {a.vmid for s in bundle.steps for a in s.actions if isinstance(a, StopContainer)}
    paths |= {lxc_config(v) for v in vmids}
    return sorted(p for p in paths if _GUEST_CONF.fullmatch(p))


def _locks(host: Host, bundle: Bundle) -> Iterator[Diagnostic]:
    for path in guests_touched(bundle):
        raw = host.read(path)
        if raw is None:
            continue
        lock = GuestConfig(ConfigFile(path, raw.decode(errors="replace"))).value("lock")
        if lock is not None:
            yield Diagnostic.error(
                "guest-locked",
                "/" + path,
                f"carries `lock: {lock.strip()}`: Proxmox is busy with this guest (backup, "
                "snapshot, migration) and refuses changes to it, and so does apply",
                "wait for the operation to finish (or `pct unlock`/`qm unlock` a stale lock)",
            )
