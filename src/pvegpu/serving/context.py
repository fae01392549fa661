"""What every engine's server of a pool starts from: the engine-neutral decisions, made once.

`serving_context` decides, before any engine runs, what no engine may decide differently:
where the container's files are (and whether the unit's python is among them), the pool's
GPUs, the compute runtime they run (CUDA, ROCm) and their ordinals in PCI order, P2P on or
off and why, the NUMA node to pin to, the model's config.json and whether TP divides its
heads, the container's userspace against the host's module, and whether the unit's user
may open the GPU nodes. An engine (`pvegpu.engines`) gets the result as one frozen
`ServingContext` and adds only what is its own (its release, flags, unit, and the memory
fit's engine-specific inputs such as the KV cache dtype).

The context keeps the problems and findings of these decisions rather than raising them,
so that a plan refused for a neutral reason still lists the engine's problems with them.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError, PvegpuError
from pvegpu.model.decision import ContainerDriver, NumaPinning, P2PDecision
from pvegpu.model.facts import GPU, HostFacts
from pvegpu.model.model_config import ModelConfig
from pvegpu.model.plan import Pool
from pvegpu.model.schema import ServingSpec
from pvegpu.serving.checks import Checks
from pvegpu.serving.container import (
    ContainerRootfs,
    container_driver,
    container_rootfs,
    python_finding,
)
from pvegpu.serving.fit import checked_model
from pvegpu.serving.node_access import node_access
from pvegpu.serving.numa import numa_pinning
from pvegpu.serving.p2p import decide_p2p
from pvegpu.serving.pool_gpus import mixed_models_finding
from pvegpu.serving.visible import container_indices
from pvegpu.values import value_class
from pvegpu.vendors import VENDORS, ComputeRuntime


@value_class
@attrs.frozen(eq=False, repr=False)
class ServingContext:
    """The engine-neutral decisions about one serving pool, and what they found."""

    facts: HostFacts
    pools: tuple[Pool, ...]
    """Every pool of the plan: the container's CUDA ordinals count all that feed it."""
    pool: Pool
    vmid: int
    """The pool's container, where the server runs."""
    where: str
    """The spec path problems point at: `pools[0].lxc.serving`."""
    rootfs: ContainerRootfs
    gpus: tuple[GPU, ...]
    runtime: ComputeRuntime
    """The compute runtime of the pool's GPUs' vendor, which the server's build runs on."""
    visible_devices: tuple[int, ...]
    """The pool's GPUs' ordinals among the container's GPUs, in PCI bus order: the
    runtime's `visible_devices` variable."""
    p2p: P2PDecision
    numa: NumaPinning | None
    model: ModelConfig | None
    """The model's config.json, checked against TP; None: the spec names none, or unread."""
    container_driver: ContainerDriver | None
    diagnostics: tuple[Diagnostic, ...]
    """What the neutral checks found: errors refuse the plan whatever the engine, the rest
    are findings; the engine adds its own after them."""
    engine_label: str
    """The engine as its messages name it (`Engine.label`), for the checks' wording."""

    stages: int = 1
    """TP groups the pool's GPUs hold, as the engine counts them (`Engine.tp_groups`:
    vLLM's pipeline stages x prefill context-parallel ranks); 1 unless the spec asks for
    more and they divide the pool's GPUs (the engine refuses them otherwise)."""

    @property
    def tp(self) -> int:
        """Tensor parallelism is the pool's GPU count over its TP groups, for any engine."""
        return len(self.gpus) // self.stages

    def checks(self, spec: ServingSpec) -> Checks:
        """A collector for the engine's own checks, holding what the context found first."""
        checks = Checks(
            self.facts, self.pools, self.pool, spec, self.where, engine_label=self.engine_label
        )
        checks.add(self.diagnostics)
        return checks


