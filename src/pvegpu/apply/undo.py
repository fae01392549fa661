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

import attrs

from pvegpu.apply.bundle import Bundle, parse_bundle
from pvegpu.apply.commands import missing_commands, refuse_off_node
from pvegpu.apply.doing import Applying
from pvegpu.apply.execute import Outcome, Say, Told, ignore
from pvegpu.apply.handlers import handlers_of
from pvegpu.apply.host import Host
from pvegpu.apply.state import LOCK, STATE_DIR, State, last_apply
from pvegpu.errors import ApplyError


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


def revert(host: Host, say: Say, *, dry_run: bool = False, told: Told = ignore) -> str:
    """Undo the last apply; refused off the node, while another apply or revert runs
    (`apply-locked`), and before any change when a command it needs is missing.

    With dry_run: say (and tell) each action it would undo, in the order it would, and
    change nothing: no lock, no command, no write; a tree (a snapshot) is read too.
    Returns what became of it: `reverted`, `already-reverted` or `dry-run`."""
    if dry_run:
        return _dry_run(host, say, told)
    refuse_off_node(host, "revert")
    bundle, state = load_last(host)  # before the lock: no apply, no state directory made
    missing = () if state.reverted else missing_commands(host, bundle)
    if missing:
        raise in_revert_words(ApplyError(missing))  # before the first undo, not half way
    with host.exclusive(LOCK):
        try:
            return _revert(host, say, told)
        except ApplyError as err:
            raise in_revert_words(err) from None


def _order(bundle: Bundle, state: State) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(what is undone, in order; what runs again once the files are back)."""
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
    undo: list[tuple[int, int]] = []
    again: list[tuple[int, int]] = []
    for i, j in early + [k for k in begun if k not in early]:
        action = bundle.steps[i].actions[j]
        if handlers_of(action).redone_after_revert(action):
            again.insert(0, (i, j))
        else:
            undo.append((i, j))
    # The same command once (daemon-reload after several units).
    once = {bundle.steps[i].actions[j]: (i, j) for i, j in reversed(again)}
    return undo, [k for k in again if once[bundle.steps[k[0]].actions[k[1]]] == k]


def _outcome(bundle: Bundle, i: int, j: int, status: str) -> Outcome:
    step = bundle.steps[i]
    return Outcome(i + 1, step.title, tuple(step.actions[j].lines()), status)


def _dry_run(host: Host, say: Say, told: Told) -> str:
    bundle, state = load_last(host)
    if state.reverted:
        say(f"apply {bundle.id} was already reverted; revert would do nothing")
        return "already-reverted"
    if host.live:
        missing = missing_commands(host, bundle)
        if missing:
            raise in_revert_words(ApplyError(missing))
    say(f"revert would undo apply {bundle.id} (journal /{state.dir}/journal.json):")
    undo, again = _order(bundle, state)
    for i, j in undo:
        action = bundle.steps[i].actions[j]
        say(f"would undo step {i + 1} ({bundle.steps[i].title}): {' ; '.join(action.lines())}")
        told(_outcome(bundle, i, j, "would-undo"))
    for i, j in again:
        action = bundle.steps[i].actions[j]
        say(f"would run again, once the files are back: {' ; '.join(action.lines())}")
        told(_outcome(bundle, i, j, "would-redo"))
    say("dry run: nothing was changed")
    return "dry-run"


def _revert(host: Host, say: Say, told: Told) -> str:
    bundle, state = load_last(host)  # again: another run may have changed it meanwhile
    if state.reverted:
        say(f"apply {bundle.id} was already reverted; nothing to do")
        return "already-reverted"
    at = Applying(host, bundle, state)
    undo, again = _order(bundle, state)
    for i, j in undo:
        step = bundle.steps[i]
        action = step.actions[j]
        handlers = handlers_of(action)
        done = state.done(i, j) or {}
        say(f"undo step {i + 1} ({step.title}): {' ; '.join(action.lines())}")
        if handlers.undo is not None:
            handlers.undo(at, action, done)
        told(_outcome(bundle, i, j, "undone"))
    for i, j in again:
        action = bundle.steps[i].actions[j]
        say(f"again, now that the files are back: {' ; '.join(action.lines())}")
        redo = handlers_of(action).do
        if redo is not None:
            redo(at, action)
        told(_outcome(bundle, i, j, "redone"))
    state.set_flag("reverted", True)
    say(f"reverted apply {bundle.id}")
    return "reverted"


REVERT_FIXES = {
    "command-failed": "fix the cause, then run pvegpu revert again: it goes on from its journal",
    "apply-step-failed": "fix the cause, then run pvegpu revert again: it goes on from its journal",
    "lock-timeout": "wait until the other operation finishes, then run pvegpu revert again",
    "command-missing": (
        "run pvegpu revert on the node the apply ran on; to see what it would undo "
        "elsewhere, `pvegpu revert --root COPY --dry-run` runs no command"
    ),
    "file-changed": (
        "someone changed it after apply wrote it: compare it with its backup under "
        f"/{STATE_DIR}/<bundle id>/backups/; put the backup back by hand to go on with "
        "pvegpu revert, or keep the change and finish by hand with the bundle's revert/"
    ),
}
"""What to do when a step of revert fails: the host seam and the actions' helpers word
their fixes for apply (`run pvegpu apply again`), which would redo what revert undoes."""


def in_revert_words(err: ApplyError) -> ApplyError:
    """`err` with each problem's fix (and a changed file's message) said for revert."""
    problems = [
        attrs.evolve(
            p,
            message=(
                "changed since pvegpu apply wrote it (its sha256 is neither apply's copy nor "
                "the backup); revert left it as it is"
                if p.code == "file-changed"
                else p.message
            ),
            fix=REVERT_FIXES.get(p.code, p.fix),
        )
        for p in err.problems
    ]
    again = ApplyError(problems)
    again.partial = err.partial
    return again
