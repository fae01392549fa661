"""Servers a container keeps running when the plan changes its GPUs and pvegpu renders
no unit for it: each enabled unit's parallel size against the GPUs the container has
after the plan. Pure: the units are in the facts (`host.container_units`).

The containers judged: each container pool's without `[pools.lxc.serving]` (after the
plan it has the pool's GPUs) and every other container that loses GPUs to a pool
(`host_guests`: it keeps the rest). A serving pool's unit is rendered for its GPUs, and
replaces its namesake only: any other server enabled in that container (another engine,
an older unit name) would start next to it on the same GPUs, and is refused
(`container-unit-second-server`, fix: `systemctl disable --now` it).

**Decision: an enabled unit that no longer fits is refused** (`container-unit-needs-gpus`,
PlanError), not warned about. It starts with the container (and Proxmox starts the pool's
container again after the split), so SGLang with `--tp 8` on 4 GPUs fails at every start,
under Restart= again and again: exactly how the reference deployment broke, with nothing
in the plan pointing at it. A warning in a long review is what got missed; each way out
(let pvegpu render the unit, edit one option, disable the unit) is one short step before
planning again. Warnings instead, where the plan breaks nothing or cannot tell:

- the unit needs more GPUs than the container has now too (`container-unit-short`): it
  fails today already;
- CUDA_VISIBLE_DEVICES names more devices than the container keeps while the server
  still fits (`container-unit-visible-devices`): CUDA shows those before the first one
  that is gone;
- the size is not a number pvegpu can read (`container-unit-gpus-unknown`);
- the root file system is block storage or otherwise not a host directory, and nothing
  was read where `pct mount` puts it, so nothing could be checked
  (`container-units-unchecked`), for a container that loses GPUs.

A unit installed in the container's /etc/systemd/system but not enabled does not start
by itself, so it is not refused; one whose server needs more GPUs than the container has
after the plan is mentioned (`container-unit-disabled-needs-gpus`, a warning naming the
unit file, what it asks for, what the container keeps and the fix): the day someone
starts it, it fails.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic, Severity
from pvegpu.engines.common.deprecations import CODE as DEPRECATED_CODE
from pvegpu.model.container_files import container_files
from pvegpu.model.facts import GPU, ConfigFile, HostFacts
from pvegpu.model.guests import LXC, guests
from pvegpu.model.paths import (
    ENABLING_DIRS,
    UNIT_DIR,
    template_of,
    unit_dropin_dirs,
)
from pvegpu.model.plan import Pool, PoolKind
from pvegpu.model.released import ContainerGpusRemoved
from pvegpu.model.rootfs import pct_mount_path, rootfs_dirs
from pvegpu.model.schema import DEFAULT_ENGINE, Spec
from pvegpu.planning.unit_gpus import (
    ServerDemand,
    UnitDemand,
    unit_demand,
    visible_count,
)
from pvegpu.serving.container_units import container_units
from pvegpu.serving.unitfile import (
    ENVIRONMENT,
    EXEC_START,
    SERVICE,
    UnitFile,
    environment_pairs,
    merge_units,
)
from pvegpu.values import value_class
from pvegpu.vendors import CONTAINER_NODES, CONTAINER_RUNTIME, ComputeRuntime, DeviceNodes
from pvegpu.vendors.drm import RENDER_BASE
from pvegpu.wording import plural


@value_class
@attrs.frozen(eq=False, repr=False)
class LeftoverVerdict:
    problems: tuple[Diagnostic, ...] = ()
    findings: tuple[Diagnostic, ...] = ()


@value_class
@attrs.frozen(eq=False, repr=False)
class _Container:
    vmid: int
    config: ConfigFile
    before: int
    """GPUs its config names now."""
    after: int
    """GPUs it has after the plan."""
    pools: tuple[Pool, ...]
    """The pools whose container it is (none: another container losing GPUs)."""
    runtime: ComputeRuntime = CONTAINER_RUNTIME
    """The compute runtime of its GPUs: which variable narrows them, and how messages
    name it."""
    rendered: str | None = None
    """The unit pvegpu renders for its pool's server (`sglang.service`); None: none."""

    @property
    def visible(self) -> str:
        return self.runtime.visible_devices

    @property
    def gets(self) -> str:
        if self.pools:
            names = ", ".join(p.name for p in self.pools)
            pool = "pools" if len(self.pools) > 1 else "pool"
            return f"after the plan CT {self.vmid} has {plural(self.after, 'GPU')} ({pool} {names})"
        return f"after the plan CT {self.vmid} keeps {self.after} of its {self.before} GPUs"


