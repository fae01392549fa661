"""The inference server's systemd unit, inside the container that keeps the GPUs."""

from __future__ import annotations

from pvegpu.engines import engine_for, engine_label
from pvegpu.model.artifact import Artifact, container_target
from pvegpu.model.decision import DecidedServer
from pvegpu.model.plan import Plan

UNIT_MODE = 0o644

__all__ = ["UNIT_MODE", "render_serving", "unit_content"]


def unit_content(serving: DecidedServer) -> str:
    """The unit text, written by the engine that decided the server."""
    engine = engine_for(serving.engine)
    # plan() decided the server through this registry, so its engine is in it.
    assert engine is not None, f"no engine {serving.engine!r}"
    return engine.unit_content(serving)


def render_serving(plan: Plan) -> tuple[Artifact, ...]:
    """One unit per serving pool, at etc/systemd/system/<unit>.service in its container,
    and the drop-ins whose guaranteed settings plan() switched off (`serving.dropins`).

    Formats what plan() decided (`Pool.serving`); it decides and checks nothing itself.
    """
    return tuple(
        Artifact(
            path=serving.unit_path,
            content=unit_content(serving),
            reason=f"{engine_label(serving.engine)} {serving.version} for "
            f"pool {serving.pool}: TP={serving.tp_size} "
            f"on {serving.runtime.name} {','.join(map(str, serving.visible_devices))}, P2P "
            + ("on" if serving.p2p.enabled else "off"),
            mode=UNIT_MODE,
            target=container_target(serving.vmid),
            base=serving.base,
        )
        for pool in plan.pools
        if (serving := pool.serving) is not None
    ) + tuple(
        Artifact(
            path=change.path,
            content=change.content,
            reason=f"switches off what drop-in /{change.source} sets that the unit of pool "
            f"{serving.pool} decides",
            mode=UNIT_MODE,
            target=container_target(serving.vmid),
            base=change.base,
        )
        for pool in plan.pools
        if (serving := pool.serving) is not None
        for change in serving.dropins
    )
