"""Flags an engine's release deprecates, with their replacement and when they go.

The facts are the engine's own (a row of its release table, `engines/<engine>/versions.py`,
naming the release file that says so); what is every engine's is the wording of the
finding: a line that still passes the flag starts today, and stops starting on the first
release past the removal, so the admin is told the flag, the replacement and the date
before that upgrade.
"""

from __future__ import annotations

import attrs

from pvegpu.values import value_class

CODE = "engine-flag-deprecated"


@value_class
@attrs.frozen(eq=False, repr=False)
class FlagDeprecation:
    """A command-line flag a release deprecates."""

    flag: str
    replacement: str
    """What to write instead, as the release's own advice words it."""
    since: str
    """The first release that deprecates it."""
    removal: str
    """When the release says it goes (`after 2026-12-31`)."""
    source: str
    """The release file that says so."""

    def message(self, engine: str, written: str, where: str) -> str:
        """The finding's message up to its fix: `written` (the option as the line has it)
        in `where`."""
        return (
            f"{where} passes `{written}`, which {engine} deprecates from {self.since} for "
            f"`{self.replacement}` and removes {self.removal}: a release past that refuses "
            "the line and the server does not start"
        )