@value_class
@attrs.frozen(eq=False, repr=False)
class _Unit:
    name: str
    source: str
    """Root-relative path of the file whose ExecStart= is judged (the unit or a drop-in)."""
    inside: str
    """The same path inside the container, for the fix (`/etc/systemd/system/x.service`)."""
    demand: UnitDemand
    visible_source: str
    """The file whose Environment= sets CUDA_VISIBLE_DEVICES (else `source`)."""
    linked: bool = False
    """`source` is the enabling link: the unit lives outside /etc (a vendor directory)."""

    def edit(self, vmid: int) -> str:
        """Where the admin edits it: /etc's file, or an /etc copy of a linked one."""
        if self.linked:
            return (
                f"{self.name} in CT {vmid} (pct exec {vmid} -- systemctl edit --full {self.name})"
            )
        return f"{self.inside} in CT {vmid}"


def leftover_servers(
    facts: HostFacts, spec: Spec, pools: Sequence[Pool], removed: Sequence[ContainerGpusRemoved]
) -> LeftoverVerdict:
    problems: list[Diagnostic] = []
    findings: list[Diagnostic] = []
    for container in _containers(facts, spec, pools, removed):
        location = guests(facts).rootfs(container.vmid)
        # Where discovery read the units: the storage's directory, else a `pct mount`.
        read = (
            d for d in rootfs_dirs(container.vmid, location) if container_units(facts, d).entries
        )
        rootfs = next(read, location.path)
        if rootfs is None:
            # No `rootfs:` line is not a container Proxmox can start: nothing to say.
            # (A serving pool's container has after == before: nothing said for it.)
            if location.volume is not None and container.after < container.before:
                findings.append(_unchecked(container, location.volume, location.why))
            continue
        enabled, idle = _units(facts, rootfs, container.visible)
        if container.rendered is not None:
            # A serving pool's container: the rendered unit replaces its namesake only.
            problems.extend(_second_servers(container, container.rendered, enabled))
            continue
        for unit in enabled:
            _judge(container, unit, problems, findings)
        for unit in idle:
            findings.extend(_judge_idle(container, unit))
    return LeftoverVerdict(tuple(problems), tuple(findings))


def _now(
    facts: HostFacts, vmid: int, nodes: DeviceNodes = CONTAINER_NODES
) -> tuple[frozenset[int], int]:
    minors, every = guests(facts).granted_gpus(vmid, nodes)
    if nodes.drm:
        # A GPU's card node (display) comes with its render node: count the render nodes.
        minors = frozenset(m for m in minors if m >= RENDER_BASE)
    if every:
        # `c 195:* rwm` reaches every GPU nvidia holds.
        return minors, max(len(minors), sum(1 for g in facts.gpus if g.node_minor is not None))
    return minors, len(minors)


def _runtime(gpus: Iterable[GPU]) -> ComputeRuntime:
    """The runtime of the GPUs' vendor; CONTAINER_VENDOR's when they have none (a vendor
    without one runs no server pvegpu knows the variable of)."""
    found = {c for g in gpus if g.vendor is not None and (c := g.vendor.compute) is not None}
    return found.pop() if len(found) == 1 else CONTAINER_RUNTIME


def _containers(
    facts: HostFacts, spec: Spec, pools: Sequence[Pool], removed: Sequence[ContainerGpusRemoved]
) -> Iterator[_Container]:
    rendered = {p.lxc.vmid for p in spec.pools if p.lxc is not None and p.lxc.serving is not None}
    own: dict[int, list[Pool]] = {}
    for pool in pools:
        if pool.kind is PoolKind.LXC and pool.lxc is not None and pool.lxc.vmid not in rendered:
            own.setdefault(pool.lxc.vmid, []).append(pool)
    for vmid, its in own.items():
        config = guests(facts).file(LXC, vmid)
        if config is not None:  # else plan() refuses it already (lxc-config-missing)
            nodes = its[0].lxc.nodes if its[0].lxc is not None else CONTAINER_NODES
            _, before = _now(facts, vmid, nodes)
            after = sum(p.size for p in its)
            runtime = _runtime(g for p in its for g in p.gpus)
            yield _Container(vmid, config, before, after, tuple(its), runtime)
    # A serving pool's container: only its other servers are judged (_second_servers).
    units = {
        p.lxc.vmid: f"{p.lxc.serving.unit}.service"
        for p in spec.pools
        if p.lxc is not None and p.lxc.serving is not None
    }
    for pool in pools:
        if pool.lxc is not None and pool.lxc.vmid in units:
            config = guests(facts).file(LXC, pool.lxc.vmid)
            if config is not None:
                unit, size = units[pool.lxc.vmid], pool.size
                yield _Container(pool.lxc.vmid, config, size, size, (pool,), rendered=unit)
    for gone in removed:
        if gone.vmid in own or gone.vmid in rendered:
            continue
        minors, before = _now(facts, gone.vmid, gone.nodes)
        after = max(before - len(minors & set(gone.minors)), 0)
        # The GPUs whose lines go: their runtime is the one a server there runs on.
        taken = set(gone.minors)
        held = [
            g for g in facts.gpus if (g.drm_render if gone.nodes.drm else g.node_minor) in taken
        ]
        yield _Container(gone.vmid, gone.config, before, after, (), _runtime(held))


