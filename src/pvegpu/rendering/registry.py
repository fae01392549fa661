"""render(plan) -> artifacts: every renderer is `Plan -> tuple[Artifact, ...]`, in one list.

Nothing here writes a file; bundle.py writes an output directory, apply.py the host.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import RenderError
from pvegpu.model.artifact import Artifact
from pvegpu.model.plan import Plan
from pvegpu.rendering.boot_units import render_boot_units
from pvegpu.rendering.lxc import render_lxc_configs
from pvegpu.rendering.pci_cfg import render_pci_cfg
from pvegpu.rendering.revert import render_revert
from pvegpu.rendering.review.render import render_review
from pvegpu.rendering.serving import render_serving
from pvegpu.rendering.split import render_split
from pvegpu.rendering.vm import render_vm_configs

Renderer = Callable[[Plan], tuple[Artifact, ...]]

RENDERERS: tuple[Renderer, ...] = (
    render_lxc_configs,
    render_pci_cfg,
    render_vm_configs,
    render_split,
    render_boot_units,
    render_serving,
)
"""Renderers of the files that get installed, in the order the summary lists them."""


def render(plan: Plan) -> tuple[Artifact, ...]:
    """Every artifact of the plan: installed files, then the revert bundle, then review.

    An installed file and its revert copy have the same (target, path); `Artifact.role`
    (`install`, `revert`, `review`) says which is which, and (role, target, path) is
    unique."""
    applied = tuple(a for renderer in RENDERERS for a in renderer(plan))
    clashes = [key for key, n in Counter((a.target, a.path) for a in applied).items() if n > 1]
    if clashes:
        raise RenderError(
            Diagnostic.error(
                "artifact-clash",
                f"{target}:{path}",
                "two renderers produce the same file",
                "this is a pvegpu bug; please report it with the spec",
            )
            for target, path in clashes
        )
    reverts = render_revert(plan, applied)
    review = render_review(plan, (*applied, *reverts))
    return (*applied, *reverts, *review)
