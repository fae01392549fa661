"""What the reviewer reads, as data: the layout table, the changed files, the runbook.

Pure functions of a Plan and its rendered artifacts. The markdown (render_review) and
the terminal table (topology) only format what is computed here, so every command in
the runbook can be tested without parsing prose.

The runbook is written for the reference situation: the host is live, the container
is running its server on GPUs that are about to move, and nothing may be lost if a
step fails. Every step says what success looks like, so an admin can stop at the
first surprise and use the revert steps instead of improvising.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Iterator, Sequence
from enum import StrEnum

import attrs

from pvegpu.artifact import HOST, REVERT_BUNDLE, REVIEW, Artifact
from pvegpu.bundle import MANIFEST, bundle_path
from pvegpu.facts import GPU, HostFacts, PciFunction
from pvegpu.model import VFIO_DRIVER, Plan, Pool, PoolKind, Severity
from pvegpu.pci import PciAddress
from pvegpu.plan import host_driver
from pvegpu.pvefiles.qemuconf import hostpci_value
from pvegpu.spec import ServingSpec
from pvegpu.wording import plural

SPLIT_SCRIPT = "/usr/local/sbin/pvegpu-vfio-split"
SPLIT_UNIT = "pvegpu-vfio-split.service"
BACKUP_DIR = "/root/pvegpu-backup"
"""Where the runbook saves files that exist but have no copy in revert/ (see REPLACED)."""
HEALTH_TIMEOUT_S = 600
"""Bound on waiting for the server: the seed deployment (234 GB of BF16 weights, TP=4)
was healthy after ~80 s, so ten minutes without health means something is wrong."""
UNBOUND = "unbound"
PVE_DIR = "etc/pve/"


class ChangeKind(StrEnum):
    NEW = "new"
    """The file does not exist yet (as far as discovery saw)."""
    PATCHED = "patched"
    """Edited from the copy discovery read; the rest of the file is kept byte for byte."""
    REPLACED = "replaced"
    """Exists on the host but is written whole, with no base: revert/ cannot restore it,
    so the runbook saves it to BACKUP_DIR first."""
    UNCHANGED = "unchanged"
    """Already as planned; listed so that a no-op is never silent."""


@attrs.frozen
class LayoutRow:
    """One GPU of the host and where this plan leaves it."""

    index: int
    """Position in PCI address order over every GPU of the host (0-based)."""
    gpu: GPU
    pool: Pool | None
    driver_before: str
    driver_after: str
    purpose: str

    @property
    def address(self) -> PciAddress:
        return self.gpu.address

    @property
    def numa(self) -> str:
        return "-" if self.gpu.numa_node is None else str(self.gpu.numa_node)

    @property
    def driver_changes(self) -> bool:
        return self.driver_before != self.driver_after

    @property
    def driver(self) -> str:
        """`nvidia -> vfio-pci` when the plan moves it, else the one driver."""
        if self.driver_changes:
            return f"{self.driver_before} -> {self.driver_after}"
        return self.driver_after


@attrs.frozen
class MovingFunction:
    """A non-GPU function (the GPU's HD audio, a group mate) that moves to vfio-pci too."""

    pool: Pool
    function: PciFunction
    driver_before: str


@attrs.frozen
class ChangedFile:
    artifact: Artifact
    kind: ChangeKind

    @property
    def where(self) -> str:
        """The file as the admin names it: `/etc/pve/lxc/129.conf`, `CT 129:/etc/...`."""
        vmid = container_vmid(self.artifact.target)
        path = "/" + self.artifact.path
        return path if vmid is None else f"CT {vmid}:{path}"


@attrs.frozen
class Step:
    """One runbook step: run `commands` in order, then compare with `expect`/`output`."""

    title: str
    commands: tuple[str, ...]
    expect: str = ""
    """What success looks like, in one or two sentences; empty when exit status 0 says it."""
    output: tuple[str, ...] = ()
    """The exact output to expect, line by line, where pvegpu can know it."""


# ---------------------------------------------------------------------------- layout


def gpus_in_pci_order(facts: HostFacts) -> tuple[GPU, ...]:
    return tuple(sorted(facts.gpus, key=lambda g: g.address))


def pool_of(plan: Plan, gpu: GPU) -> Pool | None:
    return next((p for p in plan.pools if gpu.address in {g.address for g in p.gpus}), None)


def driver_now(function: PciFunction) -> str:
    return function.driver or UNBOUND


def driver_after(pool: Pool | None, function: PciFunction) -> str:
    """The driver a function ends on: vfio-pci for VM pools, its host driver otherwise."""
    if pool is None:
        return driver_now(function)
    if pool.kind is PoolKind.VFIO:
        return VFIO_DRIVER
    return host_driver(function) or UNBOUND


def purpose(pool: Pool | None) -> str:
    """What a pool's GPUs are for, as one table cell."""
    if pool is None:
        return "unchanged (in no pool)"
    if pool.kind is PoolKind.LXC and pool.lxc is not None:
        inner = [pool.serving.engine, f"TP={pool.size}"] if pool.serving else [pool.name]
        text = f"LXC {pool.lxc.vmid} ({', '.join(inner)})"
        return f"{text}; mapping {pool.mapping.id}" if pool.mapping else text
    if pool.mapping is not None:
        if pool.vm is not None:
            return f"VM {pool.vm.vmid} via mapping {pool.mapping.id}"
        return f"mapping {pool.mapping.id}, no VM yet"
    if pool.vm is not None:
        return f"VM {pool.vm.vmid}"
    return "vfio-pci, no VM yet"


def layout(plan: Plan) -> tuple[LayoutRow, ...]:
    """Every GPU of the host in PCI order, including those no pool touches."""
    rows = []
    for index, gpu in enumerate(gpus_in_pci_order(plan.facts)):
        pool = pool_of(plan, gpu)
        rows.append(
            LayoutRow(
                index=index,
                gpu=gpu,
                pool=pool,
                driver_before=driver_now(gpu.function),
                driver_after=driver_after(pool, gpu.function),
                purpose=purpose(pool),
            )
        )
    return tuple(rows)


def moving_functions(plan: Plan) -> tuple[MovingFunction, ...]:
    """Functions that are not GPUs but leave the host with them (VFIO takes whole groups)."""
    moving = []
    for pool in plan.vfio_pools:
        gpu_addresses = {g.address for g in pool.gpus}
        for function in pool.functions:
            if function.address not in gpu_addresses:
                moving.append(MovingFunction(pool, function, driver_now(function)))
    return tuple(moving)


def host_facts_line(facts: HostFacts) -> str:
    """IOMMU mode, SEV-SNP and driver version: the three facts the split depends on."""
    unit = {"amd": "AMD-Vi", "intel": "VT-d"}.get(facts.iommu.vendor or "", "")
    types = sorted({str(g.type) for g in facts.iommu_groups if g.type is not None})
    detail = ", ".join(x for x in (unit, f"groups {'/'.join(types)}" if types else "") if x)
    iommu = f"{facts.iommu_mode}" + (f" ({detail})" if detail else "")
    nvidia = (
        f"{facts.nvidia.version} ({facts.nvidia.flavor} kernel module)"
        if facts.nvidia
        else "not loaded"
    )
    nodes = sorted({g.numa_node for g in facts.gpus if g.numa_node is not None})
    return (
        f"IOMMU: {iommu} · SEV-SNP: {'on' if facts.sev_snp else 'off'} · "
        f"NVIDIA driver: {nvidia} · {plural(len(facts.gpus), 'GPU')} on "
        f"{plural(len(nodes), 'NUMA node')}"
    )


# ---------------------------------------------------------------------------- files


def container_vmid(target: str) -> int | None:
    """The vmid of a `ct:<vmid>` target, None for any other target."""
    prefix, sep, vmid = target.partition(":")
    return int(vmid) if prefix == "ct" and sep and vmid.isdigit() else None


def is_revert(artifact: Artifact) -> bool:
    return artifact.bundle == REVERT_BUNDLE


def in_bundle(artifact: Artifact) -> str:
    """Where the file lies in the rendered directory, which the runbook runs from."""
    path = str(bundle_path(artifact))
    return f"{REVERT_BUNDLE}/{path}" if is_revert(artifact) else path


def installed(artifacts: Iterable[Artifact]) -> list[Artifact]:
    """Artifacts that end up on the host or in a container (not review, not revert)."""
    return [a for a in artifacts if a.target != REVIEW and not is_revert(a)]


def review_only(artifacts: Iterable[Artifact]) -> tuple[Artifact, ...]:
    """Files rendered for the reviewer and installed nowhere (e.g. lines for a future VM)."""
    return tuple(
        sorted((a for a in artifacts if a.target == REVIEW and not is_revert(a)), key=_order)
    )


def _order(artifact: Artifact) -> tuple[int, int, str]:
    """Host files first, Proxmox's own before system files; then containers by vmid."""
    vmid = container_vmid(artifact.target)
    if artifact.target == HOST:
        return (0, 0 if artifact.path.startswith(PVE_DIR) else 1, artifact.path)
    if vmid is not None:
        return (1, vmid, artifact.path)
    return (2, 0, f"{artifact.target}/{artifact.path}")


def change_kind(facts: HostFacts, artifact: Artifact) -> ChangeKind:
    if artifact.base is not None:
        if artifact.base.content == artifact.content:
            return ChangeKind.UNCHANGED
        return ChangeKind.PATCHED
    existing = facts.file(artifact.path) if artifact.target == HOST else None
    if existing is None:
        return ChangeKind.NEW
    return ChangeKind.UNCHANGED if existing.content == artifact.content else ChangeKind.REPLACED


def changed_files(plan: Plan, artifacts: Iterable[Artifact]) -> tuple[ChangedFile, ...]:
    """Installed files in a stable order: host first, then containers by vmid, by path."""
    return tuple(
        ChangedFile(a, change_kind(plan.facts, a)) for a in sorted(installed(artifacts), key=_order)
    )


def revert_script(artifacts: Iterable[Artifact]) -> Artifact | None:
    """The revert bundle's runner (`revert/revert.sh`), if one was rendered."""
    return next(
        (a for a in artifacts if is_revert(a) and a.target == REVIEW and a.path.endswith(".sh")),
        None,
    )


def _revert_entry(artifacts: Iterable[Artifact], artifact: Artifact) -> Artifact | None:
    return next(
        (
            a
            for a in artifacts
            if is_revert(a) and a.target == artifact.target and a.path == artifact.path
        ),
        None,
    )


# ---------------------------------------------------------------------------- commands


def nvidia_smi_bus_id(address: PciAddress) -> str:
    """The form `nvidia-smi --query-gpu=pci.bus_id` prints: 8-digit domain, uppercase hex."""
    return f"{address.domain:08X}:{address.bus:02X}:{address.device:02X}.{address.function:X}"


def health_url(serving: ServingSpec) -> str:
    """The health endpoint as seen from inside the container."""
    # A wildcard listen address is reachable on loopback; a specific one only on itself.
    host = serving.host
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{serving.port}/health"


def driver_check(addresses: Sequence[PciAddress]) -> str:
    """A one-liner printing `<address> <driver>` per function (`unbound` for none), from sysfs.

    It reads the kernel, not the split script's own report, so it checks the script.
    """
    joined = " ".join(str(a) for a in addresses)
    return (
        f"for d in {joined}; do "
        'drv=$(readlink "/sys/bus/pci/devices/$d/driver") || drv=unbound; '
        'printf \'%s %s\\n\' "$d" "${drv##*/}"; done'
    )


def _sha_check(artifact: Artifact) -> str:
    assert artifact.base is not None
    line = f"{artifact.base.sha256}  /{artifact.path}"
    vmid = container_vmid(artifact.target)
    # pct exec passes stdin through, so the same check runs inside the container.
    where = "" if vmid is None else f"pct exec {vmid} -- "
    return f"echo {shlex.quote(line)} | {where}sha256sum -c -"


def _containers(plan: Plan) -> list[Pool]:
    """LXC pools with a container, one per vmid (the spec refuses two pools per guest)."""
    return [p for p in plan.lxc_pools if p.lxc is not None]


def _vfio_functions(plan: Plan) -> list[PciFunction]:
    return sorted(f for p in plan.vfio_pools for f in p.functions)


def _is_unit(path: str) -> bool:
    return path.startswith(("etc/systemd/", "usr/lib/systemd/", "lib/systemd/"))


def _in_initramfs(path: str) -> bool:
    # Debian copies modprobe.d into the initramfs: a driver loaded from there never sees
    # new options (or a removed hook) until the initramfs is rebuilt.
    return path.startswith(("etc/modprobe.d/", "etc/initramfs-tools/"))


# ---------------------------------------------------------------------------- runbook


def runbook(plan: Plan, artifacts: Sequence[Artifact]) -> tuple[Step, ...]:
    """The apply steps in order, only those this plan needs.

    The order is forced by the host, not by taste:
    - the server stops before its container, and the container before its GPUs move,
      because unbinding from nvidia blocks while anything holds /dev/nvidiaN;
    - the container's new files go in while it still runs (`pct push` refuses a stopped
      container) and before it restarts (an enabled unit starts with the container);
    - the Proxmox configs are written after the bind, so a failed bind leaves the old,
      working configuration in place.
    """
    return tuple(_runbook(plan, changed_files(plan, artifacts)))


def _runbook(plan: Plan, files: tuple[ChangedFile, ...]) -> Iterator[Step]:
    node = plan.facts.node
    to_write = [f.artifact for f in files if f.kind is not ChangeKind.UNCHANGED]
    host_files = [a for a in to_write if a.target == HOST]
    pve_files = [a for a in host_files if a.path.startswith(PVE_DIR)]
    system_files = [a for a in host_files if not a.path.startswith(PVE_DIR)]
    ct_files = [a for a in to_write if container_vmid(a.target) is not None]
    containers = _containers(plan)

    yield Step(
        f"Work on {node}, as root, in this rendered directory",
        (f'test "$(hostname)" = {node} && test -f {MANIFEST} && echo ready',),
        f"Prints `ready`. Every path below is relative to this directory "
        f"(copy it over with `scp -r <out> root@{node}:`).",
    )

    checks = [_sha_check(a) for a in to_write if a.base is not None]
    if checks:
        yield Step(
            "Check that the files are still as discovered",
            tuple(checks),
            "Every line ends in `OK`. `FAILED` means the file changed since discovery: "
            "stop, discover again and re-render (the patches and revert/ were made from "
            "the old copy).",
        )

    replaced = [
        a
        for a in to_write
        if a.target == HOST and a.base is None and change_kind(plan.facts, a) is ChangeKind.REPLACED
    ]
    if replaced:
        yield Step(
            f"Save the files that revert/ cannot restore to {BACKUP_DIR}",
            (
                f"mkdir -p {BACKUP_DIR}",
                f"cp --parents {' '.join('/' + a.path for a in replaced)} {BACKUP_DIR}/",
            ),
            "These exist on the host but are written whole; the revert restores them from here.",
        )

    for pool in containers:
        if pool.lxc is not None and pool.serving is not None:
            yield Step(
                f"Stop the server in CT {pool.lxc.vmid}",
                (f"pct exec {pool.lxc.vmid} -- systemctl stop {pool.serving.unit}",),
                "Frees the GPUs; the container keeps running for the next step.",
            )

    for vmid in sorted({v for a in ct_files if (v := container_vmid(a.target)) is not None}):
        mine = [a for a in ct_files if container_vmid(a.target) == vmid]
        commands = [f"pct push {vmid} {in_bundle(a)} /{a.path} --perms {a.mode:04o}" for a in mine]
        if any(_is_unit(a.path) for a in mine):
            commands.append(f"pct exec {vmid} -- systemctl daemon-reload")
        yield Step(
            f"Install the new files in CT {vmid} while it still runs",
            tuple(commands),
            "`pct push` needs a running container, and the new unit must be in place before "
            "the container restarts: an enabled unit starts with it.",
        )

    for pool in containers:
        assert pool.lxc is not None
        vmid = pool.lxc.vmid
        yield Step(f"Stop CT {vmid}", (f"pct stop {vmid}",), f"`pct status {vmid}` says stopped.")

    holders = [
        f"/dev/nvidia{g.nvidia_minor}"
        for p in plan.vfio_pools
        for g in p.gpus
        if g.driver == "nvidia" and g.nvidia_minor is not None
    ]
    if holders:
        yield Step(
            "Check that nothing holds the GPUs that move",
            (f"fuser -v {' '.join(holders)}",),
            "Prints nothing. Unbinding from nvidia blocks while a process holds the device: "
            "stop whatever is listed first (another container, dcgm-exporter; for "
            "nvidia-persistenced `systemctl stop nvidia-persistenced`, and start it again "
            "after the bind).",
        )

    if system_files:
        commands = [f"install -D -m {a.mode:04o} {in_bundle(a)} /{a.path}" for a in system_files]
        if any(_in_initramfs(a.path) for a in system_files):
            commands.append("update-initramfs -u -k all")
        yield Step(
            "Install the host files",
            tuple(commands),
            "Nothing changes on the running system yet"
            + (
                "; rebuilding the initramfs takes a minute."
                if any(_in_initramfs(a.path) for a in system_files)
                else "."
            ),
        )

    functions = _vfio_functions(plan)
    if plan.vfio_pools:
        yield Step(
            "Move the VM GPUs to vfio-pci, now and at every boot",
            (
                "systemctl daemon-reload",
                f"systemctl enable {SPLIT_UNIT}",
                f"{SPLIT_SCRIPT} bind",
                f"{SPLIT_SCRIPT} status",
                driver_check([f.address for f in functions]),
            ),
            "`status` shows every VM GPU and its companion functions on vfio-pci; the last "
            "command, which reads sysfs directly, prints exactly:",
            tuple(f"{f.address} {VFIO_DRIVER}" for f in functions),
        )

    if pve_files:
        yield Step(
            "Write the Proxmox configuration",
            # cp, not install: /etc/pve is pmxcfs, which sets modes and owners itself.
            tuple(f"cp {in_bundle(a)} /{a.path}" for a in pve_files),
            "pmxcfs shares /etc/pve with the whole cluster at once.",
        )

    for pool in containers:
        assert pool.lxc is not None
        vmid = pool.lxc.vmid
        yield Step(f"Start CT {vmid}", (f"pct start {vmid}",), f"`pct status {vmid}` says running.")
        yield Step(
            f"Check the GPUs CT {vmid} sees",
            (
                f"pct exec {vmid} -- nvidia-smi -L",
                f"pct exec {vmid} -- nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader",
            ),
            f"`nvidia-smi -L` lists exactly {plural(pool.size, 'GPU')} (GPU 0 .. GPU "
            f"{pool.size - 1}); the query prints exactly:",
            tuple(f"{i}, {nvidia_smi_bus_id(g.address)}" for i, g in enumerate(pool.gpus)),
        )
        if pool.serving is None:
            continue
        unit = pool.serving.unit
        yield Step(
            f"Start the server in CT {vmid}",
            (f"pct exec {vmid} -- systemctl start {unit}",),
            f"Returns at once; loading the model over TP={pool.size} takes minutes.",
        )
        yield Step(
            f"Wait until the server in CT {vmid} is healthy",
            (
                f"timeout {HEALTH_TIMEOUT_S} sh -c 'until pct exec {vmid} -- curl -fsS "
                f"{health_url(pool.serving)}; do sleep 10; done' && echo healthy",
            ),
            f"Prints `healthy` within {HEALTH_TIMEOUT_S // 60} minutes. Exit status 124 means "
            f"it never answered: read `pct exec {vmid} -- journalctl -u {unit} -n 200 "
            "--no-pager`, and revert if it cannot be fixed.",
        )

    for pool in plan.vfio_pools:
        if pool.vm is not None and pool.vm.config is not None:
            vmid = pool.vm.vmid
            yield Step(
                f"Start VM {vmid} when you are ready",
                (f"qm start {vmid}",),
                f"`qm status {vmid}` says running. Proxmox checks every map line of the "
                "mapping against sysfs at start and refuses the start on a stale one.",
            )


# ---------------------------------------------------------------------------- revert


def revert_steps(plan: Plan, artifacts: Sequence[Artifact]) -> tuple[Step, ...]:
    """The runbook undone by hand, in reverse, from the files saved in revert/.

    The same as `revert/revert.sh`, plus the checks, for when the script stops part-way.
    """
    return tuple(_revert(plan, artifacts, changed_files(plan, artifacts)))


def _restore(artifacts: Sequence[Artifact], changed: ChangedFile) -> str | None:
    """The command that puts one file back, or None when nothing can (no revert entry)."""
    artifact = changed.artifact
    vmid = container_vmid(artifact.target)
    if changed.kind is ChangeKind.REPLACED:
        return f"cp {BACKUP_DIR}/{artifact.path} /{artifact.path}"
    entry = _revert_entry(artifacts, artifact)
    if entry is None:
        return None
    if entry.delete:
        return f"rm /{artifact.path}" if vmid is None else f"pct exec {vmid} -- rm /{artifact.path}"
    if vmid is None:
        return f"cp {in_bundle(entry)} /{artifact.path}"
    return f"pct push {vmid} {in_bundle(entry)} /{artifact.path} --perms {artifact.mode:04o}"


def _revert(
    plan: Plan, artifacts: Sequence[Artifact], files: tuple[ChangedFile, ...]
) -> Iterator[Step]:
    written = [f for f in files if f.kind is not ChangeKind.UNCHANGED]
    host = [f for f in written if f.artifact.target == HOST]
    containers = _containers(plan)

    for pool in containers:
        assert pool.lxc is not None
        vmid = pool.lxc.vmid
        commands = (
            [f"pct exec {vmid} -- systemctl stop {pool.serving.unit}"] if pool.serving else []
        )
        yield Step(f"Stop CT {vmid}", (*commands, f"pct stop {vmid}"))

    functions = _vfio_functions(plan)
    if plan.vfio_pools:
        vms = [p.vm.vmid for p in plan.vfio_pools if p.vm is not None and p.vm.config is not None]
        yield Step(
            "Return the VM GPUs to their host drivers",
            (
                *(f"qm stop {vmid}" for vmid in vms),
                # Disable first, so that a reboot half-way cannot apply the split again.
                f"systemctl disable {SPLIT_UNIT}",
                f"{SPLIT_SCRIPT} revert",
                driver_check([f.address for f in functions]),
            ),
            "Any VM using these GPUs must be stopped first. The last command prints exactly "
            "what discovery saw before the change:",
            tuple(f"{f.address} {driver_now(f)}" for f in functions),
        )

    restores = [(f, _restore(artifacts, f)) for f in host]
    commands = [c for _, c in restores if c is not None]
    if commands:
        if any(_is_unit(f.artifact.path) for f in host):
            commands.append("systemctl daemon-reload")
        if any(_in_initramfs(f.artifact.path) for f in host):
            commands.append("update-initramfs -u -k all")
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
        mine = [f for f in written if container_vmid(f.artifact.target) == vmid]
        commands = [f"pct start {vmid}"]
        commands += [c for f in mine if (c := _restore(artifacts, f)) is not None]
        if any(_is_unit(f.artifact.path) for f in mine):
            commands.append(f"pct exec {vmid} -- systemctl daemon-reload")
        if pool.serving is not None:
            commands.append(f"pct exec {vmid} -- systemctl restart {pool.serving.unit}")
        yield Step(
            f"Start CT {vmid} with its previous "
            + ("files and server" if pool.serving else "GPUs"),
            tuple(commands),
            f"It gets its previous GPUs back with the restored /etc/pve/lxc/{vmid}.conf"
            + (
                f"; wait for {health_url(pool.serving)} as in the runbook." if pool.serving else "."
            ),
        )

    # nvidia-smi sees only GPUs on nvidia, so it checks the revert only when a VM GPU goes
    # back to nvidia; one going back to amdgpu (or staying on vfio-pci, as discovery saw
    # it) is checked by the sysfs readout of the step above.
    returning = [g for p in plan.vfio_pools for g in p.gpus if g.driver == "nvidia"]
    on_nvidia = [g for g in plan.facts.gpus if g.driver == "nvidia"]
    if returning:
        yield Step(
            "Check the host sees its NVIDIA GPUs again",
            ("nvidia-smi -L",),
            f"Lists {plural(len(on_nvidia), 'GPU')}, as before the change.",
        )


# ---------------------------------------------------------------------------- VM attach


def hostpci_lines(pool: Pool) -> tuple[str, ...]:
    """The VM config lines that give a VM every GPU of the pool through its mapping."""
    if pool.mapping is None:
        return ()
    # pcie=1 needs machine q35, which passthrough of modern GPUs wants anyway; several
    # hostpciN naming one mapping each take the next free device of it.
    return tuple(f"hostpci{i}: {hostpci_value(pool.mapping.id, True)}" for i in range(pool.size))


def qm_set_command(pool: Pool, vmid: str = "<vmid>") -> str:
    """`qm set` adding those lines to an existing VM; empty for a pool without mapping."""
    if pool.mapping is None:
        return ""
    value = hostpci_value(pool.mapping.id, True)
    return f"qm set {vmid} " + " ".join(f"--hostpci{i} {value}" for i in range(pool.size))


SEVERITY_ORDER = (Severity.WARNING, Severity.INFO)
"""Display order of findings: what needs attention first."""