def _units(facts: HostFacts, rootfs: str, variable: str) -> tuple[list[_Unit], list[_Unit]]:
    """The container's units as systemd loads them, merged with their drop-ins in /etc:
    the enabled ones (/etc's file or its template, else what the enabling link names),
    then those installed in /etc that no link names (nor an instance of them)."""
    units = container_units(facts, rootfs)
    # A server's --config file, as discovery read it (host.container_units).
    config_text = container_files(facts).at(rootfs).text

    links: dict[str, ConfigFile] = {}
    installed: dict[str, ConfigFile] = {}
    dropins: dict[str, list[ConfigFile]] = {}
    for entry in units.entries:
        directory, name, file = entry.directory, entry.name, entry.file
        if directory.endswith(ENABLING_DIRS) and "/" not in directory:
            links.setdefault(name, file)
        elif name.endswith(".conf") and "/" not in directory:
            dropins.setdefault(f"{UNIT_DIR}/{directory}", []).append(file)
        elif not directory and name.endswith(".service"):
            installed[name] = file

    def unit(name: str, base: ConfigFile, link: ConfigFile | None) -> _Unit | None:
        chosen: dict[str, ConfigFile] = {}
        for directory in unit_dropin_dirs(name):
            for file in dropins.get(directory, ()):
                chosen.setdefault(posixpath.basename(file.path), file)
        files = (base, *(chosen[n] for n in sorted(chosen)))
        if not base.content.strip():
            return None  # masked (linked to /dev/null) or empty: it runs nothing
        source = next(
            (f for f in reversed(files) if units.parsed(f).values(SERVICE, EXEC_START)),
            base,
        )
        inside = "/" + source.path[len(rootfs) + 1 :]
        demand = unit_demand(merge_units(f.content for f in files), variable, config_text)
        visible = next(
            (f for f in reversed(files) if _sets_visible(units.parsed(f), variable)), source
        )
        return _Unit(name, source.path, inside, demand, visible.path, source is link)

    enabled: list[_Unit] = []
    for name in sorted(links):
        candidates = (name, template_of(name))
        base = next((installed[u] for u in candidates if u and u in installed), links[name])
        if (found := unit(name, base, links[name])) is not None:
            enabled.append(found)
    used = {*links, *(t for n in links if (t := template_of(n)) is not None)}
    idle = [u for n in sorted(installed) if n not in used and (u := unit(n, installed[n], None))]
    return enabled, idle


def _sets_visible(unit: UnitFile, variable: str) -> bool:
    pairs = environment_pairs(unit.values(SERVICE, ENVIRONMENT))
    return any(name == variable for name, _ in pairs)


def _available(visible: tuple[str, ...] | None, count: int) -> int:
    shown = visible_count(visible, count)
    return count if shown is None else shown


def _judge(
    container: _Container, unit: _Unit, problems: list[Diagnostic], findings: list[Diagnostic]
) -> None:
    for server in unit.demand.servers:
        findings.extend(_deprecated(container, unit, server))
        need = server.gpus
        if need is None:
            if container.after < container.before:
                findings.append(_unknown(container, unit, server))
            continue
        after = _available(server.visible, container.after)
        if need > after:
            if need <= _available(server.visible, container.before):
                problems.append(_needs(container, unit, server, need, after))
            else:
                findings.append(_short(container, unit, server, need, after))
        elif _names_gone(server.visible, container):
            # Set on the command line (`env HIP_VISIBLE_DEVICES=...`) or by Environment=.
            own = server.visible != unit.demand.visible
            where = unit.source if own else unit.visible_source
            findings.append(_visible(container, unit, server.visible or (), where))
    if not unit.demand.servers and _names_gone(unit.demand.visible, container):
        findings.append(_visible(container, unit, unit.demand.visible or (), unit.visible_source))


