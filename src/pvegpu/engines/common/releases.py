"""Release numbers and ranges of them, as every engine's release tables compare them.

An engine's tables (`engines/<engine>/versions.py`) say which releases a rule holds for
with a `Versions` range; nothing else compares versions.
"""

from __future__ import annotations

import re

import attrs

from pvegpu.values import value_class

_RELEASE = re.compile(r"^(\d+(?:\.\d+)*)")


def version_key(version: str) -> tuple[int, ...]:
    """The release numbers of `version` as a tuple: `0.5.10.post1` compares as 0.5.10."""
    match = _RELEASE.match(version)
    if match is None:
        raise ValueError(f"{version!r} is not a version (expected e.g. 0.5.23)")
    return tuple(int(part) for part in match.group(1).split("."))


@value_class
@attrs.frozen(eq=False, repr=False)
class Versions:
    """A range of releases: `since` (inclusive) up to `before` (exclusive); open ends."""

    since: str | None = None
    before: str | None = None

    def __contains__(self, version: object) -> bool:
        if self.since is None and self.before is None:
            return True
        if not isinstance(version, str):
            return False
        try:
            key = version_key(version)
        except ValueError:
            return False  # not a release number: no bounded rule can speak for it
        if self.since is not None and key < version_key(self.since):
            return False
        return self.before is None or key < version_key(self.before)

    def __str__(self) -> str:
        if self.since and self.before:
            return f"{self.since} to before {self.before}"
        if self.since:
            return f">= {self.since}"
        return f"< {self.before}" if self.before else "every version"
