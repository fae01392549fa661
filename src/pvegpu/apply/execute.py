"""Carry out a bundle's steps on a host: each action once, journaled, resumable.

For every action, in the runbook's order:
1. the journal of this bundle says it was done -> reported as already done, with when;
2. the host already is as the action would leave it (the file equals the bundle's, the
   container is stopped) -> reported as already done, with what was found;
3. else the file it replaces is backed up, `begin` is journaled, the action runs through
   the host seam, and `done` is journaled with what it found (`was_active`).
A failure raises ApplyError naming the action; a kill leaves the journal at the last
event. Either way, running apply again completes (actions are idempotent and
already-done ones are skipped) and `pvegpu revert` undoes what was begun.

What each action does is its row in apply/handlers.py; this is only the loop.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from pvegpu.apply.bundle import Bundle
from pvegpu.apply.doing import Applying
from pvegpu.apply.handlers import handlers_of
from pvegpu.apply.host import Host
from pvegpu.apply.state import State
from pvegpu.errors import ApplyError
from pvegpu.rendering.review.actions import Action
from pvegpu.values import value_class

Say = Callable[[str], None]


@value_class
@attrs.frozen(eq=False, repr=False)
class Outcome:
    """What became of one action, for `--json` (apply and revert print the same as text)."""

    step: int
    """The runbook's step, from 1."""
    title: str
    commands: tuple[str, ...]
    """The action as the runbook writes it."""
    status: str
    """`done`, `would-run`, `already-done`, `left-to-you`, `failed`; revert's `undone`,
    `would-undo`, `redone`, `would-redo`."""
    detail: str = ""
    """Why it was already done, or what failed."""

    def document(self) -> dict[str, object]:
        return {
            "step": self.step,
            "title": self.title,
            "commands": list(self.commands),
            "status": self.status,
            "detail": self.detail,
        }


Told = Callable[[Outcome], None]
"""Where each action's outcome goes as it is known (the CLI's `--json` gathers them)."""


def ignore(outcome: Outcome) -> None:
    """The default `Told`: the lines said are all the caller wants."""


class Executor:
    def __init__(
        self, host: Host, bundle: Bundle, state: State, say: Say, told: Told = ignore
    ) -> None:
        self.at = Applying(host, bundle, state)
        self.state = state
        self.say = say
        self.told = told

    def run(self, *, dry_run: bool) -> None:
        steps = self.at.bundle.steps
        for i, step in enumerate(steps):
            self.say(f"step {i + 1}/{len(steps)}: {step.title}")
            for j, action in enumerate(step.actions):
                for line in action.lines():
                    self.say(f"  $ {line}")
                outcome = Outcome(i + 1, step.title, tuple(action.lines()), "failed")
                try:
                    status, said = self._one(i, j, action, dry_run=dry_run)
                except ApplyError as err:
                    self.told(attrs.evolve(outcome, detail=str(err)))
                    raise
                self.told(attrs.evolve(outcome, status=status, detail=said))
                self.say(f"    -> {said}")

    def _one(self, i: int, j: int, action: Action, *, dry_run: bool) -> tuple[str, str]:
        """(status, the line said) of one action, run unless done or a dry run."""
        handlers = handlers_of(action)
        if handlers.do is None:
            return "left-to-you", "left to you: apply does not run this"
        done = self.state.done(i, j)
        if done is not None:
            return "already-done", f"already done (journal: {done['at']})"
        already = self.already(action)
        if already is not None:
            return "already-done", f"already done: {already}"
        if dry_run:
            return "would-run", "would run"
        if handlers.backup is not None:
            handlers.backup(self.at, action)
        self.state.record(i, j, "begin")
        note = handlers.do(self.at, action) or {}
        self.state.record(i, j, "done", **note)
        return "done", "done"

    def already(self, action: Action) -> str | None:
        """Why the host already is as `action` would leave it; None when it must run."""
        handlers = handlers_of(action)
        if handlers.already is None:
            return None
        if not self.at.host.live and not handlers.already_in_tree:
            return None  # a tree (a snapshot) holds files, not what runs: no command asks
        return handlers.already(self.at, action)