def _judge_idle(container: _Container, unit: _Unit) -> Iterator[Diagnostic]:
    """A unit installed but not enabled: only a server that could not start on what the
    container has after the plan is mentioned; it starts when someone starts it."""
    for server in unit.demand.servers:
        need = server.gpus
        after = _available(server.visible, container.after)
        if need is not None and need > after:
            yield _idle(container, unit, server, need, after)


def _names_gone(visible: tuple[str, ...] | None, container: _Container) -> bool:
    return visible is not None and container.after < min(len(visible), container.before)


def _ways(
    container: _Container, unit: _Unit, server: ServerDemand, after: int, *, enabled: bool = True
) -> str:
    ways: list[str] = []
    # The rewrite the hint offers sets no `engine`: right for the default engine's server.
    if container.pools and server.engine == DEFAULT_ENGINE:
        ways.append(
            f"add [pools.lxc.serving] to pool {container.pools[0].name} with "
            f'unit = "{unit.name.removesuffix(".service")}" so pvegpu rewrites the unit for '
            f"its {plural(container.after, 'GPU')}"
        )
    if (edit := _edit(server, after, container)) is not None:
        ways.append(f"edit {unit.edit(container.vmid)}: {edit}")
    if enabled:
        ways.append(f"disable it (pct exec {container.vmid} -- systemctl disable {unit.name})")
    else:
        ways.append(
            f"remove it if it is not used (pct exec {container.vmid} -- sh -c 'rm "
            f"{unit.inside} && systemctl daemon-reload')"
        )
    return "; or ".join(ways) + "; then run pvegpu again"


def _edit(server: ServerDemand, after: int, container: _Container) -> str | None:
    """The one-option change that makes the server fit, or what must hold; `after` is
    what the runtime shows it of the GPUs the container has after the plan."""
    count = container.after
    if count == 0:
        return None
    if after < count and (server.gpus or 0) <= count:
        # Only the visible-devices variable hides GPUs it needs: list the container's.
        return f"{container.visible}={','.join(str(i) for i in range(count))}"
    tp = server.option("tp")
    others = [o for o in server.options if o.kind != "tp" and o.value not in (None, 1)]
    if others or server.option("base") is not None:
        product = " x ".join(f"`{o.written}`" for o in server.options)
        return f"make {product} need at most {count} GPUs"
    if tp is None:
        return None
    return f"`{tp.written}` -> `{tp.rewritten(count)}`"


def _restarts(unit: _Unit) -> str:
    return " and systemd starts it again and again" if unit.demand.restarts else ""


def _seen(container: _Container, server: ServerDemand, after: int) -> str:
    if server.visible is None:
        return ""
    return f" ({container.visible}={','.join(server.visible)} shows it {after} of them)"


def _needs(
    container: _Container, unit: _Unit, server: ServerDemand, need: int, after: int
) -> Diagnostic:
    return Diagnostic.error(
        "container-unit-needs-gpus",
        unit.source,
        f"{unit.name} is enabled in CT {container.vmid} and runs {server.server} with "
        f"{server.shown}: {plural(need, 'GPU')}; {container.gets}"
        f"{_seen(container, server, after)}, so the server fails at every start"
        f"{_restarts(unit)}",
        _ways(container, unit, server, after),
    )


def _short(
    container: _Container, unit: _Unit, server: ServerDemand, need: int, after: int
) -> Diagnostic:
    return Diagnostic(
        Severity.WARNING,
        "container-unit-short",
        unit.source,
        f"{unit.name} is enabled in CT {container.vmid} and runs {server.server} with "
        f"{server.shown}: {plural(need, 'GPU')}, more than CT {container.vmid} has now; "
        f"{container.gets}{_seen(container, server, after)}, so it still cannot start. Fix it: "
        + _ways(container, unit, server, after),
    )


