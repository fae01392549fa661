"""A server unit's environment: what pvegpu derives for the compute runtime and its
collectives, then the spec's own variables, checked the same way for every engine.

The visible devices in PCI order (CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER, ROCm's
HIP_VISIBLE_DEVICES; the ordinals are decided in `serving/visible.py`) and the P2P switch
NCCL and RCCL both read are the runtime's, not an engine's; an engine adds its own
release's variables (`derived`) and says which of the spec's its release retired.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from pvegpu.diagnostic import Severity
from pvegpu.model.decision import P2PDecision
from pvegpu.pvefiles.lxcconf import DRIVER_MOUNT_POINT
from pvegpu.serving.checks import Checks
from pvegpu.spec.rules import ENV_NAME
from pvegpu.vendors import ComputeRuntime

P2P_ENV = "NCCL_P2P_DISABLE"
FORBIDDEN_ENV = {
    "NCCL_SHM_DISABLE": "with P2P off NCCL needs shared memory; without both it falls "
    "back to sockets between GPUs of one host",
}

# `$NAME` / `${NAME}`: what a shell would expand and Environment= does not.
_VARIABLE_REFERENCE = re.compile(r"\$\{?[A-Za-z_]")

Retired = Callable[[str], "tuple[str, str] | None"]
"""The finding (code, message) for a spec variable the engine's release no longer reads."""


def service_environment(
    checks: Checks,
    runtime: ComputeRuntime,
    p2p: P2PDecision,
    indices: tuple[int, ...],
    *,
    derived: Iterable[tuple[str, str]] = (),
    retired: Retired = lambda name: None,
) -> tuple[tuple[str, str], ...]:
    """The unit's Environment=: what pvegpu derives (`derived`: the engine's own, after
    the runtime's and its collectives'), then the spec's own variables."""
    spec = checks.spec
    env: list[tuple[str, str]] = [
        *runtime.device_order,
        (runtime.visible_devices, ",".join(map(str, indices))),
    ]
    if not p2p.enabled:
        env.append((P2P_ENV, "1"))
    env.extend(derived)
    lxc = checks.pool.lxc
    driver = host_driver_environment() if lxc is not None and lxc.host_userspace else {}
    spec_names = {name for name, _ in spec.environment}
    env.extend((name, value) for name, value in driver.items() if name not in spec_names)
    ours = dict(env)
    for name, value in spec.environment:
        where = f"{checks.where}.environment.{name}"
        if not ENV_NAME.fullmatch(name):
            checks.problem(
                "serving-env-invalid-name",
                f"{name!r} is not an environment variable name",
                "use letters, digits and '_', not starting with a digit",
                subject=where,
            )
            continue
        checks.printable(f"environment {name}", value)
        if _VARIABLE_REFERENCE.search(value):
            # A PATH copied from a shell profile (`...:$PATH`) reaches the server as
            # literal text, not as the directories it names in a shell.
            checks.finding(
                Severity.WARNING,
                "serving-env-unexpanded",
                f"environment {name}={value}: systemd's Environment= does not expand "
                "`$VAR`, so the server gets these characters as written; spell the value out",
            )
        if name in runtime.other_selectors:
            checks.problem(
                "serving-env-selects-gpus",
                f"{name}={value}: {runtime.name} narrows its GPUs by {name} too, so the "
                f"server would not get the GPUs {runtime.visible_devices} names",
                f"remove {name}; pvegpu sets {runtime.visible_devices} from the pool",
                subject=where,
            )
            continue
        if name in FORBIDDEN_ENV:
            checks.problem(
                "serving-env-forbidden",
                f"{name} must not be set: {FORBIDDEN_ENV[name]}",
                f"remove {name}",
                subject=where,
            )
            continue
        finding = retired(name)
        if finding is not None:
            checks.finding(Severity.WARNING, *finding)
        if name in driver:
            # The staged host userspace first, then the spec's own directories.
            env.append((name, f"{driver[name].split(':')[0]}:{value}"))
            continue
        if name in ours:
            if ours[name] != value:
                checks.problem(
                    "serving-env-conflict",
                    f"{name}={value} contradicts {name}={ours[name]}, which pvegpu derives "
                    "from the facts and the spec",
                    "remove it" + (" and use p2p / p2p_reason" if name == P2P_ENV else ""),
                    subject=where,
                )
            continue
        env.append((name, value))
    return tuple(env)


SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH systemd gives a system service that sets none."""


def host_driver_environment() -> dict[str, str]:
    """What makes a server run the host's staged driver userspace (`userspace = "host"`):
    its libraries before the container's own (LD_LIBRARY_PATH is searched before the
    ld.so cache) and its tools (nvidia-smi) first on PATH. A spec that sets either keeps
    its directories, after these."""
    staged = f"/{DRIVER_MOUNT_POINT}"
    return {"LD_LIBRARY_PATH": f"{staged}/lib", "PATH": f"{staged}/bin:{SYSTEMD_PATH}"}


def retired_variable(name: str) -> str | None:
    """Why an old unit's variable `name` is deliberately not carried over by any engine,
    or None."""
    if name in FORBIDDEN_ENV:
        return f"pvegpu refuses it: {FORBIDDEN_ENV[name]}"
    if name == P2P_ENV:
        return "pvegpu decides P2P from the facts (p2p / p2p_reason override it)"
    return None