def serving_context(
    facts: HostFacts,
    pools: Sequence[Pool],
    pool: Pool,
    spec: ServingSpec,
    where: str,
    *,
    engine_label: str,
    stages: int = 1,
    after_reboot: bool = False,
) -> ServingContext | PvegpuError:
    """The neutral decisions `spec` needs of `pool`, or an error when it has no container.

    `pools`: every pool of the plan; `where`: the spec path problems point at;
    `engine_label`: the engine as messages name it (`Engine.label`); `stages`: the TP
    groups it makes of the pool's GPUs (`Engine.tp_groups`);
    `after_reboot`: the runbook reboots before the server starts (`Checks.after_reboot`).
    """
    checks = Checks(
        facts, pools, pool, spec, where, engine_label=engine_label, after_reboot=after_reboot
    )
    if pool.lxc is None:
        return PlanError.one(
            "serving-needs-lxc",
            checks.where,
            "an inference server runs in the pool's container; this pool has none",
            "serve from a pool with a [pools.lxc] table (vmid = N)",
        )
    runtime = _runtime(checks)
    if isinstance(runtime, PvegpuError):
        return runtime
    vmid = pool.lxc.vmid
    mixed_models_finding(checks)
    rootfs = container_rootfs(checks, vmid)
    python_finding(checks, vmid, rootfs)
    indices = container_indices(checks, vmid)
    checks.printable("python", spec.python)
    checks.printable("p2p_reason", spec.p2p_reason or "")
    model = checked_model(checks, len(pool.gpus) // stages)
    p2p = decide_p2p(checks)
    numa = numa_pinning(checks)
    driver = container_driver(checks, vmid, rootfs, runtime)
    node_access(checks, vmid, rootfs)
    return ServingContext(
        facts=facts,
        pools=checks.pools,
        pool=pool,
        vmid=vmid,
        where=where,
        rootfs=rootfs,
        gpus=pool.gpus,
        runtime=runtime,
        visible_devices=indices,
        p2p=p2p,
        numa=numa,
        model=model,
        container_driver=driver,
        diagnostics=tuple(checks.diagnostics),
        stages=stages,
        engine_label=engine_label,
    )


def _runtime(checks: Checks) -> ComputeRuntime | PvegpuError:
    """The one compute runtime of the pool's GPUs, or why no server can run on them.

    Refused before anything else is judged: the rest (ordinals, P2P through the runtime's
    collectives, the userspace) means nothing without a runtime. A container pool holds
    one vendor's GPUs (the planner refuses a mixed one), so there is one vendor to ask.
    """
    vendors = {g.vendor for g in checks.pool.gpus}
    vendor = next(iter(vendors)) if len(vendors) == 1 else None
    if vendor is not None and vendor.compute is not None:
        return vendor.compute
    runtimes = sorted(
        {v.compute for v in vendors if v is not None and v.compute is not None},
        key=lambda r: r.name,
    )
    if len(runtimes) > 1:
        # The planner refuses such a container pool first (lxc-pool-mixed-vendors); a
        # plan built in code gets here, and the reason is the server's own.
        names = " and ".join(sorted(v.name for v in vendors if v is not None))
        said = " and ".join(f"{r.collectives} on {r.name}" for r in runtimes)
        return PlanError.one(
            "serving-pool-mixed-vendors",
            checks.where,
            f"pool {checks.pool.name} holds {names} GPUs: one server's tensor-parallel "
            f"group runs its all-reduce on one collective library ({said}), which cannot "
            "span two vendors' GPUs",
            "serve from a pool of one vendor's GPUs (one pool, container and server per vendor)",
        )
    gpus = ", ".join(f"{g.address} ({g.vendor_device})" for g in checks.pool.gpus)
    known = sorted({v.compute.name for v in VENDORS if v.compute is not None})
    return PlanError.one(
        "serving-gpu-no-runtime",
        checks.where,
        f"{checks.engine_label} runs on {' or '.join(known)} GPUs; pvegpu knows no compute "
        f"runtime for the GPUs of pool {checks.pool.name}: {gpus}",
        "serve from a pool of "
        + " or ".join(sorted(v.name for v in VENDORS if v.compute is not None))
        + " GPUs, or remove the pool's serving table",
    )