def _idle(
    container: _Container, unit: _Unit, server: ServerDemand, need: int, after: int
) -> Diagnostic:
    return Diagnostic(
        Severity.WARNING,
        "container-unit-disabled-needs-gpus",
        unit.source,
        f"{unit.name} is installed in CT {container.vmid} but not enabled, and runs "
        f"{server.server} with {server.shown}: {plural(need, 'GPU')}; {container.gets}"
        f"{_seen(container, server, after)}. It does not start with the container, but "
        f"the day someone starts it (systemctl start {unit.name}) the server fails. Fix "
        "it before then: " + _ways(container, unit, server, after, enabled=False),
    )


def _visible(
    container: _Container, unit: _Unit, visible: tuple[str, ...], where: str
) -> Diagnostic:
    keep = ",".join(str(i) for i in range(container.after))
    return Diagnostic(
        Severity.WARNING,
        "container-unit-visible-devices",
        where,
        f"{unit.name} is enabled in CT {container.vmid} and sets {container.visible}="
        f"{','.join(visible)}, {plural(len(visible), 'device')}; {container.gets}: "
        f"{container.runtime.name} shows it the listed devices up to the first one that is "
        "gone. Edit it to "
        + (f"{container.visible}={keep}" if keep else "list no GPU, or disable the unit"),
    )


def _unknown(container: _Container, unit: _Unit, server: ServerDemand) -> Diagnostic:
    option = server.unresolved
    if option is not None:
        why = f"`{option.written}` is not a number after Environment= is applied" + (
            " (EnvironmentFile= is not read)" if unit.demand.environment_file else ""
        )
    else:
        why = f"its sizes may be set in {server.config}, which {server.config_problem}"
    return Diagnostic(
        Severity.WARNING,
        "container-unit-gpus-unknown",
        unit.source,
        f"{unit.name} is enabled in CT {container.vmid} and runs {server.server}, but how "
        f"many GPUs it opens is unknown: {why}; {container.gets}. Check that it needs no "
        f"more: pct exec {container.vmid} -- systemctl cat {unit.name}",
    )


def _second_servers(
    container: _Container, rendered: str, enabled: Sequence[_Unit]
) -> Iterator[Diagnostic]:
    """Each server enabled in a serving pool's container besides the unit pvegpu renders
    (another engine, an older unit name): it starts with the container next to the new
    one, on the same GPUs, and one of the two fails for want of their memory, at every
    start. Refused like a unit that needs more GPUs than the container keeps."""
    pool = container.pools[0]
    for unit in enabled:
        if unit.name == rendered:
            continue
        for server in unit.demand.servers:
            yield Diagnostic.error(
                "container-unit-second-server",
                unit.source,
                f"{unit.name} is enabled in CT {container.vmid} and runs {server.server}; "
                f"the plan renders {rendered} for pool {pool.name}'s "
                f"{plural(container.after, 'GPU')} in the same container, and both start "
                "with it: the second server finds the GPUs' memory taken and fails at every "
                f"start{_restarts(unit)}",
                f"disable it (pct exec {container.vmid} -- systemctl disable --now "
                f"{unit.name}); or, if it is the server this pool replaces, set unit = "
                f'"{unit.name.removesuffix(".service")}" in [pools.lxc.serving] so pvegpu '
                "rewrites it; then run pvegpu again",
            )
            break  # one refusal per unit


def _deprecated(container: _Container, unit: _Unit, server: ServerDemand) -> Iterator[Diagnostic]:
    """A flag the engine deprecates: the unit starts today, and not on a release past the
    removal, which a routine upgrade of the container brings."""
    for gone in server.deprecated:
        where = f"{unit.name} (enabled in CT {container.vmid})"
        yield Diagnostic(
            Severity.WARNING,
            DEPRECATED_CODE,
            unit.source,
            f"{gone.message(server.server, gone.flag, where)}; write `{gone.replacement}` "
            f"instead: edit {unit.edit(container.vmid)}",
        )


def _unchecked(container: _Container, volume: str, why: str) -> Diagnostic:
    return Diagnostic(
        Severity.WARNING,
        "container-units-unchecked",
        container.config.path,
        f"CT {container.vmid}'s root file system ({volume}) is not readable from the host "
        f"({why}), so its enabled units were not checked; {container.gets}, and a server "
        "started with more (SGLang or vLLM `--tp 8`) fails at every start. Check by hand: "
        f"pct exec {container.vmid} -- grep -rs -e --tp -e --tensor-parallel "
        f"-e {container.visible} /etc/systemd/system; or stop CT {container.vmid}, "
        f"`pct mount {container.vmid}` (pvegpu then reads /{pct_mount_path(container.vmid)}), "
        f"plan again, `pct unmount {container.vmid}`",
    )
