"""`pvegpu check`: the host as it is, against the plan, read only.

Made to run from a timer after upgrades: the reference deployment broke when the host
driver went to 590.48.01 while the container kept 565.57.01, and nothing noticed.

Always, for the host as it is (`pipeline.check_host`, the planner's judgement): each
container with GPU device nodes against the host's NVIDIA module (or, with the host's
userspace bind-mounted, the staged version against it), every node a container is given
present, P2P left on for a multi-GPU server where the plan would turn it off, mappings
whose ids, groups or subsystem ids no longer match sysfs, and the planner's host findings
(`vfio-pci.ids` catching identical GPUs). With a bundle (or a spec, rendered in memory),
also: every planned function on its planned driver (and override), the split unit and
the boot units (device nodes, staged userspace) installed and enabled, installed files
equal to the bundle's, the server's unit (with its drop-ins) running the planned TP, GPUs
and P2P setting, and the plan's own findings.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.host.reader import RootReader
from pvegpu.model.facts import HostFacts
from pvegpu.model.observed import ObservedHost
from pvegpu.values import value_class

if TYPE_CHECKING:
    # Only a check against a bundle needs the bundle and the review code (jinja2 with
    # it); `pvegpu check --root` alone compares the host with itself.
    from pvegpu.apply.bundle import Bundle

EXIT_WARNINGS = 8
EXIT_ERRORS = 9
"""`pvegpu check` exit codes: 0 clean (info findings only), 8 warnings, 9 any error."""


@value_class
@attrs.frozen(eq=False, repr=False)
class CheckReport:
    node: str
    findings: tuple[Diagnostic, ...]

    @property
    def exit_code(self) -> int:
        severities = {f.severity for f in self.findings}
        if Severity.ERROR in severities:
            return EXIT_ERRORS
        return EXIT_WARNINGS if Severity.WARNING in severities else 0


def check(
    root: Path, bundle: Bundle | None, plan_findings: tuple[Diagnostic, ...] = ()
) -> CheckReport:
    servers: dict[int, list[str]] = {}
    for planned in bundle.serving if bundle is not None else ():
        servers.setdefault(int(planned["vmid"]), []).append(str(planned["unit"]))
    # The pipeline: discovery, and the planner's judgement of what it found.
    from pvegpu.pipeline import check_host

    facts, observed, host = check_host(root, servers, bundle.node if bundle else None)
    found = list(host)
    if bundle is not None:
        found += _against_bundle(RootReader(root), facts, observed, bundle)
        found += bundle_findings(bundle)
    found += plan_findings
    unique = tuple(dict.fromkeys(found))
    return CheckReport(facts.node, unique)


def bundle_findings(bundle: Bundle) -> list[Diagnostic]:
    """The plan's own findings, as `info`: the reviewer saw them when approving, so they
    are repeated for the record but do not turn a timer's check red forever."""
    return [
        Diagnostic(Severity.INFO, f"plan:{f['code']}", str(f["subject"]), str(f["message"]))
        for f in bundle.findings
    ]


def _against_bundle(
    reader: RootReader, facts: HostFacts, observed: ObservedHost, bundle: Bundle
) -> Iterator[Diagnostic]:
    if facts.node != bundle.node:
        yield Diagnostic(
            Severity.ERROR,
            "wrong-node",
            "/etc/hostname",
            f"this is {facts.node}, the bundle is for {bundle.node}",
        )
        return
    functions = {str(f.address): f for f in facts.functions}
    for planned in bundle.functions:
        address, want = str(planned["address"]), planned["driver_after"]
        now = functions.get(address)
        if now is None:
            yield Diagnostic(Severity.ERROR, "device-gone", address, "is no longer on the PCI bus")
            continue
        if now.driver != want:
            yield Diagnostic(
                Severity.ERROR, "driver-not-planned", address,
                f"is on {now.driver or 'no driver'}, the plan puts it on {want}",
            )  # fmt: skip
        if want == "vfio-pci" and now.driver_override != "vfio-pci":
            yield Diagnostic(
                Severity.ERROR, "override-missing", address,
                "has no driver_override vfio-pci: the next probe or boot can take it back",
            )  # fmt: skip
    if bundle.split_unit is not None:
        unit = f"etc/systemd/system/{bundle.split_unit}"
        wants = f"etc/systemd/system/sysinit.target.wants/{bundle.split_unit}"
        if not reader.exists(unit):
            yield Diagnostic(Severity.ERROR, "split-unit-missing", "/" + unit, "is not installed")
        elif reader.readlink(wants) is None:
            yield Diagnostic(
                Severity.ERROR, "split-unit-disabled", "/" + unit,
                "is not enabled: the split is lost at the next reboot",
            )  # fmt: skip
    for name in bundle.boot_units:
        unit = f"etc/systemd/system/{name}"
        if not reader.exists(unit):
            yield Diagnostic(Severity.ERROR, "boot-unit-missing", "/" + unit, "is not installed")
        elif reader.readlink(f"etc/systemd/system/multi-user.target.wants/{name}") is None:
            yield Diagnostic(
                Severity.ERROR, "boot-unit-disabled", "/" + unit,
                "is not enabled: after the next reboot the containers' GPU nodes or their "
                f"staged driver userspace are not readied before guests start (systemctl "
                f"enable {name})",
            )  # fmt: skip
    from pvegpu.rendering.review.changes import container_vmid

    for entry in bundle.entries:
        vmid = container_vmid(entry.target)
        if vmid is None:
            path, where = entry.path, "/" + entry.path
        else:
            container = observed.container(vmid)
            rootfs = container.rootfs if container is not None else None
            if rootfs is None:
                continue  # not readable from the host (block storage): nothing to compare
            path, where = f"{rootfs}/{entry.path}", f"CT {vmid}:/{entry.path}"
        content = reader.read_bytes(path)
        if content != entry.content:
            yield Diagnostic(
                Severity.ERROR, "file-differs", where,
                "is not the bundle's copy" if content is not None else "is missing",
            )  # fmt: skip
    yield from _serving(observed, bundle)


def _serving(observed: ObservedHost, bundle: Bundle) -> Iterator[Diagnostic]:
    from pvegpu.pipeline import running_unit

    for planned in bundle.serving:
        vmid, unit = int(planned["vmid"]), str(planned["unit"])
        running = running_unit(observed, vmid, unit)
        if running is None:
            continue
        subject = f"CT {vmid}:{posixpath.join('/etc/systemd/system', unit)}.service"
        if running.tp != int(planned["tp_size"]):
            yield Diagnostic(
                Severity.ERROR, "serving-tp", subject,
                f"runs with TP {running.tp}, the plan says {planned['tp_size']}",
            )  # fmt: skip
        # The contract names the runtime's variable: cuda_visible_devices, hip_visible_devices.
        for key in (k for k in planned if k.endswith("_visible_devices")):
            variable, want = key.upper(), str(planned[key])
            now = running.variable(variable)
            if now not in (None, want):
                yield Diagnostic(
                    Severity.ERROR, "serving-visible-devices", subject,
                    f"{variable}={now}, the plan says {want}",
                )  # fmt: skip
        if bool(planned["p2p_disabled"]) and not running.p2p_disabled:
            yield Diagnostic(
                Severity.ERROR, "serving-p2p-on", subject,
                "P2P is on (no NCCL_P2P_DISABLE=1); the plan turns it off",
            )  # fmt: skip
