"""`pvegpu revert`: undo the last apply from its state directory, newest action first,
except that a container's server is stopped and its own files put back before anything
else (while it runs, and before it restarts with the old unit in place).

Only actions the journal shows begun are undone, each by its inverse (its row in
apply/handlers.py): a file goes back to its backup (or away, if apply created it), a
stopped container or server is started again, a started one stopped, the split reverted
and its unit disabled. Commands that
act on files (`systemctl daemon-reload`, the initramfs rebuild) run once more at the
end, after every file is back. A file someone changed after apply wrote it is left
alone and named. Revert is journaled too: run it again after a failure.
"""

from __future__ import annotations

from pvegpu.apply.bundle import Bundle, parse_bundle
from pvegpu.apply.commands import missing_commands, refuse_off_node
from pvegpu.apply.doing import Applying
from pvegpu.apply.execute import Say
from pvegpu.apply.handlers import handlers_of
from pvegpu.apply.host import Host
from pvegpu.apply.state import LOCK, State, last_apply
from pvegpu.errors import ApplyError
from pvegpu.rendering.review.actions import Action


def load_last(host: Host) -> tuple[Bundle, State]:
    bundle_id = last_apply(host)
    if bundle_id is None:
        raise ApplyError.one(
            "nothing-applied",
            "/var/lib/pvegpu/apply/last",
            "no apply to revert on this host",
            "nothing to undo; to undo a change made by hand, use the bundle's revert/revert.sh",
        )
    state = State(host, bundle_id)

    def file(rel: str) -> bytes:
        content = host.read(f"{state.dir}/bundle/{rel}")
        if content is None:
            raise ApplyError.one(
                "state-damaged",
                f"/{state.dir}/bundle/{rel}",
                "is missing from the state of the last apply",
                "undo by hand with revert/revert.sh of the bundle that was applied",
            )
        return content

    return parse_bundle(file("MANIFEST.json").decode(), file), state


def revert(host: Host, say: Say) -> None:
    """Undo the last apply; refused off the node, while another apply or revert runs
    (`apply-locked`), and before any change when a command it needs is missing."""
    refuse_off_node(host)
    bundle, state = load_last(host)  # before the lock: no apply, no state directory made
    missing = () if state.reverted else missing_commands(host, bundle)
    if missing:
        raise ApplyError(missing)  # before the first undo, not half way through
    with host.exclusive(LOCK):
        _revert(host, say)


def _revert(host: Host, say: Say) -> None:
    bundle, state = load_last(host)  # again: another run may have changed it meanwhile
    if state.reverted:
        say(f"apply {bundle.id} was already reverted; nothing to do")
        return
    at = Applying(host, bundle, state)
    rerun: list[Action] = []
    begun = [
        (i, j)
        for i in reversed(range(len(bundle.steps)))
        for j in reversed(range(len(bundle.steps[i].actions)))
        if state.begun(i, j) is not None
    ]
    # A container's own files go back first, while it still runs (pct push needs it
    # running) and before it is stopped and started again: an enabled unit starts with
    # its container, so the old one must be in place by then. Its server is stopped
    # first. The rest is undone newest first.
    early = [(i, j) for i, j in begun if handlers_of(bundle.steps[i].actions[j]).undone_first]
    for i, j in early + [k for k in begun if k not in early]:
        step = bundle.steps[i]
        action = step.actions[j]
        handlers = handlers_of(action)
        if handlers.redone_after_revert(action):
            rerun.insert(0, action)
            continue
        done = state.done(i, j) or {}
        say(f"undo step {i + 1} ({step.title}): {' ; '.join(action.lines())}")
        if handlers.undo is not None:
            handlers.undo(at, action, done)
    for action in dict.fromkeys(rerun):
        say(f"again, now that the files are back: {' ; '.join(action.lines())}")
        redo = handlers_of(action).do
        if redo is not None:
            redo(at, action)
    state.set_flag("reverted", True)
    say(f"reverted apply {bundle.id}")
